"""GPU side of ibp-graph: CUDA decoders of every codec's row format and zero-copy gathers.

Public API (what the pipeline and users call):

* :func:`decode` - a CompressedTensor (any codec) -> its rows on a CUDA device;
* :func:`fetch` - rows ``index`` of a compressed table in pinned host or device memory,
  gathered and decoded on the GPU (zero-copy: only the selected rows cross PCIe);
* :func:`gather_raw_rows` - rows ``index`` of a raw table, by the same zero-copy gather;
* :class:`PendingChecks` - collects the kernels' error reports instead of waiting for them;
* :func:`pin_table` - a compressed table made page-locked for zero-copy reads (registered in
  place, else copied pinned; :class:`PinError` when neither works);
* :func:`is_available`, and the errors :class:`CudaUnavailableError`,
  :class:`KernelCompileError`, :class:`KernelLaunchError`.

Modules: ``dispatch`` (decode/fetch: checks, then the codec's kind), ``ibp`` / ``ebp`` /
``raw`` (tables and launches per kind), ``tables`` (the device-table cache), ``pinned``
(page-locked host tables for zero-copy), ``operands``
(tensor checks and addresses), ``checks`` (errors and error slots), ``abi`` (kernel
parameters and table records, declared once), ``compiler`` (NVRTC/nvcc) and ``runtime``
(load and launch). Nothing is imported until first use; CuPy only when a kernel is
compiled or launched.
"""
from __future__ import annotations

_LAZY = {
    "decode": "dispatch", "fetch": "dispatch", "gather_raw_rows": "raw",
    "PendingChecks": "checks", "CudaUnavailableError": "checks", "KernelCompileError": "checks",
    "KernelLaunchError": "checks",
    "pin_table": "pinned", "PinError": "pinned",
}


def is_available() -> bool:
    """Whether GPU decoding can run here: a CUDA device for torch and CuPy installed."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ibp_graph.gpu' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = ["decode", "fetch", "gather_raw_rows", "PendingChecks", "is_available",
           "CudaUnavailableError", "KernelCompileError", "KernelLaunchError", "pin_table",
           "PinError"]
