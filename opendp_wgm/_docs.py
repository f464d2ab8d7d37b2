"""Docstring text that several public functions share, written once and filled into their docstrings at import.

A docstring line that holds only ``{name}`` is replaced by the text given for ``name``, indented like that line:
``help()``, the doctests and every other reader of ``__doc__`` see the full text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

__all__: list[str] = []

_F = TypeVar("_F", bound=Callable[..., object])

#: ``input_domain, input_metric`` of a constructor that takes a user-items space, on Polars or on Spark.
USER_ITEMS_SPACE = """\
input_domain, input_metric
    From :func:`opendp_wgm.user_items_space`, or a ``dp.lazyframe_domain`` with
    ``dp.symmetric_id_distance`` (e.g. ``ctx.accountant.input_space`` of a ``dp.Context``); or
    :func:`opendp_wgm.spark.spark_user_items_space` (it runs on Spark, ``docs/engines.md``)."""

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)\{(?P<name>\w+)\}[ \t]*$", re.MULTILINE)


def fill_doc(**texts: str) -> Callable[[_F], _F]:
    """Decorator: fill the docstring's ``{name}`` lines with ``texts[name]`` (numpy-style text, unindented).

    Only lines that hold nothing but ``{name}`` are filled, so the braces of LaTeX or of examples stay; an unknown
    ``name`` raises ``KeyError`` at import, so a typo never reaches the rendered help.
    """

    def fill(match: re.Match[str]) -> str:
        indent = match["indent"]
        return "\n".join(indent + line if line else "" for line in texts[match["name"]].splitlines())

    def decorate(func: _F) -> _F:
        func.__doc__ = _PLACEHOLDER.sub(fill, func.__doc__ or "")
        return func

    return decorate
