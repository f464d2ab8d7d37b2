"""The WGM's calibration: σ and T from a budget, by searching on the WGM's privacy map."""

from __future__ import annotations

from dataclasses import dataclass

from opendp_wgm._validation import _check_probability
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.search import _Calibrated, _noise_scale, _smallest_threshold
from opendp_wgm.privacy.threshold import check_max_contributions

__all__ = ["WGMCalibration", "calibrate_wgm", "calibrate_wgm_for"]


@dataclass(frozen=True)
class WGMCalibration(_Calibrated):
    """The WGM parameters calibrated to a budget, and the budget they were calibrated to.

    Attributes
    ----------
    scale, threshold
        σ and T to pass to :func:`opendp_wgm.make_wgm`.
    max_contributions
        Δ0.
    epsilon, rho, delta
        The budget for one user (exactly one of ``epsilon`` and ``rho`` is set).
    noise_delta
        The part of δ spent on the Gaussian noise (0 under zCDP); the rest pays for the threshold.
    """

    scale: float
    threshold: float
    max_contributions: int
    delta: float
    epsilon: float | None = None
    rho: float | None = None
    noise_delta: float = 0.0


def calibrate_wgm(
    *,
    max_contributions: int,
    delta: float,
    epsilon: float | None = None,
    rho: float | None = None,
    noise_delta_fraction: float = 0.5,
) -> WGMCalibration:
    r"""Calibrate the WGM's (scale, threshold) to a budget, by searching on the privacy maps.

    - ``epsilon`` given, (ε, δ)-DP: σ is the smallest scale whose analytic-Gaussian δ at ε is at most
      ``noise_delta_fraction · δ`` (the paper's reference uses 1/2); T is the smallest threshold whose
      :math:`\delta_T` fits in what is left. At ε = 1, δ = 1e-5, Δ0 = 100 this gives σ = 3.88414,
      T = 20.7898 (the paper's calibration with an exact σ).
    - ``rho`` given, approximate zCDP (ρ, δ): σ is the smallest scale with :math:`1/(2\sigma^2) \le \rho` and T
      the smallest threshold with :math:`\delta_T \le \delta`.

    Both results are then checked against the map itself, so the returned parameters always pass
    ``measurement.check(1, budget)``.

    Parameters
    ----------
    max_contributions
        Δ0 ≥ 1.
    delta
        δ ∈ (0, 1).
    epsilon, rho
        Exactly one of them, > 0.
    noise_delta_fraction
        Share of δ given to the Gaussian noise under (ε, δ)-DP, in (0, 1).
    """
    max_contributions = check_max_contributions(max_contributions)
    return _calibrate_wgm(Budget.of(epsilon=epsilon, rho=rho, delta=delta), max_contributions, noise_delta_fraction)


def calibrate_wgm_for(budget: Budget, *, max_contributions: int, noise_delta_fraction: float = 0.5) -> WGMCalibration:
    """:func:`calibrate_wgm` for a :class:`~opendp_wgm.privacy.budget.Budget` (approximate DP or approximate zCDP)."""
    return _calibrate_wgm(budget, check_max_contributions(max_contributions), noise_delta_fraction)


def _calibrate_wgm(budget: Budget, max_contributions: int, noise_delta_fraction: float) -> WGMCalibration:
    """:func:`calibrate_wgm_for` for a Δ0 its public caller has checked once (:func:`check_max_contributions`)."""
    fraction = _check_probability("noise_delta_fraction", noise_delta_fraction)
    delta = budget.delta
    scale, noise_delta = _noise_scale(budget, max_contributions, fraction)
    threshold = _smallest_threshold(scale, max_contributions, delta - noise_delta, budget)
    d_out = wgm_privacy_loss(
        1, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=budget.epsilon
    )
    if not (d_out[0] <= budget.value and d_out[1] <= delta):  # pragma: no cover - a bug guard
        raise AssertionError(f"calibration produced {d_out}, over the budget {budget.d_out}")
    return WGMCalibration(
        scale=scale,
        threshold=threshold,
        max_contributions=max_contributions,
        delta=delta,
        epsilon=budget.epsilon,
        rho=budget.rho,
        noise_delta=noise_delta,
    )
