"""build_kernels: the parallel and the serial build of a kernel are compiled and cached apart."""
from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np

from ibp_graph.layout.bitstream import build_kernels

# Each process runs one build on a fresh cache folder and prints whether it came from the cache.
_PROBE = """
import sys, numpy as np
from ibp_graph.layout import rows
k = rows._gather_fixed[int(sys.argv[1])]
src = np.arange(64, dtype=np.uint64).reshape(8, 8)
out = np.empty((3, 8), np.uint64)
k(src, np.array([7, 0, 3]), out)
assert (out == src[[7, 0, 3]]).all()
print(bool(k.stats.cache_hits))
"""


def _loaded_from_cache(which: int, cache_dir) -> bool:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", _PROBE, str(which)], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()[-1] == "True"


def test_each_build_has_its_own_cache_entry(tmp_path):
    """The serial build must never load the parallel build's cached code, nor the other way
    round (numba keys its cache by name and signature, not by `parallel=`)."""
    assert not _loaded_from_cache(0, tmp_path)  # the parallel build compiles and is cached
    assert not _loaded_from_cache(1, tmp_path)  # the serial build compiles too (before: loaded the parallel code)
    assert _loaded_from_cache(1, tmp_path) and _loaded_from_cache(0, tmp_path)  # each from its own entry


def test_both_builds_compute_the_same():
    def add_one(a, out):
        for i in numba.prange(a.shape[0]):
            out[i] = a[i] + 1

    parallel, serial = build_kernels(add_one)
    a = np.arange(10_000)
    x, y = np.empty_like(a), np.empty_like(a)
    parallel(a, x)
    serial(a, y)
    assert (x == a + 1).all() and (y == x).all()
    assert serial.py_func.__qualname__ == parallel.py_func.__qualname__ + "_serial"
