"""GPU decoding of EBP rows (kernels/ebp_decode.cu): from device memory, and zero-copy fetches.

Entry points (called by ``EBPCodec.decode`` / ``EBPCodec.fetch``):

* :func:`decode_ebp` - a CompressedTensor already in GPU memory -> its decoded rows;
* :func:`fetch_ebp` - rows ``index`` of a compressed table in GPU memory (one kernel that
  gathers and decodes), or in pinned host memory (zero-copy: ``ebp_gather`` copies only
  the selected rows' compressed bytes over PCIe into a device scratch buffer, then the
  same decoder reads them there; both kernels run on the current stream, no host sync).

Tables (:func:`build_decode_tables`) are built once per codec state and cached per device.
Argument errors raise before any GPU work, naming the argument; a bad index raises
IndexError and a corrupt row CorruptPayloadError after the launch (with check=True).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional

import numpy as np
import torch

from ..layout.tensor import check_out
from . import runtime as rt
from .ibp_decode import (Check, _check_compressed, _check_index, _error_slots, _index_on,
                     _on_gpu, _operand_pointer, _report, _target_device, mark_in_use)
from .runtime import I32, I64, PTR

#: decode tables kept per (codec fingerprint, device); evicted least recently used.
TABLE_CACHE_SIZE = 16
#: threads per block (8 warps; the kernel's static shared memory is sized for 8).
THREADS = 256
#: element widths the decoder is instantiated for.
WIDTHS = (8, 16, 32, 64)


def build_decode_tables(codec) -> dict[str, np.ndarray]:
    """Host arrays of the GPU decoder: colinfo (d, 4) uint32, defaults (d,) uint64,
    dlut (T, 256) uint16, dict (T, 256) uint64 (layout in kernels/ebp_decode.cu)."""
    t = codec.tables
    d = t.d
    colinfo = np.zeros((max(d, 1), 4), dtype=np.uint32)
    if d:
        lowpos = np.zeros(d, dtype=np.int64)
        lowpos[1:] = np.cumsum(t.col_lw)[:-1]
        if t.low_total >= 2**32 or t.n_tables >= 2**32:
            raise ValueError(f"rows of {d} elements are too wide for the GPU decoder (low stream "
                             f"of {t.low_total} bits); accepted: low streams below 2**32 bits")
        colinfo[:d, 0] = lowpos
        colinfo[:d, 1] = t.col_tid
        colinfo[:d, 2] = t.col_tids if t.sparse else 0
        colinfo[:d, 3] = t.col_lw
    defaults = np.zeros(max(d, 1), dtype=np.uint64)
    defaults[:d] = t.col_default
    T = max(t.n_tables, 1)
    dlut = np.full((T, 256), 0xFFFF, dtype=np.uint16)
    dlut[:t.n_tables] = t.dlut
    tdict = np.zeros((T, 256), dtype=np.uint64)
    tdict[:t.n_tables] = t.t_dict
    return {"colinfo": colinfo, "defaults": defaults, "dlut": dlut, "dict": tdict}


_tables: "OrderedDict[tuple, dict[str, torch.Tensor]]" = OrderedDict()
_tables_lock = threading.Lock()


def device_tables(codec, device: torch.device) -> dict[str, torch.Tensor]:
    """The codec's decode tables on `device` (built and uploaded once per codec state)."""
    key = (int(codec.fingerprint), device.index)
    with _tables_lock:
        hit = _tables.get(key)
        if hit is not None:
            _tables.move_to_end(key)
            return hit
    host = build_decode_tables(codec)
    hit = {}
    for name, a in host.items():
        view = {np.uint32: np.int32, np.uint64: np.int64, np.uint16: np.int16}[a.dtype.type]
        hit[name] = torch.from_numpy(np.ascontiguousarray(a).view(view).reshape(-1).copy()).to(device)
    with _tables_lock:
        _tables[key] = hit
        while len(_tables) > TABLE_CACHE_SIZE:
            _tables.popitem(last=False)
    return hit


def _check_codec(codec) -> None:
    for attr in ("tables", "word_bits", "n_cols", "row_nbytes", "fingerprint", "dtype",
                 "row_shape"):
        if not hasattr(codec, attr):
            raise TypeError(f"codec must be an EBPCodec, got {type(codec).__name__} "
                            f"(it has no {attr!r})")
    if codec.word_bits not in WIDTHS:
        raise ValueError(f"codec.word_bits={codec.word_bits!r}; the GPU decoder takes {WIDTHS}")


def scratch_stride(row_nbytes: int) -> int:
    """Bytes per row slot of a zero-copy fetch's scratch buffer: the row's aligned 16-byte
    blocks (at most row_nbytes + 30 bytes) plus the decoder's 12 bytes of read-ahead."""
    return (row_nbytes + 15 + 32 + 15) // 16 * 16


def _grid(kernel, n_units: int, per_block: int, device: torch.device) -> int:
    return max(1, min(-(-n_units // per_block),
                      rt.occupancy(kernel, THREADS, 0) * rt.sm_count(device.index)))


def _launch_decode(codec, payload_ptr: int, payload_nbytes: int, offsets: Optional[torch.Tensor],
                   offsets_ptr: int, index: Optional[torch.Tensor], starts: Optional[torch.Tensor],
                   lens: Optional[torch.Tensor], n_out: int, n_rows: int, out: torch.Tensor,
                   device: torch.device, err: torch.Tensor) -> None:
    t = codec.tables
    kernel = rt.get_kernel(f"ebp_decode_w{codec.word_bits}", device.index)
    tabs = device_tables(codec, device)
    mark_in_use(tabs.values(), device)
    grid = _grid(kernel, n_out, 32 * (THREADS // 32), device)
    rt.launch(kernel, grid, THREADS, [
        (PTR, payload_ptr), (PTR, offsets_ptr),
        (I32, offsets is not None and offsets.dtype == torch.int64),
        (PTR, 0 if index is None else index.data_ptr()),
        (PTR, 0 if starts is None else starts.data_ptr()),
        (PTR, 0 if lens is None else lens.data_ptr()), (I64, n_out), (I64, n_rows),
        (I64, payload_nbytes), (PTR, tabs["colinfo"].data_ptr()),
        (PTR, tabs["defaults"].data_ptr()), (PTR, tabs["dlut"].data_ptr()),
        (PTR, tabs["dict"].data_ptr()), (I32, t.d), (I32, t.row_nbytes), (I32, int(t.sparse)),
        (I32, t.HE), (I32, t.LS), (I32, t.IB), (I32, t.low_total), (PTR, out.data_ptr()),
        (PTR, err.data_ptr()),
    ])


def _launch_gather(payload_ptr: int, payload_nbytes: int, offsets: torch.Tensor, offsets_ptr: int,
                   index: torch.Tensor, n_out: int, n_rows: int, row_nbytes: int, stride: int,
                   scratch: torch.Tensor, starts: torch.Tensor, lens: torch.Tensor,
                   device: torch.device, err: torch.Tensor) -> None:
    kernel = rt.get_kernel("ebp_gather", device.index)
    grid = _grid(kernel, n_out, THREADS // 32, device)
    rt.launch(kernel, grid, THREADS, [
        (PTR, payload_ptr), (PTR, offsets_ptr), (I32, offsets.dtype == torch.int64),
        (PTR, index.data_ptr()), (I64, n_out), (I64, n_rows), (I64, payload_nbytes),
        (I32, row_nbytes), (I64, stride), (PTR, scratch.data_ptr()), (PTR, starts.data_ptr()),
        (PTR, lens.data_ptr()), (PTR, err.data_ptr()),
    ])


def decode_ebp(codec, ct, out: Optional[torch.Tensor] = None, *, check: Check = True
               ) -> torch.Tensor:
    """Decode a CompressedTensor in GPU memory into its rows on the same GPU (bit exact).

    With check=True (default) the call waits for the kernel's error slots and raises
    CorruptPayloadError for an inconsistent row; check=False skips that synchronisation;
    a PendingChecks records the check for later (decode.PendingChecks).
    """
    _check_codec(codec)
    device, out = _on_gpu(codec, ct, out, "decode_ebp")
    if ct.n_rows == 0 or codec.row_nbytes == 0:
        return out
    err = _error_slots(device)
    _launch_decode(codec, int(ct.payload.data_ptr()), ct.payload.numel(), ct.offsets,
                   int(ct.offsets.data_ptr()), None, None, None, ct.n_rows, ct.n_rows, out,
                   device, err)
    _report(check, err, None, ct.n_rows, ct.offsets, "ct")
    return out


def fetch_ebp(codec, table, index: torch.Tensor, out: Optional[torch.Tensor] = None, *,
              check: Check = True) -> torch.Tensor:
    """Rows `index` of a compressed table, decoded on the GPU.

    `table` in GPU memory: one kernel gathers and decodes. `table` in pinned host memory
    (zero-copy): one kernel copies the selected rows' compressed bytes over PCIe into a
    device scratch buffer (aligned 16-byte reads), a second decodes them there. `index`
    is int64 on the GPU or the CPU; with check=True a bad index raises IndexError after
    the launches (one synchronisation).
    """
    _check_codec(codec)
    _check_compressed(codec, table, "table")
    index = _check_index(index)
    device = _target_device(index, out, table.payload, table.offsets)
    payload_ptr = _operand_pointer(table.payload, "table.payload", device)
    offsets_ptr = _operand_pointer(table.offsets, "table.offsets", device)
    index = _index_on(index, device)
    n_out = index.shape[0]
    out = check_out(out, (n_out,) + tuple(codec.row_shape), codec.dtype, device)
    if n_out == 0 or codec.row_nbytes == 0:
        if check and n_out and table.n_rows == 0:
            raise IndexError(f"index[0] = {int(index[0])} is out of range for table with 0 rows")
        return out
    err = _error_slots(device)
    if table.payload.is_cuda:
        _launch_decode(codec, payload_ptr, table.payload.numel(), table.offsets, offsets_ptr,
                       index, None, None, n_out, table.n_rows, out, device, err)
    else:
        stride = scratch_stride(codec.row_nbytes)
        scratch = torch.empty(n_out * stride + 16, dtype=torch.uint8, device=device)
        starts = torch.empty(n_out, dtype=torch.int64, device=device)
        lens = torch.empty(n_out, dtype=torch.int32, device=device)
        _launch_gather(payload_ptr, table.payload.numel(), table.offsets, offsets_ptr, index,
                       n_out, table.n_rows, codec.row_nbytes, stride, scratch, starts, lens,
                       device, err)
        _launch_decode(codec, int(scratch.data_ptr()), scratch.numel(), None, 0, index, starts,
                       lens, n_out, table.n_rows, out, device, err)
        # the scratch buffers are freed (stream-ordered) once the decode has read them
    _report(check, err, index, table.n_rows, table.offsets, "table")
    return out
