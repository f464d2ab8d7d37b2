"""Synthetic data: user → item-set tables drawn from a Zipf law, for tests, demos and benchmarks."""

from __future__ import annotations

import numpy as np
import polars as pl

from opendp_wgm._validation import _check_columns, _check_int, _check_real

__all__ = ["synthetic_zipf"]


def synthetic_zipf(
    n_users: int,
    items_per_user: int,
    *,
    exponent: float = 1.3,
    seed: int | np.random.Generator | None = None,
    user: str = "user",
    item: str = "item",
) -> pl.DataFrame:
    r"""Draw a synthetic user → items table with Zipf-distributed item popularity.

    Each user draws ``items_per_user`` items independently from the Zipf law on the positive integers,

    .. math::

        P(X = x) = \frac{x^{-s}}{\zeta(s)}, \qquad x = 1, 2, \dots,\quad s > 1,

    with NumPy's ``Generator.zipf`` (one vectorised call). The rows are the raw draws: duplicates within a
    user are kept, so the table has ``n_users * items_per_user`` rows and a user's *set* may be smaller.

    Parameters
    ----------
    n_users
        Number of users, integer >= 1. User ids are ``0 .. n_users - 1``.
    items_per_user
        Number of draws per user, integer >= 1.
    exponent
        Zipf exponent :math:`s`, a real number > 1. Smaller values give heavier tails.
    seed
        Seed (or ``numpy.random.Generator``) for reproducible data; ``None`` draws fresh OS entropy.
        Seeds are fine here: a dataset is not a release.
    user, item
        Names of the two columns.

    Returns
    -------
    polars.DataFrame
        Columns ``user`` and ``item``, both ``Int64``, users in ascending order.

    Raises
    ------
    TypeError, ValueError
        On an invalid parameter, naming it and the value received.

    Examples
    --------
    >>> df = synthetic_zipf(3, 4, seed=0)
    >>> df.shape, df.schema
    ((12, 2), Schema([('user', Int64), ('item', Int64)]))
    >>> df.get_column("user").to_list()
    [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    """
    n_users = _check_int("n_users", n_users, minimum=1)
    items_per_user = _check_int("items_per_user", items_per_user, minimum=1)
    exponent = _check_real("exponent", exponent, minimum=1.0, minimum_inclusive=False)
    user, item = _check_columns(user, item)
    rng = np.random.default_rng(seed)
    items = rng.zipf(exponent, size=n_users * items_per_user).astype(np.int64, copy=False)
    users = np.repeat(np.arange(n_users, dtype=np.int64), items_per_user)
    return pl.DataFrame({user: users, item: items}, schema={user: pl.Int64, item: pl.Int64})
