"""Ctrl-C for the command-line entry points: clean up and exit with status 130, never raising.

A ``KeyboardInterrupt`` raised in Python code that OpenDP calls back (a measurement's function or map) crashes
the process in OpenDP's FFI ("double free or corruption", docs/known_issues.md). The entry points own their
process, so inside :func:`_exit_on_interrupt` the SIGINT handler does not raise: it cleans up, prints one line
and calls ``os._exit``. Library functions never install it (``os._exit`` would end a notebook's kernel).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def _exit_on_interrupt(cleanup: Callable[[], None], message: str) -> Iterator[None]:
    """Make Ctrl-C (SIGINT) run ``cleanup``, print ``message`` on stderr and end the process with status 130,
    at once, inside this block. Outside the main thread signal handlers cannot be set, and the block changes
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        cleanup()
        os.write(2, f"\n{message}\n".encode())
        os._exit(130)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
