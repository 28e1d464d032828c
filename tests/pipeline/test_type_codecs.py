"""Pooled or per-type codecs for row groups shared by several node or edge types, and TYPED keys."""
import pytest
import torch

from ibp_graph.pipeline.codec_setup import build_codecs, split_row_groups
from ibp_graph.pipeline.grouping import ROWS, TYPED, GroupKey, typed_key


def test_typed_key_names_its_attribute():
    k = typed_key("paper.x", torch.float32, (128,))
    assert k == GroupKey("float32", (128,), TYPED, "paper.x") and not k.scalar
    assert str(k) == "float32[128]@paper.x" and k.codec_row_shape == (128,)
    assert k != GroupKey("float32", (128,), ROWS)
    with pytest.raises(ValueError, match="name=None with kind='typed'"):
        GroupKey("float32", (1,), TYPED)


def tables(seed=0):
    g = torch.Generator().manual_seed(seed)
    dense = torch.randn(4000, 32, generator=g)                          # all mantissa bits vary
    small = torch.randint(0, 4, (4000, 32), generator=g).float()        # two exponent values, no mantissa
    like_dense = torch.randn(3000, 32, generator=g)
    return dense, small, like_dense


@pytest.mark.parametrize("kind", ["auto", "ibp"])
def test_types_that_differ_get_a_codec_each(kind):
    dense, small, _ = tables()
    named = {"paper.x": dense, "author.x": small, "paper.n": torch.zeros(4000, dtype=torch.int64)}
    pooled = build_codecs(named, {}, num_nodes=4000, num_edges=0, codec=kind)
    codecs, typed, report = split_row_groups(named, pooled, kind=kind)
    r = report["float32[32]"]
    assert r["split"] and r["members"] == ["paper.x", "author.x"]
    assert r["per_type_fraction"] < 0.98 * r["pooled_fraction"]
    assert typed == {"paper.x": typed_key("paper.x", torch.float32, (32,)),
                     "author.x": typed_key("author.x", torch.float32, (32,))}
    assert GroupKey("float32", (32,), ROWS) not in codecs and set(typed.values()) <= set(codecs)
    # the small-integer type's own codec sends far fewer bytes than the pooled one would
    own = codecs[typed["author.x"]]
    assert own.encode(small[:1000]).fraction < pooled[GroupKey("float32", (32,), ROWS)].encode(small[:1000]).fraction
    assert torch.equal(own.decode(own.encode(small)), small)  # still lossless
    assert set(codecs) - set(typed.values()) == set(pooled) - {GroupKey("float32", (32,), ROWS)}


def test_alike_types_stay_pooled_and_lone_tables_are_left_alone():
    dense, _, like_dense = tables()
    named = {"paper.x": dense, "venue.x": like_dense, "author.z": torch.randn(100, 7)}
    pooled = build_codecs(named, {}, num_nodes=4000, num_edges=0, codec="auto")
    codecs, typed, report = split_row_groups(named, pooled, kind="auto")
    assert codecs == pooled and typed == {}
    assert not report["float32[32]"]["split"] and "float32[7]" not in report
