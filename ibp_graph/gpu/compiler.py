"""Compile the CUDA kernels of ``kernels/`` to cubins, with NVRTC (through CuPy's bindings) or nvcc.

One path serves CI and the GPU: :func:`compile_cubin` turns a kernel source into a cubin
for an explicit architecture with NVRTC (no GPU, no driver needed), and at run time the
same call builds the cubin for the device's architecture (``runtime`` loads it). (``cupy.RawModule``
would compile for "the current device", so it cannot prove in CI that the kernels
compile; its NVRTC binding is what is used here.) CuPy is imported lazily.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from importlib import resources
from typing import Optional, Sequence

from .abi import KERNEL_SOURCES, KERNELS
from .checks import CudaUnavailableError, KernelCompileError

#: options every compilation uses (NVRTC spelling; translated for nvcc).
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17",)
#: environment variable that forces a compiler backend ("nvrtc" or "nvcc").
BACKEND_ENV = "IBP_GRAPH_CUDA_COMPILER"

# --------------------------------------------------------------------------- sources
def kernel_dir():
    """The folder holding the kernel sources: the installed ``ibp_graph.kernels`` package,
    or the repository's ``kernels/`` when ibp_graph runs from a checkout not installed."""
    try:
        return resources.files("ibp_graph.kernels")
    except ModuleNotFoundError:
        from pathlib import Path

        return Path(__file__).resolve().parents[2] / "kernels"


def read_source(name: str) -> str:
    """The text of one file of the ``ibp_graph.kernels`` package (a .cu or .cuh)."""
    try:
        return kernel_dir().joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"kernel file {name!r} is not in the ibp_graph.kernels package ({e}); "
            f"known sources: {', '.join(KERNEL_SOURCES)}"
        ) from None


def header_names() -> tuple[str, ...]:
    """Names of the .cuh headers shipped with the kernels (what ``#include "x.cuh"`` finds)."""
    return tuple(sorted(p.name for p in kernel_dir().iterdir() if p.name.endswith(".cuh")))


def normalize_arch(arch) -> str:
    """'90' for any of 90, '90', 'sm_90', 'compute_90', (9, 0)."""
    if isinstance(arch, tuple) and len(arch) == 2:
        return f"{int(arch[0])}{int(arch[1])}"
    s = str(arch).strip().lower()
    for prefix in ("sm_", "compute_", "sm", "compute"):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    if not s.isdigit() or not (2 <= len(s) <= 3):
        raise ValueError(f"arch={arch!r} is not a CUDA architecture; use e.g. 'sm_90', '90' or (9, 0)")
    return s


# --------------------------------------------------------------------------- compilers
def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as e:
        raise CudaUnavailableError(
            f"CuPy is needed to compile the CUDA kernels ({e}); install the extra: "
            "pip install 'ibp-graph[cuda]' (cupy-cuda13x and nvidia-cuda-nvrtc)"
        ) from None
    return nvrtc


def _nvrtc_available() -> bool:
    try:
        _nvrtc().getVersion()
        return True
    except Exception:  # library missing or not loadable
        return False


def _nvcc_path() -> Optional[str]:
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def pick_backend(backend: Optional[str] = None) -> str:
    """The compiler to use: `backend`, else $IBP_GRAPH_CUDA_COMPILER, else NVRTC, else nvcc."""
    choice = backend or os.environ.get(BACKEND_ENV) or None
    if choice is not None:
        if choice not in ("nvrtc", "nvcc"):
            raise ValueError(f"backend={choice!r} is not accepted; use 'nvrtc' or 'nvcc'")
        return choice
    if _nvrtc_available():
        return "nvrtc"
    if _nvcc_path():
        return "nvcc"
    raise CudaUnavailableError(
        "neither NVRTC (pip install nvidia-cuda-nvrtc, used through cupy-cuda13x) nor nvcc "
        "was found; one is needed to compile the CUDA kernels"
    )


def _compile_nvrtc(name: str, source: str, arch: str, options: Sequence[str]) -> bytes:
    nvrtc = _nvrtc()
    supported = {str(a) for a in nvrtc.getSupportedArchs()}
    if arch in supported:
        target, want = f"-arch=sm_{arch}", "cubin"
    else:  # a GPU newer than this NVRTC: PTX for the newest older arch, JIT-compiled on load
        older = [a for a in supported if int(a) <= int(arch)]
        if not older:
            raise KernelCompileError(f"NVRTC {nvrtc.getVersion()} supports archs "
                                     f"{sorted(supported, key=int)}; none can target sm_{arch}")
        target, want = f"-arch=compute_{max(older, key=int)}", "ptx"
    heads = header_names()
    prog = nvrtc.createProgram(
        source, name, tuple(read_source(h).encode() for h in heads), tuple(h.encode() for h in heads)
    )
    try:
        try:
            nvrtc.compileProgram(prog, tuple(options) + (target,))
        except nvrtc.NVRTCError as e:
            raise KernelCompileError(
                f"NVRTC failed to compile {name} for sm_{arch} ({e}):\n{nvrtc.getProgramLog(prog)}"
            ) from None
        if want == "cubin":
            return bytes(nvrtc.getCUBIN(prog))
        ptx = nvrtc.getPTX(prog)
        return ptx if isinstance(ptx, bytes) else ptx.encode()
    finally:
        nvrtc.destroyProgram(prog)


def _compile_nvcc(name: str, source: str, arch: str, options: Sequence[str]) -> bytes:
    nvcc = _nvcc_path()
    if nvcc is None:
        raise CudaUnavailableError("nvcc was requested but is not on PATH nor in $CUDA_HOME/bin")
    with tempfile.TemporaryDirectory(prefix="ibp_kernels_") as tmp:
        for h in header_names():
            with open(os.path.join(tmp, h), "w", encoding="utf-8") as f:
                f.write(read_source(h))
        src = os.path.join(tmp, name)
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        dst = os.path.join(tmp, name + ".cubin")
        cmd = [nvcc, "-cubin", f"-arch=sm_{arch}", *options, "-I", tmp, "-o", dst, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelCompileError(
                f"nvcc failed to compile {name} for sm_{arch}:\n{proc.stdout}{proc.stderr}"
            )
        with open(dst, "rb") as f:
            return f.read()


_compiled: dict[tuple, bytes] = {}
_compile_lock = threading.Lock()


def compile_cubin(name: str, arch, options: Sequence[str] = COMPILE_OPTIONS,
                  backend: Optional[str] = None) -> bytes:
    """Compile kernel source `name` for `arch` to a cubin (no GPU needed); cached per process.

    The cache key is (source and header text, arch, options, backend), so an edited
    kernel is recompiled.
    """
    arch = normalize_arch(arch)
    backend = pick_backend(backend)
    source = read_source(name)
    digest = hashlib.sha256(source.encode())
    for h in header_names():
        digest.update(h.encode() + b"\0" + read_source(h).encode())
    key = (name, digest.hexdigest(), arch, tuple(options), backend)
    with _compile_lock:
        hit = _compiled.get(key)
        if hit is None:
            compile_fn = _compile_nvrtc if backend == "nvrtc" else _compile_nvcc
            hit = compile_fn(name, source, arch, options)
            _compiled[key] = hit
        return hit


def compile_all(arch, backend: Optional[str] = None) -> list[str]:
    """Compile every kernel source for `arch` without a GPU; return the sources compiled.

    Raises KernelCompileError (with the compiler log) if any source fails, and if a
    compiled binary lacks one of the entry points listed in KERNELS.
    """
    done = []
    for name in KERNEL_SOURCES:
        binary = compile_cubin(name, arch, backend=backend)
        missing = [k for k, e in KERNELS.items() if e.source == name and k.encode() not in binary]
        if missing:
            raise KernelCompileError(f"{name} compiled for sm_{normalize_arch(arch)} lacks "
                                     f"the entry points {missing}")
        done.append(name)
    return done
