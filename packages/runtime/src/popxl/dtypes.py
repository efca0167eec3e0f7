"""popxl data types and their NumPy equivalents."""

from __future__ import annotations

import builtins
import importlib
from typing import Any

import ml_dtypes
import numpy as np


class dtype:
    """A popxl element type, convertible to and from NumPy.

    popxl's 64-bit and complex types exist for host data and for popxl's API;
    tensors cannot have them (`on_device` is False): XLA here runs without
    64-bit types. popxl's float8 types are Graphcore's FP8 formats, which XLA
    has as F8E4M3FNUZ and F8E5M2FNUZ: `as_numpy()` gives those (ml_dtypes)
    types, while host data, as in popxl, holds their bytes in the one-field
    structured types `np_dtype_float8_143` and `np_dtype_float8_152`.
    """

    def __init__(
        self,
        name: str,
        np_type: Any,
        is_floating_point: builtins.bool,
        is_int: builtins.bool,
        on_device: builtins.bool = True,
    ) -> None:
        self.name = name
        self._np: np.dtype[Any] = np.dtype(np_type)
        self.is_floating_point = is_floating_point
        self.is_int = is_int
        self.on_device = on_device

    def as_numpy(self) -> np.dtype[Any]:
        """The NumPy dtype of this type."""
        return self._np

    @property
    def is_signed(self) -> builtins.bool:
        """Whether the type holds negative values."""
        return self.is_floating_point or self.name.startswith("int")

    @property
    def is_complex(self) -> builtins.bool:
        """Whether the type is complex (never, here)."""
        return False

    @classmethod
    def as_dtype(cls, type_value: Any) -> dtype:
        """The popxl dtype of a popxl, NumPy or PyTorch dtype, a name, a Python type or an array, as popxl maps
        them: 64-bit types map to popxl's 64-bit types (which hold host data only)."""
        if isinstance(type_value, str | np.dtype) and str(type_value) in _BY_NAME:
            return _BY_NAME[str(type_value)]
        if not isinstance(type_value, dtype) and type(type_value).__module__ != "torch":
            npd = _numpy_dtype(type_value)
            wide = _HOST_ONLY_BY_NUMPY.get(npd) if npd is not None else None
            if wide is not None:
                return wide
        return as_dtype(type_value)

    @classmethod
    def from_name(cls, name: str) -> dtype:
        """The popxl dtype called `name` ('float16', 'half', 'float32', 'float', ...)."""
        found = _BY_NAME.get(name)
        if found is None:
            raise ValueError(f"There is not a `popxl.dtype` that has a name: {name}.")
        return found

    def as_torch(self) -> Any:
        """The PyTorch dtype of this type (PyTorch must be installed)."""
        # PyTorch is optional: imported by name, only when asked for.
        return getattr(importlib.import_module("torch"), self.name)

    @property
    def itemsize(self) -> int:
        """Size of one element in bytes."""
        return int(self._np.itemsize)

    def __repr__(self) -> str:
        return f"popxl.{self.name}"

    def __reduce__(self) -> str:
        return self.name


bool_ = dtype("bool", np.bool_, False, False)
int8 = dtype("int8", np.int8, False, True)
uint8 = dtype("uint8", np.uint8, False, True)
int16 = dtype("int16", np.int16, False, True)
uint16 = dtype("uint16", np.uint16, False, True)
int32 = dtype("int32", np.int32, False, True)
uint32 = dtype("uint32", np.uint32, False, True)
float16 = dtype("float16", np.float16, True, False)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, True, False)
float32 = dtype("float32", np.float32, True, False)

int64 = dtype("int64", np.int64, False, True, on_device=False)
uint64 = dtype("uint64", np.uint64, False, True, on_device=False)
float64 = dtype("float64", np.float64, True, False, on_device=False)
complex64 = dtype("complex64", np.complex64, False, False, on_device=False)
complex128 = dtype("complex128", np.complex128, False, False, on_device=False)
# Graphcore's FP8: 1 sign, 4 exponent (bias 8), 3 mantissa bits, or 1-5-2 (bias 16); no infinities, one NaN.
float8_143 = dtype("float8_143", ml_dtypes.float8_e4m3fnuz, True, False)
float8_152 = dtype("float8_152", ml_dtypes.float8_e5m2fnuz, True, False)
# popxl holds float8 host data as one-byte structured types of these names.
np_dtype_float8_143 = np.dtype([("float8_143", "u1")])
np_dtype_float8_152 = np.dtype([("float8_152", "u1")])
FLOAT8_HOST = {np_dtype_float8_143: float8_143, np_dtype_float8_152: float8_152}

_ALL = (bool_, int8, uint8, int16, uint16, int32, uint32, float16, bfloat16, float32, float8_143, float8_152)
_HOST_ONLY = (int64, uint64, float64, complex64, complex128)
_HOST_ONLY_BY_NUMPY = {d.as_numpy(): d for d in _HOST_ONLY}
_BY_NAME: dict[str, dtype] = {
    **{d.name: d for d in (*_ALL, *_HOST_ONLY)},
    "half": float16,
    "float": float32,
    "double": float64,
}
# popxl's aliases; `bool` and `float` shadow the builtins, so this module names those through `builtins`.
bool = bool_
half = float16
float = float32
double = float64
_BY_NUMPY: dict[np.dtype[Any], dtype] = {**{d.as_numpy(): d for d in _ALL}, **FLOAT8_HOST}
# 64-bit host data is narrowed, as popxl does for constants and session inputs.
_DOWNCAST: dict[np.dtype[Any], dtype] = {
    np.dtype(np.int64): int32,
    np.dtype(np.uint64): uint32,
    np.dtype(np.float64): float32,
}


def _numpy_dtype(x: Any) -> np.dtype[Any] | None:
    """The NumPy dtype of a NumPy type or dtype, an array or a scalar, if it has one."""
    if isinstance(x, np.ndarray | np.generic):
        found: np.dtype[Any] = x.dtype
        return found
    try:
        converted: np.dtype[Any] = np.dtype(x)
    except TypeError:
        return None
    return converted


def as_dtype(x: Any) -> dtype:
    """The popxl dtype of a popxl dtype, NumPy dtype, NumPy array or Python scalar."""
    if isinstance(x, dtype):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    if type(x).__module__ == "torch":
        # A PyTorch dtype ("torch.float32") or tensor, matched by name.
        name = str(getattr(x, "dtype", x)).removeprefix("torch.")
        if name in _BY_NAME:
            return _BY_NAME[name]
        raise TypeError(f"PyTorch dtype {name} has no popxl equivalent")
    if isinstance(x, np.ndarray | np.generic):
        npd = x.dtype
    elif isinstance(x, builtins.bool):
        npd = np.dtype(np.bool_)
    elif isinstance(x, builtins.int):
        npd = np.dtype(np.int64)
    elif isinstance(x, builtins.float):
        npd = np.dtype(np.float64)
    else:
        try:
            npd = np.dtype(x)
        except TypeError as e:
            raise TypeError(f"{x!r} is not a popxl dtype, NumPy dtype or array") from e
    if npd in _BY_NUMPY:
        return _BY_NUMPY[npd]
    if npd in _DOWNCAST:
        # XLA here runs without 64-bit types, so 64-bit data always narrows.
        return _DOWNCAST[npd]
    raise TypeError(f"NumPy dtype {npd} has no popxl equivalent")


def device_view(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Host data as a device holds it: float8 bytes in popxl's structured types become XLA's float8 types."""
    if data.dtype in FLOAT8_HOST:
        return data.view(np.uint8).view(FLOAT8_HOST[data.dtype].as_numpy())
    return data


def host_view(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Device data as popxl's host holds it: XLA's float8 types as bytes in popxl's structured types."""
    for host, popxl_type in FLOAT8_HOST.items():
        if data.dtype == popxl_type.as_numpy():
            return data.view(np.uint8).view(host)
    return data


def host_numpy(dt: dtype) -> np.dtype[Any]:
    """The NumPy type of host data for tensors of `dt` (popxl's structured bytes for float8)."""
    for host, popxl_type in FLOAT8_HOST.items():
        if popxl_type is dt:
            return host
    return dt.as_numpy()
