"""Never compile in silence: one line before the compiled steps are compiled (``docs/engines.md``, *First use*).

The compiled steps (:mod:`opendp_wgm.engines._kernel_jit`, :mod:`opendp_wgm.engines._peel_jit`, Policy
Gaussian's) are compiled by Numba on their first call and cached on disk (``cache=True``: beside the modules in
``__pycache__``, or in Numba's user cache folder where the package's folder is read-only, or in
``NUMBA_CACHE_DIR``). A first use with a cold cache compiles for 8 to 11 s per path on 2 idle cores (steam_200k:
WGM 8.2 s, DP-SIPS 10.4 s, top-k 10.4 s, hitting set 8.0 s; ``benchmarks/bench_first_release.py``); a later
process loads the cached code in 0.4 to 0.7 s.

Numba signals a compile that the cache did not answer with a ``numba:compile`` event (a cache hit sends none), so
a listener of that event (:func:`watch_compiles`) knows, before the compile runs, that one is about to run.
It logs one line at ``WARNING`` on the ``opendp_wgm.compile`` logger, before the first compile of a burst (no
compile of the package in the previous :data:`_QUIET_SECONDS`): a library speaks through ``logging``, which
prints the line on stderr where the application configured no logging (Python's last-resort handler), and is
silenced like any logger (``logging.getLogger("opendp_wgm.compile").setLevel(logging.ERROR)``). The command
prints it on its stderr as ``opendp-wgm: compiling ...`` (:func:`opendp_wgm.cli.main`). A warm run compiles
nothing and says nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["LOGGER", "NOTICE", "watch_compiles"]

#: The logger of the notice.
LOGGER = logging.getLogger("opendp_wgm.compile")

#: The notice: what happens and roughly how long (a path's cold compile on 2 idle cores, rounded up).
NOTICE = "compiling the fast path once (~10 s); later runs reuse it"

#: A compile that starts this long after the previous one ended is a new burst, announced again (another path's
#: first use, later in the same process).
_QUIET_SECONDS = 60.0

#: Modules whose compiles are announced (the package's compiled steps; not a user's own Numba functions).
_PACKAGES: tuple[str, ...] = ("opendp_wgm.",)


class _Notice:
    """Logs :data:`NOTICE` at the start of the first compile of each burst of the package's compiles (a Numba event
    listener, registered as a virtual subclass of ``numba.core.event.Listener``: this module imports no Numba, so
    the command reads :data:`LOGGER` without loading it)."""

    def __init__(self) -> None:
        self.depth = 0  # compiles in progress (a function compiles the functions it calls within its own compile)
        self.ended = -float("inf")  # when the last compile of the package ended

    def _ours(self, data: Any) -> bool:
        module = getattr(getattr(data.get("dispatcher"), "py_func", None), "__module__", None) or ""
        return module.startswith(_PACKAGES)

    def on_start(self, event: Any) -> None:
        if not self._ours(event.data):
            return
        if self.depth == 0 and time.monotonic() - self.ended > _QUIET_SECONDS:
            LOGGER.warning(NOTICE)
        self.depth += 1

    def on_end(self, event: Any) -> None:
        if not self._ours(event.data):
            return
        self.depth = max(0, self.depth - 1)
        self.ended = time.monotonic()

    def notify(self, event: Any) -> None:
        """Numba's entry point (``Listener.notify``): a start or an end of a compile."""
        if event.is_start:
            self.on_start(event)
        elif event.is_end:
            self.on_end(event)


_LISTENER: _Notice | None = None


def watch_compiles() -> None:
    """Listen to Numba's compiles (once per process; each compiled module calls this when imported)."""
    global _LISTENER  # noqa: PLW0603 - one listener per process
    if _LISTENER is None:
        from numba.core import event

        event.Listener.register(_Notice)
        _LISTENER = _Notice()
        event.register("numba:compile", _LISTENER)  # type: ignore[no-untyped-call, unused-ignore]
