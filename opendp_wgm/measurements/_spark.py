"""Which engine a constructor runs on: the Spark engine when its input space comes from
:func:`opendp_wgm.spark.spark_user_items_space`, Polars otherwise (``docs/engines.md``).

Every constructor that runs on Spark asks :func:`spark_space` once, after checking its parameters and before
reading its input space: the answer is the Spark descriptor (column names), or ``None`` for a Polars space. The
options that only the Polars engine reads are refused on Spark, with the reason, rather than ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import opendp.prelude as dp

if TYPE_CHECKING:
    from opendp_wgm.engines.spark import SparkUserItemsDescriptor

#: The Spark engine's module: a Spark space's descriptor is an instance of a class it defines, so none exists in a
#: process that has not imported it (a Polars release need not import it: ``docs/performance.md``, "Start-up").
_SPARK_ENGINE = "opendp_wgm.engines.spark"

#: The Polars-only options of the constructors: their default (the only value Spark accepts) and why.
_POLARS_ONLY: dict[str, tuple[Any, str]] = {
    "noise": (
        "lattice",
        "the executors draw the noise with the package's exact lattice sampler; OpenDP's sampler runs on the "
        "driver only",
    ),
    "passes": (1, "Spark partitions the users itself (passes bound Polars' peak memory on one machine)"),
    "engine": ("auto", "it chooses the Polars engine that collects a plan; Spark runs its own plans"),
}


#: The last input domain found not to be a Spark space (OpenDP's domains are immutable): a two-stage release builds
#: its stage 2 on the same domain object at every release, and reading its descriptor through OpenDP's FFI costs
#: about 10–30 µs.
_LAST_POLARS: list[dp.Domain] = []


def is_spark_domain(input_domain: dp.Domain) -> bool:
    """Whether ``input_domain`` is a Spark space's, without importing the Spark engine (none exists without it)."""
    engine = sys.modules.get(_SPARK_ENGINE)
    return engine is not None and isinstance(getattr(input_domain, "descriptor", None), engine.SparkUserItemsDescriptor)


def spark_space(
    input_domain: dp.Domain, input_metric: dp.Metric, *, item: str | Sequence[str] | None = None, **options: Any
) -> SparkUserItemsDescriptor | None:
    """The Spark descriptor of the input space, or ``None`` when the constructor runs on Polars.

    On Spark, ``item`` must be ``None`` or the domain's item column, and each of ``options`` (keys of
    :data:`_POLARS_ONLY`: ``noise``, ``passes``, ``engine``) must have its default; anything else raises a
    ``ValueError`` that says why the option does not apply.
    """
    engine = sys.modules.get(_SPARK_ENGINE)
    if engine is None or (_LAST_POLARS and _LAST_POLARS[0] is input_domain):
        return None
    space: SparkUserItemsDescriptor | None = engine.spark_descriptor(input_domain, input_metric)
    if space is None:
        _LAST_POLARS[:] = [input_domain]
        return None
    return check_spark_options(space, item=item, **options)


def check_spark_options(
    space: SparkUserItemsDescriptor, *, item: str | Sequence[str] | None = None, **options: Any
) -> SparkUserItemsDescriptor:
    """``space``, once ``item`` and the Polars-only ``options`` are checked as :func:`spark_space` checks them."""
    if item is not None and item != space.item:
        msg = (
            f"`item` ({item!r}) disagrees with the Spark input space's item column ({space.item!r}); on Spark "
            "the item column is the one of spark_user_items_space() (composite keys are Polars-only)"
        )
        raise ValueError(msg)
    for name, value in options.items():
        default, reason = _POLARS_ONLY[name]
        if value != default:
            msg = f"`{name}={value!r}` is a Polars option and cannot run on a Spark input space: {reason}"
            raise ValueError(msg)
    return space
