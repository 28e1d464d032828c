"""Compile, load and launch the CUDA kernels of ``kernels/`` (NVRTC through CuPy's bindings).

One path serves CI and the GPU: :func:`compile_cubin` turns a kernel source into a cubin
for an explicit architecture with NVRTC (no GPU, no driver needed), and at run time the
same call builds the cubin for the device's architecture, which is then loaded as a
module on that device. (``cupy.RawModule`` would compile for "the current device", so it
cannot prove in CI that the kernels compile; its NVRTC binding is what is used here.)

Launches go through the CUDA driver on torch's current stream, with torch tensors passed
as raw device pointers (no copies, no CuPy arrays). CuPy is imported lazily: importing
``ibp_graph`` never needs it.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from importlib import resources
from typing import Optional, Sequence

#: kernel sources shipped in the ``ibp_graph.kernels`` package (the repo's ``kernels/``).
KERNEL_SOURCES: tuple[str, ...] = ("ibp_decode.cu", "ebp_decode.cu")
#: group sizes (lanes per row) the decoders are instantiated for.
GROUP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: access widths (bytes) the raw-row gather is instantiated for.
GATHER_WIDTHS: tuple[int, ...] = (1, 2, 4, 8, 16)
#: every kernel entry point, by the source that defines it.
KERNELS: dict[str, str] = {
    **{f"ibp_decode_w{W}_g{G}": "ibp_decode.cu" for W in (32, 64) for G in GROUP_SIZES},
    **{f"ibp_gather_v{v}": "ibp_decode.cu" for v in GATHER_WIDTHS},
    **{f"ebp_decode_w{W}": "ebp_decode.cu" for W in (8, 16, 32, 64)},
    "ebp_gather": "ebp_decode.cu",
}
#: options every compilation uses (NVRTC spelling; translated for nvcc).
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17",)
#: environment variable that forces a compiler backend ("nvrtc" or "nvcc").
BACKEND_ENV = "IBP_GRAPH_CUDA_COMPILER"
#: static shared memory a block may use without opting in.
_DEFAULT_SMEM = 48 * 1024


class KernelCompileError(RuntimeError):
    """A kernel source failed to compile; the message carries the compiler log."""


class CudaUnavailableError(RuntimeError):
    """CuPy, NVRTC/nvcc or a CUDA device needed for a GPU operation is missing."""


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
        missing = [k for k, src in KERNELS.items() if src == name and k.encode() not in binary]
        if missing:
            raise KernelCompileError(f"{name} compiled for sm_{normalize_arch(arch)} lacks "
                                     f"the entry points {missing}")
        done.append(name)
    return done


# --------------------------------------------------------------------------- loading
class Kernel:
    """A loaded kernel entry point on one device (keeps its module alive)."""

    __slots__ = ("name", "device", "module", "ptr", "_occupancy", "_smem_optin")

    def __init__(self, name: str, device: int, module, ptr: int):
        self.name = name
        self.device = device
        self.module = module
        self.ptr = ptr
        self._occupancy: dict[tuple[int, int], int] = {}
        self._smem_optin = _DEFAULT_SMEM

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, device={self.device})"


_modules: dict[tuple, object] = {}
_kernels: "OrderedDict[tuple, Kernel]" = OrderedDict()
_load_lock = threading.Lock()


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise CudaUnavailableError(
            f"CuPy is needed to run the CUDA kernels ({e}); install the extra: "
            "pip install 'ibp-graph[cuda]'"
        ) from None
    return cupy


def device_arch(device: int) -> str:
    """Compute capability of a CUDA device as an arch string ('90' for an H100/H200)."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


def get_kernel(name: str, device: int) -> Kernel:
    """Kernel `name` compiled for and loaded on CUDA device `device` (cached)."""
    if name not in KERNELS:
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(sorted(KERNELS))}")
    source = KERNELS[name]
    arch = device_arch(device)
    key = (name, device, arch)
    k = _kernels.get(key)
    if k is not None:
        return k
    with _load_lock:
        k = _kernels.get(key)
        if k is not None:
            return k
        cupy = _cupy()
        binary = compile_cubin(source, arch)
        mkey = (source, device, hashlib.sha256(binary).hexdigest())
        with cupy.cuda.Device(device):
            _bind_context()
            module = _modules.get(mkey)
            if module is None:
                module = cupy.cuda.function.Module()
                module.load(binary)
                _modules[mkey] = module
            fn = module.get_function(name)
        k = Kernel(name, device, module, int(fn.ptr))
        k.module = (module, fn)  # the Function keeps the module loaded
        _kernels[key] = k
        return k


def sm_count(device: int) -> int:
    """Streaming multiprocessors of a device."""
    import torch

    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def max_shared_optin(device: int) -> int:
    """Largest dynamic shared memory one block may opt in to on `device`."""
    cupy = _cupy()
    from cupy_backends.cuda.api import runtime

    with cupy.cuda.Device(device):
        return int(runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                              device))


def ensure_shared(kernel: Kernel, nbytes: int) -> None:
    """Let `kernel` launch with `nbytes` of dynamic shared memory (opting in above 48 KiB)."""
    if nbytes <= kernel._smem_optin:
        return
    cupy = _cupy()
    from cupy_backends.cuda.api import driver

    with cupy.cuda.Device(kernel.device):
        driver.funcSetAttribute(kernel.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                int(nbytes))
    kernel._smem_optin = int(nbytes)


def occupancy(kernel: Kernel, block: int, shared_mem: int) -> int:
    """Resident blocks per SM for this launch shape (at least 1)."""
    key = (block, shared_mem)
    got = kernel._occupancy.get(key)
    if got is None:
        cupy = _cupy()
        from cupy_backends.cuda.api import driver

        with cupy.cuda.Device(kernel.device):
            got = max(1, int(driver.occupancyMaxActiveBlocksPerMultiprocessor(
                kernel.ptr, int(block), int(shared_mem))))
        kernel._occupancy[key] = got
    return got


# --------------------------------------------------------------------------- launching
#: argument kinds a launch takes: pointers and integers of fixed widths.
PTR, I32, I64 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64


def pack_params(args: Sequence[tuple]):
    """(values, params): ctypes values of `args` and the void*[] cuLaunchKernel reads them from.

    Keep `values` alive until the launch returns (the driver copies them at launch time).
    """
    values = [kind(int(v)) for kind, v in args]
    params = (ctypes.c_void_p * max(1, len(values)))(
        *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
    )
    return values, params


def launch(kernel: Kernel, grid: int, block: int, args: Sequence[tuple], shared_mem: int = 0,
           stream: Optional[int] = None) -> None:
    """Launch `kernel` on torch's current stream (or `stream`, a cudaStream_t as int).

    `args` are (ctypes type, value) pairs in the kernel's parameter order: PTR for
    pointers (``tensor.data_ptr()``), I32 / I64 for ints. A launch the driver refuses
    raises here; faults surface at the next synchronisation (the callers synchronise
    when they read their error slots).
    """
    import torch

    cupy = _cupy()
    from cupy_backends.cuda.api import driver

    if stream is None:
        stream = torch.cuda.current_stream(kernel.device).cuda_stream
    values, params = pack_params(args)
    if grid < 1 or block < 1:
        raise ValueError(f"launch of {kernel.name} with grid={grid}, block={block}: both must be >= 1")
    with cupy.cuda.Device(kernel.device):
        _bind_context()
        driver.launchKernel(kernel.ptr, int(grid), 1, 1, int(block), 1, 1, int(shared_mem),
                            int(stream), ctypes.addressof(params), 0)


def _bind_context() -> None:
    """Make the current device's primary context (torch's) current on this thread.

    Driver-API calls need a current context; a thread that has not yet made a runtime call
    may have none. cudaFree(NULL) binds the primary context, as the runtime API does lazily.
    """
    from cupy_backends.cuda.api import driver, runtime

    if driver.ctxGetCurrent() == 0:
        runtime.free(0)


def device_pointer(tensor, argname: str) -> int:
    """The address a kernel uses for `tensor`: its data_ptr on the GPU, its UVA mapping if pinned.

    Page-locked memory from torch (cudaHostAlloc) is mapped at the same address on the
    device (unified addressing); cudaPointerGetAttributes confirms it and would give the
    mapped address if it ever differed (memory registered with cudaHostRegister).
    """
    if tensor.is_cuda:
        return int(tensor.data_ptr())
    from cupy_backends.cuda.api import runtime

    _cupy()
    host = int(tensor.data_ptr())
    if host == 0:
        return 0
    try:
        dev = int(runtime.pointerGetAttributes(host).devicePointer)
    except Exception:  # pragma: no cover - driver refuses the query; trust torch's pinning
        dev = host if tensor.is_pinned() else 0
    if dev == 0:
        raise ValueError(f"{argname} (at {host:#x}) is host memory the GPU cannot address; "
                         "accepted: page-locked memory (call .pin_memory())")
    return dev
