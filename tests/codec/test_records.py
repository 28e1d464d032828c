"""Records declared once: each codec's tables are one frozen record, the kernels' field
numbers come from the records' dtypes, and every kernel call passes the parameters its
callee declares (read from both sides)."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.codec import EBPCodec, IBPCodec
from ibp_graph.codec.ebp import decode as ebp_decode
from ibp_graph.codec.ebp import encode as ebp_encode
from ibp_graph.codec.ebp import tables as ebp_tables
from ibp_graph.codec.ibp import tables as ibp_tables


def sample_codecs():
    x = torch.from_numpy(np.random.default_rng(0).normal(0, 0.1, (400, 10)).astype(np.float32))
    x[::2, 3:] = 0
    return [IBPCodec.fit(x), IBPCodec.fit(x, word_bits=64), EBPCodec.fit(x, sparse=True),
            EBPCodec.fit(x, sparse=False)]


@pytest.mark.parametrize("codec", sample_codecs(), ids=lambda c: repr(c)[:20])
def test_tables_are_a_frozen_record(codec):
    t = codec.tables
    assert dataclasses.is_dataclass(t)
    field = dataclasses.fields(t)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(t, field, 0)
    assert any(isinstance(getattr(t, f.name), np.ndarray) for f in dataclasses.fields(t))
    assert codec.tables is t  # one record per codec, built once


def test_ibp_codec_attributes_are_the_tables_fields():
    codec = sample_codecs()[0]
    t = codec.tables
    assert codec.mask is t.mask and codec.bitval is t.bitval and codec.free_bits is t.free_bits
    assert (codec.header_bits, codec.n_words, codec.word_bits, codec.row_nbytes) == \
        (t.header_bits, t.n_words, t.W, t.row_nbytes)


def test_ibp_units_follow_the_unit_record():
    for codec in sample_codecs()[:2]:
        t = codec.tables
        units = t.cols.view(ibp_tables.UNIT_RECORD).reshape(-1)
        per = 64 // t.W
        for j in range(t.n_words):
            shift = np.uint64(32 * (j % per)) if per == 2 else np.uint64(0)
            low = np.uint64(2**t.W - 1)
            assert (units["mask"][j // per] >> shift) & low == t.mask[j]
            assert (units["bitval"][j // per] >> shift) & low == t.bitval[j]
            assert (units["free_mask"][j // per] >> shift) & low == t.free_mask[j]
        assert ibp_tables.UNIT_BYTES == t.cols.shape[1] * 8 == ibp_tables.UNIT_RECORD.itemsize


def test_ebp_column_records_match_their_field_numbers():
    T = ebp_tables
    for codec in sample_codecs()[2:]:
        t = codec.tables
        colp = t.colp.view(T.COLUMN_RECORD).reshape(-1)
        assert t.colp.shape[1] * 8 == T.COLUMN_RECORD.itemsize
        for name, idx in (("lw", T.C_LW), ("tid", T.C_TID), ("tids", T.C_TIDS),
                          ("hshift", T.C_HSHIFT), ("ddef", T.C_DDEF), ("ddefe", T.C_DDEFE),
                          ("dmin", T.C_DMIN)):
            assert np.array_equal(t.colp[:, idx], colp[name]), name
        for k, f in enumerate(T.TABLE_FIELDS):
            assert [T.F_EOFF, T.F_DLIM, T.F_HOFF, T.F_HMASK, T.F_ESCE][k] == k
            assert np.array_equal(t.colp[:, T.C_D + k], colp["d_" + f])
            assert np.array_equal(t.colp[:, T.C_S + k], colp["s_" + f])
        assert np.array_equal(t.colp[:, T.C_LW], t.col_lw)
        colm = t.colm.view(T.COLUMN_MASKS).reshape(-1)
        assert np.array_equal(t.colm[:, T.M_DEFAULT], colm["default"])
        assert np.array_equal(t.colm[:, T.M_HIMASK], colm["himask"])
        drec = t.drec.view(T.DENSE_RECORD).reshape(-1)
        for name, off in (("shift", T.R_SHIFT), ("dlim", T.R_DLIM), ("eaddr", T.R_EADDR),
                          ("himask", T.R_HIMASK)):
            assert np.array_equal(t.drec[:, off // 8], drec[name]), name
        assert T.REC_BYTES == t.drec.shape[1] * 8


def _params(fn) -> list[str]:
    return list(inspect.signature(getattr(fn, "py_func", fn)).parameters)


def test_kernel_entry_points_take_the_tables_fields_in_order():
    fields = {f.name for f in dataclasses.fields(ebp_tables.EBPTables)}
    dec = ebp_decode.DECODE_TABLE_ARGS
    assert set(dec) <= fields
    assert _params(ebp_decode._decode_impl) == ["payload", "offsets", "dest", "words", "rows", *dec, "bad"]
    enc = ebp_encode.ENCODE_TABLE_ARGS
    assert set(enc) <= fields
    assert _params(ebp_encode._encode_impl) == ["words", "rows", "n_chunks", *enc, "tmp", "lengths",
                                                "scratch"]


def test_long_numba_calls_pass_what_the_callee_declares():
    """The decoder's long positional calls (_dense_quad: 25 parameters, _decode_row: 29) pass,
    at each position, a name equal to the callee's parameter there (read from both sides)."""
    tree = ast.parse(Path(ebp_decode.__file__).read_text())
    checked = calls = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("_dense_quad", "_decode_row"):
            calls += 1
            params = _params(getattr(ebp_decode, node.func.id))
            assert len(node.args) == len(params), (node.func.id, node.lineno)
            for arg, param in zip(node.args, params):
                if isinstance(arg, ast.Name):
                    assert arg.id == param or (arg.id, param) in _SAME, (node.func.id, node.lineno,
                                                                          arg.id, param)
                    checked += 1
    assert calls == 3 and checked > 40


# a lone row goes through the lockstep decoder as all four of its (row, out, bit) triples
_SAME = {(a, a[0] + str(k)) for a in ("row", "o", "p") for k in range(4)}
