"""Errors of the GPU side, and the one mechanism that turns kernels' error slots into them.

Every launch gets error slots in device memory (:func:`error_slots`; the kernels keep the
smallest offender with atomicMin). :func:`report` either reads them at once (the host
waits for the kernel) or files them in a :class:`PendingChecks`, read later in one go.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..layout.errors import CorruptPayloadError
from .abi import ERR_CORRUPT, ERR_INDEX, N_ERR_SLOTS


class KernelCompileError(RuntimeError):
    """A kernel source failed to compile; the message carries the compiler log."""


class CudaUnavailableError(RuntimeError):
    """CuPy, NVRTC/nvcc or a CUDA device needed for a GPU operation is missing."""


class KernelLaunchError(RuntimeError):
    """The driver refused a kernel launch; the message names the kernel, its launch shape
    and the driver's error."""


def error_slots(device: torch.device) -> torch.Tensor:
    """Fresh error slots for one launch on `device` (every slot -1: nothing reported)."""
    return torch.full((N_ERR_SLOTS,), -1, dtype=torch.int64, device=device)


def index_slots(index: torch.Tensor, n_rows: int) -> torch.Tensor:
    """Error slots of a gather that launches nothing (rows of zero bytes): ERR_INDEX holds the
    first position of `index` (not empty) out of range for `n_rows` rows, as a kernel would
    report it; computed on index's device, without waiting for it."""
    err = error_slots(index.device)
    bad = (index < 0) | (index >= n_rows)
    err[ERR_INDEX] = torch.where(bad.any(), torch.argmax(bad.to(torch.uint8)), -1)
    return err


def raise_errors(err: torch.Tensor, index: Optional[torch.Tensor], n_rows: int,
                 offsets: Optional[torch.Tensor], what: str) -> None:
    """Read a launch's error slots (synchronises) and raise for the first offender.

    `index`: the gather's index (None for a decode in order); `offsets`: the table's, for
    the message; `what`: the argument the rows came from ("ct", "table").
    """
    slots = [int(v) for v in err.tolist()]
    bad_pos, bad_row = slots[ERR_INDEX], slots[ERR_CORRUPT]
    if bad_pos != -1:
        value = int(index[bad_pos].item()) if index is not None else bad_pos
        raise IndexError(f"index[{bad_pos}] = {value} is out of range for {what} with {n_rows} "
                         f"rows; accepted: 0 <= index < {n_rows}")
    if bad_row != -1:
        detail = ""
        if offsets is not None:
            o = offsets[bad_row:bad_row + 2].tolist()
            detail = f" (offsets {o[0]}..{o[1]}, {o[1] - o[0]} bytes)"
        raise CorruptPayloadError(f"{what} row {bad_row} is corrupt{detail}: its offsets or bit "
                                  "stream do not match the codec's row format")


class PendingChecks:
    """The error checks of GPU decodes whose results nobody has read yet.

    Pass one as ``checks=`` to :func:`ibp_graph.gpu.decode`, :func:`~ibp_graph.gpu.fetch`
    or :func:`~ibp_graph.gpu.gather_raw_rows`: instead of waiting for the kernel to report
    (a host synchronisation per call), the call files its error slots here and returns at
    once. Once the work is done (after an event's ``synchronize()``), :meth:`raise_first`
    reads them all and raises what ``checks=None`` would have raised for the first failing
    call. This keeps the host free to queue the next batches while the GPU decodes (the
    pipeline's decode stage does this).
    """

    def __init__(self):
        self._pending: list[tuple] = []

    def add(self, err: torch.Tensor, index: Optional[torch.Tensor], n_rows: int,
            offsets: Optional[torch.Tensor], what: str) -> None:
        """Keep one launch's error slots (and what its error message needs) for later."""
        self._pending.append((err, index, n_rows, offsets, what))

    def raise_first(self) -> None:
        """Read every filed launch's error slots (synchronises) and raise for the first that
        failed; the record is emptied either way."""
        pending, self._pending = self._pending, []
        for item in pending:
            raise_errors(*item)

    def __len__(self) -> int:
        return len(self._pending)

    def __bool__(self) -> bool:  # an empty record is still a record, never "no checks"
        return True


def report(checks: Optional[PendingChecks], err: torch.Tensor, index: Optional[torch.Tensor],
           n_rows: int, offsets: Optional[torch.Tensor], what: str) -> None:
    """Act on a launch's error slots: raise now (`checks` None) or file them in `checks`."""
    if checks is None:
        raise_errors(err, index, n_rows, offsets, what)
    else:
        checks.add(err, index, n_rows, offsets, what)


def check_checks(checks) -> Optional[PendingChecks]:
    """`checks` if it is None or a PendingChecks; else a TypeError naming what is accepted."""
    if checks is not None and not isinstance(checks, PendingChecks):
        raise TypeError(f"checks={checks!r} is not accepted; use None (raise before returning) "
                        "or an ibp_graph.gpu.PendingChecks (raise at its raise_first())")
    return checks
