"""IBP rows wider than the other emulation tests use (up to past the 48 KB default
shared memory), under the warp emulation, launched with the block size and dynamic shared memory
that ibp_graph.gpu.ibp.launch_decode itself picks for them (fewer threads for wide rows, opt-in
shared memory above 48 KB). The other emulated IBP decodes use rows of at most 512 bytes and a
fixed 64-thread block, so the staging buffer size (stage_bytes), the per-group slicing of the
dynamic shared memory and the extraction clamp (qmax) were never exercised at these widths.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ibp_graph.codec import IBPCodec
from ibp_graph.gpu import abi
from ibp_graph.gpu import ibp as D
from ibp_graph.gpu import runtime as rt
from ibp_graph.gpu.operands import RowSource

from tests.gpu.emulation import emulator_fixture, expect_rows, new_seed, row_bytes
from tests.gpu.test_ibp_compile import HARNESS, IbpEmulator, adversarial_rows

emulator = emulator_fixture(IbpEmulator, "emu", HARNESS, abi.KERNEL_SOURCES)


def launch_shape(codec, monkeypatch) -> tuple[int, int]:
    """(block, dynamic shared memory) launch_decode picks for `codec` on an H100/H200-like device."""
    got = {}
    monkeypatch.setattr(rt, "get_kernel", lambda name, device: rt.Kernel(name, device, None, 1))
    monkeypatch.setattr(rt, "occupancy", lambda kernel, block, smem: 1)
    monkeypatch.setattr(rt, "sm_count", lambda device: 132)
    monkeypatch.setattr(rt, "max_shared_optin", lambda device: 227 * 1024)
    monkeypatch.setattr(rt, "ensure_shared", lambda kernel, nbytes: None)
    monkeypatch.setattr(rt, "launch", lambda kernel, grid, block, args, shared_mem=0, stream=None:
                        got.update(block=block, smem=shared_mem, cap=args["cap_bytes"]))
    tabs = D.host_tables(codec)
    t = torch.zeros(8, dtype=torch.int64)
    src = RowSource(payload=0, payload_nbytes=1 << 20, offsets=0, off64=True, index=None, n_out=10,
                    n_rows=10)

    class _T:  # stand-ins for the uploaded tables' device tensors
        def data_ptr(self):
            return 0

    tabs = type(tabs)(**{**tabs.__dict__, "cols": _T(), "runs": _T()})
    D.launch_decode(tabs, src, t, t, torch.device("cpu"))
    G = D.group_size(codec.n_words)
    assert got["smem"] == (got["block"] // G) * got["cap"]
    return got["block"], got["smem"]


# (elements, W): 4 KB rows (256 threads, 32 KB), 12 KB rows (128 threads), 52 KB rows (32 threads,
# opt-in shared memory above 48 KB)
WIDE = [(1000, 32), (3000, 64), (13_000, 32)]


@pytest.mark.parametrize("elems,W", WIDE, ids=[f"{e}xf32-w{w}" for e, w in WIDE])
def test_emulated_wide_rows_with_the_hosts_launch_shape(emulator, tmp_path, monkeypatch, elems, W):
    seed = new_seed()
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, 6, (elems,), torch.float32, raw_fraction=0.3)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    block, smem = launch_shape(codec, monkeypatch)
    assert block in (32, 64, 128, 256)
    if elems == 13_000:
        assert block == 32 and smem > rt.DEFAULT_SHARED  # the opt-in path
    # the whole tensor in order, then a gather with repeats at an odd payload alignment
    out, err = emulator.decode(tmp_path, codec, ct, block=block, grid=2)
    assert err == [None, None], f"seed={seed}"
    assert np.array_equal(out, row_bytes(x)), f"seed={seed}"
    index = np.array([5, 0, 5, 3, 1], dtype=np.int64)
    out, err = emulator.decode(tmp_path, codec, ct, index, block=block, grid=1, payload_shift=7,
                               out_shift=4)
    assert err == [None, None], f"seed={seed}"
    assert np.array_equal(out, expect_rows(codec, ct, index)), f"seed={seed}"
