"""Prepared folders opened without their feature tables (`load(features=False)`: a host of a sharded run, which
holds neither x.npy nor the store): everything else opens and is verified as before, the feature tables are
neither opened nor checked, and code that asks for them is told why they are not there."""
import json

import pytest
import torch

from ibp_graph.data import citegen, graphgen, maggen
from ibp_graph.data.checksums import ChecksumError
from ibp_graph.data.citegen import CitationSpec
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.hetero import HeteroPreparedDataset
from ibp_graph.data.link import LinkPreparedDataset
from ibp_graph.data.maggen import MagSpec
from ibp_graph.data.prepared import PreparedDataset
from tests.data.host import sharded_host_copy

MISSING = r"was opened without its feature tables \(load\(features=False\): the host of a sharded run"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("featureless")
    return {
        PreparedDataset: graphgen.generate(GraphSpec(num_nodes=300, avg_citations=3.0, dim=6), root / "node",
                                           progress=False),
        HeteroPreparedDataset: maggen.generate(MagSpec(num_papers=200, num_authors=150, num_institutions=10,
                                                       num_fields=20, dim=5), root / "mag", progress=False),
        LinkPreparedDataset: citegen.generate(CitationSpec(num_nodes=300, dim=7, num_negatives=5), root / "link",
                                              progress=False),
    }


@pytest.mark.parametrize("kind", [PreparedDataset, HeteroPreparedDataset, LinkPreparedDataset])
def test_a_host_folder_opens_without_x_npy_and_answers_from_meta_json(folders, kind, tmp_path):
    whole = kind.load(folders[kind])
    host = sharded_host_copy(folders[kind], tmp_path / "host")
    ds = kind.load(host, features=False, verify="full")
    assert whole.has_features and not ds.has_features and not ds.has_store()
    assert ds.feature_shapes == {t: tuple(whole.feature(t).shape) for t in whole.feature_shapes}
    assert list(ds.feature_shapes) == (list(whole.x_dict) if kind is HeteroPreparedDataset else ["x"])
    assert ds.num_nodes == whole.num_nodes and ds.num_edges == whole.num_edges
    for t in ds.feature_shapes:
        assert ds.feature_file(t) == host / whole.feature_file(t).relative_to(whole.directory)
        with pytest.raises(ValueError, match=MISSING):
            ds.feature(t)
    with pytest.raises(ValueError, match=MISSING):
        ds.x
    if kind is HeteroPreparedDataset:
        with pytest.raises(ValueError, match=MISSING):
            ds.x_dict
        given = {t: object() for t in ds.feature_shapes}
        features, _, _ = ds.tables(given=given)
        assert all(features[t]["x"] is given[t] for t in given) and torch.equal(features[ds.target]["y"], whole.y)
        with pytest.raises(ValueError, match=r"given has tables \[\]; expected one per featured node type"):
            ds.tables(given={})
    else:
        assert "x=not opened" in repr(ds)
    with pytest.raises(FileNotFoundError, match=r"lacks .*x.npy: prepare again"):
        kind.load(host)  # with its features, as before


def test_the_other_arrays_are_still_verified_and_meta_json_checked(folders, tmp_path):
    host = sharded_host_copy(folders[PreparedDataset], tmp_path / "host")
    y = host / "y.npy"
    data = bytearray(y.read_bytes())
    data[-1] ^= 0xFF
    y.unlink()  # a hard link: write a file of its own
    y.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=r"y.npy: checksum differs"):
        PreparedDataset.load(host, features=False, verify="full")
    host = sharded_host_copy(folders[PreparedDataset], tmp_path / "host2")
    meta = json.loads((host / "meta.json").read_text())
    meta["x_shape"] = [299, 6]
    (host / "meta.json").unlink()
    (host / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"meta.json: x_shape=\[299, 6\] is not accepted for table 'x'; expected "
                                         r"\[300, dim\]: prepare again"):
        PreparedDataset.load(host, features=False)
    with pytest.raises(ValueError, match=r"table='paper' is not accepted; this folder's feature tables: \['x'\]"):
        PreparedDataset.load(folders[PreparedDataset]).feature_file("paper")
