"""The public boundary of the ``*_from_budget`` constructors: features asserted, ``max_contributions`` checked once,
and ``max_contributions="auto"`` resolved, by one decorator instead of a copy in every constructor."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec

import opendp.prelude as dp
import polars as pl

from opendp_wgm._spaces import _assert_features
from opendp_wgm.privacy.auto import check_max_contributions_or_auto

__all__: list[str] = []

_P = ParamSpec("_P")

#: The arguments :func:`~opendp_wgm.measurements.auto_contributions.auto_from_budget` takes by name; the
#: constructor's others are its candidates' options.
_BUDGET_ARGUMENTS = ("input_domain", "input_metric", "max_contributions", "delta", "epsilon", "rho", "auto_fraction")


def budget_boundary(
    *,
    single_item_columns: dict[str, pl.Expr] | None = None,
    candidate: Callable[..., dp.Measurement] | None = None,
    frame_check: Callable[..., Callable[[Any], object]] | None = None,
) -> Callable[[Callable[_P, dp.Measurement]], Callable[_P, dp.Measurement]]:
    """Decorate a ``*_from_budget`` constructor ``(input_domain, input_metric, *, max_contributions, delta, epsilon,
    rho, auto_fraction, **options)``: the call asserts the features and checks ``max_contributions`` (an integer
    Δ0 or ``"auto"``); an integer reaches the constructor's body checked (the body checks it no more), ``"auto"``
    is :func:`~opendp_wgm.measurements.auto_contributions.auto_from_budget` over ``candidate`` (by default the
    decorated constructor itself) with the call's other arguments, defaults included, as its options.

    Parameters
    ----------
    single_item_columns
        The columns the release at Δ0 = 1 adds to the optimal partition selection (``single_item_columns`` of
        ``auto_from_budget``), if that selection stands for the constructor at Δ0 = 1 under (ε, δ)-DP.
    candidate
        The constructor at one grid point of the choice of Δ0, if not the decorated one.
    frame_check
        ``frame_check(input_domain, input_metric, **options)``: the candidates' checks of a frame's schema beyond
        the input space's (e.g. the value columns a group-by aggregates), which ``"auto"`` runs before its choice
        draws any noise (``check`` of ``make_auto_contributions``).
    """

    def decorate(make: Callable[_P, dp.Measurement]) -> Callable[_P, dp.Measurement]:
        signature = inspect.signature(make)

        @functools.wraps(make)
        def constructor(*args: _P.args, **kwargs: _P.kwargs) -> dp.Measurement:
            _assert_features()
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            max_contributions = check_max_contributions_or_auto(given["max_contributions"])
            if max_contributions != "auto":
                given["max_contributions"] = max_contributions
                return make(*bound.args, **bound.kwargs)
            from opendp_wgm.measurements.auto_contributions import auto_from_budget  # only for "auto"

            options = {name: value for name, value in given.items() if name not in _BUDGET_ARGUMENTS}
            space = given["input_domain"], given["input_metric"]
            return auto_from_budget(
                candidate or constructor, *space, delta=given["delta"], epsilon=given["epsilon"], rho=given["rho"],
                auto_fraction=given["auto_fraction"], single_item_columns=single_item_columns,
                check=frame_check(*space, **options) if frame_check is not None else None, **options,
            )

        return constructor

    return decorate
