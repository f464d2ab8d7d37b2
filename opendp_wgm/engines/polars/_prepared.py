"""The prepared frame as the steps of one release read it (:class:`Prepared`), passed to each explicitly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._spaces import _prepare_frame, _PreparedFrame, _Space
from opendp_wgm._validation import _Engine

if TYPE_CHECKING:
    pass


__all__ = ["Prepared", "collect_once", "prepared_input", "shared_of"]


class _DecodedItems:
    """Item codes ``0 … n_items - 1`` and their values (``decode``): the part of the compiled steps' readings of a
    frame's rows that stage 2 matches the candidates against (:meth:`positions_of`)."""

    n_items: int
    decode: Callable[[NDArray[np.int64]], pl.Series]

    def positions_of(self, values: pl.Series) -> NDArray[np.int32]:
        """Per item code, the position among ``values`` (distinct, in the data's item dtype) of the code's value,
        -1 where it is none of them. Integer items are matched in NumPy (a sorted search: exact, and no Polars
        query's fixed cost, which was most of stage 2's lookup on steam_200k's 5·10^3 items); others by a join."""
        decoded = self.decode(np.arange(self.n_items, dtype=np.int64))
        position_of = np.full(self.n_items, -1, dtype=np.int32)
        if values.len() == 0:
            return position_of
        if decoded.dtype.is_integer():
            wanted = values.to_numpy()
            order = np.argsort(wanted, kind="stable")
            ranked, present = wanted[order], decoded.to_numpy()
            at = np.minimum(np.searchsorted(ranked, present), ranked.size - 1)
            hit = ranked[at] == present
            position_of[hit] = order[at[hit]]
            return position_of
        position = pl.int_range(values.len(), eager=True, dtype=pl.Int32).alias("position")
        table = pl.DataFrame([values.rename("value"), position])
        found = pl.DataFrame([decoded.rename("value")]).join(table, on="value", how="left", maintain_order="left")
        position_of[:] = found.get_column("position").fill_null(-1).to_numpy()
        return position_of


@dataclass(frozen=True)
class _CodedRows(_DecodedItems):
    """The compiled step's coding of a prepared frame's rows (:func:`coded_histogram`): a user code and an
    item code per row (exact: equal values, equal codes), and the item values of codes (``decode``)."""

    users: NDArray[np.integer]
    n_users: int
    items: NDArray[np.integer]
    n_items: int
    decode: Callable[[NDArray[np.int64]], pl.Series]


@dataclass(frozen=True)
class _UserCodes(_DecodedItems):
    """The ``compiled-hashed`` plan's reading of a prepared frame's rows (:func:`hashed_histogram`): each user's
    distinct item codes, ``held[start[u]:start[u] + distinct[u]]`` (users and items coded exactly: equal values,
    equal codes), the distinct users holding each item code (``holders``), and the item values of codes
    (``decode``). Stage 2 reads the candidates among them (:func:`opendp_wgm.engines._hashed_jit.user_candidates`),
    or their holders: no coding, no sort, no dedup of the rows again."""

    held: NDArray[np.int32]
    start: NDArray[np.int64]
    distinct: NDArray[np.int64]
    holders: NDArray[np.int64]
    n_items: int
    decode: Callable[[NDArray[np.int64]], pl.Series]


@dataclass(frozen=True)
class _UserRuns:
    """The route on runs' reading of a prepared frame's rows (:func:`runs_histogram`): each user's rows are one
    run, user ``u``'s rows ``start[u] <= r < start[u + 1]`` (checked by :func:`run_starts`; no item codes)."""

    start: NDArray[np.int64]


@dataclass(eq=False)
class Prepared:
    """A prepared frame (:func:`opendp_wgm._spaces._prepare_frame`) as the steps of one release read it, passed to
    each of them explicitly: made once per release by the code that prepares the input (:func:`collect_once`).

    ``in_memory``: ``lf`` was collected (no file scan that a filter could reach: :func:`_candidate_rows` looks its
    rows up without filtering first). ``coding``: a slot the WGM's compiled step fills with its coding of ``lf``'s
    rows (:class:`_CodedRows`, the users' runs of its route on runs, :class:`_UserRuns`, or each user's distinct
    items of the ``compiled-hashed`` plan, :class:`_UserCodes`) when the bounded lists
    it reads carry this value (:attr:`BoundedLists.shared`), so that a later step of the same release (a two-stage
    release's stage 2: :func:`candidate_pairs`) reads it instead of the rows. The coding is a deterministic
    function of the rows: no seed, no noise.
    """

    lf: pl.LazyFrame
    in_memory: bool = False
    coding: _CodedRows | _UserRuns | _UserCodes | None = None


def _as_prepared(data: pl.LazyFrame | Prepared) -> Prepared:
    """``data`` as a :class:`Prepared` (a bare plan: not in memory, no coding)."""
    return data if isinstance(data, Prepared) else Prepared(data)


def shared_of(frame: object) -> Prepared | None:
    """The :class:`Prepared` value a release's preparation passes with its prepared frame (a
    :class:`~opendp_wgm._spaces._PreparedFrame`'s ``source``: its steps share it), or ``None``."""
    return frame.source if isinstance(frame, _PreparedFrame) else None


def prepared_input(frame: Any, space: _Space) -> Prepared:
    """A step's input prepared for ``space`` (:func:`~opendp_wgm._spaces._prepare_frame`), as the release's
    :class:`Prepared` when its preparation passed one (:func:`shared_of`), else as a bare plan."""
    lf = _prepare_frame(frame, space)
    shared = shared_of(frame)
    return Prepared(lf) if shared is None else shared


def _shared_codes(data: Prepared) -> _CodedRows | None:
    return data.coding if isinstance(data.coding, _CodedRows) else None


def _shared_runs(data: Prepared) -> _UserRuns | None:
    return data.coding if isinstance(data.coding, _UserRuns) else None


def _shared_user_codes(data: Prepared) -> _UserCodes | None:
    return data.coding if isinstance(data.coding, _UserCodes) else None


def collect_once(lf: pl.LazyFrame, *, passes: int, engine: _Engine) -> Prepared:
    """A prepared frame that several steps of one release read (two stages, DP-SIPS rounds), collected once
    when its histograms run in one in-memory pass, as it was.

    The collected frame is the same rows as the plan (a deterministic function of the input), so every step
    computes what it computed on the plan, without scanning, parsing and preparing the input again. With
    ``passes > 1`` or the streaming engine the plan is kept unchanged: those bound the memory of inputs
    larger than memory, and each step re-scans the input instead (``docs/engines.md``).
    """
    if passes == 1 and engine != "streaming":
        return Prepared(lf.collect().lazy(), in_memory=True)
    return Prepared(lf)
