"""``opendp-wgm audit``: the empirical privacy auditor, delegated to :mod:`opendp_wgm.audit`.

Its arguments are declared by the audit package, which imports OpenDP and Polars, so they are added only when
this command is parsed or its help printed (:meth:`~opendp_wgm.cli._errors._Parser.defer`).
"""

from __future__ import annotations

import argparse
from typing import TextIO

from opendp_wgm.cli._errors import CLIError, _add_deferred_command, _Parser

#: The one-line help in ``opendp-wgm --help``: ``opendp_wgm.cli._audit.AUDIT_HELP`` (a test pins the two
#: equal), repeated here so that listing the commands imports nothing heavy.
_HELP = "test a shipped mechanism's privacy claim empirically on worst-case neighbours"


def _populate(parser: _Parser) -> None:
    from opendp_wgm.cli._audit import populate

    populate(parser)


def add_parser(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    """Register the command's parser (its ``run`` is :func:`run`); its arguments are added on first use."""
    _add_deferred_command(subparsers, "audit", _HELP, populate=_populate, run=run)


def run(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Audit the mechanisms (:func:`opendp_wgm.cli._audit.run_audit`): 0 when none is flagged, 1 when one is."""
    import opendp.prelude as dp

    from opendp_wgm.cli._audit import run_audit

    try:
        return run_audit(args, stdout=stdout, stderr=stderr)
    except (ValueError, TypeError, ImportError, dp.OpenDPException) as err:
        raise CLIError(str(err)) from err
