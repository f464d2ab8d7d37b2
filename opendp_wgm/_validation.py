"""Parameter checks shared by every public constructor.

Each checker names the parameter and shows the value it received, so that an error reads like
"`max_contributions` must be an integer >= 1 (found 0)". They run before any OpenDP object is built.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, TypeVar

_Choice = TypeVar("_Choice", bound=str)

__all__: list[str] = []


def _check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer (not a bool) in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise TypeError(f"`{name}` must be an integer{bound} (found {value!r})")
    integer = int(value)
    if minimum is not None and integer < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum} (found {value!r})")
    if maximum is not None and integer > maximum:
        raise ValueError(f"`{name}` must be an integer <= {maximum} (found {value!r})")
    return integer


def _check_real(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    minimum_inclusive: bool = True,
    maximum_inclusive: bool = True,
) -> float:
    """Return ``value`` as a finite ``float`` inside the given interval."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a real number (found {value!r})")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"`{name}` must be finite (found {number!r})")
    lo_ok = minimum is None or (number >= minimum if minimum_inclusive else number > minimum)
    hi_ok = maximum is None or (number <= maximum if maximum_inclusive else number < maximum)
    if not (lo_ok and hi_ok):
        left = "(-inf" if minimum is None else ("[" if minimum_inclusive else "(") + repr(minimum)
        right = "inf)" if maximum is None else repr(maximum) + ("]" if maximum_inclusive else ")")
        raise ValueError(f"`{name}` must be in {left}, {right} (found {number!r})")
    return number


def _check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    return _check_real(name, value, minimum=0.0, minimum_inclusive=False)


def _check_probability(name: str, value: Any) -> float:
    """A probability in the open interval (0, 1), such as ``delta``."""
    return _check_real(
        name, value, minimum=0.0, maximum=1.0, minimum_inclusive=False, maximum_inclusive=False
    )


def _check_choice(name: str, value: Any, allowed: tuple[_Choice, ...]) -> _Choice:
    """``value`` if it is one of ``allowed`` (typed as the ``Literal`` of ``allowed``); the message lists them."""
    for option in allowed:
        if value == option:
            return option
    options = "{" + ", ".join(map(repr, allowed)) + "}"
    msg = f"`{name}` must be one of {options}, got {value!r}"
    raise ValueError(msg)


def _check_d_in(d_in: Any) -> int:
    """A dataset distance under add/remove-one-user: an integer number of users >= 0."""
    return _check_int("d_in", d_in, minimum=0)
