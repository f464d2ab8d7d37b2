"""``--dry-run``: the release curve of a calibrated WGM or DP-SIPS (the probability that an item held by ``c``
users is released), as a table, its 50% and 95% points, and an optional PNG plot.

Two weights bracket every item: users who hold that one item each give it weight 1 (the best case, the fewest
users needed); users who hold Δ0 or more items each give each kept item weight 1/√Δ0 (the worst case).
Probabilities are exact up to the normal approximation of the lattice's discrete Gaussian
(:func:`opendp_wgm.privacy.threshold.release_probability`). For DP-SIPS, round i releases an item still
unreleased with probability p_i(c), with fresh noise each round, so the item is released by some round with
probability 1 − Π(1 − p_i(c)) (the "all rounds" curve), assuming its weight is the same in every round (exact
for weight 1; users who keep Δ0 items in every round for the worst case: fewer remaining items raise it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from opendp_wgm.cli._errors import CLIError, _one_line

if TYPE_CHECKING:
    from opendp_wgm.privacy.calibrate import DPSIPSCalibration, WGMCalibration

#: The probabilities whose fewest users the dry run reports.
_LEVELS = (0.5, 0.95)
#: Rows of the curve table at most (c is sampled geometrically beyond that).
_MAX_ROWS = 40
#: The table runs from the c at which the best case reaches the first level to the c at which the worst case
#: reaches the second: where the probabilities of every case shown change (below, every column shows 0.0000
#: to 0.0010; above, 0.9900 to 1.0000).
_SPAN = (1e-3, 0.99)


@dataclass(frozen=True)
class _Curve:
    """A calibration's rounds (one for the WGM) and the items each user keeps in the two cases."""

    scales: tuple[float, ...]
    thresholds: tuple[float, ...]
    max_contributions: int

    @property
    def cases(self) -> tuple[int, ...]:
        """Items per user: 1 (weight 1) and Δ0 (weight 1/√Δ0); one case when Δ0 = 1."""
        return (1,) if self.max_contributions == 1 else (1, self.max_contributions)

    def rounds(self, users: NDArray[np.int64], items_per_user: int) -> NDArray[np.float64]:
        """P(round i releases an item held by ``users`` users), shape (rounds, len(users))."""
        from opendp_wgm.privacy.threshold import release_probability

        return np.stack(
            [
                release_probability(users, scale=scale, threshold=threshold, items_per_user=items_per_user)
                for scale, threshold in zip(self.scales, self.thresholds, strict=True)
            ]
        )

    def combined(self, users: NDArray[np.int64], items_per_user: int) -> NDArray[np.float64]:
        """P(some round releases it): 1 − Π(1 − p_i), computed as −expm1(Σ log1p(−p_i))."""
        with np.errstate(divide="ignore"):
            # 0.0 - x, not -x: where every p_i is 0 the sum is +0.0, and -expm1(+0.0) would be -0.0 ("-0.0000")
            result: NDArray[np.float64] = 0.0 - np.expm1(np.log1p(-self.rounds(users, items_per_user)).sum(axis=0))
        return result

    def users_for(self, probability: float, items_per_user: int) -> int:
        """The fewest users at which :meth:`combined` reaches ``probability`` (each round's own point bounds it:
        the combined curve lies above every round's)."""
        from opendp_wgm.privacy.threshold import users_for_probability

        bound = min(
            users_for_probability(probability, scale=scale, threshold=threshold, items_per_user=items_per_user)
            for scale, threshold in zip(self.scales, self.thresholds, strict=True)
        )
        if len(self.scales) == 1:
            return bound
        users = np.arange(1, bound + 1, dtype=np.int64)
        return int(users[np.argmax(self.combined(users, items_per_user) >= probability)])


def _curve_of(calibration: WGMCalibration | DPSIPSCalibration) -> _Curve:
    from opendp_wgm.privacy.calibrate import DPSIPSCalibration

    if isinstance(calibration, DPSIPSCalibration):
        return _Curve(calibration.scales, calibration.thresholds, calibration.max_contributions)
    return _Curve((calibration.scale,), (calibration.threshold,), calibration.max_contributions)


def _table_users(curve: _Curve) -> NDArray[np.int64]:
    """The c of the table's rows: from the best case's :data:`_SPAN` low point to the worst case's high point
    (and each DP-SIPS round's own, as its column is shown), every c if that is at most :data:`_MAX_ROWS` rows,
    else that many geometrically spaced (both ends kept)."""
    first = curve.users_for(_SPAN[0], curve.cases[0])
    rounds = [_Curve((s,), (t,), curve.max_contributions) for s, t in zip(curve.scales, curve.thresholds, strict=True)]
    last = max([curve.users_for(_SPAN[1], curve.cases[-1])] + [r.users_for(_SPAN[1], 1) for r in rounds])
    if last - first < _MAX_ROWS:
        return np.arange(first, last + 1, dtype=np.int64)
    return np.unique(np.rint(np.geomspace(first, last, num=_MAX_ROWS)).astype(np.int64))


def _case(items_per_user: int) -> str:
    return "1 item each" if items_per_user == 1 else f"{items_per_user} items each"


def _curve_lines(calibration: WGMCalibration | DPSIPSCalibration, what: str) -> list[str]:
    """The release curve as text: the table for the best case (each round and all rounds for DP-SIPS), the
    worst case's column, and the 50% / 95% points of each case."""
    curve = _curve_of(calibration)
    users = _table_users(curve)
    sips = len(curve.scales) > 1
    header = ["c"]
    columns: list[NDArray[np.float64]] = []
    if sips:
        header += [f"round {i}" for i in range(1, len(curve.scales) + 1)]
        columns += list(curve.rounds(users, 1))
        header.append("all rounds")
    else:
        header.append(_case(1))
    columns.append(curve.combined(users, 1))
    if len(curve.cases) > 1:
        header.append(_case(curve.max_contributions) + (" (all rounds)" if sips else ""))
        columns.append(curve.combined(users, curve.max_contributions))
    widths = [max(8, len(h)) for h in header]
    lines = [
        f"release curve: P(an item held by c users is {what})",
        "  " + "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)),
    ]
    for row, c in enumerate(users):
        cells = [str(c)] + [f"{column[row]:.4f}" for column in columns]
        lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(cells, widths, strict=True)))
    if users[0] > 1:
        lines.append(f"  (c < {users[0]:,}: below {_SPAN[0]:.4f} in every column)")
    for level in _LEVELS:
        points = [f"c = {curve.users_for(level, t):,} ({_case(t)})" for t in curve.cases]
        lines.append(f"  {level:.0%} reached at " + ", ".join(points) + (" over all rounds" if sips else ""))
    if sips:
        for i, (scale, threshold) in enumerate(zip(curve.scales, curve.thresholds, strict=True), start=1):
            one = _Curve((scale,), (threshold,), curve.max_contributions)
            points = [f"{level:.0%} at c = {one.users_for(level, 1):,}" for level in _LEVELS]
            lines.append(f"  round {i} alone (1 item each): " + ", ".join(points))
    return lines


def _plot_curve(calibration: WGMCalibration | DPSIPSCalibration, path: Path, what: str) -> None:
    """Draw the release curve of each case to ``path`` (PNG), c on a log axis up to the worst case's 99%."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError("--plot needs matplotlib: pip install 'opendp-wgm[plot]'") from None
    curve = _curve_of(calibration)
    last = curve.users_for(0.99, curve.cases[-1])
    users = np.unique(np.geomspace(1, last, num=min(last, 400)).astype(np.int64))
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    try:
        for t in curve.cases:
            axes.plot(users, curve.combined(users, t), label=_case(t))
        for level in _LEVELS:
            axes.axhline(level, color="grey", linewidth=0.6, linestyle=":")
        axes.set_xscale("log")
        axes.set_xlabel("c, users holding the item")
        axes.set_ylabel(f"P({what})")
        axes.set_ylim(0, 1)
        axes.legend()
        axes.set_title("release curve" + (f" ({len(curve.scales)} rounds combined)" if len(curve.scales) > 1 else ""))
        figure.tight_layout()
        figure.savefig(path, format="png")
    except OSError as err:
        raise CLIError(f"cannot write --plot {str(path)!r}: {_one_line(err)}") from err
    finally:
        plt.close(figure)


def _candidate_lines(candidates: dict[int, WGMCalibration | DPSIPSCalibration], what: str) -> list[str]:
    """``--max-contributions auto``: the release curve depends on the privately chosen Δ0; its 50% and 95%
    points for each candidate, one line each (1 item per user, and Δ0 items per user)."""
    lines = [
        f"release curve: depends on the chosen Δ0 (private, known after the release); P(an item held by c users is "
        f"{what}) reaches",
    ]
    for max_contributions, calibration in candidates.items():
        curve = _curve_of(calibration)
        points = [
            f"{level:.0%} at c = " + " / ".join(f"{curve.users_for(level, t):,}" for t in curve.cases)
            for level in _LEVELS
        ]
        cases = "1 item each" if len(curve.cases) == 1 else f"1 / {max_contributions} items each"
        lines.append(f"  Δ0 = {max_contributions:<5} " + ", ".join(points) + f" ({cases})")
    return lines
