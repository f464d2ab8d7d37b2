"""Stage 1 of group-by: the key release calibrated to a budget (:func:`make_wgm_group_by_from_budget`'s), and
:func:`discover_keys`, the same release spending a ``dp.Context``'s next budget slot."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import opendp.prelude as dp
import polars as pl

from opendp_wgm._spaces import _assert_features, _resolve_space
from opendp_wgm._validation import (
    _check_choice,
)
from opendp_wgm.measurements.dp_sips import make_dp_sips_from_budget
from opendp_wgm.measurements.partition_selection import make_partition_selection
from opendp_wgm.measurements.top_k import make_wgm_top_k_from_budget
from opendp_wgm.measurements.two_stage import Stage1
from opendp_wgm.measurements.wgm import make_wgm_from_budget
from opendp_wgm.privacy.budget import Budget, measure_kind
from opendp_wgm.privacy.threshold import check_max_contributions

__all__ = ["KEY_MECHANISMS", "KeyMechanism", "discover_keys"]

#: Key releases :func:`make_wgm_group_by_from_budget` and :func:`discover_keys` can run first.
KeyMechanism = Literal["wgm", "dp-sips", "top-k", "partition-selection"]
KEY_MECHANISMS: tuple[KeyMechanism, ...] = ("wgm", "dp-sips", "top-k", "partition-selection")


def _key_release_from_budget(
    mechanism: KeyMechanism, budget: Budget, max_contributions: int, k: int | None, noise: Any,
    item: str | Sequence[str] | None = None,
) -> Stage1:
    """Stage 1 calibrated to ``budget`` (its own ``*_from_budget``), as a partial constructor (``item`` names the
    key column of an OpenDP space; None on the prepared space)."""
    options: dict[str, Any] = {
        "max_contributions": max_contributions, "delta": budget.delta, budget.name: budget.value, "noise": noise,
        "item": item,
    }
    if mechanism == "top-k":
        if k is None:
            msg = "`k` must be given with mechanism='top-k' (found None)"
            raise ValueError(msg)
        return functools.partial(make_wgm_top_k_from_budget, k=k, **options)
    if k is not None:
        msg = f"`k` must be None unless mechanism='top-k' (found {k!r})"
        raise ValueError(msg)
    if mechanism == "partition-selection":  # Δ0 = 1, nothing to calibrate; (ε, δ) only (docs/privacy.md §6)
        if budget.epsilon is None:
            msg = f"`mechanism` must not be 'partition-selection' under approximate zCDP (found rho={budget.value!r})"
            raise ValueError(msg)
        return functools.partial(make_partition_selection, epsilon=budget.epsilon, delta=budget.delta, item=item)
    make = make_dp_sips_from_budget if mechanism == "dp-sips" else make_wgm_from_budget
    return functools.partial(make, **options)


def discover_keys(
    context: dp.Context,
    *,
    max_contributions: int,
    item: str | Sequence[str] | None = None,
    mechanism: KeyMechanism = "wgm",
    k: int | None = None,
    noise: Literal["lattice", "opendp"] = "lattice",
) -> pl.DataFrame:
    r"""Spend a ``dp.Context``'s next budget slot on key discovery; return the keys for ``.with_keys(keys)``.

    The key release (``mechanism``'s ``*_from_budget`` on ``context.accountant.input_space``) is calibrated to
    the Context's next per-query loss and run by the Context, which records it. The returned keys feed OpenDP's
    own queries:

    .. code-block:: python

        keys = wgm.discover_keys(ctx, max_contributions=10, item="artist")
        query = (ctx.query().truncate_per_group(3, by=["artist"]).truncate_num_groups(11, by=["artist"], keep="last")
                 .group_by("artist").agg(dp.len(signed=True)).with_keys(keys))
        query.summarize(alpha=0.05); query.release().collect()

    The query must bound each user's contribution itself (OpenDP refuses it otherwise): rows per key
    (``truncate_per_group``), keys per user (``truncate_num_groups``, which keeps k − 1 keys for a charged k in
    OpenDP 0.16; its default ``keep="sample"`` fails at collect with Polars 1.36), and sums need a margin's
    ``max_length``, given when the Context is built (``docs/api.md``): this function cannot tell which queries
    will follow.

    Parameters
    ----------
    context
        A ``dp.Context.compositor`` with ``dp.unit_of(contributions=1, identifier=...)``, an approximate measure
        (``dp.loss_of(epsilon=..., delta=...)`` or ``dp.loss_of(rho=..., delta=...)``) and a budget slot left.
    max_contributions, mechanism, k, noise
        As for :func:`make_wgm_group_by_from_budget`.
    item
        The key column, when the data hold more than one column besides the user; a list of columns for a
        composite key (its tuples are discovered; the query then groups by all of them, and truncates with
        ``keep="first"`` or ``"last"``: OpenDP 0.16's default ``keep="sample"`` fails at collect).

    Returns
    -------
    polars.DataFrame
        The released keys: the key column (or each key column of a composite key) only, in the data's dtypes,
        in the release's order.
    """
    _assert_features()
    mechanism = _check_choice("mechanism", mechanism, KEY_MECHANISMS)
    if not isinstance(context, dp.Context):
        msg = f"`context` must be a dp.Context (found {type(context).__name__})"
        raise TypeError(msg)
    if context.d_in != 1:
        msg = f"`context` must have dp.unit_of(contributions=1, identifier=...) (found d_in={context.d_in!r})"
        raise ValueError(msg)
    remaining = context.remaining_privacy_loss()
    if not remaining:
        msg = f"`context` must have a budget slot left, split_evenly_over or split_by_weights (found {remaining!r})"
        raise ValueError(msg)
    kind = measure_kind(context.accountant.output_measure, ("approx_zcdp", "approx_dp"))
    value, delta = remaining[0]
    budget = Budget.of(delta=delta, **{"epsilon" if kind == "approx_dp" else "rho": value})
    space = _resolve_space(*context.accountant.input_space, item)
    max_contributions = check_max_contributions(max_contributions)
    key_release = _key_release_from_budget(
        mechanism, budget, max_contributions, k, noise, space.composite or space.item
    )
    released: pl.DataFrame = context(key_release(*context.accountant.input_space))
    return released.select(space.keys)
