"""New host buffers (layout.buffers): ordinary writable arrays and tensors of exactly the size
asked, huge-page mappings from HUGE_PAGE_MIN_NBYTES on, and batches large enough to get them
gathered and decoded bit-exactly."""
from __future__ import annotations

import mmap
import pickle
import threading

import numpy as np
import pytest
import torch

from ibp_graph.codec import EBPCodec, IBPCodec
from ibp_graph.layout.buffers import HUGE_PAGE_MIN_NBYTES, BufferPool, empty_bytes, empty_host

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


# ---- BufferPool: pages reused only once nothing holds them ---------------------------------------------
ROWS = HUGE_PAGE_MIN_NBYTES // 512 + 7  # a float32 (rows, 128) tensor above the pooled size


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_a_pooled_tensor_has_the_shape_and_dtype_asked_and_is_writable():
    pool, kept = BufferPool(), []
    for shape, dtype in [((ROWS, 128), torch.float32), ((ROWS, 3, 5), torch.float16), ((LARGE,), torch.uint8),
                         ((5, 7), torch.float64), ((0, 128), torch.float32)]:
        t = pool.empty(shape, dtype)
        assert t.shape == shape and t.dtype == dtype and t.is_contiguous() and t.device.type == "cpu"
        t.fill_(3)
        assert bool((t == 3).all())
        kept.append(t)
    assert pool.allocated == 2 and len(pool) == 2  # only the two large ones are pooled


def test_a_dropped_buffer_is_handed_out_again_and_counted():
    pool = BufferPool()
    a = pool.empty((ROWS, 128), torch.float32)
    first = _ptr(a)
    del a
    b = pool.empty((ROWS - 5, 128), torch.float32)  # a little smaller: still fits
    assert _ptr(b) == first and pool.reused == 1 and pool.allocated == 1


@pytest.mark.parametrize("hold", ["tensor", "view", "slice", "storage", "numpy", "other dtype"])
def test_a_buffer_anything_still_holds_is_never_handed_out_again(hold):
    pool = BufferPool()
    a = pool.empty((ROWS, 128), torch.float32)
    a.copy_(torch.arange(ROWS * 128, dtype=torch.float32).view(ROWS, 128))
    expected = a.clone()
    held = {"tensor": lambda: a, "view": lambda: a.view(-1), "slice": lambda: a[ROWS // 2:],
            "storage": lambda: a.untyped_storage(), "numpy": lambda: a.numpy()[1:],
            "other dtype": lambda: a.view(torch.int32)}[hold]()
    first = _ptr(a)
    del a
    b = pool.empty((ROWS, 128), torch.float32)
    b.fill_(-1.0)
    assert _ptr(b) != first and pool.reused == 0
    rows = {"tensor": lambda: held, "view": lambda: held.view(ROWS, 128),
            "slice": lambda: torch.cat([expected[:ROWS // 2], held]),
            "storage": lambda: torch.empty(0).set_(held, 0, (ROWS, 128), (128, 1)),
            "numpy": lambda: torch.cat([expected[:1], torch.from_numpy(held)]),
            "other dtype": lambda: held.view(torch.float32)}[hold]()
    assert torch.equal(rows, expected)  # untouched by the new buffer's writes
    del held, rows
    c = pool.empty((ROWS, 128), torch.float32)
    assert _ptr(c) == first and pool.reused == 1  # free once the last holder went


def test_the_pool_remembers_at_most_keep_buffers():
    pool = BufferPool(keep=2)
    held = [pool.empty((ROWS, 128), torch.float32) for _ in range(5)]
    assert len(pool) == 2 and pool.allocated == 5
    for i, t in enumerate(held):
        t.fill_(i)
    assert [float(t[0, 0]) for t in held] == [0, 1, 2, 3, 4]  # five distinct buffers
    remembered = {s.data_ptr() for s in pool._storages}
    assert remembered == {_ptr(t) for t in held[-2:]}  # the newest ones (none was free)
    del held
    t = pool.empty((ROWS, 128), torch.float32)
    assert _ptr(t) in remembered and len(pool) == 2


def test_a_larger_request_than_every_free_buffer_makes_a_new_one_with_headroom():
    pool = BufferPool(headroom=0.5)
    a = pool.empty((ROWS, 128), torch.float32)
    del a
    b = pool.empty((2 * ROWS, 128), torch.float32)
    assert pool.allocated == 2 and pool.reused == 0
    assert b.untyped_storage().nbytes() >= int(2 * ROWS * 512 * 1.5)


def test_threads_never_share_a_live_buffer():
    pool = BufferPool(keep=3)
    errors = []

    def work(k: int) -> None:
        for i in range(30):
            t = pool.empty((ROWS, 128), torch.float32)
            t.fill_(k * 1000 + i)
            if not bool((t == k * 1000 + i).all()):  # another thread wrote into it
                errors.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and pool.reused > 0


def test_a_pool_copied_to_another_process_starts_empty():
    pool = BufferPool(keep=3, headroom=0.25)
    kept = pool.empty((ROWS, 128), torch.float32)
    copy = pickle.loads(pickle.dumps(pool))
    assert (copy.keep, copy.headroom, len(copy), copy.allocated) == (3, 0.25, 0, 0) and len(pool) == 1
    assert kept.shape == (ROWS, 128)


@pytest.mark.parametrize("kwargs, match", [({"keep": 0}, "keep=0"), ({"keep": 2.0}, "keep=2.0"),
                                           ({"keep": True}, "keep=True"), ({"headroom": -0.1}, "headroom=-0.1"),
                                           ({"headroom": 2}, "headroom=2"), ({"headroom": "0.1"}, "headroom='0.1'")])
def test_the_pool_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BufferPool(**kwargs)


def test_clear_forgets_every_buffer_and_leaves_those_in_use_intact():
    pool = BufferPool()
    held = pool.empty((ROWS, 128), torch.float32)
    held.fill_(5.0)
    dropped = pool.empty((ROWS, 128), torch.float32)
    del dropped
    pool.clear()
    assert len(pool) == 0
    again = pool.empty((ROWS, 128), torch.float32)  # a new buffer: the forgotten free one is not reused
    again.fill_(-1.0)
    assert pool.reused == 0 and pool.allocated == 3 and _ptr(again) != _ptr(held)
    assert bool((held == 5.0).all())
