"""EBP GPU decoders checked bit for bit against the CPU codec (run with -m gpu on a GPU machine).

Decode from device memory (the worker path: compressed batch copied over, then decoded), and
fetch from a table in device memory or in pinned host memory (the zero-copy path). Outputs
are poisoned (0xFF) before every launch, so a row the kernel forgets cannot pass.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ibp_graph import gpu
from ibp_graph.codec import CorruptPayloadError, EBPCodec

from tests.codec.test_ebp import crafted_codec, rows_for
from tests.gpu.test_ibp_compile import adversarial_rows, new_seed, row_bytes
from tests.gpu.test_ibp_gpu import GPU_SETTINGS, gpu, poisoned  # noqa: F401  (gpu: autouse fixture)

pytestmark = pytest.mark.gpu

FAMILIES = ["embedding_f32", "embedding_f16", "pca_bow", "tfidf", "binary_bow", "node_ids_i64",
            "random_bits"]


def _check(codec, x, index=None):
    ct = codec.encode(x)
    want = x if index is None else x[torch.as_tensor(index)]
    out = poisoned(ct.shape, codec.dtype)
    assert gpu.decode(codec, ct.to("cuda"), out=out) is out
    assert np.array_equal(row_bytes(out), row_bytes(x))
    if index is None:
        return
    idx = torch.as_tensor(index, dtype=torch.int64)
    for table in (ct.to("cuda"), ct.pin_memory()):
        out = poisoned((len(idx),) + tuple(x.shape[1:]), codec.dtype)
        assert gpu.fetch(codec, table, idx.cuda(), out=out) is out
        assert np.array_equal(row_bytes(out), row_bytes(want))


@pytest.mark.parametrize("family", FAMILIES)
def test_families_bit_exact(family):
    from ibp_graph.data.synthetic import make_family

    x = make_family(family, 3000)
    rng = np.random.default_rng(new_seed())
    _check(EBPCodec.fit(x), x, rng.integers(0, 3000, 2000))


@GPU_SETTINGS
@given(seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64,
                              torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                              torch.bool]),
       shape=st.sampled_from([(1,), (3,), (7,), (33,), (128,), (2, 3), (300,)]),
       sparse=st.sampled_from([None, False]))
def test_adversarial_rows_bit_exact(seed, dtype, shape, sparse):
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, 97, shape, dtype)
    if sparse is None and dtype != torch.bool:
        x.reshape(97, -1)[torch.from_numpy(rng.random((97, int(np.prod(shape)))) < 0.8)] = 0
    _check(EBPCodec.fit(x, sparse=sparse), x, rng.integers(0, 97, 150))


@GPU_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), sparse=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.int64, torch.uint8]))
def test_crafted_tables_bit_exact(seed, sparse, dtype):
    rng = np.random.default_rng(seed)
    codec = crafted_codec(rng, dtype, (70,), sparse)
    x = rows_for(codec, rng, 64)
    _check(codec, x, rng.integers(0, 64, 80))


def test_bad_index_and_corrupt_rows_raise():
    x = torch.randn(100, 32)
    codec = EBPCodec.fit(x, sparse=False)
    ct = codec.encode(x)
    for table in (ct.to("cuda"), ct.pin_memory()):
        with pytest.raises(IndexError, match=r"index\[2\] = 100"):
            gpu.fetch(codec, table, torch.tensor([0, 1, 100, 3]).cuda())
    r = int(np.flatnonzero(ct.row_lengths().numpy() < codec.row_nbytes)[0])
    o = ct.offsets.clone()
    o[r + 1:] -= 1
    p = torch.cat([ct.payload[:int(ct.offsets[r + 1]) - 1], ct.payload[int(ct.offsets[r + 1]):]])
    with pytest.raises(CorruptPayloadError, match=f"row {r}"):
        gpu.decode(codec, dataclasses.replace(ct, offsets=o, payload=p).to("cuda"))
