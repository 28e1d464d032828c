"""The decode stage on the CPU: order, meta passed through, stats counted, corrupt groups raise first."""
import dataclasses

import pytest
import torch

from ibp_graph.pipeline.batch import DecodedBatch, EncodedBatch
from ibp_graph.pipeline.codec_setup import build_codecs, codec_for
from ibp_graph.pipeline.decode import DecodeStage
from ibp_graph.pipeline.grouping import GroupKey, ROWS, store_key
from ibp_graph.pipeline.producer import encode_tensors


def _tensors(k: int) -> dict:
    g = torch.Generator().manual_seed(k)
    return {"x": torch.randn(20 + k, 8, generator=g).half().float(), "n_id": torch.arange(k, k + 20 + k),
            "y": torch.randint(0, 5, (20 + k,), generator=g)}


@pytest.fixture(scope="module")
def codecs():
    sample = _tensors(0)
    return build_codecs({"x": sample["x"], "y": sample["y"]}, {}, num_nodes=100, num_edges=0, codec="ibp")


def _batch(k, codecs) -> EncodedBatch:
    batch = encode_tensors(_tensors(k), codecs)
    return EncodedBatch(batch.groups, batch.layouts, meta={"k": k}, seconds={"sample": 0.5, "encode": 0.25})


def test_batches_come_out_in_order_with_their_meta(codecs):
    stage = DecodeStage(codecs, torch.device("cpu"))
    out = list(stage(_batch(k, codecs) for k in range(5)))
    assert [b.meta for b in out] == [{"k": k} for k in range(5)]
    for k, b in enumerate(out):
        assert isinstance(b, DecodedBatch) and sorted(b) == ["n_id", "x", "y"]
        for name, t in _tensors(k).items():
            assert torch.equal(b[name], t), (k, name)


def test_stats_count_every_group_by_its_printed_name(codecs):
    stage = DecodeStage(codecs, torch.device("cpu"))
    batches = [_batch(k, codecs) for k in range(3)]
    list(stage(iter(batches)))
    s = stage.stats
    assert s.batches == 3
    assert sorted(s.raw_bytes) == ["float32[8]", "int64[*]"]
    for name in s.raw_bytes:
        key = next(k for k in codecs if str(k) == name)
        assert s.raw_bytes[name] == sum(b.groups[key].raw_nbytes for b in batches)
        assert s.sent_bytes[name] == sum(b.groups[key].nbytes for b in batches)
    assert s.seconds["sample"] == pytest.approx(1.5) and s.seconds["encode"] == pytest.approx(0.75)
    assert s.seconds["decode"] > 0 and s.fraction < 1.0


def test_a_corrupt_group_raises_before_its_batch_is_handed_out(codecs):
    bad = _batch(2, codecs)
    key = GroupKey("float32", (8,), ROWS)
    ct = bad.groups[key]
    bad.groups[key] = dataclasses.replace(ct, payload=ct.payload[:3].clone())  # truncated
    it = DecodeStage(codecs, torch.device("cpu"))(iter([_batch(0, codecs), _batch(1, codecs), bad,
                                                        _batch(3, codecs)]))
    assert [next(it).meta, next(it).meta] == [{"k": 0}, {"k": 1}]
    with pytest.raises(ValueError, match="payload"):
        next(it)


def test_unknown_group_and_bad_prefetch_are_refused(codecs):
    batch = _batch(0, codecs)
    only_rows = {k: c for k, c in codecs.items() if k.kind == ROWS}
    with pytest.raises(KeyError, match="group 'int64\\[\\*\\]'.*codecs exist for \\['float32\\[8\\]'\\]"):
        list(DecodeStage(only_rows, torch.device("cpu"))(iter([batch])))
    with pytest.raises(ValueError, match="prefetch=-1 is not accepted"):
        DecodeStage(codecs, torch.device("cpu"), prefetch=-1)


def test_a_group_the_set_up_did_not_see_travels_as_identity_both_ways(codecs):
    """Workers encode a group without a codec (e.g. ids a transform made int32) as identity, and the stage
    decodes it as such, bit for bit, and names it; a store's group without its codec is refused."""
    tensors = {**_tensors(1), "n_id": torch.arange(21, dtype=torch.int32), "w": torch.randn(21, 3).double()}
    batch = encode_tensors(tensors, codecs)
    assert {str(k): ct.codec for k, ct in batch.groups.items()} == {
        "float32[8]": "ibp", "int64[*]": "ibp", "int32[*]": "identity", "float64[3]": "identity"}
    stage = DecodeStage(codecs, torch.device("cpu"))
    out = next(iter(stage(iter([batch]))))
    for name, t in tensors.items():
        assert out[name].dtype == t.dtype and torch.equal(out[name], t), name
    assert stage.stats.codecs["int32[*]"] == stage.stats.codecs["float64[3]"] == \
        "identity (a group the set-up did not see)"
    with pytest.raises(KeyError, match="no codec for group 'x@store'"):
        codec_for(codecs, store_key("x", torch.float32, (8,)))


def test_host_bytes_copied_by_encode_and_counted_by_the_stage(codecs):
    x = torch.randn(30, 8)
    ident = build_codecs({"x": x}, {}, num_nodes=100, num_edges=0, codec="identity")
    assert encode_tensors({"x": x}, ident).copied_bytes == 0  # one member, contiguous, identity: a view of x
    # the group's concatenation, then nothing more
    assert encode_tensors({"x": x, "x2": x + 1}, ident).copied_bytes == 2 * x.nbytes
    batch = encode_tensors(_tensors(1), codecs)
    assert batch.copied_bytes >= sum(ct.nbytes for ct in batch.groups.values())  # ibp writes a new payload
    stage = DecodeStage(codecs, torch.device("cpu"))
    batches = [dataclasses.replace(_batch(k, codecs), copied_bytes=100 + k) for k in range(3)]
    list(stage(iter(batches)))
    assert stage.stats.copied_bytes == 303 and stage.stats.as_dict()["copied_bytes_per_batch"] == 101.0


def _large(k: int) -> dict:
    g = torch.Generator().manual_seed(100 + k)
    n = 9000 + 37 * k  # float32 rows of 128: above layout.buffers.HUGE_PAGE_MIN_NBYTES, so pooled
    return {"x": torch.randn(n, 128, generator=g).half().float(), "n_id": torch.arange(n),
            "y": torch.randint(0, 5, (n,), generator=g)}


@pytest.fixture(scope="module")
def large_codecs():
    sample = _large(0)
    return build_codecs({"x": sample["x"], "y": sample["y"]}, {}, num_nodes=20000, num_edges=0, codec="ibp")


@pytest.mark.parametrize("keep_every", [1, 2, 0])
def test_decoded_batches_reuse_only_the_buffers_of_batches_nobody_holds(large_codecs, keep_every):
    """keep_every=1: the user holds every batch; 2: every other one; 0: none (each dropped when read)."""
    stage = DecodeStage(large_codecs, torch.device("cpu"), prefetch=0)
    held, ptrs = {}, {}
    for k, b in enumerate(stage(_batch_of(_large(j), large_codecs, j) for j in range(8))):
        expected = _large(k)
        for name, t in expected.items():
            assert torch.equal(b[name], t), (k, name)
        ptrs[k] = b["x"].untyped_storage().data_ptr()
        if keep_every and k % keep_every == 0:
            held[k] = b
        del b
    for k, b in held.items():  # written once, never again
        for name, t in _large(k).items():
            assert torch.equal(b[name], t), (k, name)
    assert len({ptrs[k] for k in held}) == len(held)
    assert (stage._buffers.reused > 0) == (keep_every != 1)
    assert len(stage._buffers) == 0  # the epoch over, no idle buffer stays mapped


def _batch_of(tensors: dict, codecs, k: int) -> EncodedBatch:
    batch = encode_tensors(tensors, codecs)
    return EncodedBatch(batch.groups, batch.layouts, meta={"k": k})
