"""The one user → items coding (measurements._user_items) and its two callers: the policy baselines' CSR input and
user peeling's coverage state keep the layouts they had before they shared it."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import polars as pl
import pytest

import opendp_wgm.engines.polars as engine
from opendp_wgm._spaces import _Space
from opendp_wgm.engines.polars import without_numba
from opendp_wgm.measurements import hitting_set
from opendp_wgm.measurements._user_items import user_item_csr
from opendp_wgm.measurements.baselines import _policy_csr as policy_csr
from tests.engine_modules import patch_engine

SPACE = _Space("user", "item", None, lazyframe_domain=False)
SEEDS = (11, 22, 33, 44)

#: sha256 of the layouts below computed by the code before the unification (policy `_csr` and
#: `hitting_set._coverage` each with its own CSR construction), at the same fixed seeds and data; renewed when the
#: bound's key became the secret hash of the xor of the values' public hashes (the old digest, 31957abf…0475, is
#: still what the code gives with the old key, `pl.struct(user, item).hash(*seeds)`, patched in)
GOLDEN = "802f8970e2603b9c9b667d3f2781d0df5ed88e35d346bb05314a0c057c29a7f3"


def test_user_item_csr_layout() -> None:
    # users 7, 3, 9 contiguous (any order of users), items coded 0..3
    csr = user_item_csr(np.array([7, 7, 3, 9, 9, 9]), np.array([2, 0, 1, 0, 3, 2]), 4, item_index=True)
    assert csr.n_users == 3
    assert csr.offsets.tolist() == [0, 2, 3, 6]
    assert csr.items.tolist() == [2, 0, 1, 0, 3, 2]
    assert csr.item_offsets is not None and csr.item_users is not None
    assert csr.item_offsets.tolist() == [0, 2, 3, 5, 6]
    assert csr.item_users.tolist() == [0, 2, 1, 0, 2, 2]  # holders by user position, increasing
    empty = user_item_csr(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, item_index=True)
    assert empty.n_users == 0 and empty.offsets.tolist() == [0] and empty.item_offsets.tolist() == [0]


def _layouts() -> dict[str, object]:
    rng = np.random.default_rng(7)
    users = rng.integers(0, 40, 400)
    items = rng.zipf(1.6, 400) % 60
    out: dict[str, object] = {}
    for dtype in ("int", "str"):
        values = items if dtype == "int" else np.array([f"i{v:02d}" for v in items])
        df = pl.DataFrame({"user": users, "item": values})
        options = {
            "bounded": {"max_contributions": 3, "key_order": False, "priority_order": False},
            "key_order": {"max_contributions": 3, "key_order": True, "priority_order": False},
            "all": {"max_contributions": None, "key_order": False, "priority_order": False},
            "priority": {"max_contributions": None, "key_order": False, "priority_order": True},
        }
        for name, kw in options.items():
            d = policy_csr._csr(df, SPACE, **kw)
            segments = [d.decode(d.codes[a:b]).to_list() for a, b in zip(d.offsets[:-1], d.offsets[1:], strict=False)]
            # the item order within a user is defined only for the key-ordered and the priority layouts
            segments = segments if name in ("key_order", "priority") else [sorted(s) for s in segments]
            out[f"policy_{dtype}_{name}"] = {"offsets": d.offsets.tolist(), "segments": segments}
        for candidates in (None, list(np.unique(values)[::2])):
            state, its = hitting_set.coverage(df.lazy(), SPACE, None if candidates is None else pl.Series(candidates))
            ptr, user_items = state.user_ptr, state.user_items

            def items_of(u: int) -> list[object]:
                return sorted(its.gather(user_items[ptr[u] : ptr[u + 1]]).to_list())  # noqa: B023

            per_user = sorted(items_of(u) for u in range(ptr.size - 1))
            holders = [
                sorted(tuple(items_of(u)) for u in state.item_users[a:b])
                for a, b in zip(state.item_ptr[:-1], state.item_ptr[1:], strict=False)
            ]
            out[f"coverage_{dtype}_{'all' if candidates is None else 'half'}"] = {
                "items": its.to_list(),
                "counts": state.counts.tolist(),
                "per_user": per_user,
                "holders": holders,
                "n_users": int(state.covered.size),
            }
    return out


def test_policy_csr_and_coverage_layouts_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_engine(monkeypatch, "fresh_seeds", lambda: SEEDS)
    monkeypatch.setattr(policy_csr, "fresh_seeds", lambda: SEEDS)
    text = json.dumps(_layouts(), default=int)
    assert hashlib.sha256(text.encode()).hexdigest() == GOLDEN


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_item_index_is_the_group_by_one(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The item → users index by the compiled counting sort equals the Polars group-by's, array for array
    (holders in increasing user position; empty users and items without holders included)."""
    pytest.importorskip("numba")

    rng = np.random.default_rng(seed)  # test data only
    users = np.sort(rng.integers(0, 300, 2000))
    items = rng.integers(0, 50, 2000)
    compiled = user_item_csr(users, items, 60, item_index=True)
    with without_numba():
        plans = user_item_csr(users, items, 60, item_index=True)
    for name in ("items", "offsets", "item_offsets", "item_users"):
        assert np.array_equal(getattr(compiled, name), getattr(plans, name)), name
    empty = user_item_csr(np.zeros(0, np.int64), np.zeros(0, np.int64), 3, item_index=True)
    assert empty.item_offsets.tolist() == [0, 0, 0, 0] and empty.item_users.size == 0


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_threaded_item_index_is_the_stable_sort_by_item(monkeypatch: pytest.MonkeyPatch, threads: int, dtype) -> None:
    """The item → users index in threads over ranges of users (:func:`engine.holders_by_item`) is the stable sort
    of the users by item: holders ascending, with users holding nothing (first, last and in between; a range of
    users may hold no pair) and items held by nobody."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(threads)  # test data only
    sizes = rng.integers(0, 6, 500)
    sizes[:7] = 0
    sizes[-9:] = 0
    sizes[200:260] = 0  # three threads: one range of users may hold no pair
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    items = rng.integers(0, 40, int(offsets[-1])).astype(dtype)  # items 40 .. 44 held by nobody
    patch_engine(monkeypatch, "kernel_threads", lambda rows, kernels: threads)
    index = engine.holders_by_item(items, offsets, 45)
    assert index is not None
    holders, start = index
    users = np.repeat(np.arange(sizes.size), sizes)
    assert holders.dtype == np.int32 and start.dtype == np.int64
    assert start.tolist() == np.concatenate(([0], np.cumsum(np.bincount(items, minlength=45)))).tolist()
    assert holders.tolist() == users[np.argsort(items, kind="stable")].tolist()


def test_int32_codes_give_the_int64_codes_csr() -> None:
    """Item codes in int32 (the compiled stage 2's pairs) are kept as they are, and give the CSR of the same codes
    in int64, array for array (holders as user positions)."""
    rng = np.random.default_rng(3)  # test data only
    users = np.sort(rng.integers(0, 200, 1500))
    items = rng.integers(0, 30, 1500)
    wide = user_item_csr(users, items, 30, item_index=True)
    narrow = user_item_csr(users, items.astype(np.int32), 30, item_index=True)
    assert narrow.items.dtype == np.int32
    for name in ("items", "offsets", "item_offsets", "item_users"):
        assert np.array_equal(getattr(narrow, name), getattr(wide, name)), name
