"""What a kernel reads and writes: checks of the tensors given, where the kernel runs, and
the addresses it reads them through (GPU memory, or pinned host memory: zero-copy).

Every check raises TypeError or ValueError naming the argument, its value and what is
accepted, before any GPU work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

# the row-layout rules every decoder shares
from ..layout.dtypes import from_row_bytes
from ..layout.tensor import check_out
from .checks import CudaUnavailableError
from .runtime import device_pointer


def describe(t: torch.Tensor) -> str:
    """dtype, shape, device (and pinned or pageable for host memory) of a tensor, for messages."""
    pinned = ""
    if t.device.type == "cpu":
        pinned = ", pinned" if t.is_pinned() else ", pageable"
    return f"dtype={t.dtype}, shape={tuple(t.shape)}, device={t.device}{pinned}"


def need_tensor(t, argname: str) -> torch.Tensor:
    """`t` if it is a torch.Tensor; else a TypeError naming `argname`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{argname} must be a torch.Tensor, got {type(t).__name__}")
    return t


def check_index(index, argname: str = "index") -> torch.Tensor:
    """A gather's row index: a 1-d int64 tensor, on the GPU or the CPU."""
    index = need_tensor(index, argname)
    if index.dtype != torch.int64 or index.dim() != 1:
        raise TypeError(f"{argname} has {describe(index)}; accepted: a 1-d int64 tensor "
                        "(on the GPU, or on the CPU to be copied there)")
    return index


def index_on(index: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The index, contiguous, on the kernel's device (a CPU index is copied over)."""
    if index.device != device:
        if index.is_cuda:
            raise ValueError(f"index is on {index.device} but the kernel runs on {device}; "
                             f"accepted: {device} or the CPU")
        index = index.to(device, non_blocking=index.is_pinned())
    return index.contiguous()


def _need_cuda() -> None:
    if not torch.cuda.is_available():
        raise CudaUnavailableError("no CUDA device is available (torch.cuda.is_available() "
                                   "is False); GPU decoding needs one")


def cuda_device(device, argname: str = "device") -> torch.device:
    """`device` as the CUDA device a kernel runs on: "cuda" (no index) is the current one."""
    try:
        d = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(f"{argname}={device!r} is not a device; accepted: a CUDA device such as "
                         "'cuda' or 'cuda:0'") from None
    if d.type != "cuda":
        raise ValueError(f"{argname}={device!r} is not a CUDA device; accepted: 'cuda', "
                         "'cuda:N' (a CPU decode is the codec's own decode)")
    if d.index is None:
        _need_cuda()
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def gather_device(index: torch.Tensor, out: Optional[torch.Tensor], *operands) -> torch.device:
    """Where a gather runs: the index's GPU, else out's, else an operand's, else the current one."""
    for t in (index, out, *operands):
        if t is not None and t.is_cuda:
            return t.device
    _need_cuda()
    return torch.device("cuda", torch.cuda.current_device())


def operand_pointer(t: torch.Tensor, argname: str, device: torch.device) -> int:
    """Address a kernel on `device` reads `t` through: GPU memory there, or pinned host memory."""
    if t.is_cuda:
        if t.device != device:
            raise ValueError(f"{argname} is on {t.device} but the kernel runs on {device}; "
                             f"accepted: {device} or pinned host memory")
        return int(t.data_ptr())
    if t.device.type != "cpu":
        raise ValueError(f"{argname} is on {t.device}; accepted: {device} or pinned host memory")
    if not t.is_pinned():
        raise ValueError(f"{argname} has {describe(t)}: zero-copy reads need page-locked host "
                         "memory; accepted: a pinned tensor (call .pin_memory() once, e.g. on "
                         "the whole table) or one on the GPU")
    return device_pointer(t, argname)


def out_buffer(out: Optional[torch.Tensor], shape, dtype: torch.dtype,
               device: torch.device) -> torch.Tensor:
    """The caller's output buffer, checked (dtype, shape, device, contiguous), or a new one."""
    return check_out(out, tuple(shape), dtype, device)


def rows_view(payload: torch.Tensor, shape, dtype: torch.dtype) -> torch.Tensor:
    """Raw row bytes (a flat uint8 tensor) seen as rows of `dtype` and `shape`, without a copy."""
    return from_row_bytes(payload, tuple(shape), dtype)


def bytes_view(rows: torch.Tensor, row_nbytes: int) -> torch.Tensor:
    """A contiguous tensor of rows seen as (rows, row_nbytes) uint8, without a copy."""
    flat = rows.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    return flat.view(torch.uint8).reshape(rows.shape[0], row_nbytes)


@dataclass(frozen=True)
class RowSource:
    """The compressed rows a decode launch reads: payload and offsets addresses, and which rows.

    ``index`` None decodes rows 0 .. n_out - 1 in order; otherwise output row i is table
    row index[i] (gather + decode, the index already on the kernel's device).
    """

    payload: int
    payload_nbytes: int
    offsets: int
    off64: bool
    index: Optional[torch.Tensor]
    n_out: int
    n_rows: int

    def args(self) -> dict:
        """The kernel arguments every decoder takes for its rows (abi parameter names)."""
        return {"payload": self.payload, "offsets": self.offsets, "off64": int(self.off64),
                "index": 0 if self.index is None else int(self.index.data_ptr()),
                "n_out": self.n_out, "n_rows": self.n_rows,
                "payload_nbytes": self.payload_nbytes}
