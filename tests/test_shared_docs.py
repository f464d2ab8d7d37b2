"""Docstring text written once (``opendp_wgm._docs.fill_doc``) reaches every docstring that uses it, in full."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import opendp_wgm
from opendp_wgm._docs import _PLACEHOLDER, USER_ITEMS_SPACE, fill_doc


def test_fill_doc_fills_indented_lines_and_leaves_other_braces() -> None:
    @fill_doc(space=USER_ITEMS_SPACE)
    def f() -> None:
        r"""Summary :math:`\frac{a}{b}`.

        Parameters
        ----------
        {space}
        """

    assert f.__doc__ is not None
    assert "        input_domain, input_metric\n            From :func:`opendp_wgm.user_items_space`" in f.__doc__
    assert r"\frac{a}{b}" in f.__doc__ and "{space}" not in f.__doc__


def test_fill_doc_rejects_an_unknown_name() -> None:
    with pytest.raises(KeyError, match="spaec"):

        @fill_doc(space=USER_ITEMS_SPACE)
        def f() -> None:
            """{spaec}"""


def test_no_docstring_keeps_a_placeholder() -> None:
    """Every function of the package (``then_*`` partials and decorated constructors included) was filled."""
    left = []
    for info in pkgutil.walk_packages(opendp_wgm.__path__, "opendp_wgm."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional engine (Spark, Tumult, Numba) that is not installed
            continue
        for name, obj in vars(module).items():
            if inspect.isfunction(obj) and obj.__doc__ and _PLACEHOLDER.search(obj.__doc__):
                left.append(f"{info.name}.{name}")
    assert left == []
