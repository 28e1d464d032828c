"""What crosses the Python / CUDA boundary, declared once: every kernel entry point with its
parameter block, the device table records, and the error slots.

The kernels in ``kernels/*.cu`` mirror these declarations (C parameter lists, structs and
macros); tests/gpu/test_launch.py parses those sources and fails on any difference in
order, name or type. A launch is packed from a :class:`ParamBlock` by parameter name
(:meth:`ParamBlock.pack`), so a missing, extra or misplaced argument raises before the
driver sees it.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Mapping

import numpy as np

#: kernel sources shipped in the ``ibp_graph.kernels`` package (the repo's ``kernels/``).
KERNEL_SOURCES: tuple[str, ...] = ("ibp_decode.cu", "ebp_decode.cu")
#: group sizes (lanes per row) the IBP decoder is instantiated for.
GROUP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: access widths (bytes) the raw-row gather is instantiated for.
GATHER_WIDTHS: tuple[int, ...] = (1, 2, 4, 8, 16)
#: element widths (bits) the EBP decoder is instantiated for.
EBP_WIDTHS: tuple[int, ...] = (8, 16, 32, 64)
#: threads per block every entry point is compiled for (its __launch_bounds__).
MAX_THREADS = 256
#: widest row (bytes) the EBP decoder takes: its bit positions past the row's header are 32-bit
#: and stay below 16 * row_nbytes + 128 (kernels/ebp_decode.cu), so 2**31 + 128 at most.
EBP_MAX_ROW_NBYTES = 2**27

#: error slot written by the kernels (atomicMin): the smallest output position whose index
#: is out of range (IBP_ERR_INDEX in kernels/ibp_decode.cuh).
ERR_INDEX = 0
#: error slot of the smallest table row whose offsets or bit stream are inconsistent
#: (IBP_ERR_CORRUPT).
ERR_CORRUPT = 1
#: number of error slots a launch gets.
N_ERR_SLOTS = 2

# ctypes of the scalar C types the kernels take (typedefs of kernels/ibp_decode.cuh).
_SCALARS = {"int": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64,
            "u64": ctypes.c_uint64}
# the values each of those ctypes holds (pointers travel as c_uint64), lowest and highest.
_RANGES = {ctypes.c_int32: (-2**31, 2**31 - 1), ctypes.c_uint32: (0, 2**32 - 1),
           ctypes.c_int64: (-2**63, 2**63 - 1), ctypes.c_uint64: (0, 2**64 - 1)}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name and C type as the kernel spells it ("const u8*", "i64")."""

    name: str
    ctype: str

    @property
    def is_pointer(self) -> bool:
        """Whether the parameter is a pointer (passed as a 64-bit address)."""
        return self.ctype.endswith("*")

    @property
    def ctypes_type(self):
        """The ctypes type the driver reads this parameter's value as."""
        if self.is_pointer:
            return ctypes.c_uint64
        return _SCALARS[self.ctype]

    def value(self, v):
        """`v` as this parameter's ctypes value; ValueError naming the parameter if `v` is out
        of its C type's range (ctypes would wrap it silently)."""
        v = int(v)
        lo, hi = _RANGES[self.ctypes_type]
        if not lo <= v <= hi:
            raise ValueError(f"kernel parameter {self.name!r} ({self.ctype}) = {v} is out of "
                             f"range; accepted: {lo} <= {self.name} <= {hi}")
        return self.ctypes_type(v)


class ParamBlock:
    """An ordered kernel parameter list; packs a launch's arguments given by name."""

    def __init__(self, *params: tuple[str, str]):
        self.params = tuple(Param(n, t) for n, t in params)
        for p in self.params:
            if not p.is_pointer and p.ctype not in _SCALARS:
                raise ValueError(f"parameter {p.name!r} has C type {p.ctype!r}; accepted: a "
                                 f"pointer or one of {sorted(_SCALARS)}")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"parameter names repeat: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        """The parameter names, in the kernel's order."""
        return tuple(p.name for p in self.params)

    def pack(self, args: Mapping[str, int]):
        """(values, params): ctypes values of `args` in parameter order, and the void*[]
        cuLaunchKernel reads them from. Keep `values` alive until the launch returns.

        Raises TypeError naming the parameters that are missing or not the kernel's, and
        ValueError naming a parameter whose value its C type cannot hold.
        """
        missing = [n for n in self.names if n not in args]
        extra = sorted(set(args) - set(self.names))
        if missing or extra:
            raise TypeError(f"kernel arguments do not match its parameters: missing {missing}, "
                            f"not parameters {extra}; accepted: exactly {list(self.names)}")
        values = [p.value(args[p.name]) for p in self.params]
        params = (ctypes.c_void_p * max(1, len(values)))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        return values, params


@dataclass(frozen=True)
class Entry:
    """A kernel entry point: the source that defines it and its parameter block."""

    name: str
    source: str
    params: ParamBlock


# --------------------------------------------------------------------------- parameter blocks
#: ibp_decode_w{W}_g{G}: decode (index null) or gather + decode IBP rows.
IBP_DECODE = ParamBlock(
    ("payload", "const u8*"), ("offsets", "const void*"), ("off64", "int"),
    ("index", "const i64*"), ("n_out", "i64"), ("n_rows", "i64"), ("payload_nbytes", "i64"),
    ("cols", "const IbpColumn*"), ("runs", "const u32*"), ("n_words", "int"),
    ("row_nbytes", "int"), ("header_bits", "int"), ("store_unit", "int"), ("cap_bytes", "int"),
    ("out", "u8*"), ("err", "u64*"),
)
#: ibp_gather_v{VW}: zero-copy gather of fixed-stride raw rows.
RAW_GATHER = ParamBlock(
    ("table", "const u8*"), ("n_rows", "i64"), ("row_nbytes", "i64"), ("index", "const i64*"),
    ("n_out", "i64"), ("lanes", "int"), ("out", "u8*"), ("err", "u64*"),
)
#: ebp_decode_w{W}: decode EBP rows through offsets, or from a gather's scratch slots.
EBP_DECODE = ParamBlock(
    ("payload", "const u8*"), ("offsets", "const void*"), ("off64", "int"),
    ("index", "const i64*"), ("starts", "const i64*"), ("lens", "const int*"), ("n_out", "i64"),
    ("n_rows", "i64"), ("payload_nbytes", "i64"), ("colinfo", "const EbpColumn*"),
    ("defaults", "const u64*"), ("dlut", "const u16*"), ("dict", "const u64*"), ("d", "int"),
    ("row_nbytes", "int"), ("sparse", "int"), ("HE", "int"), ("LS", "int"), ("IB", "int"),
    ("low_total", "int"), ("out", "u8*"), ("err", "u64*"),
)
#: ebp_gather: copy the selected compressed rows into device scratch slots.
EBP_GATHER = ParamBlock(
    ("payload", "const u8*"), ("offsets", "const void*"), ("off64", "int"),
    ("index", "const i64*"), ("n_out", "i64"), ("n_rows", "i64"), ("payload_nbytes", "i64"),
    ("row_nbytes", "int"), ("stride", "i64"), ("scratch", "u8*"), ("starts", "i64*"),
    ("lens", "int*"), ("err", "u64*"),
)

#: every kernel entry point, by name.
KERNELS: dict[str, Entry] = {
    e.name: e for e in (
        *(Entry(f"ibp_decode_w{W}_g{G}", "ibp_decode.cu", IBP_DECODE)
          for W in (32, 64) for G in GROUP_SIZES),
        *(Entry(f"ibp_gather_v{v}", "ibp_decode.cu", RAW_GATHER) for v in GATHER_WIDTHS),
        *(Entry(f"ebp_decode_w{W}", "ebp_decode.cu", EBP_DECODE) for W in EBP_WIDTHS),
        Entry("ebp_gather", "ebp_decode.cu", EBP_GATHER),
    )
}

# --------------------------------------------------------------------------- table records
#: one column of the IBP decoder's table (struct IbpColumn, kernels/ibp_decode.cuh).
IBP_COLUMN = np.dtype([("bitval_lo", "<u4"), ("bitval_hi", "<u4"), ("widths", "<u4"),
                       ("runs_at", "<u4")], align=True)
#: one column of the EBP decoder's table (struct EbpColumn, kernels/ebp_decode.cu).
EBP_COLUMN = np.dtype([("low_at", "<u4"), ("tid", "<u4"), ("sparse_tid", "<u4"),
                       ("low_bits", "<u4")], align=True)
#: the C structs the records mirror, by C name.
RECORDS: dict[str, np.dtype] = {"IbpColumn": IBP_COLUMN, "EbpColumn": EBP_COLUMN}

# Bit fields of IbpColumn.widths and of a runs-array entry (see kernels/ibp_decode.cuh).
#: widths: free bits of the column in bits 0..7, its number of runs in bits 8..15,
#: run 0 in bits 16.. (shift in the low RUN0_SHIFT_BITS, length above).
WIDTHS_RUNS_SHIFT, WIDTHS_RUN0_SHIFT, RUN0_SHIFT_BITS = 8, 16, 6
#: a further run: shift in bits 0..7, length in 8..15, first source bit in 16..23.
RUN_LENGTH_SHIFT, RUN_SRC_SHIFT = 8, 16
