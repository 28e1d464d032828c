"""GPU decode of any codec: check the codec and the compressed tensor once, then dispatch on
the codec's kind (``codec.name``: "ibp", "ebp" or "identity") to that kind's launcher.

A codec is read only through its public attributes: ``name``, ``fingerprint``, ``dtype``,
``row_shape``, ``row_nbytes``, and (in ``ibp.host_tables`` / ``ebp.host_tables``) its
tables. Nothing here calls back into the codec.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..layout.errors import CodecMismatchError, CorruptPayloadError
from ..layout.tensor import CompressedTensor
from . import ebp, ibp
from .checks import PendingChecks, check_checks, error_slots, index_slots, report
from .operands import (RowSource, bytes_view, check_index, cuda_device, describe, gather_device,
                       index_on, need_tensor, operand_pointer, out_buffer, rows_view)
from .raw import gather_raw_rows
from .tables import device_tables

IDENTITY = "identity"


@dataclass(frozen=True)
class RowKind:
    """A codec kind whose rows are condensed with offsets: its tables and its launchers."""

    host_tables: Callable       # codec -> host record of its device tables
    launch_decode: Callable     # (tables, RowSource, out, err, device): rows in device memory
    launch_zero_copy: Callable  # the same, for rows read from pinned host memory


#: the kinds with offsets, by codec name.
ROW_KINDS: dict[str, RowKind] = {
    "ibp": RowKind(ibp.host_tables, ibp.launch_decode, ibp.launch_decode),  # fused zero-copy
    "ebp": RowKind(ebp.host_tables, ebp.launch_decode, ebp.launch_fetch_zero_copy),
}
#: every codec name the GPU decodes.
KINDS: tuple[str, ...] = (*ROW_KINDS, IDENTITY)


def check_codec(codec) -> str:
    """The codec's kind, or a TypeError naming the codecs accepted."""
    name = getattr(codec, "name", None)
    if not isinstance(name, str) or name not in KINDS:
        raise TypeError(f"codec must be an IBPCodec, EBPCodec or IdentityCodec (a codec whose "
                        f".name is one of {list(KINDS)}), got {type(codec).__name__} with "
                        f"name={name!r}")
    return name


def check_compressed(codec, kind: str, ct, argname: str) -> None:
    """`ct` was made by `codec` in this state, and its payload and offsets are laid out as
    the kind's kernels read them (the one check of a compressed tensor on the GPU path)."""
    if not isinstance(ct, CompressedTensor):
        raise TypeError(f"{argname} must be a CompressedTensor, got {type(ct).__name__}")
    if ct.codec != kind or ct.fingerprint != codec.fingerprint:
        raise CodecMismatchError(
            f"{argname} was encoded by codec {ct.codec!r} with state fingerprint "
            f"{ct.fingerprint:#x}; this is codec {kind!r} with fingerprint "
            f"{codec.fingerprint:#x}. Decode it with the codec that encoded it.")
    if ct.dtype != codec.dtype or ct.row_shape != tuple(codec.row_shape):
        raise CodecMismatchError(f"{argname} holds rows of {ct.dtype} {ct.row_shape}; this "
                                 f"codec decodes {codec.dtype} {tuple(codec.row_shape)}")
    p = need_tensor(ct.payload, f"{argname}.payload")
    if p.dtype != torch.uint8 or p.dim() != 1 or not p.is_contiguous():
        raise ValueError(f"{argname}.payload has {describe(p)}, contiguous={p.is_contiguous()}; "
                         "accepted: a contiguous 1-d uint8 tensor")
    if kind == IDENTITY:
        if ct.offsets is not None:
            raise ValueError(f"{argname}.offsets is set; the identity codec's rows have a fixed "
                             "stride, accepted: None")
        if p.numel() < ct.raw_nbytes:
            raise CorruptPayloadError(f"{argname}.payload has {p.numel()} bytes, needs "
                                      f"{ct.raw_nbytes}")
        return
    o = ct.offsets
    if o is not None:
        o = need_tensor(o, f"{argname}.offsets")
        if o.dtype not in (torch.int32, torch.int64) or o.dim() != 1 or not o.is_contiguous():
            raise ValueError(f"{argname}.offsets has {describe(o)}; accepted: a contiguous 1-d "
                             "int32 or int64 tensor")
    if o is None or o.numel() != ct.n_rows + 1:
        raise CorruptPayloadError(f"{argname}.offsets must have n_rows + 1 = {ct.n_rows + 1} "
                                  f"entries, has {None if o is None else o.numel()}")


def decode(codec, ct: CompressedTensor, *, device=None, out: Optional[torch.Tensor] = None,
           checks: Optional[PendingChecks] = None) -> torch.Tensor:
    """Decode `ct` (made by `codec`) on a CUDA device, bit exact.

    `device`: where to decode; default ct's device if it is a GPU, else the current one (a
    host `ct` is copied there first, asynchronously when pinned). `out`: a contiguous
    buffer of ct's shape and dtype on that device, or None for a new one. `checks`: None
    raises CorruptPayloadError for a corrupt row before returning (the host waits for the
    kernel); a PendingChecks files the check, raised by its ``raise_first()`` later.
    """
    kind = check_codec(codec)
    check_compressed(codec, kind, ct, "ct")
    checks = check_checks(checks)
    if device is None:
        device = ct.device if ct.device.type == "cuda" else "cuda"
    device = cuda_device(device)
    if ct.device != device:  # host memory, or another GPU
        ct = ct.to(device, non_blocking=ct.is_pinned())
    if kind == IDENTITY:
        rows = rows_view(ct.payload[:ct.raw_nbytes], ct.shape, ct.dtype)
        return rows if out is None else out_buffer(out, ct.shape, ct.dtype, device).copy_(rows)
    if ct.offsets.device != device:
        raise ValueError(f"ct.offsets is on {ct.offsets.device} but ct.payload on {device}; "
                         "accepted: both on the same GPU")
    out = out_buffer(out, ct.shape, codec.dtype, device)
    if ct.n_rows == 0 or codec.row_nbytes == 0:
        return out
    row_kind = ROW_KINDS[kind]
    tabs = device_tables(codec, device, row_kind.host_tables)
    src = RowSource(payload=int(ct.payload.data_ptr()), payload_nbytes=ct.payload.numel(),
                    offsets=int(ct.offsets.data_ptr()), off64=ct.offsets.dtype == torch.int64,
                    index=None, n_out=ct.n_rows, n_rows=ct.n_rows)
    err = error_slots(device)
    row_kind.launch_decode(tabs, src, out, err, device)
    report(checks, err, None, ct.n_rows, ct.offsets, "ct")
    return out


def fetch(codec, table: CompressedTensor, index: torch.Tensor, *,
          out: Optional[torch.Tensor] = None, checks: Optional[PendingChecks] = None
          ) -> torch.Tensor:
    """Rows `index` of `table` (made by `codec`), gathered and decoded on the GPU.

    `table` lives in pinned host memory (zero-copy: only the selected rows' bytes cross
    PCIe; IBP tables may keep their offsets on the GPU to save a read per row) or in GPU
    memory. `index`: int64, on the GPU or the CPU. `checks` as for :func:`decode`; an
    out-of-range index raises IndexError.
    """
    kind = check_codec(codec)
    check_compressed(codec, kind, table, "table")
    index = check_index(index)
    checks = check_checks(checks)
    shape = (index.shape[0],) + tuple(codec.row_shape)
    if kind == IDENTITY:
        device = gather_device(index, out, table.payload)
        operand_pointer(table.payload, "table.payload", device)  # checked before allocating
        out = out_buffer(out, shape, codec.dtype, device)
        rows = table.payload[:table.raw_nbytes].view(table.n_rows, table.row_nbytes)
        gather_raw_rows(rows, index, out=bytes_view(out, table.row_nbytes), checks=checks)
        return out
    device = gather_device(index, out, table.payload, table.offsets)
    payload_ptr = operand_pointer(table.payload, "table.payload", device)
    offsets_ptr = operand_pointer(table.offsets, "table.offsets", device)
    index = index_on(index, device)
    n_out = index.shape[0]
    out = out_buffer(out, shape, codec.dtype, device)
    if n_out == 0:
        return out
    if codec.row_nbytes == 0:  # nothing to decode, but the index is checked all the same
        report(checks, index_slots(index, table.n_rows), index, table.n_rows, None, "table")
        return out
    row_kind = ROW_KINDS[kind]
    tabs = device_tables(codec, device, row_kind.host_tables)
    src = RowSource(payload=payload_ptr, payload_nbytes=table.payload.numel(),
                    offsets=offsets_ptr, off64=table.offsets.dtype == torch.int64, index=index,
                    n_out=n_out, n_rows=table.n_rows)
    err = error_slots(device)
    launch = row_kind.launch_decode if table.payload.is_cuda else row_kind.launch_zero_copy
    launch(tabs, src, out, err, device)
    report(checks, err, index, table.n_rows, table.offsets, "table")
    return out
