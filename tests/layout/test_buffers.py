"""New host buffers (layout.buffers): ordinary writable arrays and tensors of exactly the size
asked, huge-page mappings from HUGE_PAGE_MIN_NBYTES on, and batches large enough to get them
gathered and decoded bit-exactly."""
from __future__ import annotations

import mmap

import numpy as np
import pytest
import torch

from ibp_graph.codec import EBPCodec, IBPCodec
from ibp_graph.layout.buffers import HUGE_PAGE_MIN_NBYTES, empty_bytes, empty_host

LARGE = HUGE_PAGE_MIN_NBYTES + 4096 + 3  # not a whole number of pages


@pytest.mark.parametrize("nbytes", [0, 1, HUGE_PAGE_MIN_NBYTES - 1, HUGE_PAGE_MIN_NBYTES, LARGE])
def test_empty_bytes_is_a_writable_array_of_that_size(nbytes):
    a = empty_bytes(nbytes)
    assert a.dtype == np.uint8 and a.shape == (nbytes,) and a.flags.c_contiguous and a.flags.writeable
    a[:] = 7
    assert int(a.sum()) == 7 * nbytes
    large = nbytes >= HUGE_PAGE_MIN_NBYTES and hasattr(mmap, "MADV_HUGEPAGE")
    assert isinstance(getattr(a.base, "obj", None), mmap.mmap) == large


@pytest.mark.parametrize("bad", [-1, 2.0, "8"])
def test_empty_bytes_refuses_a_bad_size(bad):
    with pytest.raises(ValueError, match="nbytes"):
        empty_bytes(bad)


@pytest.mark.parametrize("shape,dtype", [((3, 5), torch.float32), ((LARGE // 8 + 1, 2), torch.float32),
                                         ((LARGE,), torch.uint8), ((0, 128), torch.float16)])
def test_empty_host_has_the_shape_and_dtype_of_torch_empty(shape, dtype):
    t = empty_host(shape, dtype)
    assert tuple(t.shape) == shape and t.dtype == dtype and t.is_contiguous() and t.device.type == "cpu"
    t.fill_(3)
    assert torch.equal(t, torch.full(shape, 3, dtype=dtype))
    t.share_memory_()  # a batch may be handed to another process
    assert t.is_shared() and torch.equal(t, torch.full(shape, 3, dtype=dtype))


@pytest.mark.parametrize("codec_cls", [IBPCodec, EBPCodec])
def test_a_batch_in_huge_page_buffers_round_trips(codec_cls):
    """A gathered payload and decoded rows both above HUGE_PAGE_MIN_NBYTES (mapped buffers)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 128, generator=g)
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    idx = torch.randint(0, x.shape[0], (3 * HUGE_PAGE_MIN_NBYTES // 512,), generator=g)
    got = ct.index_select(idx)
    assert got.payload.numel() >= HUGE_PAGE_MIN_NBYTES
    out = codec.decode(got)
    assert out.numel() * 4 >= HUGE_PAGE_MIN_NBYTES
    assert torch.equal(out.view(torch.int32), x[idx].view(torch.int32))
