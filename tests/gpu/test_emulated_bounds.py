"""The CUDA kernels, under the warp emulation, on the CPU decoders' adversarial payloads.

tests/codec/test_out_of_bounds.py damages valid payloads of every dtype and codec variant (the
last row replaced by garbage of every length, a garbage row followed by runaway rows, and
hypothesis-driven damage: rows truncated, extended, replaced, bits flipped, boundaries moved);
its generators are imported here, not copied. Each damaged payload holds exactly PAYLOAD_TAIL
bytes past its last row, and the emulation (tests/gpu/emulation.py) allocates it ending with
its last byte (a read past the tail is an AddressSanitizer error), starting at the 16-byte
boundary before it (payload_shift bytes before its first: varied from case to case, so the
rows' alignments vary; 0 for one launch in most cases, where a read before the payload is an
error too). The emulated kernels decode it whole, gathered through an index (IBP: the fused
gather + decode of a zero-copy fetch), and for EBP through ebp_gather's scratch slots (a
zero-copy fetch).

Asserted for every launch: no sanitizer error, abort or write outside the output; no index
error; the corrupt-row slot holds exactly the smallest row the CPU decoder finds corrupt among
the rows the launch read (codec.decode names its smallest corrupt row; the kernels keep the
smallest with atomicMin, docs/format.md and kernels/ibp_decode.cuh) or nothing when the CPU
finds none; and every output row whose table row the CPU decodes is bit-for-bit the CPU's (the
undamaged rows: the original rows). The CPU's verdict is per row (a row is corrupt or not from
its own bytes), so for a gather it is computed row by row (the damaged rows decoded alone) and
checked against the CPU's decode of the whole payload. Where the format can tell a row is
damaged (a row's whole bit stream followed by bytes it does not use), the kernel must report it
whatever the CPU says. Rows that are corrupt have no defined output on either side.

Cases run many per emulator process (Emulator.launch_many); a failure names its case.
"""
from __future__ import annotations

import dataclasses
import re
import zlib
from typing import Optional

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from ibp_graph.codec import CompressedTensor, CorruptPayloadError, EBPCodec, IBPCodec
from ibp_graph.gpu import abi
from ibp_graph.gpu import compiler as cc
from ibp_graph.layout.rows import PAYLOAD_TAIL

from tests.codec.test_out_of_bounds import (damaged_payloads, decode_or_corrupt, garbage_last_rows,
                                            make_codec, padded_copy_edge_rows, parallel_rows)
from tests.gpu.emulation import emulator_fixture, new_seed, row_bytes
from tests.gpu.test_ebp_compile import HARNESS as EBP_HARNESS, EbpEmulator
from tests.gpu.test_ibp_compile import HARNESS as IBP_HARNESS, IbpEmulator

# the same builds as tests/gpu/test_ibp_compile.py's and test_ebp_compile.py's (compiled once per session)
ibp_emulator = emulator_fixture(IbpEmulator, "emu", IBP_HARNESS, abi.KERNEL_SOURCES)
ebp_emulator = emulator_fixture(EbpEmulator, "ebp_emu", EBP_HARNESS, ("ebp_decode.cu",))

#: one warp per launch for the many small cases (an emulated lane is a thread, a warp intrinsic a
#: barrier: cost grows with the lanes); the parallel cases take the launch shape the other tests use.
SMALL = dict(block=32, grid=1)


# --------------------------------------------------------------------------- a case and its CPU verdict
@dataclasses.dataclass
class Case:
    """A payload (rows, then `tail`, nothing after) of n rows of `codec`, x the rows it was encoded from,
    `touched` the rows the damage may have changed (the others are x's), `must_report` a row the format
    can tell is damaged (None if none is known)."""

    label: str
    codec: object
    x: torch.Tensor
    rows: bytes
    offsets: Optional[np.ndarray]
    tail: bytes
    touched: set
    must_report: Optional[int] = None

    @property
    def n(self) -> int:
        return self.x.shape[0]

    def ct(self, off64: bool = False) -> CompressedTensor:
        offsets = None
        if self.offsets is not None:
            offsets = torch.from_numpy(np.asarray(self.offsets, np.int64).astype(np.int64 if off64 else np.int32))
        payload = torch.from_numpy(np.frombuffer(self.rows + self.tail, np.uint8).copy())
        return CompressedTensor(payload=payload, offsets=offsets, shape=(self.n,) + self.codec.row_shape,
                                dtype=self.codec.dtype, codec=self.codec.name, fingerprint=self.codec.fingerprint)


@dataclasses.dataclass
class Verdict:
    """What the CPU decoder says of a case: its corrupt rows, and the bytes of every other row."""

    bad: set
    rows: dict  # table row -> its decoded bytes (uint8 array), for every row not in bad


def cpu_verdict(case: Case) -> Verdict:
    """codec.decode on the whole payload, and on each damaged row alone: they must agree (the smallest
    corrupt row is the one the whole decode names; a whole decode that succeeds gives every row), and the
    undamaged rows decode to x."""
    codec, ct, n = case.codec, case.ct(), case.n
    rb = codec.row_nbytes
    try:
        whole = codec.decode(ct)
    except CorruptPayloadError as e:
        m = re.search(r"row (\d+)", str(e))
        whole, message = int(m.group(1)) if m else -1, str(e)
    rows = {r: row_bytes(case.x[r]) for r in range(n) if r not in case.touched}
    bad = set()
    if ct.offsets is None:  # identity: no row can be corrupt
        assert isinstance(whole, torch.Tensor), case.label
    for r in sorted(case.touched):
        alone = decode_or_corrupt(codec, ct.index_select(torch.tensor([r])))
        if isinstance(alone, torch.Tensor):
            rows[r] = row_bytes(alone)
        else:
            assert alone == 0, (case.label, r, alone)
            bad.add(r)
    if case.offsets is not None and len(case.tail) < PAYLOAD_TAIL:
        # rows ending fewer than PAYLOAD_TAIL bytes before the payload's end: the CPU refuses the payload (naming
        # no row) before it decodes one; the kernels check each row's offsets, and report those rows
        assert whole == -1 and "bytes of tail padding" in message, (case.label, whole)
        end = len(case.rows) + len(case.tail) - PAYLOAD_TAIL
        bad |= {r for r in range(n) if int(case.offsets[r + 1]) > end}
        return Verdict(bad, {r: b for r, b in rows.items() if r not in bad})
    if isinstance(whole, torch.Tensor):
        assert not bad, (case.label, "decoded whole, but rows decoded alone are corrupt", sorted(bad))
        got = row_bytes(whole).reshape(n, rb)
        for r, b in rows.items():
            assert np.array_equal(got[r], b), (case.label, "CPU: row differs decoded whole and alone", r)
    elif "offsets gives row" in message:
        # the CPU refuses offsets giving any row more than row_nbytes bytes before it decodes a row, naming the
        # first such row; the kernels check each row's offsets as they read it, and report the smallest bad row
        lengths = np.diff(np.asarray(case.offsets, np.int64))
        assert whole == int(np.flatnonzero(lengths > rb)[0]) and whole in bad, (case.label, message, sorted(bad))
    else:
        assert bad and whole == min(bad), (case.label, "CPU: whole decode names", whole, "alone", sorted(bad))
    if case.must_report is not None:
        assert case.must_report in bad, (case.label, "CPU misses a damaged row", case.must_report)
    return Verdict(bad, rows)


# --------------------------------------------------------------------------- launches
def some_shift(case: Case) -> int:
    """A payload_shift (where the payload starts past a 16-byte boundary) that varies from case to case: the
    rows' alignments, and so how far a kernel's reads reach past them, vary with it."""
    return zlib.crc32(case.label.encode()) % 16


def gather_index(case: Case, verdict: Verdict, kind: str) -> Optional[np.ndarray]:
    """The table rows a launch reads (None: all, in order). "all": every row backwards, then the last
    and the first again (a repeated row, the last row read first). "skip": every row but the smallest
    corrupt one, backwards (so the next corrupt row must be reported, and a corrupt row cannot hide
    another)."""
    if kind == "all":
        return np.concatenate([np.arange(case.n)[::-1], [case.n - 1, 0]]).astype(np.int64)
    keep = [r for r in range(case.n) if not verdict.bad or r != min(verdict.bad)]
    return np.asarray(keep[::-1] or [0], np.int64)


@dataclasses.dataclass
class Launch:
    case: Case
    verdict: Verdict
    what: str  # "decode", "gather" (IBP, or EBP decode with an index), "fetch" (EBP gather + decode)
    index: Optional[np.ndarray]
    shift: int  # payload_shift: 0 puts the payload's first byte at the start of its allocation
    off64: bool
    shape: dict

    @property
    def label(self) -> str:
        return f"{self.case.label} | {self.what} shift={self.shift} off64={self.off64} index={self.index}"

    def inputs(self):
        case = self.case
        ct = case.ct(self.off64)
        shift = self.shift
        if isinstance(case.codec, IBPCodec):
            return IbpEmulator.decode_inputs(case.codec, ct, self.index, payload_shift=shift, **self.shape)
        if isinstance(case.codec, EBPCodec):
            return EbpEmulator.run_inputs(case.codec, ct, self.index, fetch=self.what == "fetch",
                                          payload_shift=shift, **self.shape)
        # identity: the raw-row gather of a fixed-stride table
        table = ct.payload.numpy().reshape(case.n, case.codec.row_nbytes)
        return IbpEmulator.gather_inputs(table, self.index, table_shift=shift, **self.shape)

    def check(self, result) -> None:
        out, err = result
        case, verdict = self.case, self.verdict
        rb = case.codec.row_nbytes
        read = np.arange(case.n) if self.index is None else self.index
        bad_read = sorted(verdict.bad & {int(r) for r in read})
        assert err[0] is None, f"{self.label}: index error slot {err[0]}"
        if case.must_report is not None and case.must_report in read:
            # the format can tell this row is damaged: reported, it or a smaller corrupt row
            assert err[1] is not None and err[1] <= case.must_report, f"{self.label}: damaged row not reported ({err})"
        want = bad_read[0] if bad_read else None
        assert err[1] == want, f"{self.label}: corrupt-row slot {err[1]}, the CPU's smallest corrupt row {want}"
        got = out.reshape(len(read), rb)
        for k, r in enumerate(read):
            if int(r) not in verdict.bad:
                assert np.array_equal(got[k], verdict.rows[int(r)]), \
                    f"{self.label}: output row {k} (table row {r}) differs from the CPU decoder's"


def launches(case: Case, verdict: Verdict, which: str, shape=SMALL, off64: bool = False) -> list:
    """The launches of `case` (the payload's allocation always ends with its last byte): "decode" (whole),
    then with "all" the gathered variants (IBP: decode through an index; EBP: the zero-copy fetch, and the
    decode through an index), one of them with the payload's first byte at its allocation's start, and
    whenever two rows are corrupt a gather that skips the smallest."""
    out = []
    shift = some_shift(case)
    if case.offsets is None:  # identity: only the raw gather exists
        return [Launch(case, verdict, "gather", gather_index(case, verdict, "all"), shift, off64, shape)]
    out.append(Launch(case, verdict, "decode", None, shift, off64, shape))
    if which == "all":
        idx = gather_index(case, verdict, "all")
        if isinstance(case.codec, EBPCodec):
            out.append(Launch(case, verdict, "fetch", idx, (shift + 7) % 16, not off64, shape))
        out.append(Launch(case, verdict, "gather", idx, 0, not off64, shape))
    if len(verdict.bad) >= 2:
        out.append(Launch(case, verdict, "fetch" if isinstance(case.codec, EBPCodec) else "gather",
                          gather_index(case, verdict, "skip"), (shift + 3) % 16, off64, shape))
    return out


def run_all(emulators: dict, tmp_path, cases_and_variants) -> int:
    """Launch every case's variants on its kind's emulator (many per process), check each; the number of
    launches."""
    by_emu: dict = {}
    for case, which, *rest in cases_and_variants:
        verdict = cpu_verdict(case)
        emu = emulators["ebp" if isinstance(case.codec, EBPCodec) else "ibp"]
        by_emu.setdefault(id(emu), (emu, []))[1].extend(launches(case, verdict, which, *rest))
    total = 0
    for k, (emu, todo) in enumerate(by_emu.values()):
        d = tmp_path / f"e{k}"
        d.mkdir()
        results = emu.launch_many(d, [(lz.label, *lz.inputs()) for lz in todo], timeout=600)
        for lz, result in zip(todo, results):
            lz.check(result)
        total += len(todo)
    return total


@pytest.fixture
def emulators(ibp_emulator, ebp_emulator):
    return {"ibp": ibp_emulator, "ebp": ebp_emulator}


# --------------------------------------------------------------------------- which cases
def chosen_lengths(codec, fill: str, last: bytes, k: int) -> set:
    """The lengths of a garbage last row the emulated kernels take, for the k-th (config, fill) (the CPU
    test takes all of 0..row_nbytes; an emulated launch costs milliseconds). What a kernel's bounds depend
    on is the row's length and where it starts and ends against 4- and 16-byte boundaries (the payload
    ends flush, so its end moves with the length): an empty row, one byte, a raw row; one more short
    length, one byte short of a raw row for every other k, and three lengths spread over the rest, all
    shifted with k so that the fills and dtypes of a kind cover different ones; IBP's participation header
    cut one byte short; and for a row's own bytes extended, its length and one byte either side (the
    lengths where the format can tell the row is damaged begin there)."""
    rb = codec.row_nbytes
    keep = {0, 1, rb, 2 + k % 4}
    if k % 2:
        keep.add(rb - 1)
    stride = max(1, (rb + 1) // 3)
    keep |= set(range(k % stride, rb + 1, stride))
    if isinstance(codec, IBPCodec):
        keep.add(-(-codec.tables.header_bits // 8) - 1)
    if fill == "extended":
        keep |= {len(last) - 1, len(last), len(last) + 1}
    return {v for v in keep if 0 <= v <= rb}


def garbage_last_row_cases(kind: str):
    """(case, variants) of garbage_last_rows: every config and fill, chosen_lengths; the gathered variants
    for one in five."""
    seen: dict = {}
    for config, codec, x, fill, length, last, rows, offsets, tail in garbage_last_rows([kind]):
        k = seen.setdefault((config, fill), len(seen))
        if length not in chosen_lengths(codec, fill, last, k):
            continue
        n = x.shape[0]
        # the row's whole bit stream, then bytes it does not use: its stream ends before its end
        must = n - 1 if fill == "extended" and len(last) < length < codec.row_nbytes else None
        case = Case(f"{config} fill={fill} length={length}", codec, x, rows, offsets, tail, {n - 1}, must)
        yield case, "all" if (k + length) % 5 == 0 else "decode"


def padded_copy_edge_cases(kind: str):
    """(case, variants) of padded_copy_edge_rows: the garbage row 3 followed by the most bytes of ones the
    CPU test puts after it (rows 4..7: one row of T bytes, three empty ones: corrupt), one length in six;
    every case has at least two corrupt rows, so its launches include a gather that skips row 3."""
    cases = {}
    for config, codec, x, fill, length, T, rows, offsets, tail in padded_copy_edge_rows([kind]):
        cases[(config, fill, length)] = (codec, x, T, rows, offsets, tail)  # the largest T wins
    for k, ((config, fill, length), (codec, x, T, rows, offsets, tail)) in enumerate(cases.items()):
        if k % 6:
            continue
        case = Case(f"{config} fill={fill} length={length} T={T}", codec, x, rows, offsets, tail,
                    {3, 4, 5, 6, 7}, 5)  # row 5 is empty: the format tells
        yield case, "all" if k % 12 else "decode"


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("kind", ["ibp", "ebp"])
def test_emulated_kernels_on_a_garbage_last_row(emulators, tmp_path, kind):
    """The last of six rows replaced by zeros, ones, random bytes, its own bytes cut short or extended (and for
    EBP streams claiming every element an escape) of many lengths 0..row_nbytes, the tail after it: no read
    past the tail, row 5 reported exactly when the CPU reports it (always when its stream ends early), rows
    0..4 exact."""
    n = run_all(emulators, tmp_path, garbage_last_row_cases(kind))
    assert n > 800 if kind == "ibp" else n > 1200


@pytest.mark.parametrize("kind", ["ibp", "ebp"])
def test_emulated_kernels_on_a_garbage_row_before_runaway_rows(emulators, tmp_path, kind):
    """A garbage row 3 followed by a row of ones (the longest codes) and three empty rows: the smallest
    corrupt row is reported (row 3, or row 4 or 5 when row 3 decodes), also when a gather skips it."""
    n = run_all(emulators, tmp_path, padded_copy_edge_cases(kind))
    assert n > 150


def test_emulated_kernels_on_a_last_row_ending_in_the_tail(emulators, tmp_path):
    """Garbage last rows (one case in eight of the test above, IBP and EBP) whose payload keeps only 0..15 of
    the PAYLOAD_TAIL bytes after them (as if the last offset had moved into the tail): the CPU refuses the
    payload; the kernels report the last row (ibp_row_range) and read nothing past the payload's end (the
    EBP decoder read up to 11 bytes past it before), every variant."""
    chosen = []
    for kind in ("ibp", "ebp"):
        for k, (case, _) in enumerate(garbage_last_row_cases(kind)):
            if k % 8 == 0:
                cut = (k // 8) % PAYLOAD_TAIL  # the tail bytes kept
                case = dataclasses.replace(case, label=f"{case.label} tail={cut}", tail=case.tail[:cut],
                                           must_report=case.n - 1)
                chosen.append((case, "all" if k % 2 else "decode"))
    assert run_all(emulators, tmp_path, chosen) > 250


def test_the_kernels_tail_is_the_formats():
    head = cc.read_source("ibp_decode.cuh")
    assert int(re.search(r"#define IBP_PAYLOAD_TAIL (\d+)", head).group(1)) == PAYLOAD_TAIL


def test_emulated_kernels_with_many_warps_and_blocks(emulators, tmp_path):
    """parallel_rows with 160 rows, two blocks of two warps (grid-stride loops, several groups and warps at
    once, reports from several of them): valid payloads exact, a garbage last row reported as row 159 (one
    fill and length in twenty)."""
    shape = dict(block=64, grid=2)
    chosen = []
    for k, (config, codec, x, fill, length, rows, offsets, tail) in enumerate(parallel_rows(160)):
        n = x.shape[0]
        if fill is not None and k % 20:
            continue
        case = Case(f"{config} fill={fill} length={length} n={n}", codec, x, rows, offsets, tail,
                    set() if fill is None else {n - 1})
        chosen.append((case, "all", shape, k % 2 == 1))
    assert run_all(emulators, tmp_path, chosen) > 40


DAMAGE_EXAMPLES = {"ibp": 120, "ebp": 80, "identity": 25}


@pytest.mark.parametrize("kind", ["ibp", "ebp", "identity"])
def test_emulated_kernels_on_damaged_payloads(emulators, tmp_path, kind):
    """damaged_payloads (rows truncated, extended, replaced by garbage or escape streams, bits flipped, row
    boundaries moved): hypothesis generates the cases (a fresh seed per run, in every failure's label), the
    emulated kernels run them all in one batch; each launch checked as above, int32 or int64 offsets."""
    s = new_seed()
    cases = []

    @seed(s)
    @settings(max_examples=DAMAGE_EXAMPLES[kind], deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(damaged_payloads([kind]), st.booleans())
    def collect(drawn, off64):
        config, x, rows, offsets, tail, touched, damage = drawn
        codec = make_codec(*config)
        label = f"seed={s} #{len(cases)} {config} damage={damage} touched={sorted(touched)} n={x.shape[0]}"
        cases.append((Case(label, codec, x, rows, offsets, tail, set(touched)), "all", SMALL, off64))

    collect()
    assert len(cases) >= DAMAGE_EXAMPLES[kind] // 2
    run_all(emulators, tmp_path, cases)
