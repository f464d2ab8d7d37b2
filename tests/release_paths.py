"""Every public release path, in one table: :data:`RELEASE_PATHS` maps a name to a builder.

A builder takes the key columns of a frame (one item column, or a composite key's columns), the candidates a
known-domain stage may be given (public: a Series, or a DataFrame for a composite key) and returns a function
from a frame to an outcome (the release). The measurements use explicit parameters (no calibration at each
build) at small scales, so that with a few dozen users keys are released and every stage runs. The keys of
the table are the public constructors' names in ``opendp_wgm.measurements.__all__`` (``make_*``) and the CLI's
release commands (``cli discover`` ...); ``tests/test_release_failures.py`` runs each on neighbouring frames
of adversarial values and checks that the table names every public constructor.

A mechanism's own test module may declare its rows instead, as a module-level ``RELEASE_PATHS`` of the same
shape built with :func:`measure` and :func:`from_budget` (``tests/measurements/test_<name>.py``): they join the
table (:func:`release_paths`), so adding a mechanism needs no edit here, and a name declared twice fails.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import opendp.prelude as dp
import polars as pl

import opendp_wgm as wgm
from opendp_wgm.cli import main
from opendp_wgm.measurements import baselines as bl

Keys = tuple[str, ...]
Release = Callable[[pl.DataFrame], Any]
Builder = Callable[[Keys, Any], Release]

APPROX_DP = dp.approximate(dp.max_divergence())
#: Value column every frame holds (the group-by paths sum and average it).
VALUE = "value"
SMALL = {"max_contributions": 3}
WGM = {"max_contributions": 3, "scale": 0.5, "threshold": 1.5}
TWO_STAGE = {"max_contributions": 3, "wgm_scale": 0.5, "wgm_threshold": 1.5, "peel_scale": 0.5, "k": 2}


def _space(keys: Keys) -> tuple[dp.Domain, dp.Metric]:
    return wgm.user_items_space("user", keys[0] if len(keys) == 1 else list(keys))


def measure(make: Callable[..., dp.Measurement], **options: Any) -> Builder:
    """A builder of ``make(*space, **options)``; ``candidates=True`` passes the public candidates."""
    wants_candidates = options.pop("candidates", False)

    def build(keys: Keys, candidates: Any) -> Release:
        extra = {"candidates": candidates} if wants_candidates else {}
        return make(*_space(keys), **options, **extra)  # type: ignore[no-any-return]

    return build


def _group_by(key_release: Any, **options: Any) -> Builder:
    stats = {"sums": {VALUE: (-1.0, 1.0)}, "means": {VALUE: (0.0, 2.0)}}
    return measure(wgm.make_wgm_group_by, key_release=key_release, max_contributions=3, scale=0.5, **stats, **options)


def from_budget(make: Callable[..., dp.Measurement], **options: Any) -> Builder:
    """A calibrated constructor, built once per key columns (its calibration is the slow part); with
    ``candidates=True``, built at each call on the public candidates."""
    if options.pop("candidates", False):
        return lambda keys, candidates: make(*_space(keys), candidates=candidates, **options)
    cached = lru_cache(maxsize=None)(lambda keys: make(*_space(keys), **options))
    return lambda keys, candidates: cached(keys)


def _cli(command: str, *options: str) -> Builder:
    """The CLI command on the frame written to Parquet (dtypes kept): its exit status and stderr's last line
    when it fails; 0 and nothing else when it succeeds (the release itself is random)."""

    def build(keys: Keys, candidates: Any) -> Release:
        def run(frame: pl.DataFrame) -> Any:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "data.parquet"
                frame.write_parquet(path)
                out, err = io.StringIO(), io.StringIO()
                argv = [command, str(path), "--user", "user", "--item", ",".join(keys), "--output", "-", *options]
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(argv)
            if code:  # the message without the temporary folder's name
                message = err.getvalue().strip().splitlines()[-1:]
                raise RuntimeError(f"exit {code}: {[line.replace(folder, '<tmp>') for line in message]}")
            return code

        return run

    return build


#: name -> builder. Every ``make_*`` of ``opendp_wgm.measurements.__all__`` that releases from users' data
#: (the test fails on a new one missing here or in a test module's ``RELEASE_PATHS``), and the CLI's release commands.
_TABLE: dict[str, Builder] = {
    "make_wgm": measure(wgm.make_wgm, **WGM),
    "make_wgm (streaming, 2 passes)": measure(wgm.make_wgm, **WGM, passes=2, engine="streaming"),
    "make_wgm_from_budget": from_budget(wgm.make_wgm_from_budget, max_contributions=3, epsilon=20.0, delta=1e-3),
    # the WGM's last step, on the chain that feeds it (make_wgm is this chain)
    "make_noisy_threshold": lambda keys, candidates: (
        wgm.make_bound_user_items(*_space(keys), max_contributions=3)
        >> wgm.then_weighted_histogram()
        >> wgm.then_noisy_threshold(scale=0.5, threshold=1.5)
    ),
    "make_wgm_top_k": measure(wgm.make_wgm_top_k, **TWO_STAGE),
    "make_wgm_top_k_from_budget": from_budget(
        wgm.make_wgm_top_k_from_budget, k=2, max_contributions=3, epsilon=20.0, delta=1e-3
    ),
    "make_wgm_hitting_set": measure(wgm.make_wgm_hitting_set, **TWO_STAGE),
    "make_wgm_hitting_set_from_budget": from_budget(
        wgm.make_wgm_hitting_set_from_budget, k=2, max_contributions=3, epsilon=20.0, delta=1e-3
    ),
    "make_peeling_top_k": measure(wgm.make_peeling_top_k, candidates=True, k=2, scale=0.5),
    "make_user_peeling": measure(wgm.make_user_peeling, candidates=True, k=2, scale=0.5),
    "make_user_peeling_from_budget": from_budget(
        wgm.make_user_peeling_from_budget, candidates=True, k=2, epsilon=20.0, delta=1e-3
    ),
    "make_wgm_group_by": _group_by(wgm.then_wgm(**WGM)),
    "make_wgm_group_by (DP-SIPS keys)": _group_by(
        wgm.then_dp_sips(max_contributions=3, scales=[0.5, 0.5], thresholds=[3.0, 1.5])
    ),
    "make_wgm_group_by (top-k keys)": _group_by(wgm.then_wgm_top_k(**TWO_STAGE)),
    "make_wgm_group_by_from_budget": from_budget(
        wgm.make_wgm_group_by_from_budget, max_contributions=3, epsilon=20.0, delta=1e-3, sums={VALUE: (-1.0, 1.0)}
    ),
    "make_partition_selection": measure(wgm.make_partition_selection, epsilon=5.0, delta=1e-3),
    "make_partition_release": lambda keys, candidates: (
        wgm.make_bound_user_items(*_space(keys), max_contributions=1)
        >> wgm.then_weighted_histogram()
        >> wgm.then_partition_release(epsilon=5.0, delta=1e-3)
    ),
    "make_wgm_group_by (partition-selection keys)": _group_by(
        wgm.then_partition_selection(epsilon=5.0, delta=1e-3), output_measure=APPROX_DP
    ),
    "make_policy_gaussian": measure(bl.make_policy_gaussian, **SMALL, scale=0.5, threshold=1.5),
    "make_policy_gaussian (reference_l1 descent)": measure(
        bl.make_policy_gaussian, **SMALL, scale=0.5, threshold=1.5, descent="reference_l1"
    ),
    "make_policy_gaussian_from_budget": from_budget(
        bl.make_policy_gaussian_from_budget, max_contributions=3, epsilon=20.0, delta=1e-3
    ),
    "make_policy_greedy": measure(bl.make_policy_greedy, scale=0.5, threshold=1.5),
    "make_policy_greedy_from_budget": from_budget(bl.make_policy_greedy_from_budget, epsilon=20.0, delta=1e-3),
    "make_limited_domain_top_k": measure(
        bl.make_limited_domain_top_k, k=2, k_bar=3, max_contributions=3, epsilon=20.0, delta=1e-3
    ),
    "make_opendp_key_release": from_budget(bl.make_opendp_key_release, max_contributions=3, epsilon=20.0, delta=1e-3),
    # max_contributions="auto": the private choice of Δ0, then the mechanism at it (tests/test_auto_contributions.py)
    "make_auto_contributions": lambda keys, candidates: wgm.make_auto_contributions(
        *_space(keys), epsilon=20.0, delta=1e-3, item=keys[0] if len(keys) == 1 else keys,
        candidate=lambda d0, b: wgm.make_wgm_from_budget(
            *_space(keys), max_contributions=d0, epsilon=b.epsilon, delta=b.delta
        ),
    ),
    "make_wgm_from_budget (auto)": from_budget(
        wgm.make_wgm_from_budget, max_contributions="auto", epsilon=20.0, delta=1e-3
    ),
    "make_wgm_from_budget (auto, zCDP)": from_budget(
        wgm.make_wgm_from_budget, max_contributions="auto", rho=20.0, delta=1e-3
    ),
    "make_wgm_top_k_from_budget (auto)": from_budget(
        wgm.make_wgm_top_k_from_budget, k=2, max_contributions="auto", epsilon=20.0, delta=1e-3
    ),
    "make_wgm_hitting_set_from_budget (auto)": from_budget(
        wgm.make_wgm_hitting_set_from_budget, k=2, max_contributions="auto", epsilon=20.0, delta=1e-3
    ),
    "make_wgm_group_by_from_budget (auto)": from_budget(
        wgm.make_wgm_group_by_from_budget, max_contributions="auto", epsilon=20.0, delta=1e-3,
        sums={VALUE: (-1.0, 1.0)},
    ),
    "cli discover": _cli("discover", "--epsilon", "20", "--delta", "1e-3", "--max-contributions", "3"),
    "cli discover (dp-sips)": _cli(
        "discover", "--mechanism", "dp-sips", "--epsilon", "20", "--delta", "1e-3", "--max-contributions", "3"
    ),
    "cli discover (partition-selection)": _cli(
        "discover", "--mechanism", "partition-selection", "--epsilon", "5", "--delta", "1e-3"
    ),
    "cli discover (auto)": _cli(
        "discover", "--epsilon", "20", "--delta", "1e-3", "--max-contributions", "auto", "--auto-fraction", "0.5"
    ),
    "cli top-k": _cli("top-k", "--k", "2", "--epsilon", "20", "--delta", "1e-3", "--max-contributions", "3"),
    "cli top-k (limited domain)": _cli(
        "top-k", "--k", "2", "--mechanism", "limited-domain", "--epsilon", "20", "--delta", "1e-3",
        "--max-contributions", "3",
    ),
    "cli hitting-set": _cli("hitting-set", "--k", "2", "--epsilon", "20", "--delta", "1e-3", "--max-contributions", "3"),
}

#: ``make_*`` names of ``opendp_wgm.measurements.__all__`` that are not releases from users' data, and why.
NOT_RELEASES: dict[str, str] = {}

_TESTS = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def release_paths() -> dict[str, Builder]:
    """Every release path: this file's table and the rows the test modules under ``tests/`` declare in a
    module-level ``RELEASE_PATHS`` (only the modules whose text assigns one are imported). A row named twice,
    here or in two modules, is an error. A function, not a constant: a declaring module imports this file, so the
    rows are read once every module is loaded."""
    rows: dict[str, Builder] = dict(_TABLE)
    for path in sorted(_TESTS.rglob("test_*.py")):
        if not re.search(r"^RELEASE_PATHS\s*[:=]", path.read_text(encoding="utf-8"), re.MULTILINE):
            continue
        module = importlib.import_module(".".join(path.relative_to(_TESTS.parent).with_suffix("").parts))
        twice = sorted(rows.keys() & module.RELEASE_PATHS.keys())
        if twice:
            raise ValueError(f"{path.name} declares release paths already declared: {twice}")
        rows.update(module.RELEASE_PATHS)
    return rows


def constructor_of(name: str) -> str:
    """The public constructor a table entry exercises (its name up to a space)."""
    return name.split(" ", maxsplit=1)[0]
