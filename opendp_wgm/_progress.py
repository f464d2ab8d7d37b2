"""The package's one progress display (:func:`_progress`): a ``tqdm`` bar on a terminal, a few plain lines (or
nothing) elsewhere.

A bar redraws itself with carriage returns; when stderr is a file or a pipe (a log, CI, ``nohup``) every redraw
becomes a line of the log. So a bar is drawn only where the stream is a terminal (of more than 0 columns: on a
pseudo-terminal that reports 0, tqdm's bar is an empty line per redraw); elsewhere the display prints
one line each time another tenth of the work is done (at most 10 lines, and one per step when there are fewer
steps), or nothing (``lines=False``: the caller prints its own summary).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Protocol, TextIO

#: The most lines a display prints on a stream that is not a terminal: one per tenth of the work.
_LINES = 10


class _Progress(Protocol):
    """What the package uses of a ``tqdm`` bar."""

    def update(self, n: int = 1) -> object: ...

    def set_description_str(self, desc: str) -> object: ...

    def set_postfix_str(self, s: str) -> object: ...

    def close(self) -> object: ...

    def __enter__(self) -> _Progress: ...

    def __exit__(self, *exc_info: object) -> object: ...


def _is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal a bar can be drawn on: a tty, unless it reports a width of 0 columns (a CI
    runner's pseudo-terminal, ``docker exec -t`` before its first resize), where tqdm's bar is an empty line per
    redraw: that gets the lines of a log. A tty whose width cannot be read (no descriptor) gets the bar."""
    isatty = getattr(stream, "isatty", None)
    try:
        if not (callable(isatty) and isatty()):
            return False
    except ValueError:  # a closed stream
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (ValueError, OSError, AttributeError):  # no descriptor (a wrapper), or no size to read: a terminal
        return True


def _progress(
    total: int,
    *,
    desc: str,
    unit: str,
    stream: TextIO | None = None,
    enabled: bool = True,
    lines: bool = True,
    leave: bool = True,
    bar_format: str | None = None,
) -> _Progress:
    """A progress display of ``total`` steps on ``stream`` (default: ``sys.stderr``, read at the call).

    A ``tqdm`` bar (``desc``, ``unit``, ``leave``, ``bar_format`` as tqdm's) when ``stream`` is a terminal;
    otherwise, with ``lines``, at most :data:`_LINES` lines ``desc: done/total unit (percent) [elapsed] postfix``,
    one each time another tenth of the steps is done; else nothing. Nothing at all unless ``enabled``.
    """
    out = sys.stderr if stream is None else stream
    if enabled and _is_terminal(out):
        from tqdm import tqdm

        bar: _Progress = tqdm(
            total=total, desc=desc, unit=unit, file=out, leave=leave, bar_format=bar_format, dynamic_ncols=True
        )
        return bar
    return _Lines(total, desc, unit, out, shown=enabled and lines)


class _Lines:
    """:func:`_progress` on a stream that is not a terminal: a line per tenth of the steps done (or none)."""

    def __init__(self, total: int, desc: str, unit: str, stream: TextIO, *, shown: bool) -> None:
        self.total, self.desc, self.unit, self.stream, self.shown = total, desc, unit, stream, shown
        self.done, self.postfix, self._tenths = 0, "", 0
        self._start = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        tenths = min(_LINES, self.done * _LINES // self.total) if self.total > 0 else 0
        if tenths > self._tenths:
            self._tenths = tenths
            self._print()

    def _print(self) -> None:
        if not self.shown:
            return
        elapsed = time.perf_counter() - self._start
        percent = 100 * self.done // self.total
        postfix = f" {self.postfix}" if self.postfix else ""
        line = f"{self.desc}: {self.done:,}/{self.total:,} {self.unit} ({percent}%) [{elapsed:.0f} s]{postfix}"
        print(line, file=self.stream, flush=True)

    def set_description_str(self, desc: str) -> None:
        self.desc = desc

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def close(self) -> None:
        """Nothing to clear: the lines stay."""

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
