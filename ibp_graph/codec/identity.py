"""IdentityCodec: the no-compression baseline behind the same interface as IBPCodec."""
from __future__ import annotations

import hashlib
import math
from typing import Optional, Sequence

import torch

from .base import (
    CodecMismatchError,
    CompressedTensor,
    CorruptPayloadError,
    Device,
    check_compressed,
    check_out,
    check_rows_tensor,
    dtype_from_name,
    dtype_name,
    from_row_bytes,
    itemsize,
)


class IdentityCodec:
    """Rows sent as they are (fixed stride, no offsets): the baseline every codec is measured against."""

    name = "identity"

    def __init__(self, *, dtype: torch.dtype, row_shape: Sequence[int]):
        dtype_name(dtype)
        self.dtype = dtype
        self.row_shape = tuple(int(s) for s in row_shape)
        self.row_nbytes = math.prod(self.row_shape) * itemsize(dtype)
        digest = hashlib.blake2b(f"identity {dtype_name(dtype)} {self.row_shape}".encode(),
                                 digest_size=8).digest()
        self.fingerprint = int.from_bytes(digest, "little") & (2**63 - 1)

    @classmethod
    def fit(cls, tensor: torch.Tensor, **_ignored) -> "IdentityCodec":
        """An identity codec for rows like those of `tensor` (nothing to learn)."""
        check_rows_tensor(tensor)
        return cls(dtype=tensor.dtype, row_shape=tensor.shape[1:])

    @property
    def state_nbytes(self) -> int:
        """No state."""
        return 0

    def __repr__(self) -> str:
        return f"IdentityCodec(dtype={self.dtype}, row_shape={self.row_shape})"

    def encode(self, tensor: torch.Tensor) -> CompressedTensor:
        """Wrap the rows' bytes (one copy into a fresh buffer) as a CompressedTensor."""
        check_rows_tensor(tensor)
        if tensor.dtype != self.dtype or tuple(tensor.shape[1:]) != self.row_shape:
            raise CodecMismatchError(f"tensor holds rows of {tensor.dtype} {tuple(tensor.shape[1:])}; "
                                     f"this codec takes {self.dtype} {self.row_shape}")
        if tensor.device.type != "cpu":
            raise ValueError(f"tensor is on {tensor.device}; encode runs on CPU tensors")
        flat = tensor.reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        payload = flat.view(torch.uint8).clone() if flat.numel() else torch.empty(0, dtype=torch.uint8)
        return CompressedTensor(payload=payload, offsets=None, shape=tuple(tensor.shape),
                                dtype=self.dtype, codec=self.name, fingerprint=self.fingerprint)

    def check(self, ct: CompressedTensor, argname: str = "ct") -> None:
        """Raise unless `ct` came from this codec."""
        check_compressed(ct, codec=self.name, fingerprint=self.fingerprint, argname=argname)
        if ct.payload.numel() < ct.raw_nbytes:
            raise CorruptPayloadError(f"{argname}.payload has {ct.payload.numel()} bytes, "
                                      f"needs {ct.raw_nbytes}")

    def decode(self, ct: CompressedTensor, *, device: Device = None,
               out: Optional[torch.Tensor] = None, check=True) -> torch.Tensor:
        """The rows as a tensor on `device` (a view of the payload when no copy is needed).

        `check` is accepted for the codecs' common signature: raw rows have nothing to check.
        """
        self.check(ct)
        target = torch.device(device) if device is not None else ct.device
        payload = ct.payload[: ct.raw_nbytes]
        if payload.device != target:
            payload = payload.to(target, non_blocking=ct.is_pinned())
        result = from_row_bytes(payload, ct.shape, self.dtype)
        if out is None:
            return result
        check_out(out, ct.shape, self.dtype, target).copy_(result)
        return out

    def state_dict(self) -> dict:
        """The dtype and row shape, with a format version."""
        from .format import FORMAT_VERSION

        return {"format_version": FORMAT_VERSION, "codec": self.name,
                "dtype": dtype_name(self.dtype), "row_shape": list(self.row_shape)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "IdentityCodec":
        """Rebuild from state_dict()."""
        from .format import check_state_header

        check_state_header(state, cls.name)
        return cls(dtype=dtype_from_name(state["dtype"]), row_shape=state["row_shape"])
