"""Parameter checks shared by every public constructor.

Each checker names the parameter and shows the value it received, so that an error reads like
"`max_contributions` must be an integer >= 1 (found 0)". They run before any OpenDP object is built.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal, TypeVar

_Choice = TypeVar("_Choice", bound=str)

#: The most passes a histogram may split its users into (``passes``), and the Polars engines (``engine``).
_MAX_PASSES = 1024
_Engine = Literal["auto", "in-memory", "streaming"]
_ENGINES: tuple[_Engine, ...] = ("auto", "in-memory", "streaming")

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
    msg = f"`{name}` must be one of {options} (found {value!r})"
    raise ValueError(msg)


def _check_column(name: str, value: Any) -> str:
    """A column name: a non-empty ``str``."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"`{name}` must be a non-empty column name (found {value!r})")
    return value


def _check_item(value: Any) -> str | tuple[str, ...]:
    """The item column, or the columns of a composite key: a non-empty name, or a sequence of distinct
    non-empty names (a one-name sequence is that name; two or more are returned as a tuple)."""
    if isinstance(value, str):
        return _check_column("item", value)
    if isinstance(value, (bytes, dict)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"`item` must be a non-empty column name or a list of them (found {value!r})")
    names = tuple(_check_column("item", name) for name in value)
    if not names:
        raise ValueError(f"`item` must name at least one column (found {value!r})")
    if len(set(names)) < len(names):
        raise ValueError(f"`item` must name distinct columns (found {value!r})")
    return names[0] if len(names) == 1 else names


def _check_columns(user: Any, item: Any) -> tuple[str, str]:
    """The user and item columns: two different non-empty column names."""
    user, item = _check_column("user", user), _check_column("item", item)
    if user == item:
        raise ValueError(f"`user` and `item` must be different columns (found both {user!r})")
    return user, item


def _check_key_columns(user: Any, item: Any) -> tuple[str, str | tuple[str, ...]]:
    """The user column and the item's (:func:`_check_item`: one column or a composite key), the user column
    not among the item's."""
    keys = _check_item(item)
    if isinstance(keys, str):
        return _check_columns(user, keys)
    user = _check_column("user", user)
    if user in keys:
        raise ValueError(f"`user` and `item` must be different columns (found {user!r} in both)")
    return user, keys


def _check_one_item(item: Any, where: str) -> None:
    """``item`` is not a composite key (two or more columns), which is not supported ``where``."""
    if isinstance(item, (list, tuple)) and len(item) > 1:
        raise ValueError(f"`item` must be one column {where} (found the composite key {list(item)!r})")


def _check_absent(name: str, value: Any, *, unless: str) -> None:
    """``value`` is ``None``: the parameter applies only ``unless`` (such as another option's value)."""
    if value is not None:
        raise ValueError(f"`{name}` must be None unless {unless} (found {value!r})")


def _check_given(name: str, value: Any, *, when: str) -> None:
    """``value`` is not ``None``: the parameter is required ``when`` (such as another option's value)."""
    if value is None:
        raise ValueError(f"`{name}` must be given {when} (found None)")


def _check_exactly_one(**given: object) -> str:
    """The name of the one argument among ``given`` that is not ``None`` (such as ``epsilon=…, rho=…``)."""
    passed = [name for name, value in given.items() if value is not None]
    if len(passed) != 1:
        names = " and ".join(f"`{name}`" for name in given)
        found = ", ".join(passed) if passed else "neither"
        raise ValueError(f"exactly one of {names} must be given (found {found})")
    return passed[0]


def _check_d_in(d_in: Any) -> int:
    """A dataset distance under add/remove-one-user: an integer number of users >= 0."""
    return _check_int("d_in", d_in, minimum=0)


def _check_execution(passes: Any, engine: Any) -> tuple[int, _Engine]:
    """How a histogram runs: ``passes`` in ``[1, _MAX_PASSES]`` and a Polars ``engine``."""
    return _check_int("passes", passes, minimum=1, maximum=_MAX_PASSES), _check_choice("engine", engine, _ENGINES)


def _check_sequence(name: str, value: Any) -> tuple[Any, ...]:
    """A non-empty sequence (list, tuple, array; not a string or a mapping) as a tuple, one entry per round."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        raise TypeError(f"`{name}` must be a sequence of numbers, one per round (found {value!r})")
    values = tuple(value)
    if not values:
        raise ValueError(f"`{name}` must hold at least one round (found {value!r})")
    return values
