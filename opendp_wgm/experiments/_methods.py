"""The methods of each experiment: how to build them for one setting, and what a run records.

A method is built once per (setting, budget) — calibration is not timed — and then called once per trial on
the loaded frame; the recorded run time is that call only (the mechanism call, as in the paper's reference code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import polars as pl

from opendp_wgm.domains import user_items_space

if TYPE_CHECKING:
    from opendp_wgm.experiments._config import Config


class _Budget(TypedDict):
    """An (ε, δ) budget, as the ``*_from_budget`` constructors' keyword arguments."""

    epsilon: float
    delta: float

__all__: list[str] = []

Run = Callable[[pl.DataFrame], pl.DataFrame]


@dataclass(frozen=True)
class Variant:
    """One line of a plot: a method at fixed extra parameters (e.g. limited domain at k̄ = 5k)."""

    method: str
    label: str
    build: Callable[[int], Run]  # x (Δ0 or k) -> run
    x_independent: bool = False  # the same release law at every x: run once per trial (Policy Greedy)
    private: bool = True
    k_bar_multiplier: int | None = None


LABELS = {
    "wgm": "WGM",
    "policy_gaussian_l2": "Policy Gaussian (ℓ2 descent)",
    "policy_gaussian_reference_l1": "Policy Gaussian (reference \"L1\")",
    "policy_greedy": "Policy Greedy (fixed)",
    "opendp_key_release": "OpenDP key release",
    "dp_sips": "DP-SIPS",
    "dp_sips_r2": "DP-SIPS R=2 (0.1, 0.9)",
    "dp_sips_default": "DP-SIPS default (adaptive)",
    "partition_selection": "Partition selection (optimal at Δ0 = 1)",
    "pipeline_dp": "PipelineDP select_partitions (truncated geometric)",
    "wgm_auto": "WGM, Δ0 auto",
    "dp_sips_auto": "DP-SIPS default, Δ0 auto",
    "wgm_top_k": "WGM-then-top-k",
    "limited_domain": "Limited domain",
    "wgm_hitting_set": "WGM-then-hitting-set",
    "greedy": "Greedy (non-private)",
    "peeling_true_domain": "Peeling on the true domain (domain not private)",
}


#: DP-SIPS schedules: the fixed ones pinned so that the rows keep their meaning if the constructor's default
#: changes (geometric R = 3, r = 0.3: fractions 0.065, 0.216, 0.719; two rounds at (0.1, 0.9)), and
#: ``dp_sips_default``, the constructor's default (the adaptive schedule), whatever it is.
_DP_SIPS_SCHEDULES: dict[str, dict[str, Any]] = {
    "dp_sips": {"rounds": 3, "ratio": 0.3},
    "dp_sips_r2": {"fractions": (0.1, 0.9)},
    "dp_sips_default": {},
}


def variants(config: Config) -> list[Variant]:
    """The variants of ``config.methods`` for ``config.experiment``, in order.

    Nothing is built here (the input space is created when a variant is built), so listing variants needs no
    OpenDP feature: the report can be rewritten from ``trials.csv`` alone.
    """
    eps, delta, alpha = config.epsilon, config.delta, config.alpha
    out: list[Variant] = []
    for method in config.methods:
        if config.experiment == "set-union":
            out.append(_set_union(method, eps, delta, alpha))
        elif config.experiment == "top-k":
            if method == "limited_domain":
                out.extend(_limited_domain(eps, delta, m) for m in config.k_bar_multipliers)
            else:
                out.append(_wgm_top_k(eps, delta, config.max_contributions))
        else:
            out.append(_hitting_set(method, eps, delta, config.max_contributions))
    return out


def _set_union(method: str, eps: float, delta: float, alpha: float) -> Variant:
    from opendp_wgm.measurements import baselines
    from opendp_wgm.measurements.dp_sips import make_dp_sips_from_budget
    from opendp_wgm.measurements.partition_selection import make_partition_selection
    from opendp_wgm.measurements.wgm import make_wgm_from_budget

    budget = _Budget(epsilon=eps, delta=delta)
    if method in ("wgm_auto", "dp_sips_auto"):  # Δ0 chosen privately inside the budget: one release law for all x
        make = make_wgm_from_budget if method == "wgm_auto" else make_dp_sips_from_budget
        return Variant(
            method,
            LABELS[method],
            lambda _d0: make(*user_items_space(), max_contributions="auto", **budget),
            x_independent=True,
        )
    if method == "wgm":
        return Variant(
            method, LABELS[method], lambda d0: make_wgm_from_budget(*user_items_space(), max_contributions=d0, **budget)
        )
    if method in _DP_SIPS_SCHEDULES:
        schedule = _DP_SIPS_SCHEDULES[method]
        return Variant(
            method,
            LABELS[method],
            lambda d0: make_dp_sips_from_budget(*user_items_space(), max_contributions=d0, **schedule, **budget),
        )
    if method == "partition_selection":  # one item per user whatever the grid's Δ0
        return Variant(
            method,
            LABELS[method],
            lambda _d0: make_partition_selection(*user_items_space(), **budget),
            x_independent=True,
        )
    if method == "pipeline_dp":
        from opendp_wgm.experiments._peers import pipeline_dp_selection

        return Variant(method, LABELS[method], lambda d0: pipeline_dp_selection(d0, **budget))
    if method in ("policy_gaussian_l2", "policy_gaussian_reference_l1"):
        descent: Literal["l2", "reference_l1"] = "l2" if method.endswith("l2") else "reference_l1"
        return Variant(
            method,
            LABELS[method],
            lambda d0: baselines.make_policy_gaussian_from_budget(
                *user_items_space(), max_contributions=d0, alpha=alpha, descent=descent, **budget
            ),
        )
    if method == "policy_greedy":
        return Variant(
            method,
            LABELS[method],
            lambda _d0: baselines.make_policy_greedy_from_budget(*user_items_space(), alpha=alpha, **budget),
            x_independent=True,
        )
    return Variant(
        method,
        LABELS[method],
        lambda d0: baselines.make_opendp_key_release(*user_items_space(), max_contributions=d0, **budget),
    )


def _wgm_top_k(eps: float, delta: float, max_contributions: int) -> Variant:
    from opendp_wgm.measurements.top_k import make_wgm_top_k_from_budget

    return Variant(
        "wgm_top_k",
        f"{LABELS['wgm_top_k']} (Δ0 = {max_contributions})",
        lambda k: make_wgm_top_k_from_budget(
            *user_items_space(), k=k, max_contributions=max_contributions, epsilon=eps, delta=delta
        ),
    )


def _limited_domain(eps: float, delta: float, multiplier: int) -> Variant:
    from opendp_wgm.measurements.baselines import make_limited_domain_top_k

    label = "k̄ = k" if multiplier == 1 else f"k̄ = {multiplier}k"
    return Variant(
        "limited_domain",
        f"{LABELS['limited_domain']} ({label}, Δ0 = ∞)",
        lambda k: make_limited_domain_top_k(
            *user_items_space(), k=k, k_bar=multiplier * k, max_contributions=None, epsilon=eps, delta=delta
        ),
        k_bar_multiplier=multiplier,
    )


def _hitting_set(method: str, eps: float, delta: float, max_contributions: int) -> Variant:
    from opendp_wgm import measurements as hs

    if method == "wgm_hitting_set":
        return Variant(
            method,
            f"{LABELS[method]} (Δ0 = {max_contributions})",
            lambda k: hs.make_wgm_hitting_set_from_budget(
                *user_items_space(), k=k, max_contributions=max_contributions, epsilon=eps, delta=delta
            ),
        )
    if method == "greedy":
        return Variant(method, LABELS[method], lambda k: (lambda frame: hs.greedy_hitting_set(frame, k)), private=False)
    return Variant(
        method,
        LABELS[method],
        lambda k: (lambda frame: hs.user_peeling_on_true_domain(frame, k, epsilon=eps, delta=delta)),
        private=False,
    )
