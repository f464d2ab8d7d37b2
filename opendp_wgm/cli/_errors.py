"""Parse errors, the parser class and the deferred commands' registration shared by every command of ``opendp-wgm``
(imports nothing heavy)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

PROG = "opendp-wgm"


class CLIError(Exception):
    """An error the user can fix: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors raise :class:`CLIError` instead of printing usage and exiting.

    ``--help`` still prints and exits (``SystemExit(0)``), which :func:`main` turns into a return value.
    A command whose arguments need a heavy import to declare registers them with :meth:`defer`: they are
    added when the command's own arguments are parsed or its help is printed, not for ``opendp-wgm --help``.
    """

    _deferred: Callable[[_Parser], None] | None = None

    def defer(self, populate: Callable[[_Parser], None]) -> None:
        """Run ``populate(self)`` (add arguments, description, epilog) only when this parser is first used."""
        self._deferred = populate

    def _populate(self) -> None:
        populate, self._deferred = self._deferred, None
        if populate is not None:
            populate(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._populate()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._populate()
        return super().format_usage()

    def format_help(self) -> str:
        self._populate()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)")


def _add_deferred_command(
    subparsers: argparse._SubParsersAction[_Parser],
    name: str,
    help: str,
    *,
    populate: Callable[[_Parser], None],
    run: Callable[..., int],
) -> None:
    """Register a command whose arguments need a heavy import to declare (``audit``, ``reproduce``): its
    ``populate`` adds them on first use (:meth:`_Parser.defer`), never for ``opendp-wgm --help``."""
    parser = subparsers.add_parser(name, help=help)
    parser.defer(populate)
    parser.set_defaults(run=run)


def _one_line(err: BaseException) -> str:
    """The first line of an exception's message (Polars appends its query plan on later lines)."""
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0].strip()


def _last_line(err: BaseException) -> str:
    """The last line of an ``OpenDPException``: the Python error of the callback that failed inside OpenDP
    (its message starts with OpenDP's own lines and the callback's traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() not in ("", '")')]
    return lines[-1].removesuffix('")') if lines else type(err).__name__




@contextmanager
def _library_errors() -> Iterator[None]:
    """Turn the library's parameter errors (``ValueError``/``TypeError``) into :class:`CLIError`, as they are.

    The library's messages name its parameters (```max_contributions` must be … (found …)``); the options a
    user gives are checked at parse time (:mod:`opendp_wgm.cli._args`), so what reaches this is about a
    combination of valid options (e.g. a budget too small to calibrate) and is printed unchanged.
    """
    try:
        yield
    except (ValueError, TypeError) as err:
        raise CLIError(_one_line(err)) from err
