"""Parameter descriptions that several constructors share, written once and filled into their docstrings.

A docstring line that holds only ``{name}`` (a key of :data:`SHARED_PARAMETERS`) is replaced, at import, by that
description, indented like the line: ``help()``, the doctests and every reader of ``__doc__`` see the full text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

__all__: list[str] = []

_F = TypeVar("_F", bound=Callable[..., object])

#: Numpy-style parameter entries (name line, then the description indented by four spaces).
SHARED_PARAMETERS: dict[str, str] = {
    "user_items_space": """\
input_domain, input_metric
    From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
    ``dp.symmetric_id_distance`` (e.g. ``ctx.accountant.input_space`` of a ``dp.Context``); or
    :func:`opendp_wgm.spark.spark_user_items_space` (it runs on Spark, ``docs/engines.md``).""",
}

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)\{(?P<name>\w+)\}[ \t]*$", re.MULTILINE)


def shared_doc(func: _F) -> _F:
    """Fill ``func``'s ``{name}`` lines with :data:`SHARED_PARAMETERS` (an unknown name raises ``KeyError``:
    a typo fails at import, not in the rendered help)."""

    def fill(match: re.Match[str]) -> str:
        indent = match["indent"]
        return "\n".join(indent + line for line in SHARED_PARAMETERS[match["name"]].splitlines())

    func.__doc__ = _PLACEHOLDER.sub(fill, func.__doc__ or "")
    return func
