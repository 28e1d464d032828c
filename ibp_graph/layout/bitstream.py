"""Numba building blocks of every row format: raw loads and stores, pdep/pext, the bit stream.

The LSB-first bit stream (``put_bits`` / ``get_bits``), unaligned loads and stores on
integer addresses, BMI2 bit deposit/extract and the parallel/serial kernel switch. The
IBP and EBP kernels and the condensed-row gather are built from these; none of them
checks bounds (the callers' buffers and PAYLOAD_TAIL do).

Each kernel exists twice (``build_kernels``): a parallel build for the main process and a
serial build for DataLoader workers (one core each, no threading layer, no locks);
``pick_kernel`` chooses by ``parallel_ok``.
"""
from __future__ import annotations

import functools
import sys
from types import FunctionType

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..threads import parallel_slot, use_parallel
from ..jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

if sys.byteorder != "little":  # pragma: no cover - the format is little-endian
    raise ImportError("ibp_graph.layout.bitstream needs a little-endian machine")

_ONE = np.uint64(1)
_ZERO = np.uint64(0)

#: below this many rows a call runs the serial build (thread start-up would dominate).
PARALLEL_MIN_ROWS = 2048


def parallel_ok(n_rows: int) -> bool:
    """Whether to use the parallel kernels (see ibp_graph.threads)."""
    return use_parallel(n_rows, PARALLEL_MIN_ROWS)


def build_kernels(fn):
    """(parallel build, serial build) of a kernel written with numba.prange.

    The serial build compiles a copy of `fn` named ``<name>_serial``: numba's on-disk cache
    keys a kernel by its qualified name, line, signature and bytecode, not by its options, so
    two builds of one function would share one cache entry, and whichever compiled first
    would be loaded as the other too (a worker running parfor code, the main process serial
    code; tests/layout/test_bitstream.py)."""
    serial = FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    serial.__qualname__ = fn.__qualname__ + "_serial"
    serial.__doc__ = fn.__doc__
    serial.__module__ = fn.__module__
    return (njit(parallel=True, cache=True, nogil=True)(fn), njit(cache=True, nogil=True)(serial))


def pick_kernel(kernels, n_rows: int):
    """The build of `kernels` (from build_kernels) for a call on n_rows rows: the serial one, or a call of
    the parallel one unless another thread runs a parallel kernel then (ibp_graph.threads.parallel_slot)."""
    return functools.partial(_one_parallel, kernels) if parallel_ok(n_rows) else kernels[1]


def _one_parallel(kernels, *args):
    with parallel_slot() as free:
        return (kernels[0] if free else kernels[1])(*args)


# --------------------------------------------------------------------------- intrinsics
def _load(bits: int):
    """Intrinsic: unaligned little-endian `bits`-bit load from an integer address, as uint64."""
    @intrinsic
    def load(typingctx, addr):
        def codegen(context, builder, signature, args):
            ptr = builder.inttoptr(args[0], ir.IntType(bits).as_pointer())
            v = builder.load(ptr, align=1)
            return v if bits == 64 else builder.zext(v, ir.IntType(64))

        return types.uint64(addr), codegen

    load.__doc__ = f"{bits}-bit load from an integer address, zero-extended (no bounds check)"
    return load


def _store(bits: int):
    """Intrinsic: unaligned little-endian store of the low `bits` bits of an integer value."""
    @intrinsic
    def store(typingctx, addr, val):
        def codegen(context, builder, signature, args):
            ptr = builder.inttoptr(args[0], ir.IntType(bits).as_pointer())
            v = args[1]
            if v.type.width > bits:
                v = builder.trunc(v, ir.IntType(bits))
            elif v.type.width < bits:
                v = builder.zext(v, ir.IntType(bits))
            builder.store(v, ptr, align=1)
            return context.get_dummy_value()

        return types.void(addr, val), codegen

    store.__doc__ = f"{bits}-bit store to an integer address (no bounds check)"
    return store


ld8, ld16, ld32, ld64 = _load(8), _load(16), _load(32), _load(64)
st8, st32, st64 = _store(8), _store(32), _store(64)


def _unary_intrinsic(emit, doc: str):
    """A uint64 -> uint64 intrinsic whose LLVM code is ``emit(builder, x)``."""
    @intrinsic
    def op(typingctx, x):
        sig = types.uint64(types.uint64)

        def codegen(context, builder, signature, args):
            return emit(builder, args[0])

        return sig, codegen

    op.__doc__ = doc
    return op


def _call_llvm(name: str):
    """`emit` for `_unary_intrinsic`: a call of the LLVM function `name` (uint64 -> uint64)."""
    def emit(builder, x):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), [x])

    return emit


_DEFINED_AT_ZERO = ir.Constant(ir.IntType(1), 0)  # cttz/ctlz's is_zero_poison=false: 64 for 0

popcnt = _unary_intrinsic(_call_llvm("llvm.ctpop.i64"),
                          "Set bits of a uint64 (one popcnt instruction where the CPU has it).")
ctz64 = _unary_intrinsic(lambda builder, x: builder.cttz(x, _DEFINED_AT_ZERO),
                         "Trailing zero count of a uint64 (64 for 0).")
clz64 = _unary_intrinsic(lambda builder, x: builder.ctlz(x, _DEFINED_AT_ZERO),
                         "Leading zero count of a uint64 (64 for 0).")


def _bmi2_intrinsic(name: str, doc: str):
    @intrinsic
    def op(typingctx, x, m):
        sig = types.uint64(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(64)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, name)
            return builder.call(fn, args)

        return sig, codegen

    op.__doc__ = doc
    return op


@njit(inline="always")
def pdep_portable(c, m):
    """Deposit the low bits of c at the set bits of m, ascending (portable loop)."""
    x = _ZERO
    while m != _ZERO:
        low = m & (~m + _ONE)
        if c & _ONE:
            x |= low
        c >>= _ONE
        m ^= low
    return x


@njit(inline="always")
def pext_portable(x, m):
    """Gather the bits of x at the set bits of m into the low bits, ascending (portable loop)."""
    c = _ZERO
    k = 0
    while m != _ZERO:
        low = m & (~m + _ONE)
        if x & low:
            c |= _ONE << np.uint64(k)
        k += 1
        m ^= low
    return c


#: x86 BMI2 has pdep/pext as single instructions; elsewhere a bit loop stands in.
HAVE_BMI2 = bool(llvm.get_host_cpu_features().get("bmi2", False))
if HAVE_BMI2:
    pdep = _bmi2_intrinsic("llvm.x86.bmi.pdep.64", "pdep(c, m) in one instruction")
    pext = _bmi2_intrinsic("llvm.x86.bmi.pext.64", "pext(x, m) in one instruction")
else:  # pragma: no cover - every x86-64 since 2013 has BMI2
    pdep, pext = pdep_portable, pext_portable


# --------------------------------------------------------------------------- bit stream
@njit(inline="always")
def put_bits(op, acc, nacc, v, n, limit):
    """Append the n low bits of v (0 <= n <= 64, v < 2**n) to the stream at address op.

    Branch-free: the 64-bit accumulator is stored at op on every call (when 8 bytes fit
    below `limit`, the row's end, so a row never touches its neighbour's bytes) and op
    advances by 8 once the accumulator is full; the bits of v that did not fit carry over.
    Returns the new (op, acc, nacc).
    """
    acc |= v << np.uint64(nacc)
    if op + 8 <= limit:
        st64(op, acc)
    total = nacc + n
    full = total >> 6
    spill = (v >> _ONE) >> np.uint64(63 - nacc)  # v >> (64 - nacc), 0 when nacc == 0
    acc = spill if full else acc  # a full accumulator's 8 bytes lie inside the row: stored above
    op += full << 3
    return op, acc, total & 63


@njit(inline="always")
def get_bits(row, p, n):
    """n bits (0..64) at bit p of the stream starting at address row (reads 16 bytes).

    Branch-free: the second word is always read (the payload's tail padding keeps it in
    bounds) and shifted in by 64 - s in two steps, which gives 0 when s == 0.
    """
    b = row + (p >> 3)
    s = np.uint64(p & 7)
    w = (ld64(b) >> s) | ((ld64(b + 8) << _ONE) << (np.uint64(63) - s))
    return w & (((_ONE << np.uint64(n & 63)) - _ONE) | (_ZERO - np.uint64(n >> 6)))


def _prefetch_intrinsic(write: int, locality: int, doc: str):
    """An intrinsic prefetching the cache line at an integer address (llvm.prefetch: a hint, never faults)."""
    @intrinsic
    def op(typingctx, addr):
        def codegen(context, builder, signature, args):
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fn = builder.module.declare_intrinsic(
                "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
            builder.call(fn, [builder.inttoptr(args[0], i8p), ir.Constant(i32, write),
                              ir.Constant(i32, locality), ir.Constant(i32, 1)])  # 1: the data cache
            return context.get_dummy_value()

        return types.void(addr), codegen

    op.__doc__ = doc
    return op


prefetch = _prefetch_intrinsic(0, 0, "Intrinsic: a read prefetch of the cache line at an integer address, "
                                     "not kept past its use (a copied row).")
prefetch_write = _prefetch_intrinsic(1, 3, "Intrinsic: a prefetch for writing of the cache line at an integer "
                                           "address (output a kernel is about to store to).")


@njit(inline="always")
def copy_bytes(dst, src, n):
    """Copy n bytes between integer addresses: whole 8-byte words while at least 8 bytes
    remain, then single bytes, so nothing past dst + n is written (rows copied in parallel
    never overlap)."""
    q = 0
    while q + 8 <= n:
        st64(dst + q, ld64(src + q))
        q += 8
    while q < n:
        st8(dst + q, ld8(src + q))
        q += 1
