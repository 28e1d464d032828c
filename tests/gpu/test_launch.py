"""Every kernel launch's host side, without a GPU: a stand-in for ibp_graph.gpu.runtime
records the launches that the real entry points (fetch_ibp, gather_rows, fetch_ebp and the
decoders' launch helpers) make, and each is checked against the kernel's signature read off
kernels/*.cu: one argument per parameter, of the parameter's width (a pointer or int64 where
the kernel takes an `int` would shift every later argument), carrying the right value (the
payload where the payload goes, n_out where n_out goes, ...). Launch shapes are checked
against the hardware and the kernels' __launch_bounds__ for inputs far beyond any test
(2**40 rows, rows from 1 byte to past the shared-memory limit), and an empty input must not
launch at all (a grid of 0 is a launch error).

What this cannot check: that the driver receives what `launch` packs (tests/gpu/test_ibp_compile.py's
test_launch_parameters_pack_exactly does), and anything the GPU itself does.
"""
from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict

import numpy as np
import pytest
import torch

from ibp_graph.codec import CorruptPayloadError, EBPCodec, IBPCodec
from ibp_graph.layout.tensor import device_with_index
from ibp_graph.gpu import ibp_decode as D
from ibp_graph.gpu import ebp_decode as E
from ibp_graph.gpu import runtime as rt

SM_COUNT = 132            # an H200
SMEM_OPTIN = 227 * 1024   # its opt-in shared memory per block
MAX_GRID_X = 2**31 - 1
_WIDTH = {"PTR": rt.PTR, "I32": rt.I32, "I64": rt.I64}
_SCALAR = {"int": "I32", "u32": "I32", "unsigned": "I32", "i64": "I64", "u64": "I64",
           "long long": "I64"}


# --------------------------------------------------------------------------- signatures
def kernel_signatures() -> dict[str, tuple[int, list[tuple[str, str]]]]:
    """{kernel name: (launch bound, [(kind, parameter name), ...])} for every entry point,
    read off the sources (macro-generated names expanded against rt.KERNELS)."""
    found = {}
    for source in rt.KERNEL_SOURCES:
        text = rt.read_source(source).replace("\\\n", " ")
        for m in re.finditer(r'extern "C" __global__ void __launch_bounds__\((\d+)\)\s+([\w#]+)\s*'
                             r"\((.*?)\)\s*\{", text, re.S):
            bound, template, params = int(m.group(1)), m.group(2), m.group(3)
            pattern = re.sub(r"##[A-Za-z_]+(?:##)?", "[0-9]+", template)
            sig = []
            for p in params.split(","):
                p = " ".join(p.split())
                name = p.replace("*", " ").split()[-1]
                if "*" in p:
                    sig.append(("PTR", name))
                else:
                    base = " ".join(t for t in p.split()[:-1] if t != "const")
                    assert base in _SCALAR, f"{template}: parameter {p!r} of unknown width"
                    sig.append((_SCALAR[base], name))
            for k, src in rt.KERNELS.items():
                if src == source and re.fullmatch(pattern, k):
                    found[k] = (bound, sig)
    return found


SIGNATURES = kernel_signatures()


def test_every_entry_point_has_a_signature():
    assert set(SIGNATURES) == set(rt.KERNELS)
    bound, sig = SIGNATURES["ibp_gather_v16"]
    assert bound == 256 and sig[1] == ("I64", "n_rows") and sig[5] == ("I32", "lanes")


# --------------------------------------------------------------------------- fake runtime
@dataclasses.dataclass
class Launch:
    name: str
    grid: int
    block: int
    shared_mem: int
    optin: int           # dynamic shared memory the kernel was allowed (ensure_shared)
    values: dict         # parameter name -> value, after the kind check

    def __getitem__(self, key):
        return self.values[key]


class FakeRuntime:
    """Records launches, checks each against its kernel's signature on the spot."""

    def __init__(self):
        self.launches: list[Launch] = []
        self.optin: dict[str, int] = {}

    def get_kernel(self, name, device):
        assert name in rt.KERNELS, name
        return rt.Kernel(name, device, None, 0x1000)

    def occupancy(self, kernel, block, shared_mem):
        static = 33 * 1024 if kernel.name.startswith("ebp_decode") else 0
        return max(1, min(2048 // block, (228 * 1024) // max(1, shared_mem + static), 32))

    def ensure_shared(self, kernel, nbytes):
        assert nbytes <= SMEM_OPTIN
        self.optin[kernel.name] = max(self.optin.get(kernel.name, 48 * 1024), nbytes)

    def launch(self, kernel, grid, block, args, shared_mem=0, stream=None):
        bound, sig = SIGNATURES[kernel.name]
        kinds = [kind for kind, _ in args]
        want = [_WIDTH[k] for k, _ in sig]
        assert len(args) == len(sig), (kernel.name, len(args), [n for _, n in sig])
        assert kinds == want, f"{kernel.name}: argument widths differ from the kernel's parameters"
        values, _ = rt.pack_params(args)  # what the driver would read
        self.launches.append(Launch(kernel.name, int(grid), int(block), int(shared_mem),
                                    self.optin.get(kernel.name, 48 * 1024),
                                    {n: v.value for (_, n), v in zip(sig, values)}))
        assert 1 <= grid <= MAX_GRID_X and 32 <= block <= bound and block % 32 == 0, \
            (kernel.name, grid, block)


@pytest.fixture
def fake(monkeypatch):
    """The CUDA runtime replaced by FakeRuntime; host tensors stand in for device ones."""
    f = FakeRuntime()
    for name in ("get_kernel", "occupancy", "ensure_shared", "launch"):
        monkeypatch.setattr(rt, name, getattr(f, name))
    monkeypatch.setattr(rt, "sm_count", lambda device: SM_COUNT)
    monkeypatch.setattr(rt, "max_shared_optin", lambda device: SMEM_OPTIN)
    for mod in (D, E):
        monkeypatch.setattr(mod, "_target_device", lambda *a: torch.device("cpu"))
        monkeypatch.setattr(mod, "_operand_pointer", lambda t, argname, device: int(t.data_ptr()))
        monkeypatch.setattr(mod, "_tables", OrderedDict())  # no host tables in the real cache
    return f


def _grid_covers(launch: Launch, n_out: int, rows_per_block: int) -> None:
    """The grid is the work's block count, capped at what is resident (grid-stride loops)."""
    need = -(-n_out // rows_per_block)
    assert 1 <= launch.grid <= min(need, 32 * SM_COUNT)
    if need <= SM_COUNT:
        assert launch.grid == need


# --------------------------------------------------------------------------- IBP
IBP_CASES = [(torch.float32, (128,), 32), (torch.float32, (128,), 64), (torch.int8, (3,), 32),
             (torch.float16, (40,), 64), (torch.float64, (5,), 32), (torch.bool, (13,), 64)]


@pytest.mark.parametrize("dtype,row_shape,W", IBP_CASES)
@pytest.mark.parametrize("off64", [False, True])
def test_ibp_fetch_arguments(fake, dtype, row_shape, W, off64):
    x = torch.zeros((50,) + row_shape, dtype=dtype)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    if off64:
        ct = dataclasses.replace(ct, offsets=ct.offsets.to(torch.int64))
    index = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6], dtype=torch.int64)
    out = D.fetch_ibp(codec, ct, index)
    (ln,) = fake.launches
    G = D.group_size(codec.n_words)
    assert ln.name == f"ibp_decode_w{W}_g{G}"
    assert ln["payload"] == ct.payload.data_ptr() and ln["offsets"] == ct.offsets.data_ptr()
    assert ln["off64"] == int(off64)
    assert ln["index"] != 0 and ln["n_out"] == 8 and ln["n_rows"] == 50
    assert ln["payload_nbytes"] == ct.payload.numel()
    assert ln["n_words"] == codec.n_words and ln["row_nbytes"] == codec.row_nbytes
    assert ln["header_bits"] == codec.header_bits and ln["cap_bytes"] == D.stage_bytes(codec.row_nbytes)
    unit = ln["store_unit"]
    assert unit in (1, 2, 4, 8) and (W // 8) % unit == 0 and codec.row_nbytes % unit == 0
    assert ln["out"] == out.data_ptr() and ln["err"] != 0 and ln["cols"] != 0 and ln["runs"] != 0
    assert ln.shared_mem == (ln.block // G) * ln["cap_bytes"]


@pytest.mark.parametrize("n_out", [1, 31, 4096, 10**6, 2**31 + 5, 2**40])
@pytest.mark.parametrize("row_elems", [1, 2, 3, 17, 128, 3000, 16_000, 50_000])
def test_ibp_launch_shapes_within_limits(fake, n_out, row_elems):
    """Any row count (grid-stride: the grid never exceeds the resident blocks), any row width
    up to the opt-in shared memory (fewer threads, opt-in above 48 KB)."""
    codec = IBPCodec.fit(torch.zeros(4, row_elems), word_bits=32)
    payload = torch.zeros(64, dtype=torch.uint8)
    offsets = torch.zeros(5, dtype=torch.int64)
    out, err = torch.zeros(1), torch.zeros(2, dtype=torch.int64)
    D._launch_decode(codec, payload.data_ptr(), 2**40, offsets, offsets.data_ptr(), None, n_out,
                     n_out, out, torch.device("cpu"), err)
    (ln,) = fake.launches
    G = D.group_size(codec.n_words)
    groups = ln.block // G
    assert groups >= 1 and ln.shared_mem == groups * D.stage_bytes(codec.row_nbytes)
    assert ln.shared_mem <= ln.optin <= SMEM_OPTIN
    _grid_covers(ln, n_out, groups)
    assert ln["n_out"] == n_out  # int64 parameter: no truncation above 2**31


def test_ibp_rows_past_shared_memory_are_refused(fake):
    codec = IBPCodec.fit(torch.zeros(2, 60_000), word_bits=64)  # 240 KB rows
    t = torch.zeros(8, dtype=torch.int64)
    with pytest.raises(ValueError, match="shared memory"):
        D._launch_decode(codec, 0, 0, t, 0, None, 1, 1, t, torch.device("cpu"), t)
    assert fake.launches == []


@pytest.mark.parametrize("row_nbytes,align", [(512, 0), (6, 2), (7, 3), (12_000, 4), (1, 1)])
def test_gather_rows_arguments(fake, row_nbytes, align):
    big = torch.zeros(40 * row_nbytes + 16, dtype=torch.uint8)
    table = big[align:align + 40 * row_nbytes].view(40, row_nbytes)
    index = torch.arange(39, -1, -3)
    out = D.gather_rows(table, index)
    (ln,) = fake.launches
    vw = int(ln.name.rsplit("v", 1)[1])
    assert row_nbytes % vw == 0 and ln["table"] % vw == 0 and ln["out"] % vw == 0
    assert ln["table"] == table.data_ptr() and ln["out"] == out.data_ptr()
    assert (ln["n_rows"], ln["row_nbytes"], ln["n_out"]) == (40, row_nbytes, index.numel())
    assert ln["lanes"] == D.group_size(row_nbytes // vw) and ln["index"] != 0 and ln["err"] != 0


def test_empty_inputs_never_launch(fake):
    x = torch.randn(20, 8)
    for codec, fetch in ((IBPCodec.fit(x), D.fetch_ibp), (EBPCodec.fit(x), E.fetch_ebp)):
        ct = codec.encode(x)
        assert fetch(codec, ct, torch.zeros(0, dtype=torch.int64)).shape == (0, 8)
        assert fetch(codec, codec.encode(x[:0]), torch.zeros(0, dtype=torch.int64)).shape == (0, 8)
    assert D.gather_rows(x, torch.zeros(0, dtype=torch.int64)).shape == (0, 8)
    assert fake.launches == []


# --------------------------------------------------------------------------- EBP
EBP_CASES = [(torch.float32, (128,)), (torch.float16, (7,)), (torch.int64, (3,)),
             (torch.uint8, (33,)), (torch.bool, (5,))]


@pytest.mark.parametrize("dtype,row_shape", EBP_CASES)
def test_ebp_zero_copy_fetch_arguments(fake, dtype, row_shape):
    """A host table: ebp_gather copies the rows into scratch, ebp_decode reads them there."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, 3, (60,) + row_shape)).to(dtype)
    codec = EBPCodec.fit(x)
    ct = codec.encode(x)
    index = torch.tensor([5, 0, 59, 7, 7], dtype=torch.int64)
    out = E.fetch_ebp(codec, ct, index)
    gather, dec = fake.launches
    assert gather.name == "ebp_gather" and dec.name == f"ebp_decode_w{codec.word_bits}"
    rb, stride = codec.row_nbytes, E.scratch_stride(codec.row_nbytes)
    assert gather["payload"] == ct.payload.data_ptr() and gather["offsets"] == ct.offsets.data_ptr()
    assert gather["off64"] == 0 and gather["n_out"] == 5 and gather["n_rows"] == 60
    assert gather["payload_nbytes"] == ct.payload.numel() and gather["row_nbytes"] == rb
    assert gather["stride"] == stride and gather["stride"] % 16 == 0
    # the decoder reads the gathered rows: scratch, starts and lens, no offsets
    assert dec["payload"] == gather["scratch"] and dec["offsets"] == 0 and dec["off64"] == 0
    assert (dec["starts"], dec["lens"], dec["index"]) == (gather["starts"], gather["lens"], gather["index"])
    assert dec["n_out"] == 5 and dec["n_rows"] == 60 and dec["out"] == out.data_ptr()
    assert dec["err"] == gather["err"]
    t = codec.tables
    assert (dec["d"], dec["row_nbytes"], dec["sparse"]) == (t.d, rb, int(t.sparse))
    assert (dec["HE"], dec["LS"], dec["IB"], dec["low_total"]) == (t.HE, t.LS, t.IB, t.low_total)
    assert all(dec[k] != 0 for k in ("colinfo", "defaults", "dlut", "dict"))


@pytest.mark.parametrize("off64", [False, True])
def test_ebp_decode_from_offsets_arguments(fake, off64):
    x = torch.randn(30, 16)
    codec = EBPCodec.fit(x)
    ct = codec.encode(x)
    offsets = ct.offsets.to(torch.int64) if off64 else ct.offsets
    out, err = torch.empty(30, 16), torch.zeros(2, dtype=torch.int64)
    E._launch_decode(codec, ct.payload.data_ptr(), ct.payload.numel(), offsets, offsets.data_ptr(),
                     None, None, None, 30, 30, out, torch.device("cpu"), err)
    (ln,) = fake.launches
    assert ln["off64"] == int(off64) and ln["offsets"] == offsets.data_ptr()
    assert (ln["index"], ln["starts"], ln["lens"]) == (0, 0, 0)
    assert ln["payload_nbytes"] == ct.payload.numel() and ln["out"] == out.data_ptr()


@pytest.mark.parametrize("n_out", [1, 33, 10**6, 2**40])
def test_ebp_launch_shapes_within_limits(fake, n_out):
    """256 threads (the static shared memory is sized for 8 warps), no dynamic shared memory."""
    codec = EBPCodec.fit(torch.randn(40, 16))
    t = torch.zeros(4, dtype=torch.int64)
    E._launch_decode(codec, 0, 2**40, t, 0, None, None, None, n_out, n_out, t,
                     torch.device("cpu"), t)
    E._launch_gather(0, 2**40, t, 0, t, n_out, n_out, 64, 128, t, t, t, torch.device("cpu"), t)
    dec, gather = fake.launches
    assert dec.block == E.THREADS == 256 and dec.shared_mem == 0
    _grid_covers(dec, n_out, 256)     # a warp decodes 32 rows
    _grid_covers(gather, n_out, 8)    # a warp gathers one row
    assert dec["n_out"] == gather["n_out"] == n_out


# --------------------------------------------------------------------------- devices
def test_cuda_without_index_is_the_current_device(monkeypatch):
    """A target of "cuda" is compared with tensors' "cuda:N" only once resolved."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert device_with_index("cuda") == torch.device("cuda", 3)
    assert device_with_index(torch.device("cuda")) == torch.device("cuda", 3)
    assert device_with_index("cuda:1") == torch.device("cuda", 1)
    assert device_with_index("cpu") == torch.device("cpu")


def test_pending_checks_raise_the_first_failure_later():
    """PendingChecks (the decode stage's deferred error checks) raise, when asked, what an
    immediate check would have raised for the first failing call, then start empty."""
    checks = D.PendingChecks()
    offsets = torch.tensor([0, 5, 9, 20], dtype=torch.int32)
    index = torch.tensor([0, 7, 2])
    D._report(checks, torch.tensor([-1, -1]), None, 3, offsets, "ct")          # a clean launch
    D._report(checks, torch.tensor([1, -1]), index, 3, offsets, "table")       # index[1] = 7
    D._report(checks, torch.tensor([-1, 2]), None, 3, offsets, "ct")           # row 2 corrupt
    with pytest.raises(IndexError, match=r"index\[1\] = 7 is out of range for table with 3 rows"):
        checks.raise_first()
    checks.raise_first()  # emptied
    D._report(checks, torch.tensor([-1, 2]), None, 3, offsets, "ct")
    with pytest.raises(CorruptPayloadError, match=r"ct row 2 is corrupt \(offsets 9..20, 11 bytes\)"):
        checks.raise_first()
    assert checks  # truthy even when empty: `if check:` in the entry points must not skip it
    D._report(False, torch.tensor([0, 0]), index, 3, offsets, "ct")  # never checked
    with pytest.raises(CorruptPayloadError, match="row 0"):
        D._report(True, torch.tensor([-1, 0]), None, 3, offsets, "ct")
