r"""Limited-domain top-k (Durfee & Rogers 2019): the paper's baseline for top-k over an unknown domain.

:func:`make_limited_domain_top_k` ranks the k̄ largest bounded counts against a noisy threshold item ⊥ and
releases up to k of them; its map and calibration are in :mod:`opendp_wgm.privacy.peeling` and
:mod:`opendp_wgm.privacy.calibrate`, its proof in ``docs/top_k.md`` §4.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import opendp.prelude as dp
import polars as pl

from opendp_wgm._partial import _to_then
from opendp_wgm._spaces import _assert_features, _prepare_frame, _released, _resolve_space
from opendp_wgm._validation import _check_d_in, _check_int, _check_positive, _check_probability
from opendp_wgm.engines.polars import bound_plan
from opendp_wgm.measurements.top_k import check_method
from opendp_wgm.measurements.two_stage import ranked_frame
from opendp_wgm.privacy.budget import measure_of
from opendp_wgm.privacy.calibrate import calibrate_limited_domain
from opendp_wgm.privacy.peeling import limited_domain_group_loss, limited_domain_threshold_offset
from opendp_wgm.privacy.threshold import check_max_contributions
from opendp_wgm.samplers import SelectionMethod, noisy_top_k

__all__ = ["make_limited_domain_top_k", "then_limited_domain_top_k"]

#: Bits of the lattice 2^-b Z on which limited-domain top-k places h_⊥ (rounded up): counts become integers
#: times 2^b, and the selection runs on integer scores exactly.
LD_LATTICE_BITS = 20

#: The largest k̄ accepted: a release holds k̄ + 1 scores (zero-count placeholders past the data's items) and
#: selects among them, about 140 bytes and 2 µs per score (1.4 GB and 20 s at this bound). A public bound on a
#: parameter, checked at construction, so a huge ``k`` or ``k_bar`` is refused before any data is read.
LD_MAX_K_BAR = 10_000_000



def make_limited_domain_top_k(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    *,
    k: int,
    k_bar: int,
    max_contributions: int | None,
    epsilon: float,
    delta: float,
    method: SelectionMethod = "auto",
    item: str | Sequence[str] | None = None,
) -> dp.Measurement:
    r"""Limited-domain top-k (Durfee & Rogers 2019, Algorithm 1): the paper's baseline

    1. Each user keeps a uniform random subset of at most Δ0 distinct items (``max_contributions``; ``None``
       keeps all, and then :math:`\Delta_0 = \infty` below).
    2. δ' = δ/2 pays for composition, :math:`\delta_\perp` = δ − δ' for the threshold.
    3. ε' is the largest value with :math:`E(\varepsilon') \le \varepsilon`
       (:func:`opendp_wgm.privacy.calibrate.limited_domain_local_epsilon`, the reference's bisection).
    4. The k̄ items with the largest bounded counts :math:`c_{(1)} \ge \dots \ge c_{(\bar k)}` (ties broken
       by item value) compete with :math:`\perp` of score
       :math:`h_\perp = c_{(\bar k+1)} + 1 + \ln(\min(\Delta_0, \bar k)/\delta_\perp)/\varepsilon'`
       (:math:`c_{(\bar k+1)} = 0` if there are at most k̄ items).
    5. All get Gumbel noise of scale 1/ε'; the items whose noisy score beats :math:`\perp`'s are released in
       noisy order, at most k.

    Parameters
    ----------
    input_domain, input_metric
        From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
        ``dp.symmetric_id_distance``.
    k
        Most items released, ≥ 1.
    k_bar
        k̄ ≥ k, the size of the limited domain, at most :data:`LD_MAX_K_BAR` (10,000,000). It may exceed the
        number of distinct items (the reference crashes there): the missing slots are filled with zero-count
        placeholders that are never released (so the release's memory and time grow with k̄, hence the bound).
    max_contributions
        Δ0 ≥ 1, or ``None`` for no bound.
    epsilon, delta
        The (ε, δ)-DP budget for one user.
    method : {'auto', 'opendp', 'fast'}
        The exact selection sampler.
    item
        The item column or columns, as for :func:`opendp_wgm.make_wgm`.

    Returns
    -------
    opendp.mod.Measurement
        Output measure ``dp.approximate(dp.max_divergence())``; maps a frame to a ``pl.DataFrame`` with the
        item column and ``rank`` (UInt32), at most k rows in rank order.

    Notes
    -----
    ``m.map(1)`` is :math:`(E(1/s), \delta)` with s the Gumbel scale actually used (:math:`1/s \le \varepsilon'`,
    so :math:`E(1/s) \le \varepsilon`); for :math:`d > 1` the group bound
    :math:`(d\,\varepsilon_1,\ \delta \sum_{i<d} e^{i\varepsilon_1})`. The threshold score is rounded *up* to the
    lattice :math:`2^{-20}\mathbb{Z}`, so every score is a multiple of :math:`2^{-20}` and the selection is
    sampled exactly on integers (``docs/top_k.md`` §4).

    Required features: ``contrib``, ``honest-but-curious``.

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.measurements.baselines import make_limited_domain_top_k
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = make_limited_domain_top_k(*wgm.user_items_space(), k=10, k_bar=50, max_contributions=100,
    ...                               epsilon=1.0, delta=1e-5)
    >>> m.check(1, (1.0, 1e-5))
    True
    """
    _assert_features()
    k = _check_int("k", k, minimum=1)
    k_bar = _check_int("k_bar", k_bar, minimum=1, maximum=LD_MAX_K_BAR)
    if k > k_bar:
        msg = f"`k` ({k}) must be <= `k_bar` ({k_bar}): the limited domain holds k_bar items"
        raise ValueError(msg)
    if max_contributions is not None:
        max_contributions = check_max_contributions(max_contributions)
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_probability("delta", delta)
    method = check_method(method)
    space = _resolve_space(input_domain, input_metric, item)

    calibration = calibrate_limited_domain(epsilon=epsilon, delta=delta, k=k)
    scale, eps_1 = calibration.scale, calibration.epsilon
    offset = limited_domain_threshold_offset(
        k_bar=k_bar,
        max_contributions=max_contributions,
        delta=calibration.delta_bottom,
        scale=scale,
        lattice_bits=LD_LATTICE_BITS,
    )

    def function(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        lf = _prepare_frame(frame, space)
        bounded = lf.unique() if max_contributions is None else bound_plan(lf, space, max_contributions)
        # top k̄ + 1 bounded counts; ties broken by item value, a fixed order of the domain
        top = (
            bounded.group_by(space.item)
            .len(name="_count")
            .sort(["_count", space.item], descending=[True, False])
            .head(k_bar + 1)
            .collect()
        )
        present = min(top.height, k_bar)
        counts = top["_count"].cast(pl.Int64).to_numpy()
        next_count = int(counts[k_bar]) if top.height > k_bar else 0
        unit = 1 << LD_LATTICE_BITS
        # scores on the lattice (units 2^-b): k̄ items (zero-count placeholders past the data), then ⊥
        scores = np.zeros(k_bar + 1, dtype=np.int64)
        scores[:present] = counts[:present] * unit
        scores[k_bar] = next_count * unit + offset
        order = noisy_top_k(scores, k + 1, scale * unit, measure="zcdp", method=method)
        stop = np.flatnonzero(order == k_bar)
        prefix = order[: min(k, int(stop[0]) if stop.shape[0] else k)]
        chosen = prefix[prefix < present]  # placeholders are dropped (post-processing)
        return _released(ranked_frame(top[space.item].head(present), chosen, space.item), space)

    def privacy_map(d_in: int) -> tuple[float, float]:
        return limited_domain_group_loss(_check_d_in(d_in), eps_1, delta)

    return dp.m.make_user_measurement(input_domain, input_metric, measure_of("approx_dp"), function, privacy_map)


then_limited_domain_top_k = _to_then(make_limited_domain_top_k)
