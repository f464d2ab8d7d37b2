"""Lazy re-exports for the package's facades (PEP 562): a facade names where each public name lives, and a
name's module is imported on its first use, so that a release imports only what it runs (``docs/performance.md``,
"Start-up")."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def _lazy_exports(name: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the facade module ``name``, whose public names ``exports`` maps to
    the modules that define them. A name, once imported, is bound on the facade: later look-ups are plain."""
    facade = sys.modules[name]

    def __getattr__(attribute: str) -> Any:
        if attribute not in exports:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(exports[attribute]), attribute)
        setattr(facade, attribute, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(facade), *exports})

    return __getattr__, __dir__
