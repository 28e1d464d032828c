"""The condensed-row layout: offsets checks and the gather, which never reads or writes outside
its buffers, whatever offsets or rows it is handed."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ibp_graph.layout import CompressedTensor, CorruptPayloadError
from ibp_graph.layout.rows import (PAYLOAD_TAIL, RAW_GATHER_MAX_ROW_NBYTES, check_offsets_array,
                                   check_row_index, empty_rows, gather_condensed_rows,
                                   gather_fixed_rows, offsets_from_lengths)


def reference_gather(payload: np.ndarray, offsets: np.ndarray, idx) -> bytes:
    """The selected rows' bytes, back to back (plain Python)."""
    return b"".join(payload[int(offsets[i]):int(offsets[i + 1])].tobytes() for i in idx)


def random_rows(seed: int, n: int, max_len: int = 40):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, max_len + 1, n)
    offsets, padded = offsets_from_lengths(lengths)
    payload = np.zeros(padded, np.uint8)
    payload[: int(offsets[-1])] = rng.integers(0, 256, int(offsets[-1]))
    return payload, offsets


@pytest.mark.parametrize("seed", range(4))
def test_gather_matches_reference(seed):
    payload, offsets = random_rows(seed, 300)
    idx = np.random.default_rng(seed + 10).integers(0, 300, 500)
    out, new = gather_condensed_rows(payload, offsets, idx)
    assert new[0] == 0 and out.shape[0] >= int(new[-1]) + PAYLOAD_TAIL
    assert out[: int(new[-1])].tobytes() == reference_gather(payload, offsets, idx)
    assert not out[int(new[-1]):].any()  # the tail is zeros


def test_offsets_from_lengths_dtype_and_padding():
    offsets, padded = offsets_from_lengths(np.array([3, 0, 5]))
    assert offsets.dtype == np.int32 and offsets.tolist() == [0, 3, 3, 8]
    assert padded % 8 == 0 and padded >= 8 + PAYLOAD_TAIL
    payload, offsets = empty_rows(4)
    assert offsets.tolist() == [0] * 5 and payload.shape[0] >= PAYLOAD_TAIL and not payload.any()


@pytest.mark.parametrize("bad, match", [
    (lambda o: o.__setitem__(5, o[4] - 1), "negative length|outside the payload"),   # decreasing
    (lambda o: o.__setitem__(slice(7, None), o[7:] + 10**6), "outside the payload"),  # past the end
    (lambda o: o.__setitem__(slice(3, None), o[3:] - 10**6), "outside the payload"),  # negative
])
def test_gather_refuses_offsets_outside_the_payload(bad, match):
    payload, offsets = random_rows(1, 20)
    offsets = offsets.astype(np.int64)
    bad(offsets)
    with pytest.raises(CorruptPayloadError, match=match):
        gather_condensed_rows(payload, offsets, np.arange(20))


def test_gather_touches_only_the_selected_rows():
    """Offsets of rows that are not gathered are not read (a whole-table check would cost O(table))."""
    payload, offsets = random_rows(2, 50)
    offsets = offsets.astype(np.int64)
    offsets[40:] = -5  # rows 39.. are corrupt
    out, new = gather_condensed_rows(payload, offsets, np.array([0, 7, 38]))
    assert out[: int(new[-1])].tobytes() == reference_gather(payload, offsets, [0, 7, 38])
    with pytest.raises(CorruptPayloadError, match=r"row 39"):
        gather_condensed_rows(payload, offsets, np.array([0, 39]))


@pytest.mark.parametrize("idx", [[0, 20], [-1], [10**9]])
def test_gather_refuses_rows_out_of_range(idx):
    payload, offsets = random_rows(3, 20)
    with pytest.raises(IndexError, match=r"outside the valid range \[0, 20\)"):
        gather_condensed_rows(payload, offsets, np.array(idx))


@pytest.mark.parametrize("offsets", [np.zeros(3, np.float64), np.zeros((2, 2), np.int64),
                                     np.zeros(3, np.uint16)])
def test_gather_refuses_offsets_of_another_type(offsets):
    with pytest.raises(CorruptPayloadError, match="int32 or int64"):
        gather_condensed_rows(np.zeros(32, np.uint8), offsets, np.array([0]))


def test_index_select_refuses_corrupt_offsets_without_crashing():
    payload, offsets = random_rows(4, 30)
    offsets = offsets.astype(np.int64)
    offsets[10] = 10**9
    ct = CompressedTensor(payload=torch.from_numpy(payload), offsets=torch.from_numpy(offsets),
                          shape=(30, 40), dtype=torch.uint8, codec="ibp", fingerprint=1)
    with pytest.raises(CorruptPayloadError, match=r"row 9 lies outside the payload"):
        ct.index_select(torch.tensor([9]))
    with pytest.raises(CorruptPayloadError, match=r"offsets has 30 entries"):
        CompressedTensor(payload=ct.payload, offsets=ct.offsets[:-1], shape=(30, 40),
                         dtype=torch.uint8, codec="ibp", fingerprint=1).index_select(torch.tensor([0]))


@pytest.mark.parametrize("change, match", [
    (lambda o: o.__setitem__(0, 1), r"offsets\[0\] is 1, must be 0"),
    (lambda o: o.__setitem__(4, o[3] - 1), r"row 3 the length -1"),
    (lambda o: o.__setitem__(slice(6, None), o[6:] + 100), r"row 5 the length 1\d\d .*row_nbytes=40"),
])
def test_check_offsets_array_names_the_first_bad_entry(change, match):
    payload, offsets = random_rows(5, 12)
    offsets = offsets.astype(np.int64)
    check_offsets_array(offsets, payload.shape[0], 40)
    change(offsets)
    with pytest.raises(CorruptPayloadError, match=match):
        check_offsets_array(offsets, payload.shape[0], 40)


def test_check_offsets_array_needs_the_tail_padding():
    payload, offsets = random_rows(5, 12)
    need = int(offsets[-1]) + PAYLOAD_TAIL
    check_offsets_array(offsets, need, 40)
    with pytest.raises(CorruptPayloadError, match=f"has {need - 1} bytes; offsets needs at least {need}"):
        check_offsets_array(offsets, need - 1, 40)


def test_check_offsets_array_refuses_other_dtypes():
    with pytest.raises(CorruptPayloadError, match="int32 or int64"):
        check_offsets_array(np.zeros(3), 64, 8)
    with pytest.raises(CorruptPayloadError, match="empty"):
        check_offsets_array(np.zeros(0, np.int64), 64, 8)


def test_check_row_index():
    assert check_row_index(torch.tensor([2, 0], dtype=torch.int32), 3).dtype == np.int64
    with pytest.raises(TypeError, match="1-d integer tensor"):
        check_row_index(torch.tensor([0.5]), 3)
    with pytest.raises(IndexError, match=r"contains 3, outside the valid range \[0, 3\)"):
        check_row_index(torch.tensor([3]), 3)


@pytest.mark.parametrize("ids", [np.array([1, 2**63 + 5], np.uint64), torch.tensor([1, 2**64 - 1], dtype=torch.uint64),
                                 np.array([2**63], np.uint64)], ids=["numpy", "torch", "2**63"])
def test_a_uint64_id_above_int64_is_refused_as_given_not_wrapped(ids):
    """uint64 ids of 2**63 and more wrap to negative int64: the error shows the id the caller gave."""
    top = int(np.asarray(ids).max())
    with pytest.raises(IndexError, match=rf"^ids contains {top}, outside the valid range \[0, 10\)$"):
        check_row_index(ids, 10, "ids")
    assert check_row_index(np.array([9, 0], np.uint64), 10).tolist() == [9, 0]  # in range: accepted as before


# ---- fixed-stride raw rows ------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(n_rows=st.integers(1, 300), row_nbytes=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 36, 512, 520,
                                                               RAW_GATHER_MAX_ROW_NBYTES,
                                                               RAW_GATHER_MAX_ROW_NBYTES + 8]),
       n_idx=st.sampled_from([0, 1, 17, 2500]), src_shift=st.integers(0, 7), out_shift=st.integers(0, 7),
       seed=st.integers(0, 2**32 - 1))
def test_fixed_gather_equals_numpy_indexing(n_rows, row_nbytes, n_idx, src_shift, out_shift, seed):
    """Every row size (whole words or not, past the kernel's limit too), misaligned buffers,
    repeated rows, the serial build (few rows) and the parallel one (2500 rows)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, n_rows * row_nbytes + src_shift, dtype=np.uint8)
    src = raw[src_shift:].reshape(n_rows, row_nbytes)  # a buffer at an odd address
    idx = rng.integers(0, n_rows, n_idx)
    dst = np.zeros(n_idx * row_nbytes + out_shift, np.uint8)
    out = dst[out_shift:].reshape(n_idx, row_nbytes)
    assert gather_fixed_rows(src, idx, out) is out
    assert np.array_equal(out, src[idx])
    assert not dst[:out_shift].any()  # nothing written before out


@pytest.mark.parametrize("row_nbytes", [8, RAW_GATHER_MAX_ROW_NBYTES + 8])
@pytest.mark.parametrize("bad", [-1, 50, 2**40])
@pytest.mark.parametrize("n_idx", [10, 3000])
def test_fixed_gather_refuses_rows_out_of_range(row_nbytes, bad, n_idx):
    src = np.arange(50 * row_nbytes, dtype=np.int64).astype(np.uint8).reshape(50, row_nbytes)
    idx = np.zeros(n_idx, np.int64)
    idx[n_idx // 2] = bad
    with pytest.raises(IndexError, match=rf"ids\[{n_idx // 2}\] is {bad}, outside the valid range \[0, 50\)"):
        gather_fixed_rows(src, idx, np.empty((n_idx, row_nbytes), np.uint8), "ids")


def test_fixed_gather_refuses_mismatched_arrays():
    src = np.zeros((4, 8), np.uint8)
    with pytest.raises(ValueError, match=r"out has shape \(3, 8\); 2 rows of 8 bytes need \(2, 8\)"):
        gather_fixed_rows(src, np.zeros(2, np.int64), np.zeros((3, 8), np.uint8))
    with pytest.raises(TypeError, match="out must be a C-contiguous 2-d uint8 array"):
        gather_fixed_rows(src, np.zeros(2, np.int64), np.zeros((8, 2), np.uint8).T)
    with pytest.raises(TypeError, match="src must be a C-contiguous 2-d uint8 array, got float32"):
        gather_fixed_rows(src.view(np.float32), np.zeros(2, np.int64), np.zeros((2, 8), np.uint8))
    with pytest.raises(TypeError, match="index must be a 1-d int64 array, got int32"):
        gather_fixed_rows(src, np.zeros(2, np.int32), np.zeros((2, 8), np.uint8))


def test_fixed_stride_index_select_uses_the_checked_gather():
    ct = CompressedTensor(payload=torch.arange(60, dtype=torch.uint8), offsets=None, shape=(5, 3),
                          dtype=torch.float32, codec="identity", fingerprint=1)
    picked = ct.index_select(torch.tensor([4, 0, 4]))
    assert picked.shape == (3, 3) and picked.payload.tolist() == list(range(48, 60)) + list(range(12)) \
        + list(range(48, 60))
    with pytest.raises(IndexError, match=r"rows contains 5, outside the valid range \[0, 5\)"):
        ct.index_select(torch.tensor([5]))


def test_condensed_gather_writes_into_the_given_buffer():
    payload, offsets = random_rows(5, 100)
    idx = np.array([3, 99, 3, 0])
    made = []
    out, new = gather_condensed_rows(payload, offsets, idx, lambda n: made.append(np.full(n, 7, np.uint8)) or made[0])
    assert out is made[0] and out[: int(new[-1])].tobytes() == reference_gather(payload, offsets, idx)
    assert not out[int(new[-1]):].any()  # the tail is zeroed even in a reused buffer
    with pytest.raises(ValueError, match=r"alloc\(\d+\) gave a uint8 array of shape \(3,\); a contiguous 1-d uint8"):
        gather_condensed_rows(payload, offsets, idx, lambda n: np.zeros(3, np.uint8))


@pytest.mark.parametrize("with_offsets", [True, False])
def test_index_select_writes_its_payload_where_empty_says(with_offsets):
    x = torch.randn(40, 6)
    from ibp_graph.codec import IBPCodec, IdentityCodec

    codec = IBPCodec.fit(x) if with_offsets else IdentityCodec.fit(x)
    ct = codec.encode(x)
    assert (ct.offsets is not None) == with_offsets
    pool = torch.zeros(4096, dtype=torch.uint8)
    used = []

    def empty(shape, dtype):
        n = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
        used.append(n)
        return pool[:n].view(dtype).view(shape)

    rows = torch.tensor([5, 0, 39, 5])
    got = ct.index_select(rows, empty)
    assert used and got.payload.data_ptr() == pool.data_ptr()
    assert torch.equal(codec.decode(got), x[rows])
    assert torch.equal(got.payload, ct.index_select(rows).payload)
