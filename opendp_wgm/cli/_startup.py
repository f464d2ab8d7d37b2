"""What a release from the command imports: OpenDP without its scikit-learn extras (:func:`_defer_unused_extras`),
and its prelude with the core names only until another name is read (:func:`_core_first_prelude`), no Numba for
a small input (:func:`_compiled_steps`); and its notice of a first-use compile (:func:`_compile_notices`).

``import opendp.prelude`` imports every OpenDP extra at once (``from opendp.extras import sklearn, numpy,
polars, ...``), and ``opendp.extras.sklearn`` imports scikit-learn, SciPy's statistics and pandas: 1.1 to 4.9 s
of a release of 10^5 rows that itself takes 0.04 s (``python -X importtime -c "import opendp.prelude"``). No
command uses it. The other extras cost under 10 ms each (``mbi`` is read by ``opendp.extras.polars`` anyway).

The command owns its process, so before it imports OpenDP it registers ``opendp.extras.sklearn`` as a lazy
module (:class:`importlib.util.LazyLoader`): the module is in ``sys.modules`` and bound on ``opendp.extras``, as
an import binds it, so ``from opendp.extras import sklearn`` (the prelude's line) binds it without running it;
its code runs on the first access to one of its attributes, which then behaves as it always did
(``dp.sklearn.decomposition.PCA``, ``import opendp.extras.sklearn.decomposition``), only later. Binding it on
the parent matters: in Python 3.11 an ``import`` of a module found in ``sys.modules`` reads its ``__spec__``,
which would run it at once. The library never does this: importing ``opendp_wgm`` changes nothing outside the
package, and a user's own ``import opendp.prelude`` behaves as always.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import TextIO

#: The OpenDP extras no command uses that are worth deferring (each costs seconds to import, the others ms).
_UNUSED_EXTRAS = ("opendp.extras.sklearn",)


def _defer_unused_extras() -> None:
    """Register each of :data:`_UNUSED_EXTRAS` as a lazy module, unless OpenDP's prelude is already imported
    (nothing to save, and nothing of the caller's is replaced), the module already is, or it is not installed."""
    if "opendp.prelude" in sys.modules:
        return
    for name in _UNUSED_EXTRAS:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # imports the parents (opendp, opendp.extras: light)
        if spec is None or spec.loader is None:
            continue
        spec.loader = importlib.util.LazyLoader(spec.loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)  # lazily: runs the module's code on its first attribute access
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, module)


#: The core modules whose names ``opendp.prelude`` star-imports, in its order, and its other core bindings.
_PRELUDE_CORE = ("opendp.mod", "opendp.domains", "opendp.metrics", "opendp.measures", "opendp.typing")
_PRELUDE_SHORT = {"t": "opendp.transformations", "m": "opendp.measurements", "c": "opendp.combinators"}
_PRELUDE_CORE_FUNCTIONS = ("as_array", "new_function", "new_queryable")  # from opendp.core


def _core_first_prelude() -> None:
    """Register ``opendp.prelude`` with OpenDP's core names only; its first look-up of any other name (the
    extras ``dp.polars``, ``dp.numpy``, ``dp.len``, ..., :mod:`opendp.context`'s and :mod:`opendp.accuracy`'s
    names) runs the real prelude in the same module, which from then on is the prelude as always.

    The extras, the context and the accuracy cost 15 to 40 ms of a release that reads none of them (Polars and
    NumPy are imported anyway). Before that first look-up, every name the module has is the object the prelude
    binds to it: the core modules' names are star-imported in the prelude's order, and the later imports
    (context, accuracy) rebind none of them (``tests/test_cli_startup.py`` checks it). Nothing is done once the
    prelude is imported, or if OpenDP is not the layout this expects (then the real prelude is imported).
    """
    if "opendp.prelude" in sys.modules:
        return
    spec = importlib.util.find_spec("opendp.prelude")
    if spec is None or spec.loader is None:  # pragma: no cover - OpenDP is a dependency
        return
    module = importlib.util.module_from_spec(spec)
    namespace = vars(module)
    for name in _PRELUDE_CORE:
        namespace.update(_star(importlib.import_module(name)))
    namespace.update({short: importlib.import_module(name) for short, name in _PRELUDE_SHORT.items()})
    core_module = importlib.import_module("opendp.core")
    namespace.update({name: getattr(core_module, name) for name in _PRELUDE_CORE_FUNCTIONS})
    loader = spec.loader

    def __getattr__(name: str) -> object:
        if name.startswith("__"):  # the import system's probes (__path__, ...): not the prelude's names
            raise AttributeError(name)
        del namespace["__getattr__"]
        loader.exec_module(module)  # the real prelude, in this module: every name as it binds it
        return getattr(module, name)

    namespace["__getattr__"] = __getattr__
    sys.modules["opendp.prelude"] = module
    setattr(sys.modules["opendp"], "prelude", module)  # noqa: B010 - bound on the parent, as an import binds it


def _star(module: ModuleType) -> dict[str, object]:
    """What ``from module import *`` binds: the names of its ``__all__``, or else its names without a ``_``."""
    names = getattr(module, "__all__", None)
    if names is None:
        return {name: value for name, value in vars(module).items() if not name.startswith("_")}
    return {name: getattr(module, name) for name in names}


def _compiled_steps(rows: int) -> AbstractContextManager[None]:
    """The context of a release of ``rows`` input rows: the library's rule for small inputs
    (:func:`opendp_wgm.kernel._small_inputs.compiled_steps_for`: below 3·10^6 rows, importing Numba and the
    compiled steps' cached code, 0.4 to 0.9 s, costs more than they save, so they are not imported), decided here
    from the row count the command read anyway."""
    from opendp_wgm.kernel import compiled_steps_for

    return compiled_steps_for(rows)


@contextmanager
def _compile_notices(stream: TextIO) -> Iterator[None]:
    """Within this block, the notice of a first-use compile (:mod:`opendp_wgm.engines.compile_notice`, logged on
    ``opendp_wgm.compile``) is one line ``opendp-wgm: ...`` on ``stream`` (the command's stderr), whatever the
    logging configuration; nothing else is changed. Imports no Numba."""
    from opendp_wgm.cli._errors import PROG
    from opendp_wgm.engines.compile_notice import LOGGER

    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
    propagate, LOGGER.propagate = LOGGER.propagate, False
    LOGGER.addHandler(handler)
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.propagate = propagate
