"""Zero-copy gather of raw (uncompressed) rows: the identity codec's fetch, and the baseline
every compressed fetch is measured against (``ibp_gather_v{VW}``, kernels/ibp_decode.cu)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import abi
from . import runtime as rt
from .checks import PendingChecks, check_checks, error_slots, index_slots, report
from .ibp import group_size
from .operands import (check_index, describe, gather_device, index_on, need_tensor,
                       operand_pointer, out_buffer)


def gather_raw_rows(table: torch.Tensor, index: torch.Tensor, *,
                    out: Optional[torch.Tensor] = None,
                    checks: Optional[PendingChecks] = None) -> torch.Tensor:
    """Rows `index` of a raw table in pinned host memory (or GPU memory), copied into GPU memory.

    One zero-copy kernel, with the widest aligned accesses the row size allows. `index` is
    int64 on the GPU or the CPU; an out-of-range index raises IndexError after the launch
    (`checks` None: before returning; a PendingChecks: at its raise_first()).
    """
    table = need_tensor(table, "table")
    if table.dim() < 1 or not table.is_contiguous():
        raise ValueError(f"table has {describe(table)}, contiguous={table.is_contiguous()}; "
                         "accepted: a contiguous tensor whose first dimension indexes rows")
    index = check_index(index)
    checks = check_checks(checks)
    device = gather_device(index, out, table)
    table_ptr = operand_pointer(table, "table", device)
    index = index_on(index, device)
    n_out = index.shape[0]
    row_shape = tuple(table.shape[1:])
    out = out_buffer(out, (n_out,) + row_shape, table.dtype, device)
    row_nbytes = math.prod(row_shape) * table.element_size()
    n_rows = table.shape[0]
    if n_out == 0:
        return out
    if row_nbytes == 0:  # nothing to copy, but the index is checked all the same
        report(checks, index_slots(index, n_rows), index, n_rows, None, "table")
        return out
    vw = next(v for v in sorted(abi.GATHER_WIDTHS, reverse=True)
              if row_nbytes % v == 0 and table_ptr % v == 0 and out.data_ptr() % v == 0)
    lanes = group_size(row_nbytes // vw)
    kernel = rt.get_kernel(f"ibp_gather_v{vw}", device.index)
    threads = abi.MAX_THREADS
    grid = min(-(-n_out // (threads // lanes)),
               rt.occupancy(kernel, threads, 0) * rt.sm_count(device.index))
    err = error_slots(device)
    rt.launch(kernel, grid, threads, dict(
        table=table_ptr, n_rows=n_rows, row_nbytes=row_nbytes, index=index.data_ptr(),
        n_out=n_out, lanes=lanes, out=out.data_ptr(), err=err.data_ptr(),
    ))
    report(checks, err, index, n_rows, None, "table")
    return out
