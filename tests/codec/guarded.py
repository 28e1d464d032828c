"""Guard pages for the decoders' bounds tests (tests/codec/test_out_of_bounds.py).

The numba decoders read their payload with raw 8-byte loads at computed addresses. A read
past the end of the buffer normally lands in other heap memory and goes unnoticed; here a
payload is copied into an anonymous mapping laid out as

    [PROT_NONE page] [data pages ...] [PROT_NONE page]

with its bytes flush against the last guard page (``at="end"``: any read past the last
byte faults) or against the first (``at="start"``: any read below the first byte faults).
A fault kills the process, so the cases run in a child process (``run_child``): it writes
each case to a log before decoding it, and the parent turns a death by signal into a test
failure that names the case and shows the child's faulthandler traceback.
"""
from __future__ import annotations

import ctypes
import faulthandler
import json
import mmap
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PAGE = mmap.PAGESIZE
_PROT_NONE = 0
_REPO = Path(__file__).resolve().parents[2]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int

#: the mappings made so far: kept alive for the life of the process (numpy views export their buffers,
#: and a guarded array must never be unmapped while anything may still read it).
_KEEP: list = []


def guarded_bytes(data, at: str = "end") -> np.ndarray:
    """A writable 1-d uint8 array holding `data` whose last byte is followed (at="end") or whose first byte
    is preceded (at="start") by an inaccessible page: any read outside it faults."""
    if at not in ("end", "start"):
        raise ValueError(f"at={at!r}; accepted: 'end' or 'start'")
    src = np.frombuffer(bytes(data), dtype=np.uint8)
    n = src.shape[0]
    pages = max(1, -(-n // PAGE))
    m = mmap.mmap(-1, (pages + 2) * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                  prot=mmap.PROT_READ | mmap.PROT_WRITE)
    whole = np.frombuffer(m, dtype=np.uint8)
    base = whole.ctypes.data
    assert base % PAGE == 0
    for guard in (base, base + (pages + 1) * PAGE):
        if _libc.mprotect(guard, PAGE, _PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect(PROT_NONE) failed")
    start = PAGE + (pages * PAGE - n if at == "end" else 0)
    arr = whole[start:start + n]
    arr[:] = src
    _KEEP.append((m, whole))
    return arr


def guarded_tensor(data, at: str = "end"):
    """guarded_bytes as a torch uint8 tensor (sharing the guarded memory)."""
    import torch

    return torch.from_numpy(guarded_bytes(data, at))


class CaseLog:
    """Writes each case (a JSON line) before it runs, flushed to the OS (which keeps it when the process dies),
    so the parent can name the case a child died on."""

    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1)

    def __call__(self, **case) -> None:
        self.f.write(json.dumps(case, default=_jsonable) + "\n")
        self.f.flush()


def _jsonable(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return repr(v)


def child_main() -> None:
    """Entry of the child: ``python -c 'from tests.codec.guarded import child_main; child_main()' MODULE FUNC LOG
    [JSON ARGS]``; runs MODULE.FUNC(log, *ARGS) with faulthandler on."""
    faulthandler.enable(all_threads=True)
    module, func, log = sys.argv[1:4]
    args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else []
    import importlib

    getattr(importlib.import_module(module), func)(CaseLog(log), *args)


def run_child(func, *args, timeout: float = 240) -> int:
    """Run `func(log, *args)` (a module-level function) in a child process; fail the calling test with the
    case it was decoding when it died by a signal (a read outside a guarded buffer) or raised. Returns how
    many cases it logged."""
    import pytest

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "cases.jsonl")
        code = "from tests.codec.guarded import child_main; child_main()"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])))
        env.setdefault("PYTHONFAULTHANDLER", "1")
        proc = subprocess.run([sys.executable, "-c", code, func.__module__, func.__name__, log, json.dumps(args)],
                              cwd=_REPO, env=env, capture_output=True, text=True, timeout=timeout)
        cases = Path(log).read_text().splitlines() if os.path.exists(log) else []
    if proc.returncode != 0:
        last = cases[-1] if cases else "(none logged)"
        if proc.returncode < 0:
            sig = signal.Signals(-proc.returncode).name
            what = f"died by {sig}: a decoder read outside its guarded buffer"
        else:
            what = f"failed (exit status {proc.returncode})"
        pytest.fail(f"{func.__name__}{tuple(args)} {what}\nlast case ({len(cases)} run): {last[:4000]}\n"
                    f"--- child stderr (tail) ---\n{proc.stderr[-6000:]}", pytrace=False)
    return len(cases)
