r"""The ``opendp-wgm`` command: differentially private domain discovery from the shell.

::

    opendp-wgm discover data.parquet --user u --item x --epsilon 1 --delta 1e-5
    opendp-wgm discover                      # built-in synthetic Zipf demo
    opendp-wgm top-k data.csv --k 10         # WGM, then peeling (or --mechanism limited-domain)
    opendp-wgm hitting-set data.csv --k 10   # WGM, then user peeling
    opendp-wgm discover --uri sqlite://events.db --query "select user, item from events" -o -    # CSV on stdout
    opendp-wgm discover --dry-run --plot curve.png   # σ, T and the release curve; no data read

The command owns its process, so it enables OpenDP's ``"contrib"`` and ``"honest-but-curious"`` features
once its arguments are parsed (the library itself only asserts them). Each command is one module of this
package exposing ``add_parser(subparsers)`` and ``run(args, *, stdout, stderr) -> int``, registered in
:data:`COMMANDS`; the argument groups shared by the paper's mechanisms (data, budget, execution, output) are
in :mod:`._args`, reading and writing in :mod:`._io`, and :func:`._report._release_and_report` runs what every
release command does after planning its measurement (read, release, write, evaluate the demo, summarise).

Start-up: ``--help``, ``--version`` and argument errors import neither OpenDP, NumPy, Polars nor the
measurements; each ``run`` imports what it needs, and the package's facades (``opendp_wgm.measurements``,
``.samplers``, ``.privacy.calibrate``) import a name's module on its first use, so a release imports only the
mechanism it runs. A release imports OpenDP's core without its extras, context and accuracy, which load if
touched (this process only; the library never does), no SciPy, no pyarrow, and no Numba for a small input (the
library's rule, decided here from the row count the command read: :mod:`._startup`). The script's process tunes
its garbage collector (:func:`_console`). A first-use compile of the compiled steps prints one line on
stderr before it runs (``opendp-wgm: compiling the fast path once ...``).

Errors a user can cause (a missing file or column, empty data, an invalid parameter) print one line
``opendp-wgm: error: ...`` on stderr and exit with status 2; they never print a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Protocol, TextIO

from opendp_wgm.cli import audit, discover, hitting_set, reproduce, top_k
from opendp_wgm.cli._errors import PROG, CLIError, _Parser

__all__ = ["COMMANDS", "PROG", "build_parser", "main"]

_FEATURES = ("contrib", "honest-but-curious")


class Command(Protocol):
    """What a command module provides (a module is accepted as it is: see :data:`COMMANDS`)."""

    def add_parser(self, subparsers: argparse._SubParsersAction[_Parser]) -> None: ...

    def run(self, args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int: ...


#: The commands, in the order of ``opendp-wgm --help``. To add a command, write a module (here or in its own
#: package, e.g. ``opendp_wgm.audit``) with ``add_parser(subparsers)`` that calls ``subparsers.add_parser(...)``
#: and ``parser.set_defaults(run=run)`` (a release command through ``_args._add_release_command``, one whose
#: arguments need a heavy import through ``_errors._add_deferred_command``), and ``run(args, *, stdout, stderr)
#: -> int`` that imports its heavy dependencies inside; then add the module to this tuple (one line). Raise
#: :class:`CLIError` for a user's error: :func:`main` prints it as one line and exits 2.
COMMANDS: Sequence[ModuleType | Command] = (
    discover,
    top_k,
    hitting_set,
    reproduce,
    audit,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``opendp-wgm`` parser with one subparser per command."""
    from opendp_wgm._version import __version__

    parser = _Parser(
        prog=PROG,
        description="Differentially private domain discovery (Weighted Gaussian Mechanism), top-k and k-hitting "
        "sets over an unknown item domain, on Polars, built on OpenDP.",
        epilog='This command enables OpenDP\'s "contrib" and "honest-but-curious" features in its own '
        "process (it trusts opendp-wgm's privacy maps; proofs in docs/privacy.md). The library does not.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _silence(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null, so that the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture): nothing to flush
        pass


def _console() -> int:
    """The ``opendp-wgm`` script and ``python -m opendp_wgm.cli``: :func:`main`, in a process that ends with it.

    The process is the command's, so it tunes its garbage collector (``docs/performance.md``, "Start-up"). A
    release imports about 650 modules, whose objects live as long as the process; with the default thresholds
    (700, 10, 10) some 125 collections ran while they were imported, 45 to 100 ms in all (one full collection
    alone 20 to 50 ms). The first generation's threshold is raised to 100,000 (a collection after 100,000 more
    container objects than were freed: at most some 20 MB held before it runs, nothing in a release that keeps
    its rows in Polars and NumPy); the release itself is the same. And every object left is frozen
    (:func:`gc.freeze`) once :func:`main` returns, so the interpreter's final collections skip them (0.05 to
    0.1 s of the exit). The exit is otherwise as always (atexit handlers run, modules are torn down); a caller
    of :func:`main` in its own process (a test, a notebook) is not affected.
    """
    import gc

    gc.set_threshold(100_000, *gc.get_threshold()[1:])
    code = main()
    gc.freeze()
    return code


def main(argv: list[str] | None = None) -> int:
    """Run ``opendp-wgm`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    Returns 0 on success, 2 on an error the user can fix (one line on stderr), 130 on Ctrl-C.
    """
    stdout, stderr = sys.stdout, sys.stderr
    try:
        args = build_parser().parse_args(argv)
        run: Callable[..., int] = args.run
        from opendp_wgm.cli._startup import _compile_notices, _core_first_prelude, _defer_unused_extras

        _defer_unused_extras()  # this process is ours: OpenDP's scikit-learn extras load only if touched
        _core_first_prelude()  # and the prelude's extras, context and accuracy too
        import opendp.prelude as dp  # after parsing: --help, --version and usage errors stay fast

        # This process is ours: opt in to the plugin's user-defined measurements (the library never does).
        dp.enable_features(*_FEATURES)
        with _compile_notices(stderr):  # a first-use compile says so on stderr, as `opendp-wgm: compiling ...`
            return run(args, stdout=stdout, stderr=stderr)
    except SystemExit as exit_:  # --help / --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except CLIError as err:
        print(f"{PROG}: error: {err}", file=stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=stderr)
        return 130
    except BrokenPipeError:  # stdout piped into a reader that stopped early (`... -o - | head`): not an error
        _silence(stdout)
        return 141  # 128 + SIGPIPE, as a shell reports it
