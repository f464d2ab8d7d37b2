"""The release step: exact discrete Gaussian noise on the integer sums and the threshold, in integers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from opendp_wgm.engines.polars._plans import WEIGHT_LAT
from opendp_wgm.privacy.threshold import LATTICE_BITS
from opendp_wgm.samplers import sample_discrete_gaussian
from opendp_wgm.samplers.bernoulli import sample_bernoulli

if TYPE_CHECKING:
    from numpy.typing import NDArray


__all__ = ["noisy_above_threshold", "release_above_threshold", "released_by_table", "weights_frame"]


def noisy_above_threshold(
    weights_lat: np.ndarray, *, scale: float, threshold: float, noise: str = "lattice"
) -> tuple[np.ndarray, np.ndarray]:
    """The integer sums (units 2^-k) plus discrete Gaussian noise, and which exceed T.

    ``noisy_lat > floor(T 2^k)`` is exactly ``noisy > T`` on the lattice; integers only. The Polars release
    and the Spark executors (:mod:`opendp_wgm.engines.spark`) both call this.
    """
    unit = 2.0**LATTICE_BITS
    noisy = weights_lat + sample_discrete_gaussian(scale * unit, weights_lat.shape[0], method=noise)  # type: ignore[arg-type]
    return noisy, noisy > math.floor(threshold * unit)


def released_by_table(counts: NDArray[np.uint64], words: NDArray[np.uint64]) -> NDArray[np.bool_]:
    """Which items of the optimal partition selection are released: an item counted ``n`` times (one user each,
    ``counts``) with probability π(n), the row ``n`` of ``words`` (``release_table(ε, δ).words()``: π(0) …
    π(n* − 1), n* rows), and with probability 1 from n*, independently, by the exact
    :func:`~opendp_wgm.samplers.bernoulli.sample_bernoulli`. The Polars release and the Spark executors
    (:mod:`opendp_wgm.engines.spark`) both call this."""
    certain = np.uint64(words.shape[0])
    row = np.minimum(counts, certain - np.uint64(1)).astype(np.intp)  # π(n) for n < n*; the n ≥ n* rows: below
    released: NDArray[np.bool_] = sample_bernoulli(words[row]) | (counts >= certain)
    return released


def weights_frame(items: pl.Series, noisy_lat: pl.Series) -> pl.DataFrame:
    """The released frame: ``items`` and ``noisy_weight`` (Float64, the noisy lattice sums ``noisy_lat`` times
    2^-k, exactly), sorted by item."""
    return (
        items.to_frame()
        .with_columns(noisy_weight=noisy_lat.cast(pl.Float64) / 2.0**LATTICE_BITS)
        .sort(items.name)  # the group-by's row order is arbitrary: sort so that order carries nothing
    )


def release_above_threshold(
    histogram: pl.DataFrame, item: str, *, scale: float, threshold: float, noise: str
) -> pl.DataFrame:
    """Noise the lattice sums (column :data:`WEIGHT_LAT`) and keep the items above the threshold."""
    noisy, keep = noisy_above_threshold(
        histogram[WEIGHT_LAT].to_numpy(), scale=scale, threshold=threshold, noise=noise
    )
    return weights_frame(histogram.get_column(item).filter(pl.Series(keep)), pl.Series(noisy[keep], dtype=pl.Int64))
