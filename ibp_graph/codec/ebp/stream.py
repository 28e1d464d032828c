"""EBP's pieces of the bit stream: low-bit masks, bit lengths and Elias-gamma counts (numba)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ...layout.bitstream import ctz64, get_bits, put_bits

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(inline="always")
def lowmask(n):
    """The n low bits set, 0 <= n <= 64."""
    if n >= 64:
        return _ALL
    return (_ONE << np.uint64(n)) - _ONE


@njit(inline="always")
def bitlen(v):
    """Bits needed for v >= 0 (0 for 0)."""
    b = 0
    while v > 0:
        v >>= 1
        b += 1
    return b


@njit(inline="always")
def put_gamma(op, acc, nacc, v, limit):
    """Elias-gamma code of v >= 1 (v < 2**32): b-1 zeros, a one, then the b-1 bits under v's top bit."""
    b = bitlen(v)
    uv = np.uint64(v)
    top = _ONE << np.uint64(b - 1)
    code = top | ((uv ^ top) << np.uint64(b))
    return put_bits(op, acc, nacc, code, 2 * b - 1, limit)


@njit(inline="always")
def get_gamma(row, p):
    """(v, new p) of a gamma code at bit p; v = 0 marks an invalid code (more than 31 zeros)."""
    w = get_bits(row, p, 64)
    z = int(ctz64(w))
    if z > 31:
        return 0, p
    v = (1 << z) | int((w >> np.uint64(z + 1)) & lowmask(z))
    return v, p + 2 * z + 1


@njit(inline="always")
def gamma_bits(v):
    """Bits of the Elias-gamma code of v >= 1."""
    return 2 * bitlen(v) - 1
