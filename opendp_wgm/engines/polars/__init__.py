r"""The release kernel on Polars: the plan functions every Polars measurement runs.

The WGM (:func:`opendp_wgm.make_wgm` = ``make_bound_user_items >> make_weighted_histogram >>
make_noisy_threshold``), its two-stage uses and the baselines build their releases from these steps only:

- :func:`bounded_lists_plan` / :func:`bound_plan`: per user, a uniform random subset of at most Δ0 distinct items
  (keyed hash of the values under a secret seed);
- :func:`lattice_histogram_plan` / :func:`lattice_histogram`: per-item sums of the lattice weights
  :math:`\lfloor 2^{20}/\sqrt t\rfloor`, in one plan or over disjoint user buckets (``passes``), or by the
  compiled steps of :mod:`opendp_wgm.engines._kernel_jit` when Numba is installed (:func:`coded_histogram`,
  :func:`runs_histogram`, :func:`hashed_histogram`: the same sums); :func:`opendp_wgm.kernel.plan_for` chooses which;
- :func:`coded_pairs` / :class:`CodedPairs`: the distinct (user, item) pairs coded once for the compiled step, for
  steps that bound the same users several times (DP-SIPS's rounds, flags and count);
- :func:`noisy_above_threshold` / :func:`release_above_threshold`: exact discrete Gaussian noise on the integer
  sums and the threshold, in integers (the Spark executors call :func:`noisy_above_threshold` too);
  :func:`released_by_table`: partition selection's exact per-item draws (and the Spark executors');
- :func:`candidate_pairs` / :func:`candidate_counts`: the distinct (user, candidate) pairs of a public candidate
  list and its distinct-user counts (stage 2 of top-k and of user peeling), on the compiled step's codes of the
  same frame, or the users' runs its route on runs found, when a two-stage release kept them (:class:`Prepared`).

The names are public within the engines package (the Spark engine implements the same steps); they are not part
of the package's top-level API. They live in one module per concept (each re-exported here):

- :mod:`._plans`: the Polars plans of the bound and of the histogram (:class:`BoundedLists`);
- :mod:`._prepared`: the prepared frame the steps of one release share (:class:`Prepared`);
- :mod:`._compiled_steps`: importing the compiled steps (Numba), coding columns, threads and ranges, users' runs;
- :mod:`._compiled_histogram`: the histogram by the compiled steps, and :class:`CodedPairs`;
- :mod:`._hashed_histogram`: the histogram of interleaved users by the compiled steps, text coded by checked hashes;
- :mod:`._release`: noise and threshold;
- :mod:`._candidates`: stage 2's candidate pairs and counts.
"""

from __future__ import annotations

from opendp_wgm.engines.polars._candidates import (
    candidate_counts,
    candidate_csr,
    candidate_pairs,
    cast_candidates,
    chunk_views,
    holders_by_item,
    item_counts,
    run_offsets,
    string_views,
)
from opendp_wgm.engines.polars._compiled_histogram import (
    CodedPairs,
    coded_histogram,
    coded_pairs,
    runs_histogram,
)
from opendp_wgm.engines.polars._compiled_steps import (
    Numba,
    codes_dtype,
    hashed_jit,
    import_deferred,
    in_threads,
    kernel_jit,
    kernel_threads,
    no_cold_compiled_import,
    numba_state,
    peel_jit,
    run_starts,
    user_ranges,
    without_numba,
)
from opendp_wgm.engines.polars._hashed_histogram import (
    UserCounts,
    hashed_histogram,
    user_counts,
)
from opendp_wgm.engines.polars._plans import (
    WEIGHT_LAT,
    BoundedLists,
    ListsOf,
    bound_key,
    bound_plan,
    bounded_lists_plan,
    distinct_pairs_plan,
    fresh_seeds,
    keys_of_hashes,
    lattice_histogram,
    lattice_histogram_plan,
    mostly_above,
    value_hash,
)
from opendp_wgm.engines.polars._prepared import (
    Prepared,
    collect_once,
    prepared_input,
    shared_of,
)
from opendp_wgm.engines.polars._release import (
    noisy_above_threshold,
    release_above_threshold,
    released_by_table,
    weights_frame,
)

__all__ = [
    "WEIGHT_LAT",
    "BoundedLists",
    "CodedPairs",
    "ListsOf",
    "Numba",
    "Prepared",
    "UserCounts",
    "bound_key",
    "bound_plan",
    "bounded_lists_plan",
    "candidate_counts",
    "candidate_csr",
    "candidate_pairs",
    "cast_candidates",
    "chunk_views",
    "coded_histogram",
    "coded_pairs",
    "codes_dtype",
    "collect_once",
    "distinct_pairs_plan",
    "fresh_seeds",
    "hashed_histogram",
    "hashed_jit",
    "holders_by_item",
    "import_deferred",
    "in_threads",
    "item_counts",
    "kernel_jit",
    "kernel_threads",
    "keys_of_hashes",
    "lattice_histogram",
    "lattice_histogram_plan",
    "mostly_above",
    "no_cold_compiled_import",
    "noisy_above_threshold",
    "numba_state",
    "peel_jit",
    "prepared_input",
    "release_above_threshold",
    "released_by_table",
    "run_offsets",
    "run_starts",
    "runs_histogram",
    "shared_of",
    "string_views",
    "user_counts",
    "user_ranges",
    "value_hash",
    "weights_frame",
    "without_numba",
]
