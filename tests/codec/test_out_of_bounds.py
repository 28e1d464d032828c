"""No CPU decoder reads outside its input buffer, whatever the payload holds.

The numba kernels read a payload with unaligned 8-byte loads at computed addresses; a read past
the end of the buffer would normally land in other heap memory and go unnoticed. Here every
payload is copied next to an inaccessible page (tests/codec/guarded.py): flush against the page
after it (a read past its last byte faults) and against the page before it (a read below its
first byte faults), with exactly the PAYLOAD_TAIL bytes of tail padding the checks accept. The
cases run in a child process, so a fault fails the test naming the case instead of killing the
run.

Inputs: valid payloads of every dtype and codec variant (decoded bit-exactly, whole, gathered,
and scattered with out_rows), the last row replaced by garbage of every length 0..row_nbytes
(zeros, ones, random bytes, its own bytes cut short or extended, and EBP streams claiming every
element an escape), a garbage row where the decoders switch to reading rows from their
zero-padded copy of the payload's end, enough rows for the parallel kernels, and property-based
damage: rows truncated, extended, replaced, bits flipped, row boundaries moved. A damaged
payload decodes or raises CorruptPayloadError naming a damaged row; it never crashes, and a row
the format can tell is damaged (a compressed row whose bit stream ends outside its last byte) is
reported.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph.codec import (CompressedTensor, CorruptPayloadError, EBPCodec, IBPCodec, IdentityCodec,
                             SUPPORTED_DTYPES)
from ibp_graph.data.store import EncodedTable
from ibp_graph.layout.dtypes import as_row_bytes
from ibp_graph.layout.rows import PAYLOAD_TAIL
from tests.codec.guarded import PAGE, guarded_bytes, guarded_tensor, run_child

DTYPE_NAMES = list(SUPPORTED_DTYPES)


# --------------------------------------------------------------------------- codecs and rows
def make_rows(dtype: torch.dtype, row_shape: tuple, n: int, seed: int, sparse: bool = False) -> torch.Tensor:
    """n compressible rows of dtype (narrow floats, small ints, sparse bools), one in five random bits (a raw
    row), and, for a sparse codec, mostly zeros."""
    rng = np.random.default_rng(seed)
    shape = (n,) + tuple(row_shape)
    if dtype == torch.bool:
        x = torch.from_numpy(rng.random(shape) < 0.2)
    elif dtype.is_floating_point:
        x = torch.from_numpy(rng.normal(0, 0.1, shape)).to(dtype)
    else:
        x = torch.from_numpy(rng.integers(0, 8, shape)).to(dtype)
    if sparse:
        x[torch.from_numpy(rng.random(shape) < 0.85)] = 0
    raw = as_row_bytes(x)
    noisy = rng.random(n) < 0.2
    raw[noisy] = rng.integers(0, 256, raw[noisy].shape, dtype=np.uint8)
    if dtype == torch.bool:
        raw &= 1
    return x


#: (kind, dtype name, variant, row shape): every codec variant the decoders take, on every dtype, and a few
#: wide rows (long code streams, long headers: a runaway read there goes far past the row).
CONFIGS = ([("ibp", d, W, (13,)) for d in DTYPE_NAMES for W in (32, 64)]
           + [("ebp", d, sparse, (13,)) for d in DTYPE_NAMES for sparse in (False, True)]
           + [("identity", d, None, (5,)) for d in DTYPE_NAMES]
           + [("ibp", "float32", 64, (200,)), ("ibp", "float16", 32, (301,)),
              ("ebp", "float32", False, (200,)), ("ebp", "int64", True, (150,)), ("ebp", "uint8", False, (300,))])


@functools.lru_cache(maxsize=None)
def make_codec(kind: str, dtype_name: str, variant, row_shape: tuple):
    """A codec of `kind` fitted on make_rows (the same for the same arguments)."""
    dtype = SUPPORTED_DTYPES[dtype_name]
    x = make_rows(dtype, row_shape, 2000, seed=1, sparse=kind == "ebp" and bool(variant))
    if kind == "ibp":
        return IBPCodec.fit(x, word_bits=variant)
    if kind == "ebp":
        return EBPCodec.fit(x, sparse=bool(variant))
    return IdentityCodec.fit(x)


def encoded(config, n: int, seed: int):
    """(codec, rows tensor, row bytes as one bytes object, int64 offsets or None)."""
    kind, dtype_name, variant, row_shape = config
    codec = make_codec(*config)
    x = make_rows(codec.dtype, row_shape, n, seed, sparse=kind == "ebp" and bool(variant))
    ct = codec.encode(x)
    if ct.offsets is None:
        return codec, x, ct.payload.numpy().tobytes(), None
    offsets = ct.offsets.numpy().astype(np.int64)
    return codec, x, ct.payload.numpy()[:int(offsets[-1])].tobytes(), offsets


def encoded_configs(kinds, n: int, seed: int):
    """(config, codec, x, rows, offsets) of encoded(config, n, seed) for each config of a codec in `kinds`."""
    for config in CONFIGS:
        if config[0] in kinds:
            yield (config,) + encoded(config, n, seed)


def guarded_ct(codec, n: int, rows: bytes, offsets, tail: bytes, at: str):
    """A CompressedTensor of n rows whose payload (rows, then `tail`) lies against a guard page (`at`)."""
    return CompressedTensor(
        payload=guarded_tensor(rows + tail, at),
        offsets=None if offsets is None else torch.from_numpy(np.asarray(offsets, np.int64).astype(np.int32)),
        shape=(n,) + codec.row_shape, dtype=codec.dtype, codec=codec.name, fingerprint=codec.fingerprint)


def decode_or_corrupt(codec, ct):
    """codec.decode(ct), or the row a CorruptPayloadError names (an int), or -1 for one naming no row."""
    try:
        return codec.decode(ct)
    except CorruptPayloadError as e:
        m = re.search(r"row (\d+)", str(e))
        return int(m.group(1)) if m else -1


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and np.array_equal(as_row_bytes(a.contiguous()), as_row_bytes(b.contiguous()))


# --------------------------------------------------------------------------- child cases
def case_harness_self_check(log, kind: str) -> None:
    """Reads one byte past (or before) a guarded buffer on purpose: the child must die (the harness works)."""
    from ibp_graph.layout.bitstream import ld8
    from numba import njit

    @njit
    def peek(addr):
        return ld8(addr)

    buf = guarded_bytes(b"\x01" * 40, "end" if kind == "past" else "start")
    assert peek(buf.ctypes.data + 39 if kind == "past" else buf.ctypes.data) == 1  # inside: fine
    log(case=f"read one byte {kind} a guarded buffer")
    peek(buf.ctypes.data + 40 if kind == "past" else buf.ctypes.data - 1)


def case_valid_payloads(log) -> None:
    """Every config's valid payload, flush against each guard, decodes bit-exactly, whole and gathered."""
    for config in CONFIGS:
        codec, x, rows, offsets = encoded(config, 9, seed=2)
        tail = b"" if offsets is None else bytes(PAYLOAD_TAIL)
        for at in ("end", "start"):
            log(config=config, at=at, offsets=offsets, rows=rows)
            ct = guarded_ct(codec, x.shape[0], rows, offsets, tail, at)
            assert same_bits(codec.decode(ct), x), (config, at)
            idx = torch.tensor([x.shape[0] - 1, 0, x.shape[0] - 1, 3])
            assert same_bits(codec.decode(ct.index_select(idx)), x[idx]), (config, at)
            out = torch.empty((x.shape[0] + 2,) + codec.row_shape, dtype=codec.dtype)
            dest = torch.arange(x.shape[0]).flip(0) + 1
            codec.decode(ct, out=out, out_rows=dest)
            assert same_bits(out[dest], x), (config, at)
        # no tail padding at all, the last row against the guard: a decode refuses it (the check that keeps every
        # decoder read inside the payload); a store gathers rows (bounded by their offsets) into padded memory first
        log(config=config, at="end", tail="none", offsets=offsets, rows=rows)
        bare = guarded_ct(codec, x.shape[0], rows, offsets, b"", "end")
        if offsets is not None:
            assert decode_or_corrupt(codec, bare) == -1, config
        assert same_bits(EncodedTable(codec, bare).decode_rows(torch.arange(x.shape[0]).flip(0)), x.flip(0)), config


FILLS = ("zeros", "ones", "random", "extended")


def bit_bytes(bits: list) -> bytes:
    """LSB-first bits as bytes (docs/format.md numbers bits so)."""
    out = bytearray((len(bits) + 7) // 8)
    for p, b in enumerate(bits):
        out[p >> 3] |= b << (p & 7)
    return bytes(out)


@functools.lru_cache(maxsize=None)
def escape_stream(codec, sparse: bool) -> bytes:
    """An EBP row stream that claims every element an escape (a count of d), then all ones (the longest
    code, the escape's in these tables): a dense row after its low bits, or a sparse row listing every
    column. Its cursors run as far as the format lets them."""
    t, d = codec.tables, codec.n_cols
    bits: list = []

    def put(v: int, n: int) -> None:
        bits.extend((v >> k) & 1 for k in range(n))

    def gamma(v: int) -> None:
        b = v.bit_length()
        put(0, b - 1)
        put(1, 1)
        put(v & ((1 << (b - 1)) - 1), b - 1)

    if t.sparse:
        put(int(sparse), 1)
    if sparse:
        gamma(d + 1)
        gamma(d + 1)
        for j in range(d):
            put(j, t.IB)
    else:
        put(0, t.low_total)
        gamma(d + 1)
    return bit_bytes(bits) + b"\xff" * (codec.row_nbytes + PAYLOAD_TAIL)


def fills(codec) -> list:
    """FILLS, and for EBP the escape streams (dense, and sparse when the codec has the mode)."""
    if not isinstance(codec, EBPCodec):
        return list(FILLS)
    return list(FILLS) + ["escapes"] + (["sparse escapes"] if codec.tables.sparse else [])


def garbage_row(codec, fill: str, length: int, original: bytes, rng) -> tuple[bytes, bytes]:
    """(row bytes, tail) of a damaged last row: `fill` bytes of `length`; the tail zero or not (alternately by
    length), or, for an escape stream, the stream's next bytes (a tail is not checked to be zero)."""
    tail = b"\xff" * PAYLOAD_TAIL if length & 1 else bytes(PAYLOAD_TAIL)
    if fill == "zeros":
        return bytes(length), tail
    if fill == "ones":
        return b"\xff" * length, tail
    if fill == "random":
        return rng.integers(0, 256, length, dtype=np.uint8).tobytes(), tail
    if fill == "extended":  # the row's own bytes cut short, or followed by garbage
        extra = rng.integers(0, 256, max(0, length - len(original)), dtype=np.uint8).tobytes()
        return (original + extra)[:length], tail
    stream = escape_stream(codec, sparse=fill == "sparse escapes")
    return stream[:length], stream[length:length + PAYLOAD_TAIL]


def garbage_last_rows(kinds):
    """The payloads of case_garbage_last_row_every_length (also run by the emulated CUDA kernels,
    tests/gpu/test_emulated_bounds.py): per config of `kinds`, six encoded rows whose last one is replaced by
    each fill of every length 0..row_nbytes. Yields (config, codec, x, fill, length, the replaced row's own
    bytes, rows, offsets, tail)."""
    rng = np.random.default_rng(3)
    for config, codec, x, rows, offsets in encoded_configs(kinds, 6, seed=4):
        last = rows[int(offsets[-2]):]
        for fill in fills(codec):
            for length in range(codec.row_nbytes + 1):
                row, tail = garbage_row(codec, fill, length, last, rng)
                new_rows = rows[:int(offsets[-2])] + row
                new_offsets = offsets.copy()
                new_offsets[-1] = offsets[-2] + length
                yield config, codec, x, fill, length, last, new_rows, new_offsets, tail


def case_garbage_last_row_every_length(log, kinds) -> None:
    """The last row of a payload (flush against the guard page after it, PAYLOAD_TAIL bytes of tail) replaced
    by garbage of every length 0..row_nbytes: decoded or reported as row n-1, never read past the tail."""
    for config, codec, x, fill, length, last, new_rows, new_offsets, tail in garbage_last_rows(kinds):
        n = x.shape[0]
        log(config=config, fill=fill, length=length, tail=tail, offsets=new_offsets, rows=new_rows)
        got = decode_or_corrupt(codec, guarded_ct(codec, n, new_rows, new_offsets, tail, "end"))
        assert isinstance(got, torch.Tensor) or got == n - 1, (config, fill, length, got)
        if isinstance(got, torch.Tensor):
            assert same_bits(got[:-1], x[:-1]), (config, fill, length)
        if fill == "extended" and len(last) < length < codec.row_nbytes and len(last) < codec.row_nbytes:
            # the row's whole bit stream, then bytes it does not use: its stream ends before its end
            assert got == n - 1, (config, length, len(last))


def row_reach(codec) -> int:
    """The most bytes the CPU decoder reads from a row's start: rows starting closer than this to the payload's
    end are decoded from a zero-padded copy (codec/ibp/decode.py, codec/ebp/decode.py), the others in place."""
    t = codec.tables
    if isinstance(codec, IBPCodec):
        return (t.header_bits + t.n_words * t.W) // 8 + 16
    from ibp_graph.codec.ebp.decode import row_reach as ebp_row_reach

    return int(ebp_row_reach(t.W, t.sparse, codec.n_cols, t.low_total, t.HE, t.IB))


def padded_copy_edge_rows(kinds):
    """The payloads of case_garbage_row_at_the_padded_copys_edge (also run by the emulated CUDA kernels): per
    config of `kinds`, eight rows: three encoded ones, a garbage row 3 (fills, lengths below row_nbytes), then
    T bytes of ones for rows 4..7, T around the padded copy's edge. Yields (config, codec, x, fill, length,
    T, rows, offsets, tail)."""
    rng = np.random.default_rng(7)
    for config, codec, x, rows, offsets in encoded_configs(kinds, 8, seed=8):
        rb, reach = codec.row_nbytes, row_reach(codec)
        head = rows[:int(offsets[3])]
        for fill in [f for f in fills(codec) if f in ("zeros", "ones", "random", "escapes")]:
            for length in sorted({0, 1, 2, 3, 5, 8, 13, rb // 4, rb // 2, rb - 2, rb - 1} & set(range(rb))):
                row = garbage_row(codec, fill, length, b"", rng)[0]
                edge = reach - 16 - length  # the T from which row 3 is read in place
                for T in sorted({0, 1} | {T for T in range(edge - 3, edge + 4) if T >= 0}):
                    # rows 4..7: T bytes of ones (the longest codes: a runaway stream goes furthest), then empty
                    # rows (corrupt: any error names row 3 or later)
                    new_offsets = np.concatenate([offsets[:4], int(offsets[3]) + length + np.array([0, T, T, T, T])])
                    new_rows = head + row + b"\xff" * T
                    yield config, codec, x, fill, length, T, new_rows, new_offsets, b"\xff" * PAYLOAD_TAIL


def case_garbage_row_at_the_padded_copys_edge(log, kinds) -> None:
    """A garbage row (row 3, closing the first group of four) followed by rows of T bytes in all, T around
    where the decoders stop reading a row in place and read it from their zero-padded copy of the payload's
    end instead: the bound on a corrupt row's reads that decides it (row_reach) must hold for the rows just
    far enough from the end to be read in place. (IBP's bound is tight: an all-zero row, every word an
    exception, reads up to it; EBP's has a few bytes to spare, so it catches a bound short by about 16.)"""
    for config, codec, _, fill, length, T, new_rows, new_offsets, tail in padded_copy_edge_rows(kinds):
        log(config=config, fill=fill, length=length, T=T, offsets=new_offsets, rows=new_rows)
        got = decode_or_corrupt(codec, guarded_ct(codec, 8, new_rows, new_offsets, tail, "end"))
        assert isinstance(got, torch.Tensor) or got >= 3, (config, fill, length, T, got)


def parallel_rows(n: int = 2500):
    """The payloads of case_parallel_kernels (the emulated CUDA kernels take fewer rows): per float32 and int64
    IBP and EBP config, n encoded rows (length None: valid), then the last one garbage (fills, a few lengths).
    Yields (config, codec, x, fill, length, rows, offsets, tail)."""
    rng = np.random.default_rng(5)
    for config in [c for c in CONFIGS if c[0] != "identity" and c[1] in ("float32", "int64")]:
        codec, x, rows, offsets = encoded(config, n, seed=6)
        yield config, codec, x, None, None, rows, offsets, bytes(PAYLOAD_TAIL)
        for length in (0, 1, 5, codec.row_nbytes // 2, codec.row_nbytes - 1):
            for fill in fills(codec):
                row, tail = garbage_row(codec, fill, length, rows[int(offsets[-2]):], rng)
                new_offsets = offsets.copy()
                new_offsets[-1] = offsets[-2] + length
                yield config, codec, x, fill, length, rows[:int(offsets[-2])] + row, new_offsets, tail


def case_parallel_kernels(log) -> None:
    """Enough rows for the parallel builds of the kernels; the last row garbage, flush against the guard."""
    for config, codec, x, fill, length, rows, offsets, tail in parallel_rows():
        n = x.shape[0]
        if fill is None:
            log(config=config, what="valid, parallel")
            assert same_bits(codec.decode(guarded_ct(codec, n, rows, offsets, tail, "end")), x)
            continue
        log(config=config, what="parallel", fill=fill, length=length)
        got = decode_or_corrupt(codec, guarded_ct(codec, n, rows, offsets, tail, "end"))
        assert isinstance(got, torch.Tensor) or got == n - 1, (config, fill, length, got)


@st.composite
def damaged_payloads(draw, kinds):
    """(config, original rows tensor, damaged row bytes, offsets, tail, rows the damage touched, kind of damage)."""
    configs = [c for c in CONFIGS if c[0] in kinds]
    wide = [c for c in configs if c[3][0] > 100] or configs  # long rows: a runaway read goes far
    config = draw(st.one_of(st.sampled_from(configs), st.sampled_from(wide)))
    n = draw(st.integers(1, 9))
    codec, x, rows, offsets = encoded(config, n, seed=draw(st.integers(0, 2**16)))
    rows = bytearray(rows)
    damage = draw(st.sampled_from(["none", "length", "garbage", "escapes", "flips", "boundary"]))
    r = draw(st.one_of(st.just(n - 1), st.integers(0, n - 1)))
    touched = {r}
    rb = codec.row_nbytes
    tail = None
    if offsets is None:  # identity: a fixed stride; only its bits can change
        damage = "flips" if damage != "none" else damage
    if damage == "escapes" and not isinstance(codec, EBPCodec):
        damage = "garbage"
    if damage in ("length", "garbage", "escapes"):
        length = draw(st.integers(0, rb))
        s, e = int(offsets[r]), int(offsets[r + 1])
        if damage == "length":  # the row's own bytes cut short, or followed by drawn garbage
            row = (bytes(rows[s:e]) + draw(st.binary(min_size=rb, max_size=rb)))[:length]
        elif damage == "escapes":  # a stream whose cursors run as far as the format lets them, cut short
            stream = escape_stream(codec, codec.tables.sparse and draw(st.booleans()))
            row = stream[:length]
            if r == n - 1:  # the tail goes on with it
                tail = stream[length:length + PAYLOAD_TAIL]
        else:
            row = draw(st.one_of(st.binary(min_size=length, max_size=length),
                                 st.sampled_from([bytes(length), b"\xff" * length])))
        rows = rows[:s] + row + rows[e:]
        offsets = offsets.copy()
        offsets[r + 1:] += length - (e - s)
    elif damage == "flips" and rows:
        touched = set()
        for _ in range(draw(st.integers(1, 4))):
            k = draw(st.integers(0, len(rows) - 1))
            rows[k] ^= 1 << draw(st.integers(0, 7))
            touched.add(k // rb if offsets is None else int(np.searchsorted(offsets, k, side="right")) - 1)
    elif damage == "boundary" and n > 1:
        r = max(r, 1)  # boundary r lies between rows r - 1 and r
        lo = max(int(offsets[r - 1]), int(offsets[r + 1]) - rb)
        hi = min(int(offsets[r + 1]), int(offsets[r - 1]) + rb)
        offsets = offsets.copy()
        offsets[r] = draw(st.integers(lo, hi))
        touched = {r - 1, r}
    if tail is None:
        tail = b"" if offsets is None else draw(st.sampled_from([bytes(PAYLOAD_TAIL), b"\xff" * PAYLOAD_TAIL,
                                                                 bytes(range(1, PAYLOAD_TAIL + 1))]))
    return config, x, bytes(rows), offsets, tail, touched, damage


def case_damaged_payloads(log, kinds, max_examples: int) -> None:
    """Property: a damaged payload against either guard decodes or raises CorruptPayloadError naming a damaged
    row, and its undamaged rows decode exactly; the same for a gather of its rows."""

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(damaged_payloads(kinds), st.sampled_from(["end", "start"]), st.data())
    def check(case, at, data):
        config, x, rows, offsets, tail, touched, damage = case
        codec = make_codec(*config)
        n = x.shape[0]
        log(config=config, damage=damage, at=at, touched=sorted(touched), tail=tail, offsets=offsets, rows=rows)
        ct = guarded_ct(codec, n, rows, offsets, tail, at)
        got = decode_or_corrupt(codec, ct)
        if damage == "none":
            assert isinstance(got, torch.Tensor) and same_bits(got, x)
        elif isinstance(got, torch.Tensor):
            keep = [i for i in range(n) if i not in touched]
            assert same_bits(got[keep], x[keep])
        else:
            assert got in touched, (got, touched)
        idx = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6)))
        log(config=config, damage=damage, at=at, gather=idx.tolist())
        got = decode_or_corrupt(codec, ct.index_select(idx))
        if isinstance(got, torch.Tensor):
            fine = [k for k, i in enumerate(idx.tolist()) if i not in touched]
            assert same_bits(got[fine], x[idx[fine]])
        else:
            assert int(idx[got]) in touched

    check()


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("kind", ["past", "before"])
def test_the_guard_page_catches_a_read_outside_the_buffer(kind):
    """The harness itself: one byte read just outside a guarded buffer kills the child, and the test fails."""
    with pytest.raises(pytest.fail.Exception, match=r"died by SIG(SEGV|BUS)(.|\n)*read one byte"):
        run_child(case_harness_self_check, kind)


def test_guarded_bytes_layout():
    for n in (0, 1, 17, PAGE, PAGE + 3):
        data = bytes(range(256)) * (n // 256 + 1)
        end, start = guarded_bytes(data[:n], "end"), guarded_bytes(data[:n], "start")
        assert end.tobytes() == start.tobytes() == data[:n]
        assert (end.ctypes.data + n) % PAGE == 0 and start.ctypes.data % PAGE == 0


def test_valid_payloads_against_guard_pages_decode_exactly():
    assert run_child(case_valid_payloads) == 3 * len(CONFIGS)


@pytest.mark.parametrize("kind", ["ibp", "ebp"])
def test_a_garbage_last_row_of_every_length_is_never_read_past(kind):
    assert run_child(case_garbage_last_row_every_length, [kind]) > 5000


@pytest.mark.parametrize("kind", ["ibp", "ebp"])
def test_a_garbage_row_where_the_decoder_stops_reading_a_padded_copy_is_never_read_past(kind):
    assert run_child(case_garbage_row_at_the_padded_copys_edge, [kind]) > 500


def test_parallel_kernels_never_read_past_the_payload():
    run_child(case_parallel_kernels)


@pytest.mark.parametrize("kind", ["ibp", "ebp", "identity"])
def test_damaged_payloads_never_read_outside_their_buffer(kind):
    run_child(case_damaged_payloads, [kind], 150)


# --------------------------------------------------------------------------- in process: IBP reports damage
@pytest.mark.parametrize("W", [32, 64])
def test_ibp_reports_a_row_whose_length_does_not_match_its_bit_stream(W):
    """A compressed IBP row's stream ends in its last byte (docs/format.md); a row cut short, with bytes added,
    or shorter than its participation header is reported as corrupt, by row, and its neighbours are intact."""
    x = make_rows(torch.float32, (40,), 30, seed=7)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    lengths = ct.row_lengths().numpy()
    r = int(np.flatnonzero((lengths < codec.row_nbytes - 1) & (lengths > codec.header_bits // 8 + 1))[0])
    rows = ct.payload.numpy()[:int(ct.offsets[-1])].tobytes()
    s, e = int(ct.offsets[r]), int(ct.offsets[r + 1])
    for new in (rows[s:e - 1], rows[s:e] + b"\0", rows[s:s + codec.header_bits // 8 - 1], b""):
        offs = ct.offsets.clone()
        offs[r + 1:] += len(new) - (e - s)
        payload = torch.from_numpy(np.frombuffer(rows[:s] + new + rows[e:] + bytes(PAYLOAD_TAIL), np.uint8).copy())
        with pytest.raises(CorruptPayloadError, match=f"ct row {r} is corrupt"):
            codec.decode(dataclasses.replace(ct, payload=payload, offsets=offs))


# --------------------------------------------------------------------------- in process: the tail on disk
@pytest.mark.parametrize("name", ["ibp", "ebp"])
def test_a_stored_payload_keeps_the_tail_decoders_read_and_a_shorter_one_is_refused(tmp_path, name):
    """The decoders' reads end within PAYLOAD_TAIL bytes past a row; a store's payload.bin keeps them (and a
    memory map of it decodes in place), and one cut short of them is refused when the store is loaded."""
    x = make_rows(torch.float32, (40,), 300, seed=8)
    folder = tmp_path / "t"
    EncodedTable.encode(x, name, directory=folder, progress=False)
    offsets = np.load(folder / "offsets.npy")
    payload = folder / "payload.bin"
    assert payload.stat().st_size >= int(offsets[-1]) + PAYLOAD_TAIL
    table = EncodedTable.load(folder, mmap=True)
    assert same_bits(table.codec.decode(table.compressed), x)  # the memory map itself, not a gathered copy
    assert same_bits(table.decode_rows(torch.arange(300).flip(0)), x.flip(0))
    del table
    payload.write_bytes(payload.read_bytes()[:int(offsets[-1]) + PAYLOAD_TAIL - 1])
    meta = json.loads((folder / "meta.json").read_text())
    meta["payload_bytes"] = int(offsets[-1]) + PAYLOAD_TAIL - 1
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptPayloadError, match=rf"\+{PAYLOAD_TAIL} of padding"):
        EncodedTable.load(folder, verify="none")
