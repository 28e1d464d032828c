"""IdentityCodec: the no-compression baseline behind the same interface as IBPCodec."""
from __future__ import annotations

import hashlib
import math
from typing import Optional, Sequence

import torch

from ..layout.dtypes import as_row_bytes, check_rows_tensor, dtype_from_name, dtype_name, from_row_bytes, itemsize
from ..layout.errors import CodecMismatchError, CorruptPayloadError
from ..layout.format import FORMAT_VERSION, check_state_header, state_row_shape
from ..layout.tensor import CompressedTensor, Device, check_decode_out
from .base import StateBlob, check_compressed, check_cpu_device, check_payload


class IdentityCodec(StateBlob):
    """Rows sent as they are (fixed stride, no offsets): the baseline every codec is measured against."""

    name = "identity"
    #: no decode tables: a GPU decoder copies the rows as they are.
    tables = None

    def __init__(self, *, dtype: torch.dtype, row_shape: Sequence[int]):
        dtype_name(dtype)
        self.dtype = dtype
        self.row_shape = tuple(int(s) for s in row_shape)
        self.row_nbytes = math.prod(self.row_shape) * itemsize(dtype)
        self.word_bits = 8 * itemsize(dtype)
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
        """Wrap the rows' bytes as a CompressedTensor without copying them.

        The payload is a byte view of `tensor` (which must be contiguous): a caller who
        later writes to `tensor` changes the payload too. Identity rows have a fixed stride and no tail padding (docs/format.md).
        """
        check_rows_tensor(tensor)
        if tensor.dtype != self.dtype or tuple(tensor.shape[1:]) != self.row_shape:
            raise CodecMismatchError(f"tensor holds rows of {tensor.dtype} {tuple(tensor.shape[1:])}; "
                                     f"this codec takes {self.dtype} {self.row_shape}")
        if tensor.device.type != "cpu":
            raise ValueError(f"tensor is on {tensor.device}; encode runs on CPU tensors")
        flat = tensor.reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        payload = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
        return CompressedTensor(payload=payload, offsets=None, shape=tuple(tensor.shape),
                                dtype=self.dtype, codec=self.name, fingerprint=self.fingerprint)

    def check(self, ct: CompressedTensor, argname: str = "ct") -> None:
        """Raise unless `ct` came from this codec (fixed-stride rows, no offsets, a whole payload)."""
        check_compressed(ct, codec=self.name, fingerprint=self.fingerprint, argname=argname)
        check_payload(ct, argname)
        if ct.offsets is not None:
            raise CorruptPayloadError(f"{argname} has offsets; identity rows have a fixed stride "
                                      "(accepted: offsets=None)")
        if ct.payload.numel() < ct.raw_nbytes:
            raise CorruptPayloadError(f"{argname}.payload has {ct.payload.numel()} bytes, "
                                      f"needs {ct.raw_nbytes}")

    def decode(self, ct: CompressedTensor, *, device: Device = None, out: Optional[torch.Tensor] = None,
               out_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The rows as a CPU tensor (`device`: None or "cpu"; a view of the payload when no
        copy is needed), copied into `out` if given (row i to row out_rows[i] with `out_rows`, as the
        row codecs do). On a GPU: ibp_graph.gpu.decode(codec, ct)."""
        check_cpu_device(device)
        self.check(ct)
        if ct.device.type != "cpu" and device is None:
            raise ValueError(f"ct is on {ct.device}; a codec decodes on the CPU. Use "
                             "ibp_graph.gpu.decode(codec, ct), or pass device='cpu' to copy it back")
        payload = ct.payload[: ct.raw_nbytes].to("cpu")
        if payload.data_ptr() % itemsize(self.dtype):  # bytes at an unaligned address: no dtype view of them
            payload = payload.clone()
        result = from_row_bytes(payload, ct.shape, self.dtype)
        if out is None and out_rows is None:
            return result
        out, dest = check_decode_out(out, out_rows, ct.shape, self.dtype, torch.device("cpu"))
        if out_rows is None:
            return out.copy_(result)
        as_row_bytes(out)[dest] = as_row_bytes(result)  # bytes: NaN payloads, -0.0 kept
        return out

    def state_dict(self) -> dict:
        """The dtype and row shape, with a format version."""
        return {"format_version": FORMAT_VERSION, "codec": self.name,
                "dtype": dtype_name(self.dtype), "row_shape": list(self.row_shape)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "IdentityCodec":
        """Rebuild from state_dict()."""
        check_state_header(state, cls.name)
        try:
            return cls(dtype=dtype_from_name(state["dtype"]), row_shape=state_row_shape(state))
        except KeyError as e:
            raise CorruptPayloadError(f"state_dict lacks the key {e.args[0]!r}") from None
