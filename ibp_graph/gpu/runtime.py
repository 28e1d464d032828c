"""Load compiled kernels on a CUDA device and launch them on torch's stream.

Launches go through the CUDA driver on torch's current stream, with torch tensors passed
as raw device pointers (no copies, no CuPy arrays), each argument given by its declared
parameter name (``abi``). CuPy is imported lazily: importing ``ibp_graph`` never needs it.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
from collections import OrderedDict
from typing import Mapping, Optional

from .abi import KERNELS, ParamBlock
from .checks import CudaUnavailableError, KernelLaunchError
from .compiler import compile_cubin

#: dynamic shared memory a block may use without opting in.
DEFAULT_SHARED = 48 * 1024


class Kernel:
    """A loaded kernel entry point on one device (keeps its module alive)."""

    __slots__ = ("name", "device", "module", "ptr", "_occupancy", "_smem_optin")

    def __init__(self, name: str, device: int, module, ptr: int):
        self.name = name
        self.device = device
        self.module = module
        self.ptr = ptr
        self._occupancy: dict[tuple[int, int], int] = {}
        self._smem_optin = DEFAULT_SHARED

    @property
    def params(self) -> ParamBlock:
        """The entry point's declared parameter block (ibp_graph.gpu.abi)."""
        return KERNELS[self.name].params

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
    source = KERNELS[name].source
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
        try:
            driver.funcSetAttribute(kernel.ptr,
                                    driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    int(nbytes))
        except Exception as e:  # the driver's CUDADriverError
            raise KernelLaunchError(f"{kernel.name} on device {kernel.device} cannot be given "
                                    f"{nbytes} bytes of dynamic shared memory: {e}") from e
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
def launch(kernel: Kernel, grid: int, block: int, args: Mapping[str, int], *,
           shared_mem: int = 0, stream: Optional[int] = None) -> None:
    """Launch `kernel` on torch's current stream (or `stream`, a cudaStream_t as int).

    `args` maps each of the kernel's declared parameters (``kernel.params``) by name to an
    int: an address (``tensor.data_ptr()``) for a pointer, a number otherwise. A missing or
    unknown name raises TypeError, a value out of its parameter's range or a bad shape
    ValueError, before the launch; a launch the driver refuses raises KernelLaunchError here;
    each names the kernel and its launch shape. Faults surface at the next synchronisation
    (the error checks read the slots).
    """
    def what() -> str:  # for errors only: nothing formatted per launch
        return (f"launch of {kernel.name} on device {kernel.device} (grid={grid}, block={block}, "
                f"shared_mem={shared_mem})")

    try:
        values, params = kernel.params.pack(args)  # `values` must live until the launch returns
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what()}: {e}") from None
    if grid < 1 or block < 1 or shared_mem < 0:
        raise ValueError(f"{what()}: accepted: grid >= 1, block >= 1, shared_mem >= 0")
    import torch

    cupy = _cupy()
    from cupy_backends.cuda.api import driver

    if stream is None:
        stream = torch.cuda.current_stream(kernel.device).cuda_stream
    with cupy.cuda.Device(kernel.device):
        _bind_context()
        try:
            driver.launchKernel(kernel.ptr, int(grid), 1, 1, int(block), 1, 1, int(shared_mem),
                                int(stream), ctypes.addressof(params), 0)
        except Exception as e:  # the driver's CUDADriverError
            raise KernelLaunchError(f"{what()} failed: {e}") from e


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
