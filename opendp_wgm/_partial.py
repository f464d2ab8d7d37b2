"""``then_*`` partials of our ``make_*`` constructors, chainable with OpenDP's ``>>``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

# OpenDP's ``Transformation.__rshift__`` and ``(domain, metric) >> ...`` dispatch on this class, so a partial
# must be an instance of it to chain; we use only its public behaviour (call with a domain and a metric).
from opendp.mod import _PartialConstructor

__all__: list[str] = []


def _to_then(constructor: Callable[..., Any]) -> Callable[..., _PartialConstructor]:
    """The ``then_`` form of ``constructor``: every argument but ``input_domain`` and ``input_metric``."""

    @functools.wraps(constructor)
    def then(*args: Any, **kwargs: Any) -> _PartialConstructor:
        return _PartialConstructor(lambda domain, metric: constructor(domain, metric, *args, **kwargs))

    then.__name__ = then.__qualname__ = constructor.__name__.replace("make_", "then_", 1)
    signature = inspect.signature(constructor)
    then.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[2:], return_annotation="_PartialConstructor"
    )
    then.__annotations__ = {k: v for k, v in then.__annotations__.items() if k not in ("input_domain", "input_metric")}
    then.__annotations__["return"] = "_PartialConstructor"
    then.__doc__ = f"Partial of :func:`{constructor.__name__}` that fixes ``input_domain`` and ``input_metric``."
    return then
