"""Row tensors as bytes: the supported dtypes, their serialized names, and byte views of rows."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from .errors import CorruptPayloadError

#: dtypes every codec accepts, by name (the name is what serialized forms store).
SUPPORTED_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_DTYPE_NAMES = {v: k for k, v in SUPPORTED_DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """The serialized name of a supported dtype, or a TypeError naming what is accepted."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(
            f"dtype={dtype} is not supported; accepted: {', '.join(SUPPORTED_DTYPES)}"
        ) from None


def dtype_from_name(name: str) -> torch.dtype:
    """The torch dtype for a serialized dtype name."""
    try:
        return SUPPORTED_DTYPES[name]
    except (KeyError, TypeError):
        raise CorruptPayloadError(
            f"dtype name {name!r} is unknown; accepted: {', '.join(SUPPORTED_DTYPES)}"
        ) from None


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of a torch dtype."""
    return torch.empty((), dtype=dtype).element_size()


def check_rows_tensor(tensor: torch.Tensor, argname: str = "tensor") -> None:
    """Validate a tensor whose first dimension indexes rows: supported dtype, >= 1-d, contiguous."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{argname} must be a torch.Tensor, got {type(tensor).__name__}")
    dtype_name(tensor.dtype)
    if tensor.dim() == 0:
        raise ValueError(
            f"{argname} is 0-d (shape ()); a codec needs at least one dimension whose "
            "first axis indexes rows, e.g. tensor.reshape(1) or tensor.reshape(-1, 1)"
        )
    if not tensor.is_contiguous():
        raise ValueError(
            f"{argname} is not contiguous (shape {tuple(tensor.shape)}, strides "
            f"{tuple(tensor.stride())}); pass tensor.contiguous() — nothing is copied silently"
        )


def as_row_bytes(tensor: torch.Tensor) -> np.ndarray:
    """A (rows, row_nbytes) uint8 numpy view of a contiguous CPU tensor, without copying."""
    n = tensor.shape[0]
    flat = tensor.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    b = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
    row_nbytes = math.prod(tensor.shape[1:]) * tensor.element_size()
    return b.numpy().reshape(n, row_nbytes)


def from_row_bytes(buf: torch.Tensor, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret a flat uint8 tensor as `dtype` with `shape` (no copy)."""
    if dtype == torch.bool:
        return buf.view(torch.bool).reshape(shape)
    if buf.numel() == 0:
        return torch.empty(shape, dtype=dtype, device=buf.device)
    return buf.view(dtype).reshape(shape)
