"""Arguments of popxl's API, and settings of popart's transforms, that steer only how an IPU plans or lays out an op.

popxl takes some arguments that tell poplar how much tile memory an op may use
for temporaries (`available_memory_proportion(s)`), which type to accumulate
partial sums in on the tiles (`partials_type(s)`, where the result's type does
not change), whether to dither a convolution's tile mapping, which tensor to
copy a tile layout from (`sparse_accumulate_`'s `W`), and the like; popart's
transforms change some of them on existing ops (the available memory
proportion, a matmul's `fully_connected_pass`), on the kinds whose
`PopartFacts.ipu_settings` name them. XLA plans memory, layouts and accumulation
itself, so none of them changes what a program computes here.

Every op function of `popxl.ops`, and every transform, hands such values to
`record`, which checks each value as popart checks it (an invalid one raises a
`ValueError` naming it, as popart would) and keeps the given ones with the op,
the one place they are kept: `recorded(op)` reads them back for transforms and
tools, `available_memory_proportion(op)` the proportion. They have no other
effect off an IPU. Arguments the runtime does honour never come here.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from popxl import dtypes
from popxl.op import Op
from popxl.tensor import Tensor

__all__ = ["available_memory_proportion", "record", "recorded"]

_RECORDED: weakref.WeakKeyDictionary[Op, dict[str, Any]] = weakref.WeakKeyDictionary()


def _proportion(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < float(value) <= 1.0:
        raise ValueError(f"{what} must be a number in (0, 1], as popart requires, got {value!r}")
    return float(value)


def _partials(what: str, value: Any) -> str:
    if isinstance(value, dtypes.dtype) and value in (dtypes.float32, dtypes.float16):
        return "float" if value is dtypes.float32 else "half"
    if isinstance(value, str) and value.lower() in ("", "float", "half"):
        return value.lower() or "float"
    raise ValueError(f"{what} must be 'float' or 'half' (or popxl.float32 or popxl.float16), got {value!r}")


def _each(what: str, value: Any, check: Any) -> tuple[Any, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"{what} must be a list (one entry per convolution), got {value!r}")
    return tuple(check(f"{what}[{i}]", v) for i, v in enumerate(value))


def _flag(what: str, value: Any) -> bool:
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and int(value) in (0, 1)):
        return bool(value)
    raise ValueError(f"{what} must be a bool (or 0 or 1), got {value!r}")


def _reference(what: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise ValueError(f"{what} must be a popxl Tensor, got {value!r}")
    return value


def _ipu(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise ValueError(f"{what} must be a non-negative IPU index, got {value!r}")
    return int(value)


# How each argument is checked: the name popxl gives it -> a checker of one value.
_CHECKS: dict[str, Any] = {
    "available_memory_proportion": _proportion,
    "available_memory_proportions": lambda what, v: _each(what, v, _proportion),
    "partials_type": _partials,
    "partials_types": lambda what, v: _each(what, v, _partials),
    "enable_conv_dithering": lambda what, v: _each(what, v, _flag),
    "no_overlap": _flag,
    "infer_modified_regions": _flag,
    "tile_layout_reference": _reference,
    "source_ipu": _ipu,
    "fully_connected_pass": _flag,
}


def record(target: Op | Tensor, **knobs: Any) -> None:
    """Check the IPU-only arguments `knobs` and keep those not None with `target` (an op, or the tensor
    whose producer it is). They change nothing that runs here (see the module's docstring)."""
    op = target.producer if isinstance(target, Tensor) else target
    if op is None:
        raise ValueError(f"{target} has no producing op to record IPU-only arguments on")
    checked: dict[str, Any] = {}
    for name, value in knobs.items():
        if name not in _CHECKS:
            raise TypeError(f"{name!r} is not an IPU-only argument known to popxl.ipu_only")
        if value is not None:
            checked[name] = _CHECKS[name](f"{op.name}'s {name}", value)
    if checked:
        _RECORDED.setdefault(op, {}).update(checked)


def recorded(op: Op) -> Mapping[str, Any]:
    """The IPU-only arguments given when `op` was created (normalised: proportions as floats, partials
    types as 'float' or 'half', flags as bools), and none that were left at None."""
    return MappingProxyType(dict(_RECORDED.get(op, {})))


def available_memory_proportion(op: Op) -> float | None:
    """The available memory proportion recorded on `op` (a convolution's: its first convolution's), or None."""
    knobs = _RECORDED.get(op, {})
    if "available_memory_proportion" in knobs:
        return float(knobs["available_memory_proportion"])
    per_convolution = knobs.get("available_memory_proportions")
    return float(per_convolution[0]) if per_convolution else None
