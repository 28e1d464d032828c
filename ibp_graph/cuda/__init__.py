"""GPU side of ibp-graph: CUDA decoders of the IBP row format and zero-copy gathers.

``decode`` holds the entry points (decode_ibp, fetch_ibp, gather_rows); ``runtime``
compiles (NVRTC, no GPU needed) and launches the kernels of ``ibp_graph.kernels``.
CuPy is imported only when a kernel is compiled or launched.
"""
from __future__ import annotations


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
    if name in ("decode_ibp", "fetch_ibp", "gather_rows", "build_decode_tables"):
        from . import decode

        return getattr(decode, name)
    if name in ("compile_all", "compile_cubin"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'ibp_graph.cuda' has no attribute {name!r}")


__all__ = ["is_available", "decode_ibp", "fetch_ibp", "gather_rows", "build_decode_tables",
           "compile_all", "compile_cubin"]
