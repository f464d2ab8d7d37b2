r"""The non-private k-hitting set baselines of the paper: greedy maximum coverage, and user peeling on the data's
own item domain. **Neither is differentially private**: they are plain functions, not measurements, and exist
to compare with :func:`opendp_wgm.make_wgm_hitting_set`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from opendp_wgm._spaces import _prepare_frame, _Space
from opendp_wgm._validation import _check_int
from opendp_wgm.measurements._peeling_rounds import coverage, peel
from opendp_wgm.measurements.two_stage import ranked_frame
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.calibrate import calibrate_peeling_for

__all__ = ["greedy_hitting_set", "user_peeling_on_true_domain"]


def _check_columns(user: Any, item: Any) -> _Space:
    for name, value in (("user", user), ("item", item)):
        if not isinstance(value, str):
            msg = f"`{name}` must be a column name (str) (found {value!r})"
            raise TypeError(msg)
    if user == item:
        msg = f"`user` and `item` must name different columns (both are {user!r})"
        raise ValueError(msg)
    return _Space(user, item, None, lazyframe_domain=False)


def _check_data(data: Any, space: _Space) -> pl.LazyFrame:
    if not isinstance(data, (pl.DataFrame, pl.LazyFrame)):
        msg = f"`data` must be a polars DataFrame or LazyFrame (found {type(data).__name__})"
        raise TypeError(msg)
    return _prepare_frame(data, space)


def greedy_hitting_set(
    data: pl.DataFrame | pl.LazyFrame, k: int, *, user: str = "user", item: str = "item"
) -> pl.DataFrame:
    r"""The non-private greedy k-hitting set (maximum coverage). **Not differentially private.**

    Each round picks the item held by the most users not yet covered, then covers them
    (as in the paper). Unlike the paper's reference code, an item is never picked twice, and the rounds stop
    early only when no item covers a new user (every user is covered). Ties go to the **smallest item** in
    Polars' sort order of the item column, so the result depends on the set of (user, item) pairs only, not
    on the row order. Greedy covers at least a :math:`1 - 1/e` fraction of the best k-set's users.

    Parameters
    ----------
    data
        Polars ``DataFrame`` or ``LazyFrame``, one row per (user, item) occurrence (duplicates and rows with a
        null user or item are dropped).
    k
        Most items to pick, ≥ 1.
    user, item
        Column names.

    Returns
    -------
    polars.DataFrame
        The picks in order: the item column (input dtype), ``rank`` (UInt32) and ``newly_covered`` (Int64, users
        covered by that pick, > 0). At most ``k`` rows.

    Examples
    --------
    >>> import polars as pl
    >>> from opendp_wgm.measurements.baselines import greedy_hitting_set
    >>> users = [[1, 2, 3], [1, 2, 4], [1, 5], [6, 7], [6, 9]]
    >>> df = pl.DataFrame({"user": [i for i, u in enumerate(users) for _ in u], "item": sum(users, [])})
    >>> greedy_hitting_set(df, 3)["item"].to_list()  # everyone is covered after two picks
    [1, 6]
    """
    space = _check_columns(user, item)
    k = _check_int("k", k, minimum=1)
    lf = _check_data(data, space)
    state, items = coverage(lf, space, None)
    chosen: list[int] = []
    newly: list[int] = []
    for _ in range(min(k, state.n_items)):
        j = int(np.argmax(state.counts))  # the first maximum: codes follow the sorted item order
        if state.counts[j] == 0:  # nothing more can be covered (chosen items sit at 0)
            break
        chosen.append(j)
        newly.append(state.pick(j))
    return ranked_frame(
        items, np.asarray(chosen, dtype=np.int64), items.name, newly_covered=np.asarray(newly, dtype=np.int64)
    )


def user_peeling_on_true_domain(
    data: pl.DataFrame | pl.LazyFrame,
    k: int,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    user: str = "user",
    item: str = "item",
) -> pl.DataFrame:
    r"""User peeling over the data's own item domain. **Not differentially private in the domain.**

    The baseline "Non-Private-Domain-And-Peel" (the paper's reference code): :func:`opendp_wgm.make_user_peeling`
    with the whole budget, and with candidates = every distinct item of ``data``. The peeling rounds are private *for
    a public candidate list*, but here the list is read from the data (a released item may be held by one
    user only), so the output as a whole is not differentially private. It models a known, public domain.

    The budget is as in :func:`opendp_wgm.calibrate_user_peeling`, spread over ``k`` rounds as the reference does
    (``epsilon`` with ``delta`` reproduces its per-round ε').

    Returns
    -------
    polars.DataFrame
        The item column (input dtype) and ``rank``, ``min(k, #items)`` rows in selection order.
    """
    space = _check_columns(user, item)
    k = _check_int("k", k, minimum=1)
    budget = Budget.of_peeling(epsilon=epsilon, rho=rho, delta=delta)
    lf = _check_data(data, space)
    scale = calibrate_peeling_for(budget, k)
    return peel(lf, space, None, k, scale)
