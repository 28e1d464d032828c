"""GPU decoding of IBP rows: from device memory, fused with a zero-copy gather, and raw gathers.

Entry points (called by ``IBPCodec.decode`` / ``IBPCodec.fetch`` / ``IdentityCodec.fetch``):

* :func:`decode_ibp` - a CompressedTensor already in GPU memory -> its decoded rows;
* :func:`fetch_ibp` - rows ``index`` of a compressed table in pinned host memory (or in
  GPU memory), gathered and decoded by one kernel that reads only those rows;
* :func:`gather_rows` - rows ``index`` of a raw 2-d table in pinned host memory (or GPU
  memory), copied by a zero-copy kernel: the uncompressed baseline.

The per-column decode tables (:func:`build_decode_tables`) are built once per codec state
on the host and cached on each device. Every check that fails raises TypeError or
ValueError naming the argument, its value and what is accepted; an out-of-range index
raises IndexError after the launch (the kernel flags it in device memory, never reads
through it).
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Optional, Union

import numpy as np
import torch

from ..layout.tensor import check_out
from . import runtime as rt
from .runtime import I32, I64, PTR

#: the `check` argument of the entry points: True (raise now), False, or a PendingChecks
Check = Union[bool, "PendingChecks"]
#: decode tables kept per (codec fingerprint, device); evicted least recently used.
TABLE_CACHE_SIZE = 32
_THREADS = 256


# --------------------------------------------------------------------------- tables
def free_bit_runs(mask: int, word_bits: int) -> list[tuple[int, int]]:
    """Runs (shift, length) of the free (zero) bits of a W-bit mask, ascending.

    pdep(c, ~mask) is then: for each run, take the next `length` bits of c and place
    them at `shift`. An all-ones mask has no runs; mask 0 has one run (0, W).
    """
    runs = []
    b = 0
    mask = int(mask)
    while b < word_bits:
        if (mask >> b) & 1:
            b += 1
            continue
        start = b
        while b < word_bits and not (mask >> b) & 1:
            b += 1
        runs.append((start, b - start))
    return runs


def build_decode_tables(mask: np.ndarray, bitval: np.ndarray, word_bits: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Per-column tables of the GPU decoder: (cols (n_words, 4) uint32, runs (>= 1,) uint32).

    cols[j] = (bitval low 32 bits, bitval high 32 bits,
               free_bits | n_runs << 8 | (shift0 | length0 << 6) << 16, start of runs 1..),
    runs[k] = shift | length << 8 | src << 16 for each further run (src: its first bit in
    the compacted value). Layout documented in kernels/ibp_decode.cuh.
    """
    if word_bits not in (32, 64):
        raise ValueError(f"word_bits={word_bits!r} is not accepted; use 32 or 64")
    mask = np.ascontiguousarray(mask, dtype=np.uint64).reshape(-1)
    bitval = np.ascontiguousarray(bitval, dtype=np.uint64).reshape(-1)
    if mask.shape != bitval.shape:
        raise ValueError(f"mask has {mask.shape[0]} columns but bitval has {bitval.shape[0]}")
    n = mask.shape[0]
    W = word_bits
    if W == 32 and ((mask >> np.uint64(32)).any() or (bitval >> np.uint64(32)).any()):
        raise ValueError("mask/bitval have bits above bit 31 with word_bits=32")
    cols = np.zeros((n, 4), dtype=np.uint32)
    cols[:, 0] = (bitval & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    cols[:, 1] = (bitval >> np.uint64(32)).astype(np.uint32)
    extra: list[int] = []
    # Vectorised run finding: free[j, b] is True where bit b of column j is free.
    bits = np.arange(W, dtype=np.uint64)
    free = ((mask[:, None] >> bits[None, :]) & np.uint64(1)) == 0
    prev = np.zeros((n, 1), dtype=bool)
    starts = free & ~np.concatenate([prev, free[:, :-1]], axis=1)
    ends = free & ~np.concatenate([free[:, 1:], prev], axis=1)  # last bit of each run
    nfree = free.sum(axis=1)
    for j in range(n):
        s = np.flatnonzero(starts[j])
        e = np.flatnonzero(ends[j])
        lengths = e - s + 1
        nr = len(s)
        z = int(nfree[j]) | (nr << 8)
        if nr:
            z |= (int(s[0]) | (int(lengths[0]) << 6)) << 16
        cols[j, 2] = z
        cols[j, 3] = len(extra)
        src = int(lengths[0]) if nr else 0
        for k in range(1, nr):
            extra.append(int(s[k]) | (int(lengths[k]) << 8) | (src << 16))
            src += int(lengths[k])
    runs = np.array(extra or [0], dtype=np.uint32)
    return cols, runs


_tables: "OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]]" = OrderedDict()
_tables_lock = threading.Lock()


def device_tables(codec, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The codec's decode tables on `device` (built and uploaded once per codec state)."""
    key = (int(codec.fingerprint), int(codec.word_bits), int(codec.n_words), device.index)
    with _tables_lock:
        hit = _tables.get(key)
        if hit is not None:
            _tables.move_to_end(key)
            return hit
    cols, runs = build_decode_tables(codec.mask, codec.bitval, codec.word_bits)
    expect = np.asarray(codec.free_bits).reshape(-1)
    if not np.array_equal(cols[:, 2] & 0xFF, expect.astype(np.uint32)):
        raise ValueError("codec.free_bits disagrees with W - popcount(codec.mask); the codec "
                         "state is inconsistent")
    hit = (torch.from_numpy(cols.view(np.int32).reshape(-1).copy()).to(device),
           torch.from_numpy(runs.view(np.int32).copy()).to(device))
    with _tables_lock:
        _tables[key] = hit
        while len(_tables) > TABLE_CACHE_SIZE:
            _tables.popitem(last=False)
    return hit


def mark_in_use(tensors, device: torch.device) -> None:
    """Mark cached device tables as read by the current stream's next launch.

    The tables are cached across calls and streams (allocated on whichever stream first
    needed them) and dropped when the LRU cache evicts them. Without this, eviction while a
    kernel on another stream still reads them would let the allocator hand their memory
    out again at once on the allocating stream.
    """
    if device.type == "cuda":
        stream = torch.cuda.current_stream(device)
        for t in tensors:
            t.record_stream(stream)


# --------------------------------------------------------------------------- checks
def _describe(t: torch.Tensor) -> str:
    pinned = ""
    if t.device.type == "cpu":
        pinned = ", pinned" if t.is_pinned() else ", pageable"
    return f"dtype={t.dtype}, shape={tuple(t.shape)}, device={t.device}{pinned}"


def _index_on(index: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The index, contiguous, on the kernel's device (a CPU index is copied over)."""
    if index.device != device:
        if index.is_cuda:
            raise ValueError(f"index is on {index.device} but the kernel runs on {device}; "
                             f"accepted: {device} or the CPU")
        index = index.to(device, non_blocking=index.is_pinned())
    return index.contiguous()


def _need_tensor(t, argname: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{argname} must be a torch.Tensor, got {type(t).__name__}")
    return t


def _check_codec(codec) -> None:
    for attr in ("word_bits", "n_words", "mask", "bitval", "free_bits", "header_bits",
                 "row_nbytes", "fingerprint", "dtype", "row_shape"):
        if not hasattr(codec, attr):
            raise TypeError(f"codec must be an IBPCodec, got {type(codec).__name__} "
                            f"(it has no {attr!r})")
    if codec.word_bits not in (32, 64):
        raise ValueError(f"codec.word_bits={codec.word_bits!r}; the GPU decoder takes 32 or 64")


def _check_compressed(codec, ct, argname: str) -> None:
    """Same codec, same state, offsets present: the codec's own check, then layout checks."""
    from ..layout.tensor import CompressedTensor

    if not isinstance(ct, CompressedTensor):
        raise TypeError(f"{argname} must be a CompressedTensor, got {type(ct).__name__}")
    if hasattr(codec, "check"):
        codec.check(ct, argname)
    elif ct.fingerprint != codec.fingerprint:
        raise ValueError(f"{argname}.fingerprint={ct.fingerprint:#x} differs from the codec's "
                         f"{codec.fingerprint:#x}: it was encoded with another codec state")
    p = _need_tensor(ct.payload, f"{argname}.payload")
    if p.dtype != torch.uint8 or p.dim() != 1 or not p.is_contiguous():
        raise ValueError(f"{argname}.payload has {_describe(p)}, contiguous={p.is_contiguous()}; "
                         "accepted: a contiguous 1-d uint8 tensor")
    o = _need_tensor(ct.offsets, f"{argname}.offsets")
    if o.dtype not in (torch.int32, torch.int64) or o.dim() != 1 or not o.is_contiguous():
        raise ValueError(f"{argname}.offsets has {_describe(o)}; accepted: a contiguous 1-d "
                         "int32 or int64 tensor")
    if o.numel() != ct.n_rows + 1:
        raise ValueError(f"{argname}.offsets has {o.numel()} entries; {argname} has "
                         f"{ct.n_rows} rows, so n_rows + 1 = {ct.n_rows + 1} are needed")


def _check_index(index, argname: str = "index") -> torch.Tensor:
    index = _need_tensor(index, argname)
    if index.dtype != torch.int64 or index.dim() != 1:
        raise TypeError(f"{argname} has {_describe(index)}; accepted: a 1-d int64 tensor "
                        "(on the GPU, or on the CPU to be copied there)")
    return index


def _target_device(index: torch.Tensor, out: Optional[torch.Tensor], *others) -> torch.device:
    """Where a gather runs: the index's GPU, else out's, else a GPU operand's, else the current one."""
    for t in (index, out, *others):
        if t is not None and t.is_cuda:
            return t.device
    if not torch.cuda.is_available():
        raise rt.CudaUnavailableError("no CUDA device is available (torch.cuda.is_available() "
                                      "is False); GPU decoding needs one")
    return torch.device("cuda", torch.cuda.current_device())


def _operand_pointer(t: torch.Tensor, argname: str, device: torch.device) -> int:
    """Pointer a kernel on `device` reads `t` through: GPU memory there, or pinned host memory."""
    if t.is_cuda:
        if t.device != device:
            raise ValueError(f"{argname} is on {t.device} but the kernel runs on {device}; "
                             f"accepted: {device} or pinned host memory")
        return int(t.data_ptr())
    if t.device.type != "cpu":
        raise ValueError(f"{argname} is on {t.device}; accepted: {device} or pinned host memory")
    if not t.is_pinned():
        raise ValueError(f"{argname} has {_describe(t)}: zero-copy reads need page-locked host "
                         "memory; accepted: a pinned tensor (call .pin_memory() once, e.g. on "
                         "the whole table) or one on the GPU")
    return rt.device_pointer(t, argname)


def _error_slots(device: torch.device) -> torch.Tensor:
    return torch.full((2,), -1, dtype=torch.int64, device=device)


def _raise_errors(err: torch.Tensor, index: Optional[torch.Tensor], n_rows: int,
                  offsets: Optional[torch.Tensor], what: str) -> None:
    """Read the kernel's error slots (synchronises) and raise for the first offender."""
    bad_pos, bad_row = (int(v) for v in err.tolist())
    if bad_pos != -1:
        value = int(index[bad_pos].item()) if index is not None else bad_pos
        raise IndexError(f"index[{bad_pos}] = {value} is out of range for {what} with {n_rows} "
                         f"rows; accepted: 0 <= index < {n_rows}")
    if bad_row != -1:
        from ..layout.errors import CorruptPayloadError

        detail = ""
        if offsets is not None:
            o = offsets[bad_row:bad_row + 2].tolist()
            detail = f" (offsets {o[0]}..{o[1]}, {o[1] - o[0]} bytes)"
        raise CorruptPayloadError(f"{what} row {bad_row} is corrupt{detail}: its offsets or bit "
                                  "stream do not match the codec's row format")


class PendingChecks:
    """The error checks of GPU decodes whose results nobody has read yet.

    Pass one as ``check=`` to :func:`decode_ibp`, :func:`fetch_ibp`, :func:`gather_rows`,
    ``decode_ebp`` or ``fetch_ebp`` (or to a codec's ``decode`` / ``fetch`` on a CUDA
    device): instead of waiting for the kernel to report (a host synchronisation per
    call), the call records its error slots here and returns at once. Once the work is
    done (after an event's ``synchronize()``), :meth:`raise_first` reads them all and
    raises what ``check=True`` would have raised for the first failing call. This keeps
    the host free to queue the next batches while the GPU decodes (the loader's
    ``DecodeStage`` does this).
    """

    def __init__(self):
        self._pending: list[tuple] = []

    def add(self, err: torch.Tensor, index: Optional[torch.Tensor], n_rows: int,
            offsets: Optional[torch.Tensor], what: str) -> None:
        """Keep one call's error slots (and what its error message needs) for later."""
        self._pending.append((err, index, n_rows, offsets, what))

    def raise_first(self) -> None:
        """Read every recorded call's error slots (synchronises) and raise for the first
        that failed; the record is emptied either way."""
        pending, self._pending = self._pending, []
        for item in pending:
            _raise_errors(*item)


def _report(check, err: torch.Tensor, index: Optional[torch.Tensor], n_rows: int,
            offsets: Optional[torch.Tensor], what: str) -> None:
    """Act on a launch's error slots as `check` says: raise now (True), later (a
    PendingChecks), or never (False)."""
    if isinstance(check, PendingChecks):
        check.add(err, index, n_rows, offsets, what)
    elif check:
        _raise_errors(err, index, n_rows, offsets, what)


# --------------------------------------------------------------------------- launch shapes
def group_size(n_words: int) -> int:
    """Lanes per row: the next power of two >= n_words, at most a warp."""
    return 1 << max(0, min(5, math.ceil(math.log2(max(1, n_words)))))


def stage_bytes(row_nbytes: int) -> int:
    """Shared memory per row group: the row, its 16-byte alignment slack and read-ahead."""
    return (row_nbytes + 32 + 15) // 16 * 16


def _store_unit(word_bytes: int, row_nbytes: int, ptr: int) -> int:
    for u in (8, 4, 2, 1):
        if u <= word_bytes and row_nbytes % u == 0 and ptr % u == 0:
            return u
    return 1


def _launch_decode(codec, payload_ptr: int, payload_nbytes: int, offsets: torch.Tensor,
                   offsets_ptr: int, index: Optional[torch.Tensor], n_out: int, n_rows: int,
                   out: torch.Tensor, device: torch.device, err: torch.Tensor) -> None:
    W = int(codec.word_bits)
    n_words = int(codec.n_words)
    row_nbytes = int(codec.row_nbytes)
    G = group_size(n_words)
    kernel = rt.get_kernel(f"ibp_decode_w{W}_g{G}", device.index)
    cap = stage_bytes(row_nbytes)
    threads = _THREADS
    while threads > 32 and (threads // G) * cap > 48 * 1024:
        threads //= 2
    smem = (threads // G) * cap
    if smem > 48 * 1024:
        limit = rt.max_shared_optin(device.index)
        if smem > limit:
            raise ValueError(
                f"rows of {row_nbytes} bytes need {smem} bytes of shared memory per block to "
                f"decode; {device} allows {limit}. Accepted: rows up to about "
                f"{limit - 48} bytes (split wider rows into several tensors)")
        rt.ensure_shared(kernel, smem)
    groups = threads // G
    grid = min(-(-n_out // groups),
               rt.occupancy(kernel, threads, smem) * rt.sm_count(device.index))
    cols, runs = device_tables(codec, device)
    mark_in_use((cols, runs), device)
    unit = _store_unit(W // 8, row_nbytes, int(out.data_ptr()))
    rt.launch(kernel, grid, threads, [
        (PTR, payload_ptr), (PTR, offsets_ptr), (I32, offsets.dtype == torch.int64),
        (PTR, 0 if index is None else index.data_ptr()), (I64, n_out), (I64, n_rows),
        (I64, payload_nbytes), (PTR, cols.data_ptr()), (PTR, runs.data_ptr()),
        (I32, n_words), (I32, row_nbytes), (I32, int(codec.header_bits)), (I32, unit),
        (I32, cap), (PTR, out.data_ptr()), (PTR, err.data_ptr()),
    ], shared_mem=smem)


# --------------------------------------------------------------------------- public API
def _on_gpu(codec, ct, out: Optional[torch.Tensor], caller: str
            ) -> tuple[torch.device, torch.Tensor]:
    """Check a CompressedTensor to decode in GPU memory (and `out`); (its device, out)."""
    _check_compressed(codec, ct, "ct")
    if not ct.payload.is_cuda:
        raise ValueError(f"ct.payload has {_describe(ct.payload)}; {caller} takes a "
                         "CompressedTensor in GPU memory: move it with ct.to('cuda', "
                         "non_blocking=True), or use codec.fetch for a zero-copy read")
    device = ct.payload.device
    if ct.offsets.device != device:
        raise ValueError(f"ct.offsets is on {ct.offsets.device} but ct.payload on {device}; "
                         "accepted: both on the same GPU")
    return device, check_out(out, tuple(ct.shape), codec.dtype, device)


def decode_ibp(codec, ct, out: Optional[torch.Tensor] = None, *, check: Check = True
               ) -> torch.Tensor:
    """Decode a CompressedTensor in GPU memory into its rows on the same GPU (bit exact).

    With check=True (default) the call waits for the kernel to read its error slot and
    raises CorruptPayloadError for an inconsistent row; check=False skips that
    synchronisation (a corrupt row then leaves garbage in its output row); a PendingChecks
    records the check for later (no synchronisation now).
    """
    _check_codec(codec)
    device, out = _on_gpu(codec, ct, out, "decode_ibp")
    if ct.n_rows == 0 or codec.row_nbytes == 0:
        return out
    err = _error_slots(device)
    _launch_decode(codec, int(ct.payload.data_ptr()), ct.payload.numel(), ct.offsets,
                   int(ct.offsets.data_ptr()), None, ct.n_rows, ct.n_rows, out, device, err)
    _report(check, err, None, ct.n_rows, ct.offsets, "ct")
    return out


def fetch_ibp(codec, table, index: torch.Tensor, out: Optional[torch.Tensor] = None, *,
              check: Check = True) -> torch.Tensor:
    """Rows `index` of a compressed table, gathered and decoded on the GPU by one kernel.

    `table` lives in pinned host memory (zero-copy: only the selected rows' compressed
    bytes cross PCIe; keeping ``table.offsets`` on the GPU saves one PCIe read per row)
    or in GPU memory. `index` is int64, on the GPU or the CPU. With check=True (default)
    an out-of-range index raises IndexError after the launch (one synchronisation).
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
    _launch_decode(codec, payload_ptr, table.payload.numel(), table.offsets, offsets_ptr,
                   index, n_out, table.n_rows, out, device, err)
    _report(check, err, index, table.n_rows, table.offsets, "table")
    return out


def gather_rows(table: torch.Tensor, index: torch.Tensor, out: Optional[torch.Tensor] = None,
                *, check: Check = True) -> torch.Tensor:
    """Rows `index` of a raw table in pinned host memory (or GPU memory), copied into GPU memory.

    One zero-copy kernel, with the widest aligned accesses the row size allows; the
    baseline the compressed fetch is measured against.
    """
    table = _need_tensor(table, "table")
    if table.dim() < 1 or not table.is_contiguous():
        raise ValueError(f"table has {_describe(table)}, contiguous={table.is_contiguous()}; "
                         "accepted: a contiguous tensor whose first dimension indexes rows")
    index = _check_index(index)
    device = _target_device(index, out, table)
    table_ptr = _operand_pointer(table, "table", device)
    index = _index_on(index, device)
    n_out = index.shape[0]
    row_shape = tuple(table.shape[1:])
    out = check_out(out, (n_out,) + row_shape, table.dtype, device)
    row_nbytes = math.prod(row_shape) * table.element_size()
    n_rows = table.shape[0]
    if n_out == 0 or row_nbytes == 0:
        return out
    vw = next(v for v in (16, 8, 4, 2, 1)
              if row_nbytes % v == 0 and table_ptr % v == 0 and out.data_ptr() % v == 0)
    lanes = group_size(row_nbytes // vw)
    kernel = rt.get_kernel(f"ibp_gather_v{vw}", device.index)
    groups = _THREADS // lanes
    grid = min(-(-n_out // groups), rt.occupancy(kernel, _THREADS, 0) * rt.sm_count(device.index))
    err = _error_slots(device)
    rt.launch(kernel, grid, _THREADS, [
        (PTR, table_ptr), (I64, n_rows), (I64, row_nbytes), (PTR, index.data_ptr()),
        (I64, n_out), (I32, lanes), (PTR, out.data_ptr()), (PTR, err.data_ptr()),
    ])
    _report(check, err, index, n_rows, None, "table")
    return out
