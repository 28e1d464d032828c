"""GPU side of ibp-graph: CUDA decoders of every codec's row format and zero-copy gathers.

The entry points the pipeline and users call are :func:`decode` (a CompressedTensor ->
its rows on a CUDA device) and :func:`fetch` (rows ``index`` of a compressed table in
pinned host or device memory, gathered and decoded by one kernel), with
:class:`PendingChecks` to collect the kernels' error reports instead of waiting for them.
``runtime`` compiles (NVRTC, no GPU needed) and launches the kernels of
``ibp_graph.kernels``. CuPy is imported only when a kernel is compiled or launched.
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


def decode(codec, ct, *, device=None, out=None, checks=None):
    """Decode `ct` (made by `codec`) on a CUDA device: `device`, else ct's if it is on a GPU,
    else the current one (a host `ct` is copied there first, asynchronously when pinned).

    `checks`: None raises a corrupt row's error before returning (the host waits for the
    kernel); a PendingChecks collects it, to be raised by ``checks.raise_first()`` later.
    """
    import torch

    if device is None:
        device = ct.device if ct.device.type == "cuda" else torch.device("cuda")
    return codec.decode(ct, device=device, out=out, check=True if checks is None else checks)


def fetch(codec, table, index, *, out=None, checks=None):
    """Rows `index` of `table` (made by `codec`, in pinned host or device memory), gathered and
    decoded on the GPU by one kernel (`checks` as for :func:`decode`)."""
    return codec.fetch(table, index, out=out, check=True if checks is None else checks)


def __getattr__(name: str):
    if name == "PendingChecks":
        from .ibp_decode import PendingChecks

        return PendingChecks
    if name in ("decode_ibp", "fetch_ibp", "gather_rows", "build_decode_tables"):
        from . import ibp_decode as decode

        return getattr(decode, name)
    if name in ("compile_all", "compile_cubin"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'ibp_graph.gpu' has no attribute {name!r}")


__all__ = ["is_available", "decode", "fetch", "PendingChecks", "decode_ibp", "fetch_ibp", "gather_rows", "build_decode_tables",
           "compile_all", "compile_cubin"]
