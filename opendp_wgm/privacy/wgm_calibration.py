"""The WGM's calibration: σ and T from a budget, by searching on a privacy map (the WGM's, or the map of any
constructor whose noise is the WGM's and whose threshold its map prices: the same search)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opendp_wgm._validation import _check_probability
from opendp_wgm.privacy.budget import Budget, Loss
from opendp_wgm.privacy.gaussian import wgm_privacy_loss
from opendp_wgm.privacy.search import _Calibrated, _noise_scale, _pair, smallest_passing
from opendp_wgm.privacy.threshold import check_max_contributions

#: A map ``(d_in, *, scale, threshold, max_contributions, epsilon) -> loss``, such as
#: :func:`~opendp_wgm.privacy.gaussian.wgm_privacy_loss`: an approximate pair, (ρ, δ) or (ε, δ) with ``epsilon``.
ThresholdMap = Callable[..., Loss]

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
    privacy_map: ThresholdMap = wgm_privacy_loss,
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
    privacy_map
        The map T is searched on: the WGM's (:func:`~opendp_wgm.privacy.gaussian.wgm_privacy_loss`, the default),
        or the map of a constructor whose noise is the WGM's (the discrete Gaussian of σ on the 2^-20 lattice,
        ℓ2 sensitivity 1 per user) and whose threshold its own map prices, called as ``privacy_map(1, scale=σ,
        threshold=T, max_contributions=Δ0, epsilon=ε)``: that constructor calibrates with this search and no
        calibration of its own (``docs/architecture.md``).
    """
    max_contributions = check_max_contributions(max_contributions)
    budget = Budget.of(epsilon=epsilon, rho=rho, delta=delta)
    return _calibrate_wgm(budget, max_contributions, noise_delta_fraction, privacy_map)


def calibrate_wgm_for(
    budget: Budget,
    *,
    max_contributions: int,
    noise_delta_fraction: float = 0.5,
    privacy_map: ThresholdMap = wgm_privacy_loss,
) -> WGMCalibration:
    """:func:`calibrate_wgm` for a :class:`~opendp_wgm.privacy.budget.Budget` (approximate DP or approximate zCDP),
    T searched on ``privacy_map`` (as there)."""
    return _calibrate_wgm(budget, check_max_contributions(max_contributions), noise_delta_fraction, privacy_map)


def _calibrate_wgm(
    budget: Budget, max_contributions: int, noise_delta_fraction: float, privacy_map: ThresholdMap = wgm_privacy_loss
) -> WGMCalibration:
    """:func:`calibrate_wgm_for` for a Δ0 its public caller has checked once (:func:`check_max_contributions`).

    σ is the WGM's noise search; T the smallest threshold whose loss ``privacy_map(1, scale=σ, threshold=T,
    max_contributions=Δ0, epsilon=ε)`` fits the budget, so the parameters pass the map by construction."""
    fraction = _check_probability("noise_delta_fraction", noise_delta_fraction)
    scale, noise_delta = _noise_scale(budget, max_contributions, fraction)

    def fits(threshold: float) -> bool:
        value, delta = _pair(
            privacy_map(
                1, scale=scale, threshold=threshold, max_contributions=max_contributions, epsilon=budget.epsilon
            )
        )
        return value <= budget.value and delta <= budget.delta

    return WGMCalibration(
        scale=scale,
        threshold=smallest_passing(fits, lower=0.0, parameter="threshold", budget=budget),
        max_contributions=max_contributions,
        delta=budget.delta,
        epsilon=budget.epsilon,
        rho=budget.rho,
        noise_delta=noise_delta,
    )
