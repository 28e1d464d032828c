"""Every kernel launch's host side, without a GPU.

1. What crosses the Python / CUDA boundary is declared once in ``ibp_graph.gpu.abi`` and
   mirrored in kernels/*.cu: each entry point's parameter list (order, name, C type), the
   table records (structs), the error slots and the bit fields of the IBP column record are
   read off the sources here and must equal the declarations.
2. A stand-in for ``ibp_graph.gpu.runtime`` records the launches that the real entry points
   (gpu.fetch, gpu.decode, gpu.gather_raw_rows and the launchers) make: each is packed by
   the declared parameter block (a missing or unknown name raises) and must carry the right
   value in each parameter (the payload where the payload goes, n_out where n_out goes, ...).
   Launch shapes are checked against the hardware and the kernels' __launch_bounds__ for
   inputs far beyond any test (2**40 rows, rows from 1 byte to past the shared-memory
   limit), and an empty input must not launch at all (a grid of 0 is a launch error).

What this cannot check: that the driver receives what the pack produces
(tests/gpu/test_ibp_compile.py's test_launch_parameters_pack_exactly does), and anything the
GPU itself does.
"""
from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ibp_graph import gpu
from ibp_graph.codec import CorruptPayloadError, EBPCodec, IBPCodec, IdentityCodec
from ibp_graph.gpu import abi, dispatch, operands, raw, tables
from ibp_graph.gpu import compiler as cc
from ibp_graph.gpu import ebp as E
from ibp_graph.gpu import ibp as D
from ibp_graph.gpu import runtime as rt
from ibp_graph.gpu.checks import check_checks, report
from ibp_graph.gpu.operands import RowSource

SM_COUNT = 132            # an H200
SMEM_OPTIN = 227 * 1024   # its opt-in shared memory per block
MAX_GRID_X = 2**31 - 1
CPU = torch.device("cpu")
_NP_CTYPE = {np.dtype("<u4"): "u32", np.dtype("<u8"): "u64", np.dtype("<u2"): "u16",
             np.dtype("<i4"): "int", np.dtype("<i8"): "i64"}


# --------------------------------------------------------------------------- the sources
def _sources() -> dict[str, str]:
    names = tuple(abi.KERNEL_SOURCES) + tuple(cc.header_names())
    return {n: cc.read_source(n).replace("\\\n", " ") for n in names}


def _ctype(decl: str) -> str:
    """'const u8 * ' -> 'const u8*': one spelling per C type."""
    return re.sub(r"\s*\*", "*", " ".join(decl.split()))


def kernel_signatures() -> dict[str, tuple[int, list[tuple[str, str]]]]:
    """{kernel name: (launch bound, [(parameter name, C type), ...])} for every entry point,
    read off the sources (macro-generated names expanded against abi.KERNELS)."""
    found = {}
    for source in abi.KERNEL_SOURCES:
        text = _sources()[source]
        for m in re.finditer(r'extern "C" __global__ void __launch_bounds__\((\d+)\)\s+([\w#]+)\s*'
                             r"\((.*?)\)\s*\{", text, re.S):
            bound, template, params = int(m.group(1)), m.group(2), m.group(3)
            pattern = re.sub(r"##[A-Za-z_]+(?:##)?", "[0-9]+", template)
            sig = []
            for p in params.split(","):
                name = re.search(r"(\w+)\s*$", p).group(1)
                sig.append((name, _ctype(p[:p.rstrip().rindex(name)])))
            for k, e in abi.KERNELS.items():
                if e.source == source and re.fullmatch(pattern, k):
                    found[k] = (bound, sig)
    return found


def struct_fields() -> dict[str, list[tuple[str, str]]]:
    """{struct name: [(field name, C type), ...]} of every `struct alignas(16) X {...};`."""
    found = {}
    for text in _sources().values():
        for m in re.finditer(r"struct\s+alignas\(16\)\s+(\w+)\s*\{(.*?)\};", text, re.S):
            fields = [tuple(reversed(f.split())) for f in m.group(2).split(";") if f.strip()]
            found[m.group(1)] = [(n, t) for n, t in fields]
    return found


def mismatches(declared: list[tuple[str, str]], parsed: list[tuple[str, str]]) -> list[str]:
    """Every position where a declaration and a source disagree (name or C type), and
    a difference in length."""
    out = [f"position {i}: declared {d}, source {p}"
           for i, (d, p) in enumerate(zip(declared, parsed)) if d != p]
    if len(declared) != len(parsed):
        out.append(f"declared {len(declared)} entries, source {len(parsed)}")
    return out


SIGNATURES = kernel_signatures()


def test_every_entry_point_is_declared_and_defined():
    assert set(SIGNATURES) == set(abi.KERNELS)
    bound, sig = SIGNATURES["ibp_gather_v16"]
    assert bound == 256 and sig[1] == ("n_rows", "i64") and sig[5] == ("lanes", "int")


@pytest.mark.parametrize("kernel", sorted(abi.KERNELS))
def test_declared_parameters_are_the_kernels(kernel):
    """Order, name and C type of every parameter, and the block-size bound."""
    bound, sig = SIGNATURES[kernel]
    declared = [(p.name, p.ctype) for p in abi.KERNELS[kernel].params.params]
    assert mismatches(declared, sig) == []
    assert bound == abi.MAX_THREADS


def test_the_comparison_catches_a_swap_a_rename_and_a_type():
    sig = SIGNATURES["ebp_gather"][1]
    swapped = [sig[1], sig[0]] + sig[2:]
    assert len(mismatches(swapped, sig)) == 2
    assert mismatches([("payloads", sig[0][1])] + sig[1:], sig) != []
    assert mismatches([(sig[0][0], "const u16*")] + sig[1:], sig) != []
    assert mismatches(sig[:-1], sig) == [f"declared {len(sig) - 1} entries, source {len(sig)}"]


def test_a_launch_with_a_missing_or_unknown_argument_raises_before_the_driver():
    kernel = rt.Kernel("ebp_gather", 0, None, 0)  # never loaded: nothing may reach the driver
    args = {p.name: 0 for p in abi.EBP_GATHER.params}
    with pytest.raises(TypeError, match=r"missing \['stride'\]"):
        rt.launch(kernel, 1, 32, {k: v for k, v in args.items() if k != "stride"})
    with pytest.raises(TypeError, match=r"not parameters \['n_cols'\]"):
        rt.launch(kernel, 1, 32, dict(args, n_cols=3))
    with pytest.raises(ValueError, match="grid=0"):
        rt.launch(kernel, 0, 32, args)


def test_a_value_its_parameter_cannot_hold_is_refused_not_wrapped():
    """ctypes wraps silently (2**31 in an int is -2**31): pack refuses instead, naming the
    parameter, the value and the range, and a launch says which kernel, before the driver."""
    block = abi.ParamBlock(("n", "u32"), ("k", "int"), ("m", "i64"), ("p", "const u8*"))
    ok = dict(n=2**32 - 1, k=-2**31, m=-2**63, p=2**64 - 1)
    assert [v.value for v in block.pack(ok)[0]] == list(ok.values())  # the limits themselves pass
    for name, bad, accepted in [
            ("n", -1, "0 <= n <= 4294967295"), ("n", 2**32, "0 <= n <= 4294967295"),
            ("k", 2**31, "-2147483648 <= k <= 2147483647"),
            ("m", 2**63, "-9223372036854775808 <= m <= 9223372036854775807"),
            ("p", -1, "0 <= p <= 18446744073709551615")]:
        ctype = {p.name: p.ctype for p in block.params}[name]
        with pytest.raises(ValueError, match=re.escape(f"kernel parameter {name!r} ({ctype}) = {bad} "
                                                       f"is out of range; accepted: {accepted}")):
            block.pack(dict(ok, **{name: bad}))
    kernel = rt.Kernel("ebp_decode_w8", 0, None, 0)  # never loaded: nothing may reach the driver
    args = {p.name: 0 for p in abi.EBP_DECODE.params}
    with pytest.raises(ValueError, match=r"launch of ebp_decode_w8 on device 0 \(grid=4, block=256, "
                                         r"shared_mem=0\): kernel parameter 'row_nbytes' \(int\) = "
                                         r"2147483648 is out of range"):
        rt.launch(kernel, 4, 256, dict(args, row_nbytes=2**31))  # an EBP row of 2 GiB


class _Refused(RuntimeError):
    """What cupy's driver bindings raise for a refused call (CUDADriverError needs libcuda)."""


@pytest.fixture
def refusing_driver(monkeypatch):
    """The CUDA driver replaced by one that refuses every launch and attribute change."""
    from cupy_backends.cuda.api import driver

    class _Device:  # cupy.cuda.Device as a context that does nothing
        def __init__(self, device):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def refuse(*args):
        raise _Refused("CUDA_ERROR_INVALID_VALUE: invalid argument")

    monkeypatch.setattr(rt, "_cupy", lambda: SimpleNamespace(cuda=SimpleNamespace(Device=_Device)))
    monkeypatch.setattr(rt, "_bind_context", lambda: None)
    monkeypatch.setattr(driver, "launchKernel", refuse)
    monkeypatch.setattr(driver, "funcSetAttribute", refuse)


def test_launch_failures_name_the_kernel_and_its_shape(refusing_driver):
    kernel = rt.Kernel("ibp_decode_w32_g4", 1, None, 0x1000)
    args = {p.name: 0 for p in abi.IBP_DECODE.params}
    shape = r"launch of ibp_decode_w32_g4 on device 1 \(grid=3, block=512, shared_mem=70000\)"
    with pytest.raises(RuntimeError, match=shape + r" failed: CUDA_ERROR_INVALID_VALUE") as got:
        rt.launch(kernel, 3, 512, args, shared_mem=70000, stream=0)
    assert isinstance(got.value, gpu.KernelLaunchError) and isinstance(got.value.__cause__, _Refused)
    with pytest.raises(TypeError, match=shape + r": kernel arguments do not match .*missing \['err'\]"):
        rt.launch(kernel, 3, 512, {k: v for k, v in args.items() if k != "err"}, shared_mem=70000)
    with pytest.raises(ValueError, match=r"launch of ibp_decode_w32_g4 on device 1 \(grid=3, block=0, "
                                         r"shared_mem=0\): accepted: grid >= 1, block >= 1"):
        rt.launch(kernel, 3, 0, args)
    with pytest.raises(gpu.KernelLaunchError, match=r"ibp_decode_w32_g4 on device 1 cannot be given "
                                                    r"70000 bytes of dynamic shared memory: "
                                                    r"CUDA_ERROR_INVALID_VALUE"):
        rt.ensure_shared(kernel, 70000)
    assert kernel._smem_optin == rt.DEFAULT_SHARED  # not recorded as granted


@pytest.mark.parametrize("struct", sorted(abi.RECORDS))
def test_table_records_are_the_kernels_structs(struct):
    dtype = abi.RECORDS[struct]
    declared = [(name, _NP_CTYPE[dtype.fields[name][0]]) for name in dtype.names]
    assert mismatches(declared, struct_fields()[struct]) == []
    assert dtype.itemsize == 16  # alignas(16): one vector load per record


def test_error_slots_and_bit_fields_are_the_kernels():
    head = _sources()["ibp_decode.cuh"]
    slots = dict(re.findall(r"#define (IBP_ERR_\w+) (\d+)", head))
    assert (int(slots["IBP_ERR_INDEX"]), int(slots["IBP_ERR_CORRUPT"])) == (abi.ERR_INDEX,
                                                                          abi.ERR_CORRUPT)
    assert abi.N_ERR_SLOTS == len(slots)
    # how the kernel unpacks IbpColumn.widths and a runs entry (ibp_pdep, once for W = 32 and 64)
    for expr in (f"(ci.widths >> {abi.WIDTHS_RUNS_SHIFT}) & 0xffu",
                 f"r0 = ci.widths >> {abi.WIDTHS_RUN0_SHIFT};",
                 f"(r0 >> {abi.RUN0_SHIFT_BITS}) & 0x7fu", f"(r0 & {hex((1 << abi.RUN0_SHIFT_BITS) - 1)}u)",
                 f"(rr >> {abi.RUN_SRC_SHIFT})", f"(rr >> {abi.RUN_LENGTH_SHIFT}) & 0xffu"):
        assert head.count(expr) == 1, expr


# --------------------------------------------------------------------------- fake runtime
@dataclasses.dataclass
class Launch:
    name: str
    grid: int
    block: int
    shared_mem: int
    optin: int           # dynamic shared memory the kernel was allowed (ensure_shared)
    values: dict         # parameter name -> value, as the driver reads it

    def __getitem__(self, key):
        return self.values[key]


class FakeRuntime:
    """Records launches, packs each by its declared parameters on the spot."""

    def __init__(self):
        self.launches: list[Launch] = []
        self.optin: dict[str, int] = {}

    def get_kernel(self, name, device):
        assert name in abi.KERNELS, name
        return rt.Kernel(name, device, None, 0x1000)

    def occupancy(self, kernel, block, shared_mem):
        static = 33 * 1024 if kernel.name.startswith("ebp_decode") else 0
        return max(1, min(2048 // block, (228 * 1024) // max(1, shared_mem + static), 32))

    def ensure_shared(self, kernel, nbytes):
        assert nbytes <= SMEM_OPTIN
        self.optin[kernel.name] = max(self.optin.get(kernel.name, 48 * 1024), nbytes)

    def launch(self, kernel, grid, block, args, *, shared_mem=0, stream=None):
        bound, sig = SIGNATURES[kernel.name]
        values, _ = kernel.params.pack(args)  # raises on a missing or unknown name
        self.launches.append(Launch(kernel.name, int(grid), int(block), int(shared_mem),
                                    self.optin.get(kernel.name, 48 * 1024),
                                    {n: v.value for (n, _), v in zip(sig, values)}))
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
    for mod in (dispatch, raw):
        monkeypatch.setattr(mod, "gather_device", lambda *a: CPU)
        monkeypatch.setattr(mod, "operand_pointer", lambda t, argname, device: int(t.data_ptr()))
    monkeypatch.setattr(dispatch, "cuda_device", lambda device, argname="device": CPU)
    monkeypatch.setattr(tables, "CACHE", tables.TableCache())  # no host tables in the real cache
    return f


def _grid_covers(launch: Launch, n_out: int, rows_per_block: int) -> None:
    """The grid is the work's block count, capped at what is resident (grid-stride loops)."""
    need = -(-n_out // rows_per_block)
    assert 1 <= launch.grid <= min(need, 32 * SM_COUNT)
    if need <= SM_COUNT:
        assert launch.grid == need


def _source(payload, offsets, n_out, n_rows, payload_nbytes=None, index=None) -> RowSource:
    return RowSource(payload=payload.data_ptr(), payload_nbytes=payload_nbytes or payload.numel(),
                     offsets=offsets.data_ptr(), off64=offsets.dtype == torch.int64, index=index,
                     n_out=n_out, n_rows=n_rows)


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
    out = gpu.fetch(codec, ct, index)
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


def test_ibp_decode_arguments(fake):
    """gpu.decode of a tensor: every row in order (no index), the table's own offsets."""
    x = torch.randn(70, 33)
    codec = IBPCodec.fit(x, word_bits=64)
    ct = codec.encode(x)
    out = gpu.decode(codec, ct)
    (ln,) = fake.launches
    assert ln.name == f"ibp_decode_w64_g{D.group_size(codec.n_words)}"
    assert (ln["index"], ln["n_out"], ln["n_rows"]) == (0, 70, 70)
    assert ln["payload"] == ct.payload.data_ptr() and ln["offsets"] == ct.offsets.data_ptr()
    assert ln["out"] == out.data_ptr() and out.shape == (70, 33)


@pytest.mark.parametrize("n_out", [1, 31, 4096, 10**6, 2**31 + 5, 2**40])
@pytest.mark.parametrize("row_elems", [1, 2, 3, 17, 128, 3000, 16_000, 50_000])
def test_ibp_launch_shapes_within_limits(fake, n_out, row_elems):
    """Any row count (grid-stride: the grid never exceeds the resident blocks), any row width
    up to the opt-in shared memory (fewer threads, opt-in above 48 KB)."""
    codec = IBPCodec.fit(torch.zeros(4, row_elems), word_bits=32)
    payload = torch.zeros(64, dtype=torch.uint8)
    offsets = torch.zeros(5, dtype=torch.int64)
    out, err = torch.zeros(1), torch.zeros(2, dtype=torch.int64)
    tabs = tables.upload(D.host_tables(codec), CPU)
    D.launch_decode(tabs, _source(payload, offsets, n_out, n_out, payload_nbytes=2**40), out, err,
                    CPU)
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
    tabs = tables.upload(D.host_tables(codec), CPU)
    with pytest.raises(ValueError, match="shared memory"):
        D.launch_decode(tabs, _source(t, t, 1, 1), t, t, CPU)
    assert fake.launches == []


@pytest.mark.parametrize("row_nbytes,align", [(512, 0), (6, 2), (7, 3), (12_000, 4), (1, 1)])
def test_gather_raw_rows_arguments(fake, row_nbytes, align):
    big = torch.zeros(40 * row_nbytes + 16, dtype=torch.uint8)
    table = big[align:align + 40 * row_nbytes].view(40, row_nbytes)
    index = torch.arange(39, -1, -3)
    out = gpu.gather_raw_rows(table, index)
    (ln,) = fake.launches
    vw = int(ln.name.rsplit("v", 1)[1])
    assert row_nbytes % vw == 0 and ln["table"] % vw == 0 and ln["out"] % vw == 0
    assert ln["table"] == table.data_ptr() and ln["out"] == out.data_ptr()
    assert (ln["n_rows"], ln["row_nbytes"], ln["n_out"]) == (40, row_nbytes, index.numel())
    assert ln["lanes"] == D.group_size(row_nbytes // vw) and ln["index"] != 0 and ln["err"] != 0


def test_identity_fetch_is_the_raw_gather_into_out(fake):
    x = torch.randn(30, 6)
    codec = IdentityCodec.fit(x)
    ct = codec.encode(x)
    out = torch.empty(4, 6)
    assert gpu.fetch(codec, ct, torch.tensor([1, 29, 0, 3]), out=out) is out
    (ln,) = fake.launches
    assert ln.name.startswith("ibp_gather_v") and ln["table"] == ct.payload.data_ptr()
    assert ln["out"] == out.data_ptr() and (ln["n_rows"], ln["row_nbytes"], ln["n_out"]) == (30, 24, 4)


def test_empty_inputs_never_launch(fake):
    x = torch.randn(20, 8)
    for codec in (IBPCodec.fit(x), EBPCodec.fit(x), IdentityCodec.fit(x)):
        ct = codec.encode(x)
        assert gpu.fetch(codec, ct, torch.zeros(0, dtype=torch.int64)).shape == (0, 8)
        assert gpu.fetch(codec, codec.encode(x[:0]), torch.zeros(0, dtype=torch.int64)).shape == (0, 8)
        if codec.name != "identity":
            assert gpu.decode(codec, codec.encode(x[:0])).shape == (0, 8)
    assert gpu.gather_raw_rows(x, torch.zeros(0, dtype=torch.int64)).shape == (0, 8)
    assert fake.launches == []


@pytest.mark.parametrize("kind", [IBPCodec, EBPCodec, IdentityCodec], ids=lambda c: c.__name__)
def test_zero_width_rows_still_check_the_index(fake, kind):
    """Rows of zero bytes launch nothing, but an id out of range is refused as for any row:
    at once, or at the PendingChecks' raise_first()."""
    x = torch.zeros(10, 0)
    codec = kind.fit(x)
    ct = codec.encode(x)
    assert gpu.fetch(codec, ct, torch.tensor([9, 0, 3])).shape == (3, 0)
    with pytest.raises(IndexError, match=r"index\[1\] = 10 is out of range for table with 10 rows; "
                                         r"accepted: 0 <= index < 10"):
        gpu.fetch(codec, ct, torch.tensor([9, 10, -1]))
    checks = gpu.PendingChecks()
    assert gpu.fetch(codec, ct, torch.tensor([0, -1]), checks=checks).shape == (2, 0)
    with pytest.raises(IndexError, match=r"index\[1\] = -1 is out of range"):
        checks.raise_first()
    with pytest.raises(IndexError, match=r"index\[0\] = 0 is out of range for table with 0 rows"):
        gpu.fetch(codec, codec.encode(x[:0]), torch.tensor([0]))
    with pytest.raises(IndexError, match=r"index\[2\] = 11 is out of range for table with 10 rows"):
        gpu.gather_raw_rows(x, torch.tensor([1, 2, 11]))
    assert fake.launches == []


def test_one_table_cache_for_every_kind(fake):
    """Tables are built once per (kind, codec state, device), whatever the entry point."""
    x = torch.randn(40, 16)
    ibp_c, ebp_c = IBPCodec.fit(x), EBPCodec.fit(x)
    for codec in (ibp_c, ebp_c):
        ct = codec.encode(x)
        gpu.decode(codec, ct)
        gpu.fetch(codec, ct, torch.tensor([0, 5]))
    assert len(tables.CACHE) == 2
    ibp_launches = [ln for ln in fake.launches if ln.name.startswith("ibp_decode")]
    assert len({ln["cols"] for ln in ibp_launches}) == 1 and len(ibp_launches) == 2


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
    out = gpu.fetch(codec, ct, index)
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
    tabs = tables.upload(E.host_tables(codec), CPU)
    E.launch_decode(tabs, _source(ct.payload, offsets, 30, 30), out, err, CPU)
    (ln,) = fake.launches
    assert ln["off64"] == int(off64) and ln["offsets"] == offsets.data_ptr()
    assert (ln["index"], ln["starts"], ln["lens"]) == (0, 0, 0)
    assert ln["payload_nbytes"] == ct.payload.numel() and ln["out"] == out.data_ptr()
    gpu.decode(codec, dataclasses.replace(ct, offsets=offsets))  # the same through the dispatch
    buffers = {"out", "err", "colinfo", "defaults", "dlut", "dict"}  # allocated per call
    via = fake.launches[1].values
    assert {k: v for k, v in via.items() if k not in buffers} == \
        {k: v for k, v in ln.values.items() if k not in buffers}


@pytest.mark.parametrize("n_out", [1, 33, 10**6, 2**40])
def test_ebp_launch_shapes_within_limits(fake, n_out):
    """256 threads (the static shared memory is sized for 8 warps), no dynamic shared memory."""
    codec = EBPCodec.fit(torch.randn(40, 16))
    t = torch.zeros(4, dtype=torch.int64)
    tabs = tables.upload(E.host_tables(codec), CPU)
    src = _source(t, t, n_out, n_out, payload_nbytes=2**40, index=t)
    E.launch_decode(tabs, src, t, t, CPU)
    E.launch_gather(src, 64, t, t, t, t, CPU)
    dec, gather = fake.launches
    assert dec.block == E.THREADS == 256 and dec.shared_mem == 0
    _grid_covers(dec, n_out, 256)     # a warp decodes 32 rows
    _grid_covers(gather, n_out, 8)    # a warp gathers one row
    assert dec["n_out"] == gather["n_out"] == n_out


# --------------------------------------------------------------------------- devices, checks
def test_cuda_without_index_is_the_current_device(monkeypatch):
    """A target of "cuda" is compared with tensors' "cuda:N" only once resolved."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert operands.cuda_device("cuda") == torch.device("cuda", 3)
    assert operands.cuda_device(torch.device("cuda")) == torch.device("cuda", 3)
    assert operands.cuda_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"device='cpu' is not a CUDA device"):
        operands.cuda_device("cpu")


def test_pending_checks_raise_the_first_failure_later():
    """PendingChecks (the decode stage's deferred error checks) raise, when asked, what an
    immediate check would have raised for the first failing call, then start empty."""
    checks = gpu.PendingChecks()
    offsets = torch.tensor([0, 5, 9, 20], dtype=torch.int32)
    index = torch.tensor([0, 7, 2])
    report(checks, torch.tensor([-1, -1]), None, 3, offsets, "ct")          # a clean launch
    report(checks, torch.tensor([1, -1]), index, 3, offsets, "table")       # index[1] = 7
    report(checks, torch.tensor([-1, 2]), None, 3, offsets, "ct")           # row 2 corrupt
    assert len(checks) == 3
    with pytest.raises(IndexError, match=r"index\[1\] = 7 is out of range for table with 3 rows"):
        checks.raise_first()
    checks.raise_first()  # emptied
    report(checks, torch.tensor([-1, 2]), None, 3, offsets, "ct")
    with pytest.raises(CorruptPayloadError, match=r"ct row 2 is corrupt \(offsets 9..20, 11 bytes\)"):
        checks.raise_first()
    assert checks  # truthy even when empty: an empty record still defers
    report(gpu.PendingChecks(), torch.tensor([0, 0]), index, 3, offsets, "ct")  # filed, not read
    with pytest.raises(CorruptPayloadError, match="row 0"):
        report(None, torch.tensor([-1, 0]), None, 3, offsets, "ct")
    with pytest.raises(TypeError, match=r"checks=False is not accepted.*PendingChecks"):
        check_checks(False)
