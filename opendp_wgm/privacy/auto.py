r"""``max_contributions="auto"``: the budget split, the private choice of Δ0, and the map of both stages.

A stated fraction ``f`` of the budget (``auto_fraction``, default 0.02) buys a noisy histogram of the users'
distinct-item counts over the public grid :data:`GRID`: every user falls in one bin (its count rounded up to the
grid, or above the last point), so adding or removing one user moves one bin by one, ℓ2 sensitivity 1. The
bins get exact discrete Gaussian noise of scale :math:`\sigma_c` (:func:`calibrate_choice`); the rule
:func:`choose_max_contributions` reads only the noisy bins. The rest of the budget calibrates the mechanism at
the chosen Δ0. The two stages compose adaptively (``docs/privacy.md`` §8): the map is the choice's plus the
largest of the candidates' maps (:func:`auto_loss`).

Under (ε, δ)-DP the choice costs (fε, fδ) and the mechanism gets the rest; under approximate zCDP the choice
costs fρ (and no δ: the Gaussian histogram is zCDP) and the mechanism gets (1 − f)ρ and all of δ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from opendp_wgm._validation import _check_d_in, _check_positive, _check_real
from opendp_wgm.privacy.budget import Budget
from opendp_wgm.privacy.gaussian import _noise_delta, _up, wgm_rho
from opendp_wgm.privacy.search import _rho_scale, smallest_passing
from opendp_wgm.privacy.threshold import MAX_SCALE, check_max_contributions

__all__ = [
    "AUTO",
    "DEFAULT_AUTO_FRACTION",
    "GRID",
    "SINGLE_SHARE",
    "TAIL_SHARE",
    "AutoBudget",
    "auto_loss",
    "check_auto_fraction",
    "check_max_contributions_or_auto",
    "choice_loss",
    "choose_max_contributions",
    "is_auto",
    "split_auto_budget",
]

#: The value of ``max_contributions`` that asks for the private choice.
AUTO = "auto"
#: The candidates for Δ0: the choice returns one of them.
GRID: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
#: The default share of the budget spent on the choice.
DEFAULT_AUTO_FRACTION = 0.02
#: Largest ``auto_fraction``: the choice never takes more than half of the budget.
MAX_AUTO_FRACTION = 0.5
#: Δ0 = 1 when the noisy share of users holding one item is at least this.
SINGLE_SHARE = 0.75
#: Otherwise Δ0 is the smallest grid point with at most this noisy share of the users above it.
TAIL_SHARE = 0.03


def is_auto(max_contributions: object) -> bool:
    """Whether ``max_contributions`` asks for the private choice (the string ``"auto"``)."""
    return isinstance(max_contributions, str) and max_contributions == AUTO


def check_max_contributions_or_auto(max_contributions: object) -> int | Literal["auto"]:
    """``"auto"``, or Δ0: an integer in [1, 2^20]."""
    if is_auto(max_contributions):
        return "auto"
    if isinstance(max_contributions, str):
        msg = f"`max_contributions` must be an integer >= 1 or 'auto' (found {max_contributions!r})"
        raise ValueError(msg)
    return check_max_contributions(max_contributions)


def check_auto_fraction(auto_fraction: Any) -> float:
    """The share of the budget spent on the choice of Δ0: a real in (0, 0.5]."""
    return _check_real(
        "auto_fraction", auto_fraction, minimum=0.0, maximum=MAX_AUTO_FRACTION, minimum_inclusive=False
    )


@dataclass(frozen=True)
class AutoBudget:
    r"""The two stages of ``max_contributions="auto"``.

    Attributes
    ----------
    total
        The budget the user gave.
    choice
        The choice's share: (fε, fδ) under (ε, δ)-DP, (fρ, 0) under approximate zCDP (each shrunk by a relative
        1e-12, :meth:`~opendp_wgm.privacy.budget.Budget.split`).
    rest
        The mechanism's share: ((1 − f)ε, (1 − f)δ), or ((1 − f)ρ, δ).
    scale
        :math:`\sigma_c`, the noise scale of the choice's histogram (in users).
    """

    total: Budget
    choice: Budget
    rest: Budget
    scale: float

    @property
    def fraction(self) -> float:
        """The share of ε (or ρ) the choice spends."""
        return self.choice.value / self.total.value


def split_auto_budget(budget: Budget, auto_fraction: float) -> AutoBudget:
    """The choice's and the mechanism's budgets, and the choice's σ, for a checked ``auto_fraction``."""
    rest, choice = budget.split(1.0 - auto_fraction)  # the rest first: under zCDP it keeps all of δ
    return AutoBudget(budget, choice, rest, calibrate_choice(choice))


def choice_loss(d_in: int, *, scale: float, epsilon: float | None = None) -> tuple[float, float]:
    r"""The choice's privacy loss for ``d_in`` users added or removed.

    The histogram moves by a vector of non-negative integers summing to ``d_in`` (ℓ1 and ℓ2 norm at most
    ``d_in``). Without ``epsilon``: :math:`(d_{in}^2/(2\sigma^2), 0)`, zCDP of the discrete Gaussian. With
    ``epsilon`` (ε at ``d_in = 1``): :math:`(d_{in}\varepsilon,\ \delta_{\mathcal N}(d_{in}\varepsilon - a;
    \sigma, d_{in}))` with the WGM's lattice slack :math:`a` at Δ0 = 1 (the noise is drawn on the WGM's
    lattice, ``docs/privacy.md`` Lemma 3).
    """
    d_in = _check_d_in(d_in)
    scale = _check_positive("scale", scale)
    if epsilon is None:
        return wgm_rho(d_in, scale), 0.0
    epsilon = _check_real("epsilon", epsilon, minimum=0.0)
    if d_in == 0:
        return 0.0, 0.0
    eps_out = d_in * epsilon
    return eps_out, min(1.0, _noise_delta(eps_out, scale, d_in, 1))


def calibrate_choice(choice: Budget) -> float:
    """The smallest σ whose :func:`choice_loss` at one user fits ``choice`` (its ε and δ, or its ρ).

    Raises
    ------
    ValueError
        When σ would exceed the sampler's range 2^20 (a choice budget far too small).
    """
    if choice.kind == "approx_dp":
        epsilon = choice.value
        scale = smallest_passing(
            lambda s: choice_loss(1, scale=s, epsilon=epsilon)[1] <= choice.delta,
            lower=1.0 / MAX_SCALE, parameter="auto scale", budget=choice,
        )
    else:
        scale = _rho_scale(choice.value, choice)
    if scale > MAX_SCALE:
        msg = (
            f"the choice of max_contributions needs a noise scale above 2**20 at {choice.description}: "
            "raise `auto_fraction` or the budget"
        )
        raise ValueError(msg)
    return scale


def auto_loss(d_in: int, choice: tuple[float, float], candidates: Sequence[tuple[float, float]]) -> tuple[float, float]:
    r"""The map of the two stages: the choice's loss plus the largest of the candidates' losses, part by part.

    For every released Δ0 the second stage is one of the candidates; each is (ε_j, δ_j) (or (ρ_j, δ_j)), so
    the second stage is :math:`(\max_j \varepsilon_j, \max_j \delta_j)` whatever the first released, and the
    adaptive composition adds the two (``docs/privacy.md`` §8). Sums are rounded up.
    """
    _check_d_in(d_in)
    value = max(c[0] for c in candidates)
    delta = max(c[1] for c in candidates)
    return _up(math.fsum((choice[0], value))), min(1.0, _up(math.fsum((choice[1], delta))))


def bin_of(counts: NDArray[np.int64]) -> NDArray[np.intp]:
    """Each user's bin: the number of grid points below its distinct-item count (0 for one item, 10 above 1000)."""
    return np.searchsorted(np.array(GRID), counts, side="left")


def choose_max_contributions(noisy_bins: NDArray[np.float64] | Sequence[float]) -> int:
    r"""The rule: Δ0 from the noisy histogram of the users' distinct-item counts (bin ``j`` holds the users with
    ``GRID[j-1] < count <= GRID[j]``; the last bin, those above ``GRID[-1]``).

    With the bins clamped at 0 and :math:`n` their sum: Δ0 = 1 when bin 0 (one item) holds at least
    :data:`SINGLE_SHARE` of :math:`n`; otherwise the smallest grid point :math:`g \ge 2` whose tail (the sum of
    the clamped bins above :math:`g`) is at most :data:`TAIL_SHARE` · n; the last grid point when none is. No
    noisy histogram raises: every input gives a grid point (``n = 0``: Δ0 = 1).

    Clamping biases every tail upwards by about σ/√(2π) per empty bin: where the noise dominates 3% of the users
    (a few thousand users at the default budget) the rule errs towards a larger Δ0, the side that costs least
    missing mass (a Δ0 too small cuts the mass of every user above it; one too large adds noise). Summing the raw
    noisy bins instead (unbiased) let the noise of many bins pass a small Δ0 on small data sets: Δ0 = 2 on
    MovieLens 100K (943 users) in one draw of five, at a missing mass near 1 (``docs/auto.md``).
    """
    bins = np.asarray(noisy_bins, dtype=np.float64)
    clamped = np.maximum(bins, 0.0)
    total = float(clamped.sum())
    if total <= 0.0 or clamped[0] >= SINGLE_SHARE * total:
        return GRID[0]
    # tails[j]: users above GRID[j + 1], the clamped bins summed; from GRID[1] on: Δ0 = 1 is the single-item
    # branch's only (a noisy tail above 1 below 3% would contradict it)
    tails = np.cumsum(clamped[::-1])[::-1][2:]
    fitting = np.flatnonzero(tails <= TAIL_SHARE * total)
    return GRID[1 + int(fitting[0])] if fitting.size else GRID[-1]
