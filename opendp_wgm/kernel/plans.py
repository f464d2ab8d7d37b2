r"""The plans that compute the WGM's weighted histogram, and the one function that chooses among them.

The histogram is :math:`\sum_u \lfloor 2^{20}/\sqrt{t_u}\rfloor` over each user's kept subset (all its distinct
items when it holds at most Δ0 of them, else the Δ0 of smallest secret key, :func:`~opendp_wgm.engines.polars.
bound_key`). Every :class:`Plan` computes that same histogram, bit for bit for the same seed: they differ in speed
and memory only. :func:`plan_for` chooses one from facts about the input (Numba importable, ``passes``, the engine,
the dtypes, and probes of the rows: the row count, whether most of the first rows belong to users above Δ0,
whether each user's rows form one run); :func:`histogram` runs exactly the plan it is given, and refuses one that
cannot run on the input from public information (Numba, ``passes``, engine, dtypes), never falling back to
another. A compiled plan that meets a data-dependent case it does not handle (2^31 rows or more, users whose rows
are not runs, two text items sharing a hash) finishes by the exact Polars plan itself, or codes the column by a
category map (``compiled-hashed``: two text values sharing a hash), as its row of the table states
(``docs/engines.md``, *Which plan computes the histogram*).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Literal

import numpy as np
import polars as pl
from numpy.typing import NDArray

from opendp_wgm._validation import _Engine
from opendp_wgm.engines import polars as engine_polars
from opendp_wgm.engines.polars import BoundedLists, Numba, UserCounts, codes_dtype, numba_state, run_starts
from opendp_wgm.kernel._small_inputs import COMPILED_FROM_ROWS, cold

__all__ = ["Numba", "Plan", "histogram", "plan_for", "refusal"]

_LOG = logging.getLogger("opendp_wgm.kernel")


class Plan(Enum):
    """The plans that compute the weighted histogram (:func:`histogram`); ``why`` says when each pays."""

    #: one Polars plan; each user's distinct items listed, only the lists longer than Δ0 keyed and cut
    POLARS_SPLIT = "polars-split"
    #: one Polars plan; every user's rows sorted by the key, the first Δ0 distinct kept
    POLARS_KEYED = "polars-keyed"
    #: the Polars plans over ``passes`` disjoint hash buckets of users, their partial histograms summed
    POLARS_PASSES = "polars-passes"
    #: the compiled step (Numba) on the columns coded to integers, rows bucketed by user
    COMPILED_CODED = "compiled-coded"
    #: the compiled step on each user's run of rows, the items as their own keys, no coding
    COMPILED_RUNS = "compiled-runs"
    #: the compiled step on each user's run of rows, every row keyed by the secret key
    COMPILED_RUNS_KEYED = "compiled-runs-keyed"
    #: the compiled step on the distinct pairs coded once per call (DP-SIPS's rounds: :class:`CodedPairs`)
    CODED_PAIRS = "coded-pairs"
    #: the compiled step on interleaved users (logs in time order): text coded by checked hashes, every row keyed
    #: where most rows belong to users above Δ0, each user's rows weighed in one pass
    COMPILED_HASHED = "compiled-hashed"

    @property
    def why(self) -> str:
        """One line: when this plan is the fastest, and what it does where its fast path does not apply."""
        return _WHY[self]

    @property
    def compiled(self) -> bool:
        """Whether the plan needs Numba (``opendp-wgm[fast]``) and the whole frame in memory (one pass)."""
        return self not in (Plan.POLARS_SPLIT, Plan.POLARS_KEYED, Plan.POLARS_PASSES)


_WHY = {
    Plan.POLARS_SPLIT: "most rows belong to users with at most Δ0 items: only the longer lists are keyed",
    Plan.POLARS_KEYED: "most of the first rows belong to users above Δ0: sorting every user's rows by the key pays",
    Plan.POLARS_PASSES: "passes > 1: each pass holds about 1/passes of the users (each bucket split or keyed "
    "from its first rows, the same subsets)",
    Plan.COMPILED_CODED: "Numba, one in-memory pass, coded dtypes: a counting sort by user beats Polars' group_by "
    "(2^31 rows or more: the exact Polars plan)",
    Plan.COMPILED_RUNS: "each user's rows one run and 2^21 rows or more: no coding (not runs, or two text items "
    "sharing a hash: the exact Polars plan)",
    Plan.COMPILED_RUNS_KEYED: "each user's rows one run and most rows above Δ0: every row keyed once (not runs, "
    "or a hash collision: the exact Polars plan)",
    Plan.CODED_PAIRS: "the pairs were coded once for several bounds of the same users (DP-SIPS's rounds; "
    "2^31 rows or more: the exact Polars plan)",
    Plan.COMPILED_HASHED: "users not runs, 2^21 rows or more, String users or most rows above Δ0: no category map "
    "and no group_by (two text values sharing a hash: that column by a category map; 2^31 rows or more: the exact "
    "Polars plan)",
}

#: From this many rows on, a frame whose users' rows are runs takes :data:`Plan.COMPILED_RUNS` (no coding:
#: 0.85-0.9x the compiled step's time at 10^6 and 4·10^6 sorted Zipf rows, 1.3x at 10^5 and on fimi_retail's
#: 9·10^5, where the streaming group-by's fixed cost weighs), and one whose users are not runs, text or mostly above
#: Δ0, :data:`Plan.COMPILED_HASHED` (``benchmarks/bench_logs.py``).
_LARGE_ROWS = 2**21

#: The compiled steps index rows with int32.
_MAX_ROWS = 2**31


@dataclass(frozen=True)
class _Facts:
    """What :func:`_choose` read of the rows, handed to the plan so that it does not read them again."""

    frame: pl.DataFrame | None = None
    start: NDArray[np.int64] | None = None
    users: UserCounts | None = None


@dataclass(frozen=True)
class _Choice:
    plan: Plan
    reason: str
    facts: _Facts = _Facts()


def refusal(
    plan: Plan,
    *,
    passes: int,
    engine: _Engine,
    dtypes: tuple[pl.DataType, pl.DataType] | None,
    numba: Numba | None = None,
) -> str | None:
    """Why ``plan`` cannot run on an input, from public information only (``None``: it can).

    ``dtypes``: the user and item columns' dtypes of the prepared frame (``None``: not known yet, checked when
    the histogram runs). ``numba``: the :class:`~opendp_wgm.engines.polars.Numba` state to plan for (``None``:
    this process's, :func:`~opendp_wgm.engines.polars.numba_state`); a compiled plan needs it ready, and Numba
    importable whatever the state given."""
    if not plan.compiled:
        if passes != 1 and plan is not Plan.POLARS_PASSES:
            return f"{plan.value!r} computes the histogram in one pass; with passes={passes} use 'polars-passes'"
        return None
    ready = (numba_state() if numba is None else numba) is Numba.READY
    if not ready or engine_polars.kernel_jit() is None or engine_polars.hashed_jit() is None:
        return f"{plan.value!r} needs Numba (pip install 'opendp-wgm[fast]')"
    if passes != 1 or engine == "streaming":
        return f"{plan.value!r} holds the whole frame in memory: it runs with one pass and an in-memory engine"
    if dtypes is not None:
        user, item = dtypes
        if not (codes_dtype(user) and codes_dtype(item)):
            found = f"found user {user}, item {item}"
            return f"{plan.value!r} codes integer, String, Categorical and Enum columns ({found})"
        if plan in _USER_TEXT_OR_INTEGERS and not (user == pl.String or user.is_integer()):
            return f"{plan.value!r} reads runs of integer or String users (found user {user})"
    return None


#: The compiled plans that read the user column's values as they are (runs, or codes of text or integers).
_USER_TEXT_OR_INTEGERS = (Plan.COMPILED_RUNS, Plan.COMPILED_RUNS_KEYED, Plan.COMPILED_HASHED)


def _dtypes(lists: BoundedLists) -> tuple[pl.DataType, pl.DataType]:
    schema = lists.lf.collect_schema()
    return schema[lists.space.user], schema[lists.space.item]


def _polars_choice(lists: BoundedLists, why: str) -> _Choice:
    keyed = engine_polars.mostly_above(lists.lf, lists.space.user, lists.max_contributions)
    plan = Plan.POLARS_KEYED if keyed else Plan.POLARS_SPLIT
    return _Choice(plan, f"{why}; {'most' if keyed else 'few'} of the first rows belong to users above Δ0")


def _choose(lists: BoundedLists, *, passes: int, engine: _Engine, numba: Numba | None = None) -> _Choice:
    """The plan :func:`plan_for` chooses, its reason, and what it read of the rows."""
    if passes != 1:
        return _Choice(Plan.POLARS_PASSES, f"passes={passes}")
    if engine == "streaming":
        return _polars_choice(lists, "the streaming engine")
    user_dtype, item_dtype = _dtypes(lists)
    codable = codes_dtype(user_dtype) and codes_dtype(item_dtype)
    # rule 2 (docs/engines.md): the rows of a small input, read where the compiled steps are not loaded yet
    read = lists.lf.collect() if numba is None and codable and lists.coded is None and cold() else None
    if read is not None and read.height < COMPILED_FROM_ROWS:
        return _polars_choice(lists, "fewer than 3·10^6 rows and the compiled steps not loaded (they cost more)")
    numba = numba_state() if numba is None else numba
    if numba is Numba.DEFERRED:
        return _polars_choice(lists, "the compiled steps are not imported (no_cold_compiled_import: a small input)")
    jit = engine_polars.kernel_jit()
    if numba is not Numba.READY or jit is None or engine_polars.hashed_jit() is None:
        return _polars_choice(lists, "Numba is not installed")
    if not codable:
        return _polars_choice(lists, f"the compiled step does not code user {user_dtype} or item {item_dtype}")
    if lists.coded is not None:
        return _Choice(Plan.CODED_PAIRS, "the distinct pairs were coded once for this call")
    space = lists.space
    keyed = engine_polars.mostly_above(lists.lf, space.user, lists.max_contributions)  # every row needs its key
    frame = lists.lf.collect() if read is None else read  # in memory: the Polars plans after it read no file again
    rows = frame.height
    if rows >= _MAX_ROWS:
        plan = Plan.POLARS_KEYED if keyed else Plan.POLARS_SPLIT
        return _Choice(plan, "2^31 rows or more: the compiled step indexes rows with int32")
    if keyed or rows >= _LARGE_ROWS:
        start = run_starts(frame.get_column(space.user))
        if start is not None:
            plan, why = (Plan.COMPILED_RUNS_KEYED, "most of the first rows above Δ0") if keyed else (
                Plan.COMPILED_RUNS, "2^21 rows or more")
            return _Choice(plan, f"each user's rows form one run and {why}", _Facts(frame, start))
    if rows >= _LARGE_ROWS and user_dtype == pl.String:  # the plan codes the users (with the items, at once)
        return _Choice(Plan.COMPILED_HASHED, "users not runs, 2^21 rows or more, String users", _Facts(frame))
    if rows >= _LARGE_ROWS and user_dtype.is_integer():
        users = engine_polars.user_counts(frame, space, jit)  # handed to the plan, which does not count again
        if users.mostly_above(lists.max_contributions):
            why = "users not runs, 2^21 rows or more, most rows belong to users above Δ0"
            return _Choice(Plan.COMPILED_HASHED, why, _Facts(frame, users=users))
        if not keyed:  # the counts serve the counting sort (one pass over the users saved)
            return _Choice(Plan.COMPILED_CODED, "Numba, one in-memory pass, coded dtypes", _Facts(frame, users=users))
    if keyed:
        return _Choice(Plan.POLARS_KEYED, "most of the first rows belong to users above Δ0 and users are not runs")
    return _Choice(Plan.COMPILED_CODED, "Numba, one in-memory pass, coded dtypes", _Facts(frame))


def plan_for(lists: BoundedLists, *, passes: int = 1, engine: _Engine = "auto", numba: Numba | None = None) -> Plan:
    """The plan that computes the histogram of ``lists`` (:func:`histogram` with ``plan="auto"``).

    The ONE place the choice is made: from ``numba`` (a :class:`~opendp_wgm.engines.polars.Numba` state; ``None``:
    this process's, :func:`~opendp_wgm.engines.polars.numba_state`), ``passes``, ``engine``, the prepared frame's
    dtypes, and probes of its rows (whether most of the first 65,536 rows belong to users above Δ0, the row
    count against 2^21 and 2^31, whether each user's rows form one run, and, for users not in runs from 2^21
    rows on, whether most rows belong to users above Δ0: the users coded and counted, handed to the plan). A speed
    choice only: every plan gives the same histogram, so the choice changes no release. The choice (and its
    reason, which names the thresholds crossed, never a count) depends on the data: it is for the data's curator,
    not part of any release.
    """
    return _choose(lists, passes=passes, engine=engine, numba=numba).plan


_How = Literal["split", "keyed"]


def _polars(lists: BoundedLists, max_contributions: int, engine: _Engine, how: _How) -> pl.LazyFrame:
    space = lists.space
    bounded = engine_polars.bounded_lists_plan(
        lists.lf, space, lists.max_contributions, lists.seeds, plan=how, distinct=lists.distinct
    )
    plan = engine_polars.lattice_histogram_plan(bounded, space, max_contributions)
    return plan if engine == "auto" else plan.collect(engine=engine).lazy()


def _run(
    plan: Plan, lists: BoundedLists, max_contributions: int, passes: int, engine: _Engine, facts: _Facts
) -> pl.LazyFrame:
    """Exactly ``plan`` (checked runnable), with what the choice read of the rows."""
    space = lists.space
    if plan is Plan.POLARS_PASSES:
        return engine_polars.lattice_histogram(lists, space, max_contributions, passes=passes, engine=engine)
    if plan in (Plan.POLARS_SPLIT, Plan.POLARS_KEYED):
        return _polars(lists, max_contributions, engine, "keyed" if plan is Plan.POLARS_KEYED else "split")
    jit = engine_polars.kernel_jit()
    assert jit is not None  # refusal() checked it
    # the data-dependent cases a compiled step does not handle: the exact Polars plan, part of this plan
    exact: _How = "keyed" if plan is Plan.COMPILED_RUNS_KEYED else "split"
    if plan is Plan.CODED_PAIRS:
        coded = lists.coded
        if coded is None:
            coded = engine_polars.coded_pairs(lists.lf, space, passes=passes, engine=engine)
        if coded is None:  # 2^31 rows or more
            return _polars(lists, max_contributions, engine, exact)
        return coded.histogram(lists.max_contributions, lists.seeds, max_contributions).lazy()
    frame = lists.lf.collect() if facts.frame is None else facts.frame
    if frame.height >= _MAX_ROWS:
        return _polars(lists, max_contributions, engine, exact)
    if plan is Plan.COMPILED_CODED:
        return engine_polars.coded_histogram(lists, frame, max_contributions, jit, facts.users).lazy()
    if plan is Plan.COMPILED_HASHED:
        hashed = engine_polars.hashed_jit()
        assert hashed is not None  # refusal() checked it
        return engine_polars.hashed_histogram(lists, frame, max_contributions, jit, hashed, facts.users).lazy()
    start = run_starts(frame.get_column(space.user)) if facts.start is None else facts.start
    if start is not None:
        keyed = plan is Plan.COMPILED_RUNS_KEYED
        found = engine_polars.runs_histogram(lists, frame, start, max_contributions, jit, keyed=keyed)
        if found is not None:
            return found.lazy()
    return _polars(lists, max_contributions, engine, exact)


def checked_plan(plan: Plan | str) -> Plan | Literal["auto"]:
    """``plan`` as a :class:`Plan` (or ``"auto"``), from a Plan or its name."""
    if plan == "auto" or isinstance(plan, Plan):
        return plan  # type: ignore[return-value]
    names = {p.value: p for p in Plan}
    if plan in names:
        return names[plan]
    msg = f"`plan` must be 'auto' or one of {sorted(names)} (found {plan!r})"
    raise ValueError(msg)


def refuse(
    plan: Plan | Literal["auto"],
    *,
    passes: int,
    engine: _Engine,
    dtypes: tuple[pl.DataType, pl.DataType] | None,
    numba: Numba | None = None,
) -> None:
    """Raise where :func:`refusal` refuses ``plan`` (nothing for ``"auto"``)."""
    if plan == "auto":
        return
    why = refusal(plan, passes=passes, engine=engine, dtypes=dtypes, numba=numba)
    if why is not None:
        msg = f"`plan` must be a plan that runs on this input: {why} (found {plan.value!r})"
        raise ValueError(msg)


def histogram(
    plan: Plan | str,
    lists: BoundedLists,
    max_contributions: int,
    *,
    passes: int = 1,
    engine: _Engine = "auto",
    numba: Numba | None = None,
) -> pl.LazyFrame:
    """The lattice histogram (item, ``weight_lat``) of ``lists`` by ``plan`` (``"auto"``: :func:`plan_for`'s, for
    the :class:`~opendp_wgm.engines.polars.Numba` state ``numba``; ``None``: this process's).

    Every plan gives the same histogram, bit for bit, for the same seeds. A plan that cannot run on the input
    (:func:`refusal`: Numba, ``passes``, engine, dtypes) raises a ``ValueError``; none falls back to another.
    The plan that runs is logged at debug level on the ``opendp_wgm.kernel`` logger.
    """
    chosen = checked_plan(plan)
    if chosen == "auto":
        choice = _choose(lists, passes=passes, engine=engine, numba=numba)
    else:
        refuse(chosen, passes=passes, engine=engine, dtypes=_dtypes(lists), numba=numba)
        choice = _Choice(chosen, "forced")
    _LOG.debug("weighted histogram by plan %s: %s", choice.plan.value, choice.reason)
    return _run(choice.plan, lists, max_contributions, passes, engine, choice.facts)
