"""Validated experiment settings: every bad input fails here, before any data is read."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from opendp_wgm._validation import _check_int, _check_positive, _check_probability, _check_real

__all__: list[str] = []

Experiment = Literal["set-union", "top-k", "hitting-set"]
EXPERIMENTS: tuple[str, ...] = ("set-union", "top-k", "hitting-set")

#: Methods of each experiment, in plotting order.
METHODS: dict[str, tuple[str, ...]] = {
    "set-union": (
        "wgm",
        "policy_gaussian_l2",
        "policy_gaussian_reference_l1",
        "policy_greedy",
        "opendp_key_release",
        "dp_sips",
        "dp_sips_r2",
        "dp_sips_default",
        "partition_selection",
        "wgm_auto",
        "dp_sips_auto",
    ),
    "top-k": ("wgm_top_k", "limited_domain"),
    "hitting-set": ("wgm_hitting_set", "greedy", "peeling_true_domain"),
}

#: Optional methods of each experiment: peers accepted by ``methods`` but not run by default, each with the
#: package it imports and the extra that installs it (``opendp_wgm.experiments._peers``).
OPTIONAL_METHODS: dict[str, tuple[str, ...]] = {"set-union": ("pipeline_dp",), "top-k": (), "hitting-set": ()}
_NEEDS = {"pipeline_dp": ("pipeline_dp", "peers")}

#: The data sets of the paper's experiments that the shared data folder holds (imdb and fimi: set union only).
DEFAULT_DATASETS: dict[str, tuple[str, ...]] = {
    "set-union": ("steam_200k", "amazon_magazine_subscriptions", "imdb_50k", "fimi_retail", "movielens_100k"),
    "top-k": ("steam_200k", "amazon_magazine_subscriptions", "movielens_100k"),
    "hitting-set": ("steam_200k", "amazon_magazine_subscriptions", "movielens_100k"),
}

#: The x axis of each experiment: the Δ0 grid for set union, the k grid otherwise.
X_NAME: dict[str, str] = {"set-union": "max_contributions", "top-k": "k", "hitting-set": "k"}


@dataclass(frozen=True)
class Config:
    """Everything a run needs, validated and normalised."""

    experiment: str
    data_dir: Path
    out_dir: Path
    datasets: tuple[str, ...]
    methods: tuple[str, ...]
    trials: int
    epsilon: float
    delta: float
    grid: tuple[int, ...]  # Δ0 values (set union) or k values
    max_contributions: int  # Δ0 of the top-k / hitting-set pipelines
    k_bar_multipliers: tuple[int, ...]
    alpha: float
    seed: int | None

    @property
    def x_name(self) -> str:
        return X_NAME[self.experiment]

    @property
    def run_dir(self) -> Path:
        return self.out_dir / self.experiment


def _names(name: str, value: Any) -> tuple[str, ...]:
    """A list of names from a sequence or a comma-separated string."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, Sequence) or isinstance(value, (bytes, bytearray)):
        msg = f"`{name}` must be a list of names or a comma-separated string (found {value!r})"
        raise TypeError(msg)
    names = tuple(value)
    if not names:
        msg = f"`{name}` must not be empty"
        raise ValueError(msg)
    for v in names:
        if not isinstance(v, str):
            msg = f"`{name}` must hold names (str) (found {v!r})"
            raise TypeError(msg)
    if len(set(names)) != len(names):
        msg = f"`{name}` has duplicates: {list(names)}"
        raise ValueError(msg)
    return names


def _check_installed(methods: tuple[str, ...]) -> None:
    """Raise before any data is read if an optional method's package is missing."""
    import importlib.util

    for method in methods:
        if method in _NEEDS:
            package, extra = _NEEDS[method]
            if importlib.util.find_spec(package) is None:
                msg = f'method {method!r} needs the package {package!r}: pip install -e ".[{extra}]"'
                raise ModuleNotFoundError(msg)


def parse_grid(name: str, value: Any, *, minimum: int = 1) -> tuple[int, ...]:
    """A non-empty grid of integers >= ``minimum`` from a sequence or a string like ``"1,50,100"``.

    Integral floats (``100.0``, the reference's float flags) are accepted as integers; anything else fails
    with a message that names the grid and the offending value.
    """
    raw: list[Any]
    if isinstance(value, str):
        raw = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, numbers.Number):
        raw = [value]
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        raw = list(value)
    else:
        msg = f"`{name}` must be a list of integers or a comma-separated string (found {value!r})"
        raise TypeError(msg)
    if not raw:
        msg = f"`{name}` grid is empty: give at least one value"
        raise ValueError(msg)
    grid: list[int] = []
    for v in raw:
        number: Any = v
        if isinstance(v, str):
            try:
                number = float(v) if any(c in v for c in ".eE") else int(v)
            except ValueError:
                msg = f"`{name}` values must be integers >= {minimum} (found non-numeric {v!r})"
                raise ValueError(msg) from None
        if isinstance(number, bool) or not isinstance(number, numbers.Real):
            msg = f"`{name}` values must be integers >= {minimum} (found {v!r})"
            raise TypeError(msg)
        if isinstance(number, numbers.Integral):
            integer = int(number)
        elif math.isfinite(float(number)) and float(number).is_integer():
            integer = int(float(number))
        else:
            msg = f"`{name}` values must be integers >= {minimum} (found {v!r})"
            raise ValueError(msg)
        if integer < minimum:
            msg = f"`{name}` values must be integers >= {minimum} (found {v!r})"
            raise ValueError(msg)
        grid.append(integer)
    if len(set(grid)) != len(grid):
        msg = f"`{name}` grid has duplicates: {grid}"
        raise ValueError(msg)
    return tuple(grid)


def make_config(
    experiment: str,
    *,
    data_dir: Any,
    out_dir: Any,
    datasets: Any = None,
    methods: Any = None,
    trials: Any = 5,
    epsilon: Any = 1.0,
    delta: Any = 1e-5,
    l0: Any = (1, 50, 100, 150, 200, 300),
    k: Any = (5, 10, 20, 50, 100, 200),
    max_contributions: Any = 100,
    k_bar_multipliers: Any = (1, 5, 10),
    alpha: Any = 3.0,
    seed: Any = None,
) -> Config:
    """Check every argument of :func:`opendp_wgm.experiments.reproduce`; raise a clear error on the first bad one."""
    if experiment not in EXPERIMENTS:
        msg = f"unknown experiment {experiment!r}; choose one of {list(EXPERIMENTS)}"
        raise ValueError(msg)
    data_path = Path(data_dir).expanduser()
    if not data_path.is_dir():
        msg = (
            f"data folder {str(data_path)!r} does not exist "
            "(it must hold one directory per data set, like ../shared/data)"
        )
        raise FileNotFoundError(msg)
    from opendp_wgm.datasets import DATASETS  # NumPy and Polars: not for `opendp-wgm reproduce --help`

    names = DEFAULT_DATASETS[experiment] if datasets is None else _names("datasets", datasets)
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        msg = f"unknown data set(s) {unknown}; known data sets: {sorted(DATASETS)}"
        raise ValueError(msg)
    missing = [n for n in names if not (data_path / n).is_dir()]
    if missing:
        msg = f"data set folder(s) {missing} not found in {str(data_path)!r}"
        raise FileNotFoundError(msg)
    chosen = METHODS[experiment] if methods is None else _names("methods", methods)
    known = METHODS[experiment] + OPTIONAL_METHODS[experiment]
    bad = [m for m in chosen if m not in known]
    if bad:
        msg = f"unknown method(s) {bad} for {experiment!r}; choose among {list(known)}"
        raise ValueError(msg)
    _check_installed(chosen)
    trials = _check_int("trials", trials, minimum=1)
    epsilon = _check_positive("epsilon", epsilon)
    delta = _check_probability("delta", delta)
    grid = parse_grid("l0", l0) if experiment == "set-union" else parse_grid("k", k)
    max_contributions = _check_int("max_contributions", max_contributions, minimum=1)
    multipliers = parse_grid("k_bar_multipliers", k_bar_multipliers)
    if experiment == "top-k" and "limited_domain" in chosen:
        from opendp_wgm.measurements.baselines.limited_domain import LD_MAX_K_BAR

        if max(grid) * max(multipliers) > LD_MAX_K_BAR:  # refused here, before any data is read
            msg = (
                f"limited domain's k̄ = k x multiplier must be <= {LD_MAX_K_BAR:,} "
                f"(found {max(grid):,} x {max(multipliers):,}): lower `k` or `k_bar_multipliers`"
            )
            raise ValueError(msg)
    alpha = _check_real("alpha", alpha, minimum=0.0)
    if seed is not None:
        seed = _check_int("seed", seed, minimum=0)
    if out_dir is None:
        raise TypeError("`out_dir` must be a folder path (found None)")
    out_path = Path(out_dir).expanduser()
    if out_path.exists() and not out_path.is_dir():
        msg = f"`out_dir` {str(out_path)!r} exists and is not a folder"
        raise NotADirectoryError(msg)
    return Config(
        experiment=experiment,
        data_dir=data_path,
        out_dir=out_path,
        datasets=tuple(names),
        methods=tuple(chosen),
        trials=trials,
        epsilon=epsilon,
        delta=delta,
        grid=grid,
        max_contributions=max_contributions,
        k_bar_multipliers=multipliers,
        alpha=alpha,
        seed=seed,
    )
