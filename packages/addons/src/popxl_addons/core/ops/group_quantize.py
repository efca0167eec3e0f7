"""popxl-addons' 4-bit group quantisation (FlexGen, arXiv:2303.06865): the packing on the host and the
`GroupQuantizeDecompress` custom op, here the op kind `group_quantize_decompress`.

A float tensor is cut along one axis (moved last) into groups of `group_size` elements. Each group keeps
a float16 bias, its smallest value, and a float16 scale, `(max - min) / 15`, both rounded to float16
first; each element becomes the 4-bit id `round((x - bias) / scale)` (ties to even) in [0, 15]. Four
ids share one uint16 word, the first in the top nibble: `id0 << 12 | id1 << 8 | id2 << 4 | id3`. So a
float (rows, n_groups * group_size) tensor packs into uint16 (rows, n_groups, group_size / 4), with
scales and biases of shape (rows, n_groups, 1). Decompressing unpacks the ids in that order and computes
`id * scale + bias` in the scales' type; in float16 with one rounding for the product and one for the
sum, as NumPy does in popxl-addons' reference. popxl-addons' op takes float16 scales (its IPU vertex
unpacks to float16); float32 scales give a float32 result here (XLA may fuse its product and sum into
one rounding). The op has no gradient in popxl-addons, nor here.

Where popxl-addons' NumPy packer would give undefined ids (a group whose values are all equal, so that
its scale is 0, or one whose float16 limits round inside its values), the ids are 0 and clipped to
[0, 15] here; for every other input the words are popxl-addons' bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import popxl
from popxl.extension import Attrs, LoweringContext, OpDef, create_op, register

__all__ = ["group_quantize_compress_numpy", "group_quantize_decompress", "group_quantize_decompress_numpy"]

Array = np.ndarray[Any, Any]

IDS_PER_WORD = 4
BITS_PER_ID = 4
LEVELS = 2**BITS_PER_ID - 1
# The shift of each id in its word, first id first.
SHIFTS = (12, 8, 4, 0)
SCALE_DTYPES = (popxl.float16, popxl.float32)


def _decompressed_shape(t: popxl.TensorSpec, scale: popxl.TensorSpec, bias: popxl.TensorSpec) -> tuple[int, int]:
    if t.dtype is not popxl.uint16:
        raise TypeError(f"group_quantize_decompress: the packed tensor must be uint16, got {t.dtype}")
    if len(t.shape) != 3:
        raise NotImplementedError(
            f"group_quantize_decompress takes packed tensors of rank 3 (rows, groups, words), got shape {t.shape}"
        )
    expected = (*t.shape[:2], 1)
    for name, spec in (("group_scale", scale), ("group_bias", bias)):
        if spec.shape != expected:
            raise ValueError(f"group_quantize_decompress: {name} must have shape {expected}, got {spec.shape}")
        if spec.dtype not in SCALE_DTYPES:
            raise TypeError(f"group_quantize_decompress: {name} must be float16 or float32, got {spec.dtype}")
    if scale.dtype is not bias.dtype:
        raise TypeError(
            "group_quantize_decompress: group_scale and group_bias must share a type, "
            f"got {scale.dtype} and {bias.dtype}"
        )
    rows, groups, words = t.shape
    return rows, groups * words * IDS_PER_WORD


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    t, scale, bias = specs
    return [popxl.TensorSpec(_decompressed_shape(t, scale, bias), scale.dtype)]


def _lower(ctx: LoweringContext, attrs: Attrs, t: Any, scale: Any, bias: Any) -> list[Any]:
    rows, groups, words = t.shape
    ids = jnp.stack([(t >> s) & LEVELS for s in SHIFTS], axis=-1).reshape(rows, groups, words * IDS_PER_WORD)
    values = ids.astype(scale.dtype) * scale + bias
    return [values.reshape(rows, groups * words * IDS_PER_WORD)]


GROUP_QUANTIZE_DECOMPRESS = register(
    OpDef("group_quantize_decompress", _infer, _lower, output_names=("t_decompressed",))
)


def _to_last(dim: int, rank: int) -> list[int]:
    """The permutation that moves axis `dim` last."""
    perm = list(range(rank))
    perm.append(perm.pop(dim))
    return perm


def _from_last(dim: int, rank: int) -> list[int]:
    """The permutation that moves the last axis to `dim`."""
    perm = list(range(rank))
    perm.insert(dim, perm.pop(-1))
    return perm


def group_quantize_decompress(
    t: popxl.Tensor, group_scale: popxl.Tensor, group_bias: popxl.Tensor, dim: int = -1
) -> popxl.Tensor:
    """The float tensor that uint16 `t` (rows, groups, words) packs, 4-bit ids scaled by `group_scale` and
    shifted by `group_bias` (rows, groups[, 1]); its decompressed axis (last) is moved to `dim`."""
    if group_scale.rank == t.rank - 1:
        group_scale = group_scale.reshape((*group_scale.shape, 1))
    if group_bias.rank == t.rank - 1:
        group_bias = group_bias.reshape((*group_bias.shape, 1))
    out = create_op(GROUP_QUANTIZE_DECOMPRESS, [t, group_scale, group_bias], {})[0]
    if dim != -1:
        out = out.transpose(tuple(_from_last(dim, out.rank)))
    return out


def group_quantize_decompress_numpy(t: Array, group_scale: Array, group_bias: Array, dim: int = -1) -> Array:
    """NumPy's decompression of uint16 `t` (*dims, groups, words) with `group_scale` and `group_bias`
    (*dims, groups, 1): shape (*dims, groups * words * 4), its last axis then moved to `dim`."""
    t = np.asarray(t)
    if not np.issubdtype(t.dtype, np.integer) or t.ndim < 2:
        raise TypeError(f"t must be an array of packed words of rank 2 or more, got {t.dtype} of shape {t.shape}")
    *dims, groups, words = t.shape
    ids = np.stack([(t >> s) & LEVELS for s in SHIFTS], axis=-1).reshape(*dims, groups, words * IDS_PER_WORD)
    values = ids.astype(np.float16) * group_scale + group_bias
    values = values.reshape(*dims, groups * words * IDS_PER_WORD)
    if dim != -1:
        values = values.transpose(_from_last(dim, values.ndim))
    return values


def group_quantize_compress_numpy(t: Array, group_size: int, dim: int = -1) -> tuple[Array, Array, Array]:
    """`(packed, scale, bias)`: `t` quantised to 4 bits in groups of `group_size` along `dim`, as uint16
    words (*other dims, groups, group_size / 4) with float16 scales and biases (*other dims, groups, 1)."""
    t = np.asarray(t)
    if dim != -1:
        t = t.transpose(_to_last(dim, t.ndim))
    *dims, n = t.shape
    if group_size <= 0 or group_size % IDS_PER_WORD or n % group_size:
        raise ValueError(
            f"group_size must be a positive multiple of {IDS_PER_WORD} that divides the quantised axis ({n}), "
            f"got {group_size}"
        )
    if not np.isfinite(t).all():
        raise ValueError("Cannot compress t which contains non-finite values")
    grouped = t.reshape(*dims, n // group_size, group_size)
    # Limits beyond float16 become infinite here and are refused below.
    with np.errstate(over="ignore"):
        high = grouped.max(-1, keepdims=True).astype(np.float16)
        low = grouped.min(-1, keepdims=True).astype(np.float16)
        scale = (high - low) / np.float16(LEVELS)
    if not (np.isfinite(high).all() and np.isfinite(low).all() and np.isfinite(scale).all()):
        raise ValueError("Cannot compress t whose groups span more than float16's range")
    bias = low
    step = np.where(scale == 0, np.float16(1), scale)
    ids = np.where(scale == 0, 0, np.round((grouped - bias) / step))
    ids = np.clip(ids, 0, LEVELS).astype(np.uint16).reshape(*dims, n // group_size, group_size // IDS_PER_WORD, -1)
    packed = np.zeros(ids.shape[:-1], np.uint16)
    for k, s in enumerate(SHIFTS):
        packed |= ids[..., k] << np.uint16(s)
    return packed, scale, bias
