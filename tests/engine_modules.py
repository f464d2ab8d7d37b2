"""The Polars engine's modules, for tests that replace one of its functions: :func:`patch_engine` sets a name
wherever the engine binds it (the package ``opendp_wgm.engines.polars``, which the kernel's plans read, and each
of its modules, which import one another's names)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

import pytest

import opendp_wgm.engines.polars as engine

#: The package and every module in it, found on disk: a module added to the engine is patched too.
MODULES: tuple[ModuleType, ...] = (
    engine,
    *(importlib.import_module(f"{engine.__name__}.{info.name}") for info in pkgutil.iter_modules(engine.__path__)),
)


def patch_engine(monkeypatch: pytest.MonkeyPatch, name: str, value: Any) -> None:
    """Set ``name`` to ``value`` in every module of the engine that binds it (at least one must)."""
    bound = [module for module in MODULES if hasattr(module, name)]
    assert bound, f"no module of the Polars engine binds {name!r}"
    for module in bound:
        monkeypatch.setattr(module, name, value)


class MergingJit:
    """A compiled module (:func:`opendp_wgm.engines.polars.kernel_jit`'s) whose ``dense_codes`` gives every value
    code 0, as if all their hashes collided: the text codes' check must then fail."""

    @staticmethod
    def dense_codes(values: Any, codes: Any, uniques: Any) -> int:
        codes[:] = 0
        return 1

    def __getattr__(self, name: str) -> Any:  # the compiled module's other functions
        return getattr(engine.kernel_jit(), name)
