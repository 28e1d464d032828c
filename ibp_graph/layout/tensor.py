"""CompressedTensor: the rows of one tensor as every codec stores them, and the checks of its buffers."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch

from .buffers import empty_host
from .dtypes import dtype_from_name, dtype_name, itemsize
from .errors import CorruptPayloadError
from .format import KIND_TENSOR, pack_blob, unpack_blob
from .rows import NO_DEST, OFFSET_DTYPES, check_offsets_array, check_out_rows, check_row_index, gather_condensed_rows, gather_fixed_rows

Device = Union[str, torch.device, None]


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

    def index_select(self, rows: torch.Tensor,
                     empty: Optional[Callable[..., torch.Tensor]] = None) -> "CompressedTensor":
        """Gather compressed rows (without decoding) into a new CompressedTensor, in `rows` order.
        The payload is written into ``empty(shape, torch.uint8)`` when given (e.g. a worker's
        shared-memory slot: pipeline.transport.OutputBuffers.empty), else into new memory
        (buffers.empty_host: huge pages for a large batch)."""
        if self.device.type != "cpu":
            raise ValueError(
                f"index_select runs on CPU CompressedTensors; this one is on {self.device}. "
                "Use ibp_graph.gpu.fetch for GPU-side gathers."
            )
        idx = check_row_index(rows, self.n_rows, "rows")
        shape = (idx.shape[0],) + self.row_shape
        if self.offsets is None:
            if self.payload.numel() < self.raw_nbytes:
                raise CorruptPayloadError(f"payload has {self.payload.numel()} bytes; "
                                          f"{self.n_rows} fixed-stride rows need {self.raw_nbytes}")
            src = self.payload[: self.raw_nbytes].view(self.n_rows, self.row_nbytes)
            payload = (empty or empty_host)((idx.shape[0], self.row_nbytes), dtype=torch.uint8)
            gather_fixed_rows(src.numpy(), idx, payload.numpy(), "rows")
            return replace(self, payload=payload.reshape(-1), shape=shape)
        if self.offsets.numel() != self.n_rows + 1:
            raise CorruptPayloadError(f"offsets has {self.offsets.numel()} entries; "
                                      f"{self.n_rows} rows need {self.n_rows + 1}")
        made = []

        def alloc(nbytes: int) -> np.ndarray:
            made.append((empty or empty_host)((nbytes,), dtype=torch.uint8))
            return made[0].numpy()

        _, offsets = gather_condensed_rows(self.payload.numpy(), self.offsets.numpy(), idx, alloc)
        return replace(self, payload=made[0], offsets=torch.from_numpy(offsets), shape=shape)

    # ---- serialization ---------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialize (format version, metadata, payload, offsets, checksum) to bytes."""
        payload = self.payload.detach().cpu().numpy()
        sections = [payload] + ([] if self.offsets is None else [self.offsets.detach().cpu().numpy()])
        meta = {"shape": list(self.shape), "dtype": dtype_name(self.dtype), "codec": self.codec,
                "fingerprint": self.fingerprint, "has_offsets": self.offsets is not None}
        return pack_blob(KIND_TENSOR, meta, sections)

    @staticmethod
    def from_bytes(blob: bytes) -> "CompressedTensor":
        """Parse bytes made by to_bytes; CorruptPayloadError naming what is wrong if the blob is
        damaged, truncated or inconsistent (shape, dtypes, offsets out of order or range)."""
        meta, sections = unpack_blob(blob, KIND_TENSOR, "CompressedTensor")
        try:
            shape, has_offsets = meta["shape"], meta["has_offsets"]
            codec, fingerprint = meta["codec"], meta["fingerprint"]
            dtype = dtype_from_name(meta["dtype"])
        except KeyError as e:
            raise CorruptPayloadError(f"CompressedTensor blob lacks {e}") from None
        if not isinstance(shape, list) or not shape or \
                any(type(s) is not int or s < 0 for s in shape):
            raise CorruptPayloadError(f"CompressedTensor blob has shape {shape!r}; accepted: a "
                                      "non-empty list of integers >= 0")
        if type(fingerprint) is not int or not isinstance(codec, str) or \
                not isinstance(has_offsets, bool):
            raise CorruptPayloadError(f"CompressedTensor blob has codec={codec!r}, fingerprint="
                                      f"{fingerprint!r}, has_offsets={has_offsets!r}; accepted: a "
                                      "string, an integer and a boolean")
        if len(sections) != 1 + has_offsets:
            raise CorruptPayloadError(f"CompressedTensor blob has {len(sections)} sections; "
                                      f"has_offsets={has_offsets} needs {1 + has_offsets}")
        payload = sections[0]
        if payload.dtype != np.uint8:
            raise CorruptPayloadError(f"CompressedTensor blob has a payload of dtype {payload.dtype}; "
                                      "accepted: uint8")
        ct = CompressedTensor(payload=torch.from_numpy(payload), offsets=None, shape=tuple(shape),
                              dtype=dtype, codec=codec, fingerprint=fingerprint)
        if not has_offsets:
            if payload.shape[0] < ct.raw_nbytes:
                raise CorruptPayloadError(f"CompressedTensor blob has {payload.shape[0]} payload bytes; "
                                          f"shape {tuple(shape)} of {dtype} needs {ct.raw_nbytes}")
            return ct
        offsets = sections[1]
        if offsets.dtype not in OFFSET_DTYPES or offsets.shape[0] != ct.n_rows + 1:
            raise CorruptPayloadError(f"CompressedTensor blob has {offsets.shape[0]} offsets of dtype "
                                      f"{offsets.dtype} for {ct.n_rows} rows; accepted: n_rows + 1 = "
                                      f"{ct.n_rows + 1} of int32 or int64")
        check_offsets_array(offsets, payload.shape[0], ct.row_nbytes, "offsets")
        return replace(ct, offsets=torch.from_numpy(offsets))

    def __repr__(self) -> str:
        return (f"CompressedTensor(codec={self.codec!r}, shape={self.shape}, dtype={self.dtype}, "
                f"nbytes={self.nbytes}, raw_nbytes={self.raw_nbytes}, device={self.device})")


def check_offsets(ct: CompressedTensor, argname: str = "ct") -> None:
    """Refuse a CPU CompressedTensor whose offsets would read outside its payload (see
    rows.check_offsets_array)."""
    check_offsets_array(ct.offsets.numpy(), ct.payload.numel(), ct.row_nbytes, f"{argname}.offsets")


def device_with_index(device: Device) -> torch.device:
    """`device` as a torch.device with an index for CUDA: "cuda" is the current CUDA device.

    Tensors report "cuda:N", and torch.device("cuda") != torch.device("cuda:0"), so a
    target given as "cuda" must be resolved before it is compared with a tensor's device.
    """
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def check_decode_out(out: Optional[torch.Tensor], out_rows, shape: Sequence[int], dtype: torch.dtype,
                     device: Device) -> tuple[torch.Tensor, np.ndarray]:
    """A decode's output buffer (check_out) and where its rows go: without `out_rows`, `out` of `shape` (or
    a new one) and NO_DEST; with it, the caller's `out` of any number of rows of shape[1:] and out_rows
    checked (check_out_rows) as the row of `out` each decoded row goes to (the others are left as they are)."""
    if out_rows is None:
        return check_out(out, shape, dtype, device), NO_DEST
    if not isinstance(out, torch.Tensor) or out.dim() != len(shape):
        raise ValueError(f"out_rows needs out=, a tensor of rows of shape {tuple(shape[1:])} for them to go into; "
                         f"got {type(out).__name__}" + (f" of shape {tuple(out.shape)}" if out is not None else ""))
    out = check_out(out, (out.shape[0],) + tuple(shape[1:]), dtype, device)
    return out, check_out_rows(out_rows, shape[0], out.shape[0])


def check_out(out: Optional[torch.Tensor], shape: Sequence[int], dtype: torch.dtype,
              device: Device) -> torch.Tensor:
    """Validate a caller's output buffer for a decoded tensor on `device`, or allocate one (on the
    CPU with buffers.empty_host: huge pages for a large one)."""
    if out is None:
        if torch.device(device if device is not None else "cpu").type == "cpu":
            return empty_host(tuple(shape), dtype)
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype={out.dtype}; accepted: {dtype} (the decoded dtype)")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}; accepted: {tuple(shape)}")
    device = device_with_index(device)
    if out.device != device:
        raise ValueError(f"out is on {out.device}; accepted: a tensor on {device}")
    if not out.is_contiguous():
        raise ValueError(f"out is not contiguous (strides {tuple(out.stride())}); accepted: a "
                         "contiguous tensor")
    return out
