"""What a codec is, and the compressed tensor every codec produces."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np
import torch

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

#: payload bytes past the last row (at least), so decoders may read two whole 64-bit words past any bit.
PAYLOAD_TAIL = 16

Device = Union[str, torch.device, None]


class CodecError(ValueError):
    """Base class of the errors a codec raises for input it cannot accept."""


class CorruptPayloadError(CodecError):
    """A serialized blob or a compressed payload is damaged, truncated or of another format."""


class CodecMismatchError(CodecError):
    """A compressed tensor or state was made by a different codec (or codec state)."""


def dtype_name(dtype: torch.dtype) -> str:
    """The serialized name of a supported dtype, or a ValueError naming what is accepted."""
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
    except KeyError:
        raise CorruptPayloadError(
            f"dtype name {name!r} is unknown; accepted: {', '.join(SUPPORTED_DTYPES)}"
        ) from None


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of a torch dtype."""
    return torch.empty((), dtype=dtype).element_size()


def check_rows_tensor(tensor: torch.Tensor, argname: str = "tensor") -> None:
    """Validate a tensor whose first dimension indexes rows: supported dtype, >= 1-d, contiguous, CPU or CUDA."""
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


def random_rows(tensor: torch.Tensor, limit: int, seed: int = 0) -> torch.Tensor:
    """At most `limit` distinct rows of `tensor`, chosen at random with `seed`, in row order.

    O(limit) time and memory whatever the table size (numpy draws distinct indices without
    permuting all rows: a full permutation of ogbn-papers100M's 111 M rows would take
    seconds and 0.9 GB just to pick a sample). The whole tensor when it has no more rows.
    """
    n = tensor.shape[0]
    if n <= limit:
        return tensor
    pick = np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))
    return tensor.index_select(0, torch.from_numpy(pick))


def from_row_bytes(buf: torch.Tensor, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret a flat uint8 tensor as `dtype` with `shape` (no copy)."""
    if dtype == torch.bool:
        return buf.view(torch.bool).reshape(shape)
    if buf.numel() == 0:
        return torch.empty(shape, dtype=dtype, device=buf.device)
    return buf.view(dtype).reshape(shape)


@dataclass(frozen=True)
class CompressedTensor:
    """Compressed rows of one tensor: payload, per-row offsets, and what decoding needs to check.

    Layout (docs/format.md): row ``i`` is ``payload[offsets[i]:offsets[i+1]]``; a row
    whose length equals ``row_nbytes`` is stored raw. ``offsets`` is ``None`` for the
    fixed-stride layout of the identity codec.
    """

    payload: torch.Tensor
    offsets: Optional[torch.Tensor]
    shape: tuple[int, ...]
    dtype: torch.dtype
    codec: str
    fingerprint: int
    meta: dict = field(default_factory=dict, compare=False)

    # ---- sizes -----------------------------------------------------------
    @property
    def n_rows(self) -> int:
        """Number of rows (the first dimension of the decoded tensor)."""
        return self.shape[0]

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Trailing shape of one row."""
        return tuple(self.shape[1:])

    @property
    def row_nbytes(self) -> int:
        """Bytes of one decoded row."""
        return math.prod(self.shape[1:]) * itemsize(self.dtype)

    @property
    def raw_nbytes(self) -> int:
        """Bytes of the decoded tensor."""
        return self.n_rows * self.row_nbytes

    @property
    def nbytes(self) -> int:
        """Bytes that cross PCIe: payload plus per-row offsets (not the codec state)."""
        n = self.payload.numel()
        if self.offsets is not None:
            n += self.offsets.numel() * self.offsets.element_size()
        return n

    @property
    def fraction(self) -> float:
        """nbytes / raw_nbytes (1.0 for an empty tensor)."""
        return self.nbytes / self.raw_nbytes if self.raw_nbytes else 1.0

    @property
    def device(self) -> torch.device:
        """Where the payload lives."""
        return self.payload.device

    # ---- movement --------------------------------------------------------
    def _map(self, fn) -> "CompressedTensor":
        return replace(
            self,
            payload=fn(self.payload),
            offsets=None if self.offsets is None else fn(self.offsets),
        )

    def to(self, device: Device, non_blocking: bool = False) -> "CompressedTensor":
        """Move payload and offsets to `device` (asynchronous from pinned memory with non_blocking=True)."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "CompressedTensor":
        """Copy payload and offsets into page-locked host memory."""
        return self._map(lambda t: t.pin_memory())

    def is_pinned(self) -> bool:
        """Whether payload (and offsets) live in page-locked host memory."""
        return self.payload.is_pinned() and (self.offsets is None or self.offsets.is_pinned())

    def share_memory_(self) -> "CompressedTensor":
        """Move payload and offsets into shared memory in place (for DataLoader workers)."""
        self.payload.share_memory_()
        if self.offsets is not None:
            self.offsets.share_memory_()
        return self

    def record_stream(self, stream: "torch.cuda.Stream") -> None:
        """Mark the CUDA buffers as used by `stream` (see torch.Tensor.record_stream)."""
        self.payload.record_stream(stream)
        if self.offsets is not None:
            self.offsets.record_stream(stream)

    # ---- rows ------------------------------------------------------------
    def row_lengths(self) -> torch.Tensor:
        """Stored bytes of every row (int64); a row is raw when its length equals row_nbytes."""
        if self.offsets is None:
            return torch.full((self.n_rows,), self.row_nbytes, dtype=torch.int64)
        o = self.offsets.to(torch.int64)
        return o[1:] - o[:-1]

    def index_select(self, rows: torch.Tensor) -> "CompressedTensor":
        """Gather compressed rows (without decoding) into a new CompressedTensor, in `rows` order."""
        from .bitpack import gather_rows  # local: numba kernels load lazily

        if self.device.type != "cpu":
            raise ValueError(
                f"index_select runs on CPU CompressedTensors; this one is on {self.device}. "
                "Use codec.fetch for GPU-side gathers."
            )
        idx = _check_index(rows, self.n_rows, "rows")
        shape = (idx.shape[0],) + self.row_shape
        if self.offsets is None:
            src = self.payload[: self.raw_nbytes].view(self.n_rows, self.row_nbytes)
            payload = src.index_select(0, torch.from_numpy(idx)).reshape(-1) if self.row_nbytes else \
                torch.empty(0, dtype=torch.uint8)
            return replace(self, payload=payload.contiguous(), shape=shape)
        payload, offsets = gather_rows(self.payload.numpy(), self.offsets.numpy(), idx)
        return replace(self, payload=torch.from_numpy(payload), offsets=torch.from_numpy(offsets),
                       shape=shape)

    # ---- serialization ---------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialize (format version, metadata, payload, offsets, checksum) to bytes."""
        from .format import compressed_to_bytes

        return compressed_to_bytes(self)

    @staticmethod
    def from_bytes(blob: bytes) -> "CompressedTensor":
        """Parse bytes made by to_bytes; raise CorruptPayloadError if damaged or truncated."""
        from .format import compressed_from_bytes

        return compressed_from_bytes(blob)

    def __repr__(self) -> str:
        return (f"CompressedTensor(codec={self.codec!r}, shape={self.shape}, dtype={self.dtype}, "
                f"nbytes={self.nbytes}, raw_nbytes={self.raw_nbytes}, device={self.device})")


def resolve_device(device: Device) -> torch.device:
    """`device` as a torch.device with an index for CUDA: "cuda" is the current CUDA device.

    Tensors report "cuda:N", and torch.device("cuda") != torch.device("cuda:0"), so a
    target given as "cuda" must be resolved before it is compared with a tensor's device.
    """
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def check_out(out: Optional[torch.Tensor], shape: Sequence[int], dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
    """Validate a caller's output buffer for a decoded tensor, or allocate one."""
    if out is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype={out.dtype}; accepted: {dtype} (the decoded dtype)")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}; accepted: {tuple(shape)}")
    device = resolve_device(device)
    if out.device != device:
        raise ValueError(f"out is on {out.device}; accepted: a tensor on {device}")
    if not out.is_contiguous():
        raise ValueError(f"out is not contiguous (strides {tuple(out.stride())}); accepted: a "
                         "contiguous tensor")
    return out


def _check_index(rows, n_rows: int, argname: str) -> np.ndarray:
    """Validate a 1-d integer row index against n_rows; return it as int64 numpy."""
    if isinstance(rows, np.ndarray):
        rows = torch.from_numpy(rows)
    if not isinstance(rows, torch.Tensor):
        raise TypeError(f"{argname} must be a 1-d integer tensor, got {type(rows).__name__}")
    if rows.dim() != 1 or rows.dtype.is_floating_point or rows.dtype == torch.bool or rows.is_complex():
        raise TypeError(f"{argname} must be a 1-d integer tensor, got dtype={rows.dtype} "
                        f"shape={tuple(rows.shape)}")
    idx = rows.detach().to("cpu", torch.int64).numpy()
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n_rows:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{argname} contains {bad}, outside the valid range [0, {n_rows})")
    return np.ascontiguousarray(idx)


def check_compressed(ct: "CompressedTensor", *, codec: str, fingerprint: int,
                     argname: str = "ct") -> None:
    """Raise CodecMismatchError unless `ct` was made by this codec with this state."""
    if not isinstance(ct, CompressedTensor):
        raise TypeError(f"{argname} must be a CompressedTensor, got {type(ct).__name__}")
    if ct.codec != codec or ct.fingerprint != fingerprint:
        raise CodecMismatchError(
            f"{argname} was encoded by codec {ct.codec!r} with state fingerprint "
            f"{ct.fingerprint:#x}; this is codec {codec!r} with fingerprint {fingerprint:#x}. "
            "Decode it with the codec that encoded it (its state_dict travels with the data)."
        )


def check_row_compressed(codec, ct: "CompressedTensor", argname: str = "ct") -> None:
    """The check of a row codec with offsets (IBP, EBP): same codec and state, rows, offset count."""
    check_compressed(ct, codec=codec.name, fingerprint=codec.fingerprint, argname=argname)
    if ct.dtype != codec.dtype or ct.row_shape != codec.row_shape:
        raise CodecMismatchError(f"{argname} holds rows of {ct.dtype} {ct.row_shape}; this "
                                 f"codec decodes {codec.dtype} {codec.row_shape}")
    if ct.offsets is None or ct.offsets.numel() != ct.n_rows + 1:
        raise CorruptPayloadError(f"{argname}.offsets must have n_rows + 1 = {ct.n_rows + 1} "
                                  f"entries, has {None if ct.offsets is None else ct.offsets.numel()}")


def check_offsets(ct: "CompressedTensor") -> None:
    """Refuse CPU offsets that would read outside the payload or are not non-decreasing."""
    o = ct.offsets.numpy()
    if o[0] != 0:
        raise CorruptPayloadError(f"ct.offsets[0] is {int(o[0])}, must be 0")
    d = np.diff(o.astype(np.int64))
    if (d < 0).any() or (d > ct.row_nbytes).any():
        i = int(np.flatnonzero((d < 0) | (d > ct.row_nbytes))[0])
        raise CorruptPayloadError(f"ct row {i} has length {int(d[i])}; lengths must lie in "
                                  f"[0, row_nbytes={ct.row_nbytes}]")
    need = int(o[-1]) + PAYLOAD_TAIL
    if ct.payload.numel() < need:
        raise CorruptPayloadError(f"ct.payload has {ct.payload.numel()} bytes; its offsets need "
                                  f"at least {need} (rows plus {PAYLOAD_TAIL} bytes of tail padding)")


@runtime_checkable
class Codec(Protocol):
    """A row codec: fitted state that encodes row tensors to CompressedTensors and back."""

    name: str
    fingerprint: int
    dtype: torch.dtype
    row_shape: tuple[int, ...]

    def encode(self, tensor: torch.Tensor) -> CompressedTensor:
        """Compress a tensor whose first dimension indexes rows."""
        ...

    def decode(self, ct: CompressedTensor, *, device: Device = None,
               out: Optional[torch.Tensor] = None, check=True) -> torch.Tensor:
        """Rebuild the exact tensor (same bits) from a CompressedTensor; `check` says when a
        GPU decode reports corrupt rows (True: before returning; a cuda.decode.PendingChecks:
        when its raise_first() is called; False: never)."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to rebuild the codec, with a format version."""
        ...

    @property
    def state_nbytes(self) -> int:
        """Bytes of codec state a decoder keeps (sent once, not per batch)."""
        ...
