"""The argument groups shared by the paper's commands (data, budget, execution, output, k, split), their
argparse types (CLI options are validated here, at parse time, before any work), and their resolution.

Imports nothing heavy: ``opendp-wgm --help`` and argument errors never import Polars, OpenDP or NumPy.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from opendp_wgm.cli._errors import CLIError, _Parser

if TYPE_CHECKING:
    import polars as pl

    from opendp_wgm.measurements.wgm import Engine
    from opendp_wgm.samplers.discrete_gaussian import NoiseMethod

_DEFAULT_EPSILON = 1.0
_DEFAULT_DEMO_USERS = 5_000
_DEMO_ITEMS_PER_USER = 20
_DEMO_EXPONENT = 1.3
_SHOW_ROWS = 10
_DEFAULT_SPLIT = 0.5
#: ``--auto-fraction``'s default (the library's ``DEFAULT_AUTO_FRACTION``).
_DEFAULT_AUTO_FRACTION = 0.015
#: Limited-domain top-k's default k̄, in multiples of k.
_K_BAR_PER_K = 5
#: ``--output -``: the release goes to stdout.
_STDOUT = "-"
#: ``--format``: how the release is written (gzip by the output's ``.gz`` suffix).
_OUTPUT_FORMATS = ("csv", "tsv", "parquet", "json", "ndjson")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (found {value})")
    return value


def _max_contributions(text: str) -> int | Literal["auto"]:
    """``--max-contributions``: a positive integer, or ``auto`` (a private choice of Δ0)."""
    return "auto" if text == "auto" else _positive_int(text)


def _auto_fraction(text: str) -> float:
    """``--auto-fraction``: in (0, 0.5], as the library's ``auto_fraction``."""
    value = _open_unit(text)
    if value > _MAX_AUTO_FRACTION:
        raise argparse.ArgumentTypeError(f"must be in (0.0, {_MAX_AUTO_FRACTION!r}] (found {value!r})")
    return value


def _item_columns(text: str) -> str | tuple[str, ...]:
    """``--item``: one column, or ``COL,COL,...``, the columns of a composite key (distinct, non-empty)."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"must be COL or COL,COL,... with non-empty names (found {text!r})")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"must name distinct columns (found {text!r})")
    return names[0] if len(names) == 1 else names


def _real_in(maximum: float) -> Callable[[str], float]:
    """An argparse type: a finite real number in the open interval (0, ``maximum``), checked as the library
    checks its parameter of that option (``_check_positive``, ``_check_probability``), with its wording."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be finite (found {value!r})")
        if not 0.0 < value < maximum:
            raise argparse.ArgumentTypeError(f"must be in (0.0, {maximum!r}) (found {value!r})")
        return value

    return parse


#: The largest ``--auto-fraction`` (the library's ``MAX_AUTO_FRACTION``, not imported: parsing imports nothing heavy).
_MAX_AUTO_FRACTION = 0.5
#: ε, ρ: in (0, inf); δ, --split, --noise-delta-fraction: in (0, 1).
_positive_real = _real_in(math.inf)
_open_unit = _real_in(1.0)

#: Dtypes that ``--schema`` accepts (by name, case-insensitive): those of identifiers.
_SCHEMA_DTYPES = ("String", "Categorical", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")


def _schema(text: str) -> dict[str, type[pl.DataType]]:
    """``--schema``: ``COL=DTYPE[,COL=DTYPE...]`` to a dict of column name to Polars dtype."""
    import polars as pl

    dtypes: dict[str, type[pl.DataType]] = {name.lower(): getattr(pl, name) for name in _SCHEMA_DTYPES}
    schema: dict[str, type[pl.DataType]] = {}
    for entry in text.split(","):
        column, equals, name = (part.strip() for part in entry.partition("="))
        if not equals or not column or not name:
            raise argparse.ArgumentTypeError(f"entries must be COL=DTYPE (found {entry.strip()!r})")
        if name.lower() not in dtypes:
            raise argparse.ArgumentTypeError(
                f"dtype must be one of {', '.join(_SCHEMA_DTYPES)} (found {name!r} for column {column!r})"
            )
        if column in schema:
            raise argparse.ArgumentTypeError(f"column {column!r} is given twice")
        schema[column] = dtypes[name.lower()]
    return schema


def _features_paragraph(docs: str) -> str:
    """The epilog paragraph of every release command: the OpenDP features it enables, and where the proofs of the
    privacy maps it trusts are (``docs``)."""
    return (
        'This command enables OpenDP\'s "contrib" and "honest-but-curious" features in its own process: it trusts\n'
        f"opendp-wgm's privacy maps, whose proofs are in the package docs ({docs}).\n"
    )


def _add_release_command(
    subparsers: argparse._SubParsersAction[_Parser],
    name: str,
    help: str,
    description: str,
    epilog: str,
    *,
    proofs: str,
    examples: str,
    options: Callable[[argparse.ArgumentParser], None],
    columns: str,
    run: Callable[..., int],
    two_stage: bool = False,
    wgm_only: str = "",
    noise_delta_fraction: bool = True,
) -> None:
    """Register a release command (``discover``, ``top-k``, ``hitting-set``): description as written; epilog as
    written, then the paragraph on the OpenDP features it enables and the ``proofs`` of the maps it trusts (docs
    pages), then its ``examples``; then its argument groups in the order of every release command's help: data,
    the command's own ``options``, budget, execution, output (the release's ``columns``). ``two_stage``,
    ``wgm_only`` and ``noise_delta_fraction`` are those of :func:`_add_budget_arguments` and
    :func:`_add_execution_arguments`."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=f"{epilog}\n{_features_paragraph(proofs)}\n{examples}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_arguments(parser)
    options(parser)
    _add_budget_arguments(parser, noise_delta_fraction=noise_delta_fraction, wgm_only=wgm_only)
    _add_execution_arguments(parser, two_stage=two_stage, wgm_only=wgm_only)
    _add_output_arguments(parser, columns)
    parser.set_defaults(run=run)


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data")
    group.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        type=Path,
        help="input table, one row per (user, item): CSV (.csv, .tsv, .csv.gz, .tsv.gz), NDJSON (.ndjson, "
        ".jsonl, .ndjson.gz, .jsonl.gz) or Parquet (.parquet, .pq), read lazily (.gz decompressed in memory). "
        "Without PATH or --uri: a synthetic Zipf demo.",
    )
    group.add_argument(
        "--uri",
        metavar="URI",
        help="read from a SQL database instead of PATH, with --query: e.g. sqlite://events.db (relative to the "
        "current directory; sqlite:///abs/events.db for an absolute path) or "
        "postgresql://user:password@host:5432/db (Polars' read_database_uri with ConnectorX: "
        "pip install 'opendp-wgm[sql]'); the result is read into memory",
    )
    group.add_argument(
        "--query",
        metavar="SQL",
        help='with --uri: the query whose rows are (user, item), e.g. "select user, item from events"',
    )
    group.add_argument("--user", default="user", metavar="COL", help="user-id column (default: %(default)s)")
    group.add_argument(
        "--item",
        default="item",
        type=_item_columns,
        metavar="COL[,COL...]",
        help="item column, or comma-separated columns of a composite key, e.g. country,query: the items are their "
        "distinct tuples, and the output has those columns (default: %(default)s)",
    )
    group.add_argument(
        "--separator",
        metavar="SEP",
        help="CSV field separator (default: ',' for .csv, tab for .tsv; '\\t' is accepted)",
    )
    group.add_argument(
        "--schema",
        type=_schema,
        metavar="COL=DTYPE[,...]",
        help="CSV only: read these columns with these Polars dtypes (" + ", ".join(_SCHEMA_DTYPES) + "). "
        "The user and item columns of a CSV are read as String by default, so that ids such as 007 and 7 "
        "stay distinct; e.g. --schema user=Int64 to read user ids as integers.",
    )
    demo = parser.add_argument_group("demo (without PATH or --uri)")
    demo.add_argument(
        "--demo-users",
        type=_positive_int,
        metavar="N",
        help=f"users in the synthetic demo, {_DEMO_ITEMS_PER_USER} Zipf(s={_DEMO_EXPONENT}) draws each "
        f"(default: {_DEFAULT_DEMO_USERS})",
    )
    demo.add_argument(
        "--seed",
        type=int,
        help="seed of the demo *data* (default: fresh). The release's noise is never seeded.",
    )


def _add_budget_arguments(
    parser: argparse.ArgumentParser, *, noise_delta_fraction: bool = True, wgm_only: str = ""
) -> None:
    """ε or ρ, δ, Δ0, and the WGM's options (``--noise-delta-fraction`` only where the command calibrates it;
    ``wgm_only`` marks the WGM's options in the help when the command has another mechanism)."""
    group = parser.add_argument_group("privacy budget (per user, add/remove one user)")
    measure = group.add_mutually_exclusive_group()
    measure.add_argument(
        "--epsilon",
        type=_positive_real,
        metavar="E",
        help=f"(ε, δ)-DP with this ε > 0 (default: ε = {_DEFAULT_EPSILON:g} when --rho is not given)",
    )
    measure.add_argument("--rho", type=_positive_real, metavar="R", help="approximate (ρ, δ)-zCDP with this ρ > 0")
    group.add_argument("--delta", type=_open_unit, default=1e-5, metavar="D", help="δ in (0, 1) (default: %(default)g)")
    group.add_argument(
        "--max-contributions",
        type=_max_contributions,
        default=100,
        metavar="N",
        help="Δ0 >= 1: each user keeps a uniform random subset of at most N distinct items (default: %(default)s); "
        "'auto': a private choice of Δ0 from the data with --auto-fraction of the budget (printed, and part of the "
        "release), the rest calibrating the mechanism at it",
    )
    group.add_argument(
        "--auto-fraction",
        type=_auto_fraction,
        metavar="F",
        help="with --max-contributions auto: the share of ε (or of ρ) that buys the choice of Δ0, which spends no "
        f"δ, in (0, 0.5] (default: {_DEFAULT_AUTO_FRACTION:g})",
    )
    if noise_delta_fraction:
        group.add_argument(
            "--noise-delta-fraction",
            type=_open_unit,
            metavar="F",
            help="with --epsilon: share of the WGM's δ spent on its Gaussian noise, the rest on its threshold "
            "(default: 0.5)",
        )
    group.add_argument(
        "--noise",
        choices=("lattice", "opendp"),
        help="the WGM's noise sampler: this package's fast exact discrete Gaussian, or OpenDP's exact sampler "
        f"(slow) (default: lattice){wgm_only}",
    )


_ENGINES = ("auto", "in-memory", "streaming")


def _add_execution_arguments(
    parser: argparse.ArgumentParser, *, two_stage: bool = False, wgm_only: str = ""
) -> None:
    """How the WGM runs on Polars: ``--passes`` and ``--engine`` (of the WGM stage, for a ``two_stage``
    command; ``wgm_only`` marks them in the help when the command has another mechanism)."""
    group = parser.add_argument_group("execution")
    where = "the WGM stage processes" if two_stage else "process"
    group.add_argument(
        "--passes",
        type=_positive_int,
        metavar="N",
        help=f"{where} the users in N disjoint hash buckets, one pass over the input each: the same release, "
        f"with peak memory about 1/N of one pass, for inputs larger than memory (default: 1){wgm_only}",
    )
    group.add_argument(
        "--engine",
        choices=_ENGINES,
        help=f"the Polars engine that collects each pass{' of the WGM stage' if two_stage else ''} "
        f"(default: auto){wgm_only}",
    )


def _add_output_arguments(parser: argparse.ArgumentParser, columns: str) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="FILE",
        help=f"write the release ({columns}) to FILE: .csv, .tsv, .json (one array), .ndjson/.jsonl, "
        ".parquet or .pq, text formats optionally gzip'd (.csv.gz, ...); never an input file; written to a "
        "temporary file beside it and renamed, so FILE is complete or untouched. '-': all of it as CSV to "
        f"stdout (the summary stays on stderr). Without --output the first {_SHOW_ROWS} released rows are "
        "printed to stdout as a table.",
    )
    group.add_argument(
        "--format",
        choices=_OUTPUT_FORMATS,
        help="the format of --output, whatever its suffix (default: by the suffix; CSV for -)",
    )
    group.add_argument("--force", action="store_true", help="overwrite FILE if it exists (default: refuse)")
    group.add_argument(
        "--dry-run",
        action="store_true",
        help="calibrate and print σ, T and the release curve (the probability that an item held by c users is "
        "released, and the c at which it reaches 50%% and 95%%), then stop: no data is read, nothing released",
    )
    group.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="with --dry-run: also draw the release curve to this PNG file (needs matplotlib; an existing file "
        "only with --force)",
    )


def _add_two_stage_arguments(
    parser: argparse.ArgumentParser,
    title: str,
    k_help: str,
    *,
    wgm_only: str = "",
    mechanism: Callable[[argparse._ActionsContainer], None] | None = None,
) -> None:
    """The group ``title`` of a two-stage command (``top-k``, ``hitting-set``): ``--k`` (``k_help``), the command's
    ``mechanism`` options if any, ``--split`` and ``--stage-1`` (``wgm_only`` marks them when there is another
    mechanism)."""
    group = parser.add_argument_group(title)
    group.add_argument("--k", type=_positive_int, required=True, metavar="K", help=k_help)
    if mechanism is not None:
        mechanism(group)
    group.add_argument(
        "--split",
        type=_open_unit,
        metavar="S",
        help=f"share of the budget (of ε and δ, or of ρ) given to the WGM stage, in (0, 1); the peeling stage "
        f"gets the rest (default: {_DEFAULT_SPLIT:g}, the paper's){wgm_only}",
    )
    _add_stage_1_arguments(group, wgm_only)


def _split(args: argparse.Namespace) -> float:
    """``--split``, or the paper's default."""
    return _DEFAULT_SPLIT if args.split is None else float(args.split)


def _add_sips_arguments(group: argparse._ActionsContainer, when: str) -> None:
    """``--rounds`` and ``--ratio``: DP-SIPS's schedule, which applies only ``when`` (e.g. "--mechanism dp-sips")."""
    group.add_argument(
        "--rounds",
        type=_positive_int,
        metavar="R",
        help=f"{when} only: a geometric schedule of R rounds (with --ratio; default R = 3 when --ratio is given)",
    )
    group.add_argument(
        "--ratio",
        type=_positive_real,  # the library checks r <= 1, with its message
        metavar="r",
        help=f"{when} only: round i of a geometric schedule gets a share of the budget proportional to r^(R-i) "
        "(default r = 0.3 when --rounds is given; without either, the library's default: the adaptive schedule, "
        "round 1 then one or two rounds chosen from a noisy count of the users it boosted)",
    )


def _sips_options(args: argparse.Namespace, *, sips: bool, when: str) -> tuple[int | None, float | None]:
    """``--rounds`` and ``--ratio`` (None: the library's default, adaptive schedule); they may be given only if ``sips``
    (``when``)."""
    if not sips:
        for option in ("rounds", "ratio"):
            if getattr(args, option) is not None:
                raise CLIError(f"--{option} applies only with {when}")
    return args.rounds, args.ratio


_STAGE_1 = "--stage-1 dp-sips"


def _add_stage_1_arguments(group: argparse._ActionsContainer, only: str = "") -> None:
    """``--stage-1 {wgm,dp-sips}`` of a two-stage command, with DP-SIPS's ``--rounds`` and ``--ratio``."""
    group.add_argument(
        "--stage-1",
        choices=("wgm", "dp-sips"),
        help="the mechanism that discovers the candidates: wgm, one round (default, the paper's); dp-sips, "
        f"rounds, each on the items not yet released (the adaptive schedule, or --rounds/--ratio; better where users "
        f"hold many items){only}",
    )
    _add_sips_arguments(group, _STAGE_1)


def _stage_1_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``stage_1``, ``rounds`` and ``ratio`` keyword arguments of the two-stage calibrations and constructors
    (``rounds`` and ``ratio`` only with ``--stage-1 dp-sips``, as the library requires)."""
    sips = args.stage_1 == "dp-sips"
    rounds, ratio = _sips_options(args, sips=sips, when=_STAGE_1)
    return {"stage_1": "dp-sips", "rounds": rounds, "ratio": ratio} if sips else {"stage_1": "wgm"}


class _RequiredBudgetKwargs(TypedDict):
    delta: float
    max_contributions: int


class _CoreBudgetKwargs(_RequiredBudgetKwargs, total=False):
    """The budget keyword arguments of every calibration and ``*_from_budget`` constructor."""

    epsilon: float
    rho: float


class _BudgetKwargs(_CoreBudgetKwargs, total=False):
    """Those of the commands that calibrate the WGM's noise/threshold split of δ as well."""

    noise_delta_fraction: float


class _ExecutionKwargs(TypedDict):
    """The execution keyword arguments of the WGM constructors."""

    passes: int
    engine: Engine


@dataclass(frozen=True)
class _Budget:
    """The normalised budget arguments (exactly one of ``epsilon`` and ``rho``); ``max_contributions`` is Δ0,
    or ``"auto"`` with its ``auto_fraction``."""

    delta: float
    max_contributions: int | Literal["auto"]
    epsilon: float | None
    rho: float | None
    noise_delta_fraction: float | None
    auto_fraction: float | None = None

    @property
    def auto(self) -> bool:
        """Whether Δ0 is chosen privately (``--max-contributions auto``)."""
        return self.max_contributions == "auto"

    def kwargs(self) -> _BudgetKwargs:
        """The calibrations' keyword arguments: at a fixed Δ0 only (``auto`` goes through the constructors)."""
        if isinstance(self.max_contributions, str):  # pragma: no cover - a bug guard: the commands branch on auto
            raise AssertionError("a fixed Δ0 is needed here")
        out: _BudgetKwargs = {"delta": self.delta, "max_contributions": self.max_contributions}
        if self.epsilon is not None:
            out["epsilon"] = self.epsilon
        elif self.rho is not None:  # exactly one of the two is set
            out["rho"] = self.rho
        if self.noise_delta_fraction is not None:
            out["noise_delta_fraction"] = self.noise_delta_fraction
        return out

    def core_kwargs(self) -> _CoreBudgetKwargs:
        """The budget without ``noise_delta_fraction`` (for a command that has no such option)."""
        out = self.kwargs()
        out.pop("noise_delta_fraction", None)
        return out


def _budget(args: argparse.Namespace) -> _Budget:
    epsilon, rho = args.epsilon, args.rho
    if epsilon is None and rho is None:
        epsilon = _DEFAULT_EPSILON
    fraction = getattr(args, "noise_delta_fraction", None)
    if rho is not None and fraction is not None:
        raise CLIError("--noise-delta-fraction applies only with --epsilon (under --rho all of δ pays the threshold)")
    auto_fraction = getattr(args, "auto_fraction", None)
    if auto_fraction is not None and args.max_contributions != "auto":
        raise CLIError("--auto-fraction applies only with --max-contributions auto")
    if args.max_contributions == "auto" and auto_fraction is None:
        auto_fraction = _DEFAULT_AUTO_FRACTION
    return _Budget(args.delta, args.max_contributions, epsilon, rho, fraction, auto_fraction)


def _noise(args: argparse.Namespace) -> NoiseMethod:
    return "lattice" if args.noise is None else args.noise


@dataclass(frozen=True)
class _Execution:
    """The resolved ``--passes`` and ``--engine``: keyword arguments of the WGM constructors."""

    passes: int
    engine: Engine

    def kwargs(self) -> _ExecutionKwargs:
        return {"passes": self.passes, "engine": self.engine}

    def line(self) -> str:
        passes = "1 pass" if self.passes == 1 else f"{self.passes} passes (disjoint user buckets)"
        return f"  execution     {passes}, Polars engine {self.engine}"


def _execution(args: argparse.Namespace) -> _Execution:
    return _Execution(1 if args.passes is None else args.passes, "auto" if args.engine is None else args.engine)


def _requested(budget: _Budget) -> str:
    return f"ε = {budget.epsilon:g}" if budget.epsilon is not None else f"ρ = {budget.rho:g}"


