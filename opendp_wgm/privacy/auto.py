r"""``max_contributions="auto"``: the budget split, the private choice of Δ0, and the map of both stages.

A stated fraction ``f`` of the budget (``auto_fraction``, default 0.015) buys the choice, in two steps on the
users' distinct-item counts, each user counted once:

1. **the single-item test**, at :data:`TEST_SHARE` of ``f``: two counts (the users holding one item, and the
   others) with exact noise; Δ0 = 1 when the noisy one-item count exceeds 3/4 of the noisy total by
   :data:`TEST_MARGIN` standard deviations of that difference (:func:`passes_single_item_test`). The mechanism
   then runs at the rest of the budget, ``1 − f/15`` of it: where users hold one item (the case the optimal
   partition selection serves) the choice costs about a fifteenth of ``f``;
2. otherwise **the histogram**, at the rest of ``f``: a noisy histogram over the public grid :data:`GRID` (every
   user in one of :data:`BINS` bins, its count rounded up to the grid, or above 200), read by the rule
   :func:`choose_max_contributions`; the mechanism runs at ``1 − f`` of the budget.

Adding or removing one user moves one count of each step by one (ℓ1 and ℓ2 sensitivity 1). Under (ε, δ)-DP
the counts get exact discrete Laplace noise (OpenDP's sampler: pure DP, no δ) of scale about ``1/(share·ε)``;
under approximate zCDP exact discrete Gaussian noise (:func:`calibrate_choice`). The steps compose adaptively
(``docs/privacy.md`` §8): the map is the test's, plus the larger of the single-item candidate's and the
histogram's plus the largest candidate's (:func:`auto_loss`, applied twice).

Under (ε, δ)-DP the choice never costs more than (fε, 0), and the mechanism gets ((1 − f/15)ε, δ) after the test,
((1 − f)ε, δ) after the histogram; under approximate zCDP the same with ρ.
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
from opendp_wgm.privacy.gaussian import _up, wgm_rho
from opendp_wgm.privacy.search import _rho_scale, smallest_passing
from opendp_wgm.privacy.threshold import MAX_SCALE, check_max_contributions
from opendp_wgm.samplers.discrete_laplace import discrete_laplace_epsilon

__all__ = [
    "AUTO",
    "BINS",
    "DEFAULT_AUTO_FRACTION",
    "GRID",
    "ROOT_COST",
    "SINGLE_SHARE",
    "TEST_MARGIN",
    "TEST_SHARE",
    "AutoBudget",
    "auto_loss",
    "check_auto_fraction",
    "check_max_contributions_or_auto",
    "choice_loss",
    "choose_max_contributions",
    "is_auto",
    "passes_single_item_test",
    "single_item_threshold",
    "split_auto_budget",
]

#: The value of ``max_contributions`` that asks for the private choice.
AUTO = "auto"
#: The candidates for Δ0: the choice returns one of them. None above 500: on the eleven measured data sets
#: Δ0 = 1000 is never better than 500 by more than 0.0013 and worse on 20 of the 22 (data set, mechanism) pairs, and
#: a rule that can reach it pays for it under noise (``docs/auto.md``).
GRID: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500)
#: Bins of the choice's histogram: one per grid point up to 200, and one for the users above 200 (the rule needs
#: no count above 500: Δ0 = 500 is what it returns when no smaller grid point fits).
BINS = len(GRID)
#: The default share of the budget spent on the choice.
DEFAULT_AUTO_FRACTION = 0.015
#: Largest ``auto_fraction``: the choice never takes more than half of the budget.
MAX_AUTO_FRACTION = 0.5
#: Δ0 = 1 when the noisy share of users holding one item is at least this.
SINGLE_SHARE = 0.75
#: The single-item test's share of ``auto_fraction`` (the histogram gets the rest): 0.001 of ε at the default.
TEST_SHARE = 1.0 / 15.0
#: The test passes when the noisy one-item share clears :data:`SINGLE_SHARE` by this many standard deviations.
TEST_MARGIN = 3.0
#: Otherwise Δ0 is the grid point of least score: the noisy share of the users above it plus this times √Δ0.
ROOT_COST = 0.0045
#: The relative shrink of the mechanism's share: the rounded-up sum of the two stages' maps stays in the budget.
_SHRINK = 1.0 - 1e-12


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
    r"""The budgets of ``max_contributions="auto"``: the two steps of the choice and the mechanism after each.

    Attributes
    ----------
    total
        The budget the user gave.
    test
        The single-item test's share: (f/15·ε, 0) under (ε, δ)-DP, (f/15·ρ, 0) under approximate zCDP.
    histogram
        The histogram's share: (14f/15·ε, 0), or (14f/15·ρ, 0).
    single
        The mechanism's share when the test chose Δ0 = 1: ((1 − f/15)ε, δ), or ((1 − f/15)ρ, δ).
    rest
        The mechanism's share after the histogram: ((1 − f)ε, δ), or ((1 − f)ρ, δ). The mechanism's shares are
        shrunk by a relative 1e-12.
    test_scale, histogram_scale
        The noise scales of the test's counts and of the histogram (in users): the discrete Laplace's :math:`b`
        under (ε, δ)-DP, the discrete Gaussian's :math:`\sigma` under approximate zCDP.
    """

    total: Budget
    test: Budget
    histogram: Budget
    single: Budget
    rest: Budget
    test_scale: float
    histogram_scale: float

    @property
    def fraction(self) -> float:
        """The share of ε (or ρ) the choice spends at most (the test's and the histogram's)."""
        return (self.test.value + self.histogram.value) / self.total.value

    @property
    def laplace(self) -> bool:
        """Whether the choice's noise is the discrete Laplace (under (ε, δ)-DP) rather than the Gaussian."""
        return self.total.kind == "approx_dp"


def split_auto_budget(budget: Budget, auto_fraction: float) -> AutoBudget:
    """The choice's and the mechanism's budgets, and the choice's noise scales, for a checked ``auto_fraction``:
    the choice spends no δ (pure DP or zCDP), so the mechanism keeps all of it."""

    def share(value: float) -> Budget:
        return Budget(budget.kind, value, 0.0)

    def mechanism(spent: float) -> Budget:
        return Budget(budget.kind, (budget.value - spent) * _SHRINK, budget.delta * _SHRINK)

    test_value = TEST_SHARE * auto_fraction * budget.value
    histogram_value = auto_fraction * budget.value - test_value
    test, histogram = share(test_value), share(histogram_value)
    return AutoBudget(
        budget, test, histogram, mechanism(test_value), mechanism(test_value + histogram_value),
        calibrate_choice(test), calibrate_choice(histogram),
    )


def choice_loss(d_in: int, *, scale: float, laplace: bool) -> tuple[float, float]:
    r"""The privacy loss of one step of the choice (the test's two counts, or the histogram) for ``d_in`` users
    added or removed.

    The counts move by a vector of integers whose absolute values sum to at most ``d_in`` (ℓ1 and ℓ2 norm at most
    ``d_in``). With ``laplace`` (under (ε, δ)-DP): :math:`(d_{in}/b, 0)`, the discrete Laplace's pure-DP map
    (OpenDP's, rounded up). Otherwise: :math:`(d_{in}^2/(2\sigma^2), 0)`, zCDP of the discrete Gaussian.
    """
    d_in = _check_d_in(d_in)
    scale = _check_positive("scale", scale)
    if laplace:
        return discrete_laplace_epsilon(d_in, scale), 0.0
    return wgm_rho(d_in, scale), 0.0


def calibrate_choice(choice: Budget) -> float:
    """The smallest scale whose :func:`choice_loss` at one user fits ``choice`` (its ε, or its ρ): a step of the
    choice (the test's counts or the histogram).

    Raises
    ------
    ValueError
        When the scale would exceed the sampler's range 2^20 (a choice budget far too small).
    """
    if choice.kind == "approx_dp":
        epsilon = choice.value
        scale = smallest_passing(
            lambda s: choice_loss(1, scale=s, laplace=True)[0] <= epsilon,
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
    r"""The map of a choice and a candidate chosen by it: the choice's loss plus the largest of the candidates'
    losses, part by part.

    For every output of the choice the second stage is one of the candidates; each is (ε_j, δ_j) (or
    (ρ_j, δ_j)), so the second stage is :math:`(\max_j \varepsilon_j, \max_j \delta_j)` whatever the first
    released, and the adaptive composition adds the two (``docs/privacy.md`` §8). Sums are rounded up. The auto
    path applies it twice: the histogram and the grid's candidates, then the test and the two branches.
    """
    _check_d_in(d_in)
    value = max(c[0] for c in candidates)
    delta = max(c[1] for c in candidates)
    return _up(math.fsum((choice[0], value))), min(1.0, _up(math.fsum((choice[1], delta))))


def bin_of(counts: NDArray[np.int64]) -> NDArray[np.intp]:
    """Each user's bin: the number of grid points up to 200 below its distinct-item count (0 for one item, 8
    above 200)."""
    return np.searchsorted(np.array(GRID[:-1]), counts, side="left")


def passes_single_item_test(
    noisy_counts: NDArray[np.float64] | Sequence[float], scale: float, *, laplace: bool
) -> bool:
    r"""The single-item test on the noisy counts (users holding one item, users holding more) of noise scale
    ``scale``: whether :math:`\tilde n_1 - \tfrac34(\max(\tilde n_1, 0) + \max(\tilde n_{>1}, 0))` is at least
    :data:`TEST_MARGIN` times :math:`s\sqrt{(1/4)^2 + (3/4)^2}`, with :math:`s` the standard deviation of one
    count's noise (:math:`\sqrt2 b` for the Laplace of scale :math:`b`, :math:`\sigma` for the Gaussian): the
    deviation of :math:`\tilde n_1 - \tfrac34(\tilde n_1 + \tilde n_{>1})`. A margin of 3 makes the test pass
    rarely where fewer than 3/4 of the users hold one item; where it fails the histogram decides, Δ0 = 1 included.
    Never raises."""
    counts = np.asarray(noisy_counts, dtype=np.float64)
    statistic = float(counts[0] - SINGLE_SHARE * np.maximum(counts, 0.0).sum())
    return statistic >= single_item_threshold(scale, laplace=laplace)


def single_item_threshold(scale: float, *, laplace: bool) -> float:
    """The single-item test's threshold in users (:func:`passes_single_item_test`) at noise scale ``scale``."""
    deviation = (math.sqrt(2.0) * scale if laplace else scale) * math.hypot(1.0 - SINGLE_SHARE, SINGLE_SHARE)
    return TEST_MARGIN * deviation


def choose_max_contributions(noisy_bins: NDArray[np.float64] | Sequence[float]) -> int:
    r"""The rule: Δ0 from the noisy histogram of the users' distinct-item counts (bin ``j < 8`` holds the users
    with ``GRID[j-1] < count <= GRID[j]``; bin 8, those above ``GRID[7] = 200``).

    With :math:`n` the sum of the bins clamped at 0: Δ0 = 1 when the clamped bin 0 (one item) holds at least
    :data:`SINGLE_SHARE` of :math:`n`; otherwise the grid point :math:`g \ge 2` of least score
    :math:`T_g / n + c\sqrt{g}`, with :math:`T_g` the tail above :math:`g` (the sum of the noisy bins above it,
    not clamped; 0 for :math:`g = 500`, which the bins cannot see past) and :math:`c` = :data:`ROOT_COST` (the
    smaller grid point on a tie). The first term is the share of the users that Δ0 = g cuts, the second the cost
    every user pays for a larger Δ0 (the noise and the threshold grow about as √Δ0). No noisy histogram raises:
    every input gives a grid point (``n = 0``: Δ0 = 1).

    The tails sum the noisy bins as drawn, so they are unbiased: clamping each bin first adds about half a noise
    scale per empty bin to every tail, and on small data sets (lastfm_hetrec2011: 1,892 users) that bias alone
    pushed Δ0 to 1000 where 50 is best (``docs/auto.md``). One bin above 200 (not one per grid point up to 500
    and one above) keeps every tail a sum of at most 7 noisy bins, and the tail above 200 a single one.
    """
    bins = np.asarray(noisy_bins, dtype=np.float64)
    clamped = np.maximum(bins, 0.0)
    total = float(clamped.sum())
    if total <= 0.0 or clamped[0] >= SINGLE_SHARE * total:
        return GRID[0]
    # tails[j]: users above GRID[j + 1], from GRID[1] = 2 to GRID[7] = 200, then 0 above 500 (Δ0 = 1 is the
    # single-item branch's only)
    tails = np.append(np.cumsum(bins[::-1])[::-1][2:], 0.0)
    scores = tails / total + ROOT_COST * np.sqrt(np.array(GRID[1:], dtype=np.float64))
    return GRID[1 + int(np.argmin(scores))]
