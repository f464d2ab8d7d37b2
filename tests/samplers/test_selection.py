"""Exact private selection (``opendp_wgm.samplers.selection``): oracle statistics, both paths, the exact fallback.

Tolerances are derived from the sample size: a frequency is accepted within 5 standard errors of its exact
probability (false alarm < 1e-6 per check), and χ² statistics are compared with their 1 − 1e-6 quantile.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpmath import mp
from scipy import stats

import opendp_wgm.samplers.selection as sel
from opendp_wgm.samplers import csprng, noisy_max, noisy_top_k

ALPHA = 1e-6


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib")


# --------------------------------------------------------------------------------------------------------------
# exact pmfs of the two distributions


def em_pmf(scores: list[int], k: int, scale: float) -> dict[tuple[int, ...], float]:
    """Exponential-mechanism peeling: every round Pr[i] ∝ exp(x_i / scale) among the remaining items."""
    out = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, left = 1.0, set(range(len(scores)))
        for i in seq:
            top = max(scores[j] for j in left)
            weights = {j: math.exp((scores[j] - top) / scale) for j in left}
            p *= weights[i] / sum(weights.values())
            left.remove(i)
        out[seq] = p
    return out


def pf_round(scores: list[int], left: set[int], scale: float) -> dict[int, float]:
    """Permute-and-flip: the winner is uniform among the items whose coin (prob e^{(x - x_max)/scale}) is 1."""
    items = sorted(left)
    top = max(scores[j] for j in items)
    p = {j: math.exp((scores[j] - top) / scale) for j in items}
    win = dict.fromkeys(items, 0.0)
    for mask in itertools.product([0, 1], repeat=len(items)):
        accepted = [j for j, b in zip(items, mask, strict=False) if b]
        if not accepted:
            continue
        prob = math.prod(p[j] if b else 1.0 - p[j] for j, b in zip(items, mask, strict=False))
        for j in accepted:
            win[j] += prob / len(accepted)
    return win


def pf_pmf(scores: list[int], k: int, scale: float) -> dict[tuple[int, ...], float]:
    out = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, left = 1.0, set(range(len(scores)))
        for i in seq:
            p *= pf_round(scores, left, scale)[i]
            left.remove(i)
        out[seq] = p
    return out


def chi2_gof(counts: Counter, pmf: dict, n: int) -> tuple[float, float]:
    """χ² statistic of ``counts`` against ``pmf`` (cells with expectation < 5 pooled), and its critical value."""
    cells = sorted(pmf, key=pmf.get, reverse=True)
    observed, expected = [], []
    pool_o = pool_e = 0.0
    for c in cells:
        if pmf[c] * n >= 5:
            observed.append(counts.get(c, 0))
            expected.append(pmf[c] * n)
        else:
            pool_o += counts.get(c, 0)
            pool_e += pmf[c] * n
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=False))
    return stat, stats.chi2.ppf(1 - ALPHA, len(expected) - 1)


def within(frequency: float, p: float, n: int) -> bool:
    return abs(frequency - p) <= 5 * math.sqrt(p * (1 - p) / n)


# --------------------------------------------------------------------------------------------------------------
# oracle of the paper's reference code: counts (1, 0), ε' = 1.1


def test_oracle_values() -> None:
    assert em_pmf([1, 0], 1, 1 / 1.1)[(0,)] == pytest.approx(math.exp(1.1) / (1 + math.exp(1.1)))
    assert math.exp(1.1) / (1 + math.exp(1.1)) == pytest.approx(0.7503, abs=1e-4)
    assert pf_pmf([1, 0], 1, 1 / 1.1)[(0,)] == pytest.approx(1 - math.exp(-1.1) / 2)


@pytest.mark.slow
@pytest.mark.parametrize("measure", ["zcdp", "max_divergence"])
def test_oracle_fast_path(measure) -> None:
    """The fast path's race on the oracle: 100 000 independent rounds."""
    n = 100_000
    source = csprng().bit_generator
    offsets, counts = np.array([0.0, 1.0]), np.array([1, 1])
    wins = sum(sel._race(offsets, counts, 1 / 1.1, measure, source) == 0 for _ in range(n))
    p = em_pmf([1, 0], 1, 1 / 1.1)[(0,)] if measure == "zcdp" else pf_pmf([1, 0], 1, 1 / 1.1)[(0,)]
    assert within(wins / n, p, n), (wins / n, p)


@pytest.mark.slow
@pytest.mark.parametrize(("measure", "n"), [("zcdp", 100_000), ("max_divergence", 30_000)])
def test_oracle_opendp_path(measure, n) -> None:
    """OpenDP's own sampler (what method='opendp' calls) on the oracle: 0.7503 (Gumbel) and 1 - e^-1.1/2 (PF)."""
    space = dp.vector_domain(dp.atom_domain(T=dp.i64), size=2), dp.linf_distance(T=dp.i64, monotonic=True)
    out_measure = dp.zero_concentrated_divergence() if measure == "zcdp" else dp.max_divergence()
    m = dp.m.make_noisy_top_k(*space, output_measure=out_measure, k=1, scale=1 / 1.1)
    wins = sum(m([1, 0])[0] == 0 for _ in range(n))
    p = em_pmf([1, 0], 1, 1 / 1.1)[(0,)] if measure == "zcdp" else pf_pmf([1, 0], 1, 1 / 1.1)[(0,)]
    assert within(wins / n, p, n), (wins / n, p)


@pytest.mark.parametrize("measure", ["zcdp", "max_divergence"])
def test_oracle_public_function_both_methods(measure) -> None:
    """The public function end to end (fresh generator per call), both methods, fewer trials."""
    n = 2500
    p = em_pmf([1, 0], 1, 1 / 1.1)[(0,)] if measure == "zcdp" else pf_pmf([1, 0], 1, 1 / 1.1)[(0,)]
    for method in ("fast", "opendp"):
        wins = sum(noisy_max([1, 0], 1 / 1.1, measure=measure, method=method) == 0 for _ in range(n))
        assert within(wins / n, p, n), (method, wins / n, p)


# --------------------------------------------------------------------------------------------------------------
# full sequences on a small vector with ties: fast path vs exact pmf vs OpenDP


SCORES = [3, 5, 3, 0, 4]


@pytest.mark.slow
@pytest.mark.parametrize("measure", ["zcdp", "max_divergence"])
def test_fast_path_top2_matches_exact_pmf(measure) -> None:
    n, scale = 20_000, 1.5
    gen = csprng()
    counts = Counter(tuple(sel._fast_top_k(np.array(SCORES), 2, scale, measure, gen).tolist()) for _ in range(n))
    pmf = em_pmf(SCORES, 2, scale) if measure == "zcdp" else pf_pmf(SCORES, 2, scale)
    stat, critical = chi2_gof(counts, pmf, n)
    assert stat < critical, (stat, critical)
    # and the test has power: the other distribution is rejected
    other = pf_pmf(SCORES, 2, scale) if measure == "zcdp" else em_pmf(SCORES, 2, scale)
    assert chi2_gof(counts, other, n)[0] > critical


@pytest.mark.parametrize("measure", ["zcdp", "max_divergence"])
def test_fast_vs_opendp_winner_two_sample(measure) -> None:
    """Two-sample χ² (homogeneity) on the winner: method='fast' against method='opendp'."""
    n, scale = 3000, 1.5
    fast = Counter(noisy_max(SCORES, scale, measure=measure, method="fast") for _ in range(n))
    ours = Counter(noisy_max(SCORES, scale, measure=measure, method="opendp") for _ in range(n))
    table = np.array([[fast.get(i, 0) for i in range(5)], [ours.get(i, 0) for i in range(5)]])
    table = table[:, table.sum(axis=0) > 0]
    stat, p_value, _, _ = stats.chi2_contingency(table)
    assert p_value > ALPHA, (table, stat)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("measure", "k", "fallback"), [("zcdp", 3, "_exact_order"), ("max_divergence", 2, "_exact_race")]
)
def test_forced_fallback_is_exact(monkeypatch, measure: str, k: int, fallback: str) -> None:
    """With the fast path's margin inflated to 2^-4, many draws go to the mpmath fallback: the one-shot Gumbel
    draw's clusters, ordered by ``_exact_order`` on the same uniforms, and permute-and-flip's rounds
    (``_exact_race``); the top-k sequences still have the exact law."""
    monkeypatch.setattr(sel, "_MARGIN", 2.0**-4)
    calls = []
    original = getattr(sel, fallback)
    monkeypatch.setattr(sel, fallback, lambda *a: calls.append(1) or original(*a))
    n, scale = 4000, 1.5
    gen = csprng()
    counts = Counter(tuple(sel._fast_top_k(np.array(SCORES), k, scale, measure, gen).tolist()) for _ in range(n))
    pmf = em_pmf(SCORES, k, scale) if measure == "zcdp" else pf_pmf(SCORES, k, scale)
    stat, critical = chi2_gof(counts, pmf, n)
    assert stat < critical, (measure, stat, critical)
    assert len(calls) > 100


@pytest.mark.slow
def test_one_shot_gumbel_matches_peeling_pmf() -> None:
    """Top-3 of 5 scores with ties, through the public function (auto picks the one-shot draw)."""
    n, scale = 20_000, 1.5
    counts = Counter(tuple(noisy_top_k(np.array(SCORES), 3, scale, measure="zcdp").tolist()) for _ in range(n))
    stat, critical = chi2_gof(counts, em_pmf(SCORES, 3, scale), n)
    assert stat < critical, (stat, critical)
    assert chi2_gof(counts, pf_pmf(SCORES, 3, scale), n)[0] > critical  # power: PF's law is rejected


def test_auto_draws_the_gumbel_form_in_one_shot(monkeypatch) -> None:
    """``method="auto"`` with the Gumbel form: the one-shot draw, not OpenDP's sampler (was: OpenDP's up to
    n·k <= 20 000, about 14 ms for 107 scores at k = 100, more than a WGM call on steam_200k)."""
    used = []
    monkeypatch.setattr(sel, "_opendp_top_k", lambda *a: used.append("opendp") or np.arange(a[1]))
    original = sel._gumbel_top_k
    monkeypatch.setattr(sel, "_gumbel_top_k", lambda *a: used.append("one-shot") or original(*a))
    out = noisy_top_k(np.arange(107), 100, 40.0, measure="zcdp")
    assert used == ["one-shot"]
    assert sorted(out.tolist()) == sorted(set(out.tolist())) and len(out) == 100
    noisy_top_k(np.arange(10), 2, 0.0, measure="zcdp")  # scale 0: no Gumbel draw; OpenDP as before
    assert used == ["one-shot", "opendp"]


# --------------------------------------------------------------------------------------------------------------
# the exact fallback and the float assumptions


def _key_mp(offset: int, scale: float, count: int, v, measure: str):
    a = mp.mpf(offset) / mp.mpf(scale)
    if measure == "zcdp":
        return a + mp.log(-mp.log(v)) - mp.log(count)
    return a + mp.log(-mp.expm1(mp.log(v) / count))


@pytest.mark.parametrize("measure", ["zcdp", "max_divergence"])
def test_exact_race_agrees_with_high_precision(measure) -> None:
    """Near-ties built on purpose: the fallback's winner is the argmin of the keys at 400 bits."""
    rng = np.random.default_rng(5)  # test data only; the sampler's words come from `words` below
    mp.prec = 400
    for _ in range(40):
        count = int(rng.integers(1, 50))
        offsets = [0, int(rng.integers(0, 3))]
        counts = [count, int(rng.integers(1, 50))]
        w0 = int(rng.integers(1, 2**63)) * 2 + 1
        # pick w1 so that level 1's key is within ~2^-50 of level 0's
        target = _key_mp(offsets[0], 1.3, counts[0], mp.mpf(w0) / 2**64, measure) - mp.mpf(offsets[1]) / mp.mpf(1.3)
        v1 = mp.exp(-mp.exp(target + mp.log(counts[1]))) if measure == "zcdp" else (1 - mp.exp(target)) ** counts[1]
        if not (0 < v1 < 1):
            continue
        w1 = int(mp.floor(v1 * 2**64))

        class Source:
            def random_raw(self, size=None):
                return int(rng.integers(0, 2**63)) * 2

        winner = sel._exact_race(offsets, counts, [w0, w1], 1.3, measure, Source())
        # the decision must hold for the refined uniforms: check on the original 64-bit cells when decisive
        lo = [_key_mp(o, 1.3, c, mp.mpf(w + 1) / 2**64, measure) for o, c, w in zip(offsets, counts, [w0, w1], strict=False)]
        hi = [_key_mp(o, 1.3, c, mp.mpf(w) / 2**64, measure) for o, c, w in zip(offsets, counts, [w0, w1], strict=False)]
        if hi[0] < lo[1]:
            assert winner == 0
        elif hi[1] < lo[0]:
            assert winner == 1


def _fast_key_bounds(v_lo: float, v_hi: float, count: int, measure: str) -> tuple[float, float]:
    """Float bounds of ``g`` on the cell [v_lo, v_hi) of a level at offset 0, as ``sel._race`` forms them."""
    c = np.array([float(count)])
    with np.errstate(divide="ignore", invalid="ignore"):
        g_hi = sel._g(np.array([v_hi]), c, measure)[0]
        g_lo = sel._g(np.array([v_lo]), c, measure)[0]
    lo = g_hi - sel._MARGIN * (4.0 + abs(g_hi))
    hi = g_lo + sel._MARGIN * (4.0 + abs(g_lo))
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(hi) else hi)


@pytest.mark.parametrize("measure", ["zcdp", "max_divergence"])
def test_fast_bounds_contain_the_exact_key(measure) -> None:
    """The float bounds of g on a 52-bit cell contain g at the cell's ends (computed at 200 bits)."""
    rng = np.random.default_rng(11)
    mp.prec = 200
    for _ in range(300):
        r = int(rng.integers(1, 2**52 - 1))
        count = int(rng.choice([1, 2, 7, 1000, 10**6]))
        lo, hi = _fast_key_bounds(r * 2.0**-52, (r + 1) * 2.0**-52, count, measure)
        assert lo <= _key_mp(0, 1.0, count, mp.mpf(r + 1) / 2**52, measure)
        assert hi >= _key_mp(0, 1.0, count, mp.mpf(r) / 2**52, measure)


def test_float_library_assumption() -> None:
    """(F3) of docs/top_k.md: numpy's log and expm1 have relative error <= 2^-42 (measured: ~2^-52)."""
    rng = np.random.default_rng(3)
    mp.prec = 120
    x = np.concatenate([rng.random(400), 1 - rng.random(100) * 2.0**-40, rng.random(100) * 2.0**-40])
    x = x[x > 0]
    worst = max(abs(float((mp.mpf(float(v)) - mp.log(mp.mpf(float(u)))) / mp.log(mp.mpf(float(u)))))
                for u, v in zip(x, np.log(x), strict=False) if u != 1.0)
    t = -rng.random(500) * 60
    worst_expm1 = max(abs(float((mp.mpf(float(v)) - mp.expm1(mp.mpf(float(u)))) / mp.expm1(mp.mpf(float(u)))))
                      for u, v in zip(t, np.expm1(t), strict=False) if u != 0.0)
    assert worst <= 2.0**-42 and worst_expm1 <= 2.0**-42


def test_float_library_assumption_compiled() -> None:
    """(F3) for the compiled user-peeling rounds (``engines._peel_jit``): the ``log`` Numba compiles (the C
    library's) has relative error <= 2^-42 too, on the same kind of arguments (cell ends and their -log)."""
    numba = pytest.importorskip("numba")
    compiled_log = numba.njit(lambda values: np.array([np.log(v) for v in values]))
    rng = np.random.default_rng(4)
    mp.prec = 120
    x = np.concatenate([rng.random(400), 1 - rng.random(100) * 2.0**-40, rng.random(100) * 2.0**-40, rng.random(200) * 36])
    x = x[(x > 0) & (x != 1.0)]
    worst = max(abs(float((mp.mpf(float(v)) - mp.log(mp.mpf(float(u)))) / mp.log(mp.mpf(float(u)))))
                for u, v in zip(x, compiled_log(x), strict=True))
    assert worst <= 2.0**-42


def test_no_legacy_numpy_random_on_the_path(monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("a non-cryptographic numpy.random entry point was used")

    for name in ("default_rng", "random", "rand", "randint", "gumbel", "exponential", "choice", "permutation",
                 "shuffle", "uniform", "PCG64", "MT19937", "RandomState"):
        monkeypatch.setattr(np.random, name, boom)
    for measure in ("zcdp", "max_divergence"):
        assert len(noisy_top_k(np.arange(50), 10, 3.0, measure=measure, method="fast")) == 10


# --------------------------------------------------------------------------------------------------------------
# properties and edge cases


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.integers(-50, 50), min_size=0, max_size=30),
    k=st.integers(1, 40),
    scale=st.sampled_from([0.0, 1e-6, 0.7, 5.0, 1e6]),
    measure=st.sampled_from(["zcdp", "max_divergence"]),
)
def test_output_is_a_prefix_of_a_permutation(scores, k, scale, measure) -> None:
    arr = np.array(scores, dtype=np.int64)
    before = arr.copy()
    out = noisy_top_k(arr, k, scale, measure=measure, method="fast")
    assert out.dtype == np.int64 and out.shape[0] == min(k, len(scores))
    assert len(set(out.tolist())) == out.shape[0]
    assert all(0 <= i < len(scores) for i in out.tolist())
    assert np.array_equal(arr, before)
    if scale in (0.0, 1e-6) and out.shape[0]:
        # (almost) no noise: the true top-k, ties in any order
        assert sorted(arr[out].tolist(), reverse=True) == arr[out].tolist()
        assert arr[out].tolist() == sorted(scores, reverse=True)[: out.shape[0]]


def test_zero_scale_breaks_ties_uniformly() -> None:
    seen = Counter(int(noisy_top_k(np.array([2, 5, 5, 5]), 1, 0.0, method="fast")[0]) for _ in range(600))
    assert set(seen) == {1, 2, 3} and min(seen.values()) > 120


def test_empty_scores_and_k_larger_than_n() -> None:
    assert noisy_top_k(np.array([], dtype=np.int64), 3, 1.0).shape == (0,)
    assert noisy_top_k([], 3, 1.0).shape == (0,)
    assert sorted(noisy_top_k(np.array([4, 1, 2]), 10, 1.0, method="fast").tolist()) == [0, 1, 2]
    assert sorted(noisy_top_k(np.array([4, 1, 2]), 10, 1.0, method="opendp").tolist()) == [0, 1, 2]


def test_large_candidate_set_is_fast_and_sensible() -> None:
    rng = np.random.default_rng(0)
    scores = np.minimum(rng.zipf(1.3, 200_000), 10**6).astype(np.int64)
    out = noisy_top_k(scores, 100, 1e-3, measure="zcdp")  # auto: the fast path
    assert sorted(scores[out].tolist(), reverse=True) == sorted(scores.tolist(), reverse=True)[:100]


def test_auto_uses_opendp_for_small_inputs(monkeypatch) -> None:
    used = []
    monkeypatch.setattr(sel, "_opendp_top_k", lambda *a: used.append("opendp") or np.arange(a[1]))
    noisy_top_k(np.arange(10), 2, 1.0)
    assert used == ["opendp"]
    dp.disable_features("contrib")
    try:
        assert len(noisy_top_k(np.arange(10), 2, 1.0)) == 2  # falls back to the fast path
        assert used == ["opendp"]
    finally:
        dp.enable_features("contrib")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scores": np.zeros((2, 2), dtype=int)}, ValueError, "one-dimensional"),
        ({"scores": np.array([0.5, 1.0])}, TypeError, "must hold integers"),
        ({"scores": np.array([True, False])}, TypeError, "must hold integers"),
        ({"scores": np.array([2**63], dtype=np.uint64)}, ValueError, "fit in int64"),
        ({"k": 0}, ValueError, r"`k` must be an integer >= 1 \(found 0\)"),
        ({"k": 1.5}, TypeError, "`k` must be an integer"),
        ({"scale": -1.0}, ValueError, r"`scale` must be in \[0.0, inf\)"),
        ({"scale": math.nan}, ValueError, "`scale` must be finite"),
        ({"measure": "pure"}, ValueError, "`measure` must be one of"),
        ({"method": "slow"}, ValueError, "`method` must be one of"),
        ({"scores": np.array([0, 2**60]), "method": "fast"}, ValueError, "spread"),
    ],
)
def test_bad_input(kwargs, error, match) -> None:
    args = {"scores": np.array([1, 2, 3]), "k": 2, "scale": 1.0, **kwargs}
    with pytest.raises(error, match=match):
        noisy_top_k(args.pop("scores"), args.pop("k"), args.pop("scale"), **args)


def test_noisy_max_rejects_empty_and_opendp_needs_contrib() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        noisy_max([], 1.0)
    dp.disable_features("contrib")
    try:
        with pytest.raises(RuntimeError, match=r'dp\.enable_features\("contrib"\)'):
            noisy_top_k(np.array([1, 2]), 1, 1.0, method="opendp")
    finally:
        dp.enable_features("contrib")


def test_huge_spread_uses_opendp_under_auto() -> None:
    out = noisy_top_k(np.array([0, 2**60, 5]), 1, 1.0)
    assert out.tolist() == [1]
