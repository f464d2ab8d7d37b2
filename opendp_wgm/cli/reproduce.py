"""``opendp-wgm reproduce``: the paper's experiments, delegated to :mod:`opendp_wgm.experiments`.

Its arguments are declared by the experiments package, which imports NumPy and Polars, so they are added only
when this command is parsed or its help printed (:meth:`~opendp_wgm.cli._errors._Parser.defer`), never for
``opendp-wgm --help``.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from opendp_wgm.cli._errors import CLIError, _add_deferred_command, _Parser

#: The one-line help in ``opendp-wgm --help``: ``opendp_wgm.experiments.REPRODUCE_HELP`` (a test pins the two
#: equal), repeated here so that listing the commands imports nothing heavy.
_HELP = "reproduce the paper's set-union, top-k or hitting-set experiment (tables and plots)"


def _populate(parser: _Parser) -> None:
    from opendp_wgm.experiments import (
        REPRODUCE_DESCRIPTION,
        REPRODUCE_EPILOG,
        add_reproduce_arguments,
    )

    parser.description = REPRODUCE_DESCRIPTION
    parser.epilog = REPRODUCE_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_reproduce_arguments(parser)


def add_parser(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    """Register the command's parser (its ``run`` is :func:`run`); its arguments are added on first use."""
    _add_deferred_command(subparsers, "reproduce", _HELP, populate=_populate, run=run)


def run(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Run the experiment (:func:`opendp_wgm.experiments.run_reproduce`); its input errors are one line."""
    import opendp.prelude as dp

    from opendp_wgm.experiments import run_reproduce

    # the policy baselines' maps assume exact arithmetic in their contraction step (docs/baselines.md)
    dp.enable_features("idealized-numerics")
    try:
        return run_reproduce(args, stdout=stdout, stderr=stderr)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, NotADirectoryError, ImportError) as err:
        raise CLIError(str(err)) from err
