"""The Polars engine's modules, for tests that replace one of its functions: :func:`patch_engine` sets a name
wherever the engine binds it (the package ``opendp_wgm.engines.polars``, which the kernel's plans read, and each
of its modules, which import one another's names)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

import opendp_wgm.engines.polars as engine
from opendp_wgm.engines.polars import (
    _candidates,
    _compiled_histogram,
    _compiled_steps,
    _plans,
    _prepared,
    _release,
)

MODULES: tuple[ModuleType, ...] = (
    engine,
    _candidates,
    _compiled_histogram,
    _compiled_steps,
    _plans,
    _prepared,
    _release,
)


def patch_engine(monkeypatch: pytest.MonkeyPatch, name: str, value: Any) -> None:
    """Set ``name`` to ``value`` in every module of the engine that binds it (at least one must)."""
    bound = [module for module in MODULES if hasattr(module, name)]
    assert bound, f"no module of the Polars engine binds {name!r}"
    for module in bound:
        monkeypatch.setattr(module, name, value)
