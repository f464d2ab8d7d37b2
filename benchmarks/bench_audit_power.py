"""Power of the auditor against under-claimed δ: ``python benchmarks/bench_audit_power.py``.

For the WGM and DP-SIPS (equal rounds) at a few (σ, T, Δ0), prints ρ and δ of the map, the probability P₁ that
one of the differing user's unique items is released (any round: 1 − Π_i (1 − q_i(t))^t at the worst t, q from
the release curve), and the smallest fraction f of the map's δ that a twin (``make_underclaimed(m, f)``) must
claim to be flagged with probability ≥ 0.9 at α = 10⁻³ on ``worst_case_pairs(Δ0, T, users=20)``, by
:func:`opendp_wgm.audit.flag_power` (exact; no release is run). The table is in ``docs/audit.md``, "Power".
"""

from __future__ import annotations

import opendp.prelude as dp

import opendp_wgm as wgm
from opendp_wgm.audit import flag_power, worst_case_pairs
from opendp_wgm.privacy.threshold import release_probability

#: (σ, T, Δ0, rounds): rounds = 1 is the WGM.
SETTINGS = [(4.0, 7.0, 1, 1), (4.0, 7.0, 1, 2), (4.0, 7.0, 1, 3), (3.0, 5.0, 1, 2), (1.5, 4.0, 1, 2),
            (1.0, 3.3, 1, 2), (4.0, 5.0, 4, 3), (2.0, 3.0, 4, 2)]
TRIALS = (2000, 5000, 20_000)


def detected_fraction(p1: float, delta: float, rho: float, trials: int, events: int) -> float:
    """The largest f whose claim f·δ is flagged with probability ≥ 0.9 (bisection; 0: none is)."""
    low, high = 0.0, 1.0
    for _ in range(30):
        f = (low + high) / 2
        low, high = (f, high) if flag_power(p1, f * delta, rho, trials=trials, events=events) >= 0.9 else (low, f)
    return low


def main() -> None:
    dp.enable_features("contrib", "honest-but-curious")
    print("σ, T, Δ0, rounds | ρ | claimed δ | P₁ | f at " + ", ".join(f"{n} trials" for n in TRIALS))
    for sigma, threshold, max_contributions, rounds in SETTINGS:
        m = wgm.make_dp_sips(*wgm.user_items_space(), max_contributions=max_contributions,
                             scales=[sigma] * rounds, thresholds=[threshold] * rounds)
        rho, delta = m.map(1)
        curve = [release_probability(1, scale=sigma, threshold=threshold, items_per_user=t)[0]
                 for t in range(1, max_contributions + 1)]
        p1 = max(1 - (1 - float(q)) ** (t * rounds) for t, q in enumerate(curve, start=1))
        events = sum(len(pair.events) for pair in worst_case_pairs(max_contributions, threshold, users=20))
        fractions = ", ".join(f"{detected_fraction(p1, delta, rho, n, events):.2f}" for n in TRIALS)
        setting = f"{sigma:g}, {threshold:g}, {max_contributions}, {rounds}"
        print(f"{setting} | {rho:.4f} | {delta:.4f} | {p1:.4f} | {fractions}")


if __name__ == "__main__":
    main()
