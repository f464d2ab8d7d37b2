"""Ctrl-C and SIGTERM for the command-line entry points: clean up and exit with status 128 + the signal's
number (130, 143), never raising.

A ``KeyboardInterrupt`` raised in Python code that OpenDP calls back (a measurement's function or map) crashes
the process in OpenDP's FFI ("double free or corruption", docs/known_issues.md), and SIGTERM's default action
ends the process without any clean-up (leaving, e.g., the temporary file of an atomic write). The entry points
own their process, so inside :func:`_exit_on_interrupt` the SIGINT and SIGTERM handlers do not raise: they clean
up, print one line and call ``os._exit``. Library functions never install them (``os._exit`` would end a
notebook's kernel).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: The signals handled, each ending the process with status 128 + its number (as a shell reports it).
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _exit_on_interrupt(cleanup: Callable[[], None], message: str) -> Iterator[None]:
    """Make Ctrl-C (SIGINT) and SIGTERM run ``cleanup``, print ``message`` on stderr and end the process at once
    with status 128 + the signal's number (130, 143), inside this block. Outside the main thread signal
    handlers cannot be set, and the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        cleanup()
        os.write(2, f"\n{message}\n".encode())
        os._exit(128 + signum)

    previous = {signum: signal.signal(signum, handler) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, signal.SIG_DFL if action is None else action)  # None: set outside Python
