"""A deliberately under-claimed measurement, to check that an audit catches one."""

from __future__ import annotations

import opendp.prelude as dp

from opendp_wgm._spaces import _assert_features
from opendp_wgm._validation import _check_real

__all__ = ["make_underclaimed"]


def make_underclaimed(measurement: dp.Measurement, delta_factor: float = 0.5) -> dp.Measurement:
    """``measurement`` unchanged, but whose map reports ``delta_factor`` times its δ: NOT private as claimed.

    For testing auditors only (``opendp-wgm audit --mechanism wgm-underclaimed``). The output measure must
    be approximate (a ``(first, δ)`` pair).

    Examples
    --------
    >>> import opendp.prelude as dp, opendp_wgm as wgm
    >>> from opendp_wgm.audit import make_underclaimed
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> m = wgm.make_wgm(*wgm.user_items_space(), max_contributions=1, scale=1.0, threshold=3.0)
    >>> [round(v, 5) for v in make_underclaimed(m).map(1)]
    [0.5, 0.01138]
    """
    _assert_features()
    factor = _check_real("delta_factor", delta_factor, minimum=0.0, maximum=1.0, minimum_inclusive=False)
    if "Approximate" not in str(measurement.output_measure):
        msg = f"`measurement` must have an approximate output measure (found {measurement.output_measure})"
        raise ValueError(msg)

    def privacy_map(d_in: int) -> tuple[float, float]:
        first, delta = measurement.map(d_in)
        return first, factor * delta

    return dp.m.make_user_measurement(
        measurement.input_domain, measurement.input_metric, measurement.output_measure, measurement, privacy_map
    )
