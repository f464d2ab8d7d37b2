"""Peer libraries as optional baselines of ``reproduce`` (extra ``[peers]``): measured, never a release path.

``pipeline_dp`` is PipelineDP's private partition selection (``DPEngine.select_partitions``) with its default
strategy, *truncated geometric* — for Δ0 = 1 the optimal (ε, δ) selection of Desfontaines et al. (PoPETs 2022);
for Δ0 > 1 PipelineDP splits (ε, δ) evenly over a user's Δ0 kept items. It runs on PipelineDP's local backend
(plain Python over the rows, as its users would run it without Beam or Spark), so it is slow on large data sets;
its noise comes from PipelineDP's own samplers. It is a peer to compare with, not one of this package's
mechanisms: nothing here is used by a release.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

__all__: list[str] = []

def pipeline_dp_selection(
    max_contributions: int, *, epsilon: float, delta: float
) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """PipelineDP's ``select_partitions`` at Δ0 = ``max_contributions``: a run for ``reproduce``.

    The run takes a frame of ``user, item`` rows and returns the released items as a one-column frame ``item``
    (the set-union metrics' input). A new budget accountant per run: each call spends (ε, δ) once.
    """
    import pipeline_dp

    params = pipeline_dp.SelectPartitionsParams(max_partitions_contributed=max_contributions)
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row[0], partition_extractor=lambda row: row[1]
    )

    def run(frame: pl.DataFrame) -> pl.DataFrame:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=delta)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        rows = zip(frame["user"].to_list(), frame["item"].to_list(), strict=True)
        selected = engine.select_partitions(rows, params, extractors)
        accountant.compute_budgets()
        released = list(selected)  # the local backend is lazy: the selection runs here
        return pl.DataFrame({"item": pl.Series("item", released, dtype=frame.schema["item"])})

    return run
