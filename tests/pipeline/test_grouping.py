"""grouping: keys are small dataclasses with readable names; a group splits back into its tensors."""
import dataclasses
import math
import pickle

import pytest
import torch

from ibp_graph.codec import SUPPORTED_DTYPES
from ibp_graph.pipeline.grouping import (ROWS, SCALAR_BLOCK, SCALARS, STORE, GroupKey, GroupLayout, Member,
                                         gather_rows, group_key, one_tensor_group, store_key, write_group)


def group_tensors(tensors):
    """The named tensors as one contiguous tensor per group, with its layout, as the producer writes them
    (pipeline/producer.py): one contiguous row tensor alone is the group itself, anything else is written."""
    buckets = {}
    for name, t in tensors.items():
        buckets.setdefault(group_key(name, t), []).append((name, tuple(t.shape), t))
    return {key: one_tensor_group(key, items[0][0], items[0][2])
            if not key.scalar and len(items) == 1 and items[0][2].is_contiguous() else write_group(key, items)
            for key, items in buckets.items()}


def _tensor(dtype: torch.dtype, shape, seed: int) -> torch.Tensor:
    """Random bits of `dtype` (every pattern, NaNs included for floats)."""
    n = 1
    for s in shape:
        n *= s
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    if dtype == torch.bool:
        raw = raw & 1
    return raw.view(dtype).reshape(shape)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


def test_keys_are_frozen_dataclasses_with_readable_names():
    k = GroupKey("float32", (128,), ROWS)
    assert str(k) == "float32[128]" and k.codec_row_shape == (128,) and not k.scalar
    assert str(GroupKey("int64", (), SCALARS)) == "int64[*]"
    assert GroupKey("int64", (), SCALARS).codec_row_shape == (SCALAR_BLOCK,)
    assert str(GroupKey("float16", (4, 3), ROWS)) == "float16[4,3]"
    s = store_key("x", torch.float32, (128,))
    assert str(s) == "x@store" and s.kind == STORE and s.name == "x" and s.torch_dtype == torch.float32
    assert s != GroupKey("float32", (128,), ROWS)  # a store is its own group, even with the same rows
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.dtype = "int8"
    assert pickle.loads(pickle.dumps(k)) == k and hash(pickle.loads(pickle.dumps(k))) == hash(k)
    with pytest.raises(ValueError, match="kind='feature' is not accepted"):
        GroupKey("float32", (1,), "feature")
    with pytest.raises(ValueError, match="name='x' with kind='rows'"):
        GroupKey("float32", (1,), ROWS, "x")
    with pytest.raises(ValueError, match="name=None with kind='store'"):
        GroupKey("float32", (1,), STORE)
    with pytest.raises(ValueError, match="row_shape=\\(3,\\) with kind='scalars'"):
        GroupKey("int64", (3,), SCALARS)


def test_group_key_of_named_tensors():
    assert group_key("x", torch.zeros(5, 8)) == GroupKey("float32", (8,), ROWS)
    assert group_key("y", torch.zeros(5, dtype=torch.int64)) == GroupKey("int64", (), SCALARS)
    # edge_index is 2-d but joins the id stream
    assert group_key("edge_index", torch.zeros(2, 7, dtype=torch.int64)) == GroupKey("int64", (), SCALARS)
    assert group_key("w", torch.zeros(5, 2, 3, dtype=torch.float16)) == GroupKey("float16", (2, 3), ROWS)


@pytest.mark.parametrize("dtype_name", sorted(SUPPORTED_DTYPES))
@pytest.mark.parametrize("row_shape", [(), (1,), (7,), (3, 5)], ids=["scalar", "1", "7", "3x5"])
def test_split_round_trip_for_every_dtype_and_row_shape(dtype_name, row_shape):
    dtype = SUPPORTED_DTYPES[dtype_name]
    tensors = {"a": _tensor(dtype, (13,) + row_shape, 1), "b": _tensor(dtype, (0,) + row_shape, 2),
               "c": _tensor(dtype, (70,) + row_shape, 3)}
    if row_shape == ():
        tensors["edge_index"] = _tensor(dtype, (2, 9), 4)
    grouped = group_tensors(tensors)
    (key,) = grouped
    layout, data = grouped[key]
    assert key == layout.key and key.dtype == dtype_name and key.torch_dtype == dtype
    assert key.kind == (SCALARS if row_shape == () else ROWS)
    assert data.dtype == dtype and data.is_contiguous() and tuple(data.shape[1:]) == key.codec_row_shape
    if key.scalar:  # one element stream, cut into zero-padded rows of SCALAR_BLOCK
        n = sum(t.numel() for t in tensors.values())
        assert data.shape[0] == -(-n // SCALAR_BLOCK)
        assert not _bits(data.reshape(-1)[n:]).any()
    else:
        assert data.shape[0] == sum(t.shape[0] for t in tensors.values())
    out = layout.split(data.clone())
    assert list(out) == list(tensors)
    for name, t in tensors.items():
        assert out[name].dtype == t.dtype and out[name].shape == t.shape, name
        assert torch.equal(_bits(out[name]), _bits(t)), name


def test_mixed_groups_and_store_layout():
    tensors = {"x": torch.randn(10, 4), "y": torch.arange(10), "n_id": torch.arange(10, 20),
               "edge_attr": torch.randn(6, 4), "mask": torch.ones(10, dtype=torch.bool)}
    grouped = group_tensors(tensors)
    assert sorted(map(str, grouped)) == ["bool[*]", "float32[4]", "int64[*]"]
    rows = grouped[GroupKey("float32", (4,), ROWS)][0]
    assert [(m.name, m.start) for m in rows.members] == [("x", 0), ("edge_attr", 10)]
    layout = GroupLayout(store_key("x", torch.float16, (4,)), (Member("x", (10, 4), 0),))
    assert layout.key == store_key("x", torch.float16, (4,)) and str(layout.key) == "x@store"
    decoded = torch.randn(10, 4).half()
    assert layout.split(decoded)["x"] is not None and torch.equal(layout.split(decoded)["x"], decoded)


#: dtypes no codec has (layout.dtypes.SUPPORTED_DTYPES lacks them), of element sizes 1, 2, 4, 8, 16.
BYTE_DTYPES = [torch.float8_e4m3fn, torch.uint16, torch.uint32, torch.complex64, torch.complex128, torch.uint64]


@pytest.mark.parametrize("dtype", BYTE_DTYPES, ids=str)
@pytest.mark.parametrize("row_shape", [(), (7,), (3, 5)], ids=["scalar", "7", "3x5"])
def test_a_dtype_no_codec_has_travels_as_bytes_and_splits_back_bit_for_bit(dtype, row_shape):
    size = torch.empty((), dtype=dtype).element_size()
    tensors = {"a": _tensor(dtype, (13,) + row_shape, 1), "b": _tensor(dtype, (0,) + row_shape, 2),
               "c": _tensor(dtype, (70,) + row_shape, 3)}
    (key,) = grouped = group_tensors(tensors)
    layout, data = grouped[key]
    name = str(dtype).removeprefix("torch.")
    assert key.dtype == name and key.as_bytes and key.torch_dtype == dtype and key.codec_dtype == torch.uint8
    assert str(key) == (f"{name}[*]" if row_shape == () else f"{name}[{','.join(map(str, row_shape))}]")
    per_row = SCALAR_BLOCK if row_shape == () else math.prod(row_shape)
    assert key.codec_row_shape == (per_row * size,)
    assert data.dtype == torch.uint8 and data.is_contiguous() and tuple(data.shape[1:]) == key.codec_row_shape
    out = layout.split(data.clone())
    for n, t in tensors.items():
        assert out[n].dtype == dtype and out[n].shape == t.shape, n
        assert torch.equal(_bits(out[n]), _bits(t)), n


def test_supported_dtypes_are_not_sent_as_bytes():
    for name, dtype in SUPPORTED_DTYPES.items():
        key = group_key("x", torch.zeros(2, 3, dtype=dtype))
        assert not key.as_bytes and key.codec_dtype == dtype and key.codec_row_shape == (3,), name


@pytest.mark.parametrize("dtype", BYTE_DTYPES + [torch.int4, torch.bits16, torch.float32], ids=str)
def test_gather_rows_for_any_dtype(dtype):
    table = _tensor(dtype, (20, 3), 5)
    index = torch.tensor([4, 0, 19, 4])
    rows = gather_rows(table, index)
    assert rows.dtype == dtype and rows.shape == (4, 3)
    assert torch.equal(_bits(rows), torch.cat([_bits(table[i:i + 1]) for i in index.tolist()]))


@pytest.mark.parametrize("dtype", list(SUPPORTED_DTYPES.values()) + [torch.complex64, torch.uint16], ids=str)
@pytest.mark.parametrize("row_shape", [(), (3,), (4, 32)], ids=str)
def test_gather_rows_into_a_slice_of_a_buffer(dtype, row_shape):
    """out= a view inside a larger buffer (a shared-memory slot): only its rows are written."""
    table = _tensor(dtype, (50,) + row_shape, 7)
    index = torch.randint(0, 50, (3000,), generator=torch.Generator().manual_seed(1))  # the parallel build too
    buf = torch.zeros((3002,) + row_shape, dtype=dtype)
    got = gather_rows(table, index, out=buf[1:3001])
    assert got.data_ptr() == buf[1].data_ptr()
    assert torch.equal(_bits(got), _bits(table[index]))
    assert not _bits(buf[:1]).any() and not _bits(buf[3001:]).any()


@pytest.mark.parametrize("index", [torch.tensor([0, 9, 3], dtype=torch.int32), torch.tensor([[0, 9, 3]])[0, ::1]])
def test_gather_rows_of_a_strided_table_or_int32_index(index):
    table = _tensor(torch.float32, (10, 6), 3)[:, ::2]  # not contiguous: index_select's path
    assert torch.equal(_bits(gather_rows(table, index)), _bits(table[index.long()]))
    assert torch.equal(_bits(gather_rows(table.contiguous(), index)), _bits(table[index.long()]))


@pytest.mark.parametrize("bad", [-1, 10])
def test_gather_rows_refuses_rows_out_of_range(bad):
    with pytest.raises(IndexError, match=rf"index\[1\] is {bad}, outside the valid range \[0, 10\)"):
        gather_rows(torch.zeros(10, 4), torch.tensor([0, bad]))


@pytest.mark.parametrize("dtype", [torch.qint32, torch.quint8], ids=str)
def test_gather_rows_of_a_quantized_dtype_seen_through_bytes(dtype):
    """A table of quantized dtype made from bytes (no quantizer: torch.empty of it crashes)."""
    table = torch.randint(0, 256, (30, 4 * torch.empty(0, dtype=torch.uint8).view(dtype).element_size()),
                          dtype=torch.uint8).view(dtype)
    index = torch.tensor([29, 0, 7, 7])
    got = gather_rows(table, index)
    assert got.dtype == dtype and got.shape == (4, 4)
    assert torch.equal(got.view(torch.uint8), table.view(torch.uint8)[index])


@pytest.mark.parametrize("shape", [(10, 0, 3), (10, 4), (10,), (0, 4)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint16], ids=str)
def test_gather_rows_of_no_rows_or_empty_rows(shape, dtype):
    table = torch.zeros(shape, dtype=dtype)
    for n_index in ([0, 5] if shape[0] else [0]):
        got = gather_rows(table, torch.zeros(n_index, dtype=torch.int64))
        assert got.shape == (n_index,) + shape[1:] and got.dtype == dtype
