"""EBP on the GPU: the decoder's tables built from an EBP codec, and the launches of
``ebp_decode_w{W}`` and ``ebp_gather`` (kernels/ebp_decode.cu).

:func:`host_tables` is the one place that reads an EBP codec's state; everything after it
works from the :class:`EBPGpuTables` record (cached on each device by ``tables``). A fetch
from pinned host memory runs two kernels: ``ebp_gather`` copies only the selected rows'
compressed bytes over PCIe into device scratch slots, then the decoder reads them there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from . import abi
from . import runtime as rt
from .operands import RowSource

#: threads per block (8 warps; the kernel's static shared memory is sized for 8).
THREADS = abi.MAX_THREADS


@dataclass(frozen=True)
class EBPGpuTables:
    """What the EBP decoder needs of a codec: its sizes and code parameters, and the column,
    default, decode-lookup and dictionary tables (numpy on the host; uint8 tensors of the
    same bytes once on a device)."""

    word_bits: int
    d: int
    row_nbytes: int
    sparse: bool
    HE: int
    LS: int
    IB: int
    low_total: int
    colinfo: object   # abi.EBP_COLUMN per column (at least one)
    defaults: object  # uint64 per column
    dlut: object      # uint16 (tables, 256)
    dict: object      # uint64 (tables, 256)


def host_tables(codec) -> EBPGpuTables:
    """The EBP decoder's record of `codec` (the one place that reads an EBP codec's state)."""
    t = codec.tables
    W, d = int(codec.word_bits), int(t.d)
    if W not in abi.EBP_WIDTHS:
        raise ValueError(f"codec.word_bits={W!r}; the GPU decoder takes {abi.EBP_WIDTHS}")
    if int(codec.row_nbytes) > abi.EBP_MAX_ROW_NBYTES:
        raise ValueError(f"rows of {int(codec.row_nbytes)} bytes are too wide for the GPU decoder "
                         f"(its bit positions are 32-bit); accepted: rows up to "
                         f"{abi.EBP_MAX_ROW_NBYTES} bytes (split wider rows into several tensors)")
    if t.low_total >= 2**32 or t.n_tables >= 2**32:
        raise ValueError(f"rows of {d} elements are too wide for the GPU decoder (low stream "
                         f"of {t.low_total} bits); accepted: low streams below 2**32 bits")
    colinfo = np.zeros(max(d, 1), dtype=abi.EBP_COLUMN)
    if d:
        col_lw = np.asarray(t.col_lw, dtype=np.int64)
        colinfo["low_at"][1:d] = np.cumsum(col_lw)[:-1]
        colinfo["tid"][:d] = t.col_tid
        colinfo["sparse_tid"][:d] = t.col_tids if t.sparse else 0
        colinfo["low_bits"][:d] = col_lw
    defaults = np.zeros(max(d, 1), dtype=np.uint64)
    defaults[:d] = t.col_default
    T = max(int(t.n_tables), 1)
    dlut = np.full((T, 256), 0xFFFF, dtype=np.uint16)
    dlut[:t.n_tables] = t.dlut
    tdict = np.zeros((T, 256), dtype=np.uint64)
    tdict[:t.n_tables] = t.t_dict
    return EBPGpuTables(word_bits=W, d=d, row_nbytes=int(codec.row_nbytes), sparse=bool(t.sparse),
                     HE=int(t.HE), LS=int(t.LS), IB=int(t.IB), low_total=int(t.low_total),
                     colinfo=colinfo, defaults=defaults, dlut=dlut, dict=tdict)


def scratch_stride(row_nbytes: int) -> int:
    """Bytes per row slot of a zero-copy fetch's scratch buffer: the row's aligned 16-byte
    blocks (at most row_nbytes + 30 bytes) plus the decoder's 12 bytes of read-ahead."""
    return (row_nbytes + 15 + 32 + 15) // 16 * 16


def _grid(kernel, n_units: int, per_block: int, device: torch.device) -> int:
    return max(1, min(-(-n_units // per_block),
                      rt.occupancy(kernel, THREADS, 0) * rt.sm_count(device.index)))


def launch_decode(tabs: EBPGpuTables, src: RowSource, out: torch.Tensor, err: torch.Tensor,
                  device: torch.device, starts: Optional[torch.Tensor] = None,
                  lens: Optional[torch.Tensor] = None) -> None:
    """Queue one ebp_decode launch: rows `src` (or, with `starts`/`lens`, the scratch slots
    of a gather) decoded into `out`, errors into `err`."""
    kernel = rt.get_kernel(f"ebp_decode_w{tabs.word_bits}", device.index)
    grid = _grid(kernel, src.n_out, 32 * (THREADS // 32), device)  # a warp decodes 32 rows
    rt.launch(kernel, grid, THREADS, dict(
        src.args(), starts=0 if starts is None else starts.data_ptr(),
        lens=0 if lens is None else lens.data_ptr(), colinfo=tabs.colinfo.data_ptr(),
        defaults=tabs.defaults.data_ptr(), dlut=tabs.dlut.data_ptr(), dict=tabs.dict.data_ptr(),
        d=tabs.d, row_nbytes=tabs.row_nbytes, sparse=int(tabs.sparse), HE=tabs.HE, LS=tabs.LS,
        IB=tabs.IB, low_total=tabs.low_total, out=out.data_ptr(), err=err.data_ptr(),
    ))


def launch_gather(src: RowSource, row_nbytes: int, scratch: torch.Tensor,
                  starts: torch.Tensor, lens: torch.Tensor, err: torch.Tensor,
                  device: torch.device) -> None:
    """Queue one ebp_gather launch copying rows `src.index` into the scratch slots (stride
    :func:`scratch_stride`), their starts and lengths into `starts` and `lens`."""
    kernel = rt.get_kernel("ebp_gather", device.index)
    grid = _grid(kernel, src.n_out, THREADS // 32, device)  # a warp gathers one row
    rt.launch(kernel, grid, THREADS, dict(
        src.args(), row_nbytes=row_nbytes, stride=scratch_stride(row_nbytes),
        scratch=scratch.data_ptr(), starts=starts.data_ptr(), lens=lens.data_ptr(),
        err=err.data_ptr(),
    ))


def launch_fetch_zero_copy(tabs: EBPGpuTables, src: RowSource, out: torch.Tensor,
                           err: torch.Tensor, device: torch.device) -> None:
    """Rows `src.index` of a table in pinned host memory: ebp_gather copies the selected
    rows' compressed bytes into device scratch slots, then ebp_decode reads them there
    (both on the current stream, no host synchronisation)."""
    n_out = src.n_out
    scratch = torch.empty(n_out * scratch_stride(tabs.row_nbytes) + 16, dtype=torch.uint8,
                          device=device)
    starts = torch.empty(n_out, dtype=torch.int64, device=device)
    lens = torch.empty(n_out, dtype=torch.int32, device=device)
    launch_gather(src, tabs.row_nbytes, scratch, starts, lens, err, device)
    slots = RowSource(payload=int(scratch.data_ptr()), payload_nbytes=scratch.numel(), offsets=0,
                      off64=False, index=src.index, n_out=n_out, n_rows=src.n_rows)
    launch_decode(tabs, slots, out, err, device, starts=starts, lens=lens)
    # the scratch buffers are freed (stream-ordered) once the decode has read them
