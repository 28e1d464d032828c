"""Page-locked host memory for zero-copy reads: a compressed table the GPU reads in place.

A zero-copy fetch (:func:`ibp_graph.gpu.fetch` on a host table) reads the selected rows
straight out of host memory over PCIe, so the *whole* table must stay resident and
page-locked for as long as it is read. :func:`pin_table` makes it so, once: it registers
the table's own buffers with CUDA in place (``cudaHostRegister``: no copy, the buffers
must already be in RAM, e.g. a table encoded in memory or loaded with ``mmap=False``),
and when the driver refuses (a memory-mapped file, a lock limit) it copies them into
pinned memory allocated by torch (``pin_memory()``: a second resident copy). When
neither works it raises :class:`PinError` naming the argument, the bytes it needed and
what is accepted.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Optional

import torch

from ..layout.tensor import CompressedTensor
from .checks import CudaUnavailableError


class PinError(RuntimeError):
    """A table could not be made page-locked (neither registered in place nor copied pinned)."""


class Registration:
    """Host buffers registered with CUDA in place; unregistered by :meth:`release` (or when
    garbage collected). Keeps the tensors alive while registered."""

    def __init__(self, tensors: list[torch.Tensor], unregister: Callable[[int], None]):
        self._tensors = tensors
        self._unregister = unregister
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether the buffers are still registered."""
        return bool(self._tensors)

    def release(self) -> None:
        """Unregister the buffers (idempotent)."""
        with self._lock:
            tensors, self._tensors = self._tensors, []
        for t in tensors:
            try:
                self._unregister(int(t.data_ptr()))
            except Exception:  # pragma: no cover - the context may be gone at interpreter exit
                pass

    def __del__(self):
        self.release()


def _host_register() -> tuple[Callable[[int, int], None], Callable[[int], None]]:
    """(register(ptr, nbytes), unregister(ptr)) through CuPy's runtime bindings."""
    try:
        from cupy_backends.cuda.api import runtime
    except ImportError as e:
        raise CudaUnavailableError(f"CuPy is needed to register host memory with CUDA ({e}); "
                                   "install the extra: pip install 'ibp-graph[cuda]'") from None
    return (lambda ptr, n: runtime.hostRegister(ptr, n, 0)), runtime.hostUnregister


def _buffers(ct: CompressedTensor) -> list[torch.Tensor]:
    return [t for t in (ct.payload, ct.offsets) if t is not None]


def pin_table(ct: CompressedTensor, argname: str = "table", *, register: bool = True,
              _register=None) -> tuple[CompressedTensor, Optional[Registration]]:
    """`ct` in page-locked host memory, and the registration to release when done (None when
    nothing was registered: already pinned, or copied into torch's pinned memory).

    `register`: first try to register the buffers in place (no copy); else, or when the
    driver refuses, copy them into pinned memory. Raises PinError when both fail, and
    ValueError for a table that is not in host memory.
    """
    if not isinstance(ct, CompressedTensor):
        raise TypeError(f"{argname} must be a CompressedTensor, got {type(ct).__name__}")
    if ct.device.type != "cpu":
        raise ValueError(f"{argname} is on {ct.device}; accepted: a table in host memory "
                         "(zero-copy reads it there)")
    if ct.is_pinned():
        return ct, None
    nbytes = ct.nbytes
    reasons = []
    if register:
        reg, unreg = _register if _register is not None else _host_register()
        done: list[torch.Tensor] = []
        try:
            for t in _buffers(ct):
                if not t.is_contiguous():
                    raise ValueError("not contiguous")
                if t.numel():
                    reg(int(t.data_ptr()), t.numel() * t.element_size())
                    done.append(t)
            return ct, Registration(done, unreg)
        except Exception as e:  # the driver refused: undo, then try a pinned copy
            Registration(done, unreg).release()
            reasons.append(f"cudaHostRegister in place failed ({type(e).__name__}: {e})")
    try:
        return dataclasses.replace(ct, payload=ct.payload.pin_memory(),
                                   offsets=None if ct.offsets is None else ct.offsets.pin_memory()), None
    except RuntimeError as e:
        reasons.append(f"a pinned copy failed ({e})")
    raise PinError(f"{argname} ({nbytes / 2**30:.2f} GiB of compressed rows) cannot be made page-locked: "
                   f"{'; '.join(reasons)}. Zero-copy needs the whole table resident and pinned "
                   f"({nbytes} bytes of host RAM, twice that while a copy is made); accepted: a table "
                   "that fits in pinned host memory, or features='worker'")


__all__ = ["pin_table", "PinError", "Registration"]
