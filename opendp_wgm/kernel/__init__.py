"""The kernel: the plans that compute the WGM's weighted histogram, the one function that chooses among them
(:func:`plan_for`), and the one that runs a plan (:func:`histogram`).

``docs/engines.md`` (*Which plan computes the histogram*) has the table: plan, when it runs, why, and how to force
one (``make_weighted_histogram(..., plan=...)``). :mod:`opendp_wgm.kernel.reference` is the plain statement of
the histogram every plan must equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import opendp.prelude as dp
import polars as pl

from opendp_wgm._spaces import _prepare_frame, _resolve_space
from opendp_wgm._validation import _check_execution, _check_int, _Engine
from opendp_wgm.engines.polars import BoundedLists, Numba, fresh_seeds
from opendp_wgm.kernel._small_inputs import COMPILED_FROM_ROWS, compiled_steps_for, small_and_cold
from opendp_wgm.kernel.plans import Plan, _choose, histogram, plan_for, refusal

__all__ = [
    "COMPILED_FROM_ROWS",
    "Explanation",
    "Numba",
    "Plan",
    "compiled_steps_for",
    "explain",
    "histogram",
    "plan_for",
    "refusal",
    "small_and_cold",
]


@dataclass(frozen=True)
class Explanation:
    """The plan that computes a frame's histogram, and why it was chosen."""

    plan: Plan
    reason: str


def explain(
    frame: pl.DataFrame | pl.LazyFrame,
    space: tuple[dp.Domain, dp.Metric],
    max_contributions: int,
    *,
    passes: int = 1,
    engine: _Engine = "auto",
    numba: Numba | None = None,
) -> Explanation:
    """The plan a release of ``frame``'s weighted histogram runs (``plan="auto"``), and its reason.

    Parameters
    ----------
    frame
        The (user, item) rows.
    space
        ``(input_domain, input_metric)``, e.g. :func:`opendp_wgm.user_items_space`'s.
    max_contributions
        Δ0 ≥ 1.
    passes, engine
        As :func:`opendp_wgm.make_weighted_histogram`'s.
    numba
        The :class:`Numba` state to plan for (``None``: this process's).

    Returns
    -------
    Explanation
        The :class:`Plan` and a one-line reason. Reads the frame as the choice does (its first rows, and with the
        compiled step its rows); computes no histogram.
    """
    max_contributions = _check_int("max_contributions", max_contributions, minimum=1)
    passes, engine = _check_execution(passes, engine)
    resolved = _resolve_space(*space)
    lists = BoundedLists(_prepare_frame(frame, resolved), resolved, max_contributions, fresh_seeds())
    choice = _choose(lists, passes=passes, engine=engine, numba=numba)
    return Explanation(choice.plan, choice.reason)
