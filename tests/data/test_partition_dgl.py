"""dgl_layout against DGL itself: shards follow the partitions dgl.distributed.partition_graph makes
(homogeneous and heterogeneous graphs, node ids reshuffled as DGL does). Runs in .venv-dgl."""
import numpy as np
import pytest
import torch

from ibp_graph.data.partition import dgl_layout

pytestmark = [pytest.mark.dgl]


def _inner_nodes(config, part, ntype=None):
    """DGL's (type-wise) new ids of the nodes partition `part` owns, read back by DGL."""
    import dgl

    g, _, _, gpb, *_ = dgl.distributed.load_partition(str(config), part)
    homo = g.ndata[dgl.NID][g.ndata["inner_node"].bool()]
    if ntype is None:
        return homo
    types, per_type = gpb.map_to_per_ntype(homo)
    return per_type[types == gpb.ntypes.index(ntype)]


@pytest.mark.parametrize("method", ["random", "metis"])
def test_shards_follow_dgls_partitions_of_a_graph(tmp_path, method):
    import dgl

    g = dgl.rand_graph(300, 2400)
    orig, _ = dgl.distributed.partition_graph(g, "g", 3, str(tmp_path), part_method=method, return_mapping=True)
    layout = dgl_layout(tmp_path / "g.json", orig)
    owner = layout.owner_array()
    for part in range(3):
        mine = orig[_inner_nodes(tmp_path / "g.json", part)].numpy()  # the user's ids DGL put in `part`
        assert mine.size and (owner[mine] == part).all()
        assert np.array_equal(np.sort(mine), layout.rows_of(part))
    assert not np.array_equal(orig.numpy(), np.arange(300))  # DGL did reshuffle: the mapping mattered


def test_shards_follow_dgls_partitions_of_a_heterogeneous_graph(tmp_path):
    import dgl

    g = dgl.heterograph({("author", "writes", "paper"): (torch.randint(0, 50, (400,)), torch.randint(0, 120, (400,))),
                         ("paper", "cites", "paper"): (torch.randint(0, 120, (500,)), torch.randint(0, 120, (500,)))},
                        num_nodes_dict={"author": 50, "paper": 120})
    orig, _ = dgl.distributed.partition_graph(g, "h", 2, str(tmp_path), part_method="random", return_mapping=True)
    for ntype, n in (("author", 50), ("paper", 120)):
        layout = dgl_layout(tmp_path / "h.json", orig[ntype], ntype=ntype)
        assert layout.num_rows == n
        for part in range(2):
            mine = orig[ntype][_inner_nodes(tmp_path / "h.json", part, ntype)].numpy()
            assert np.array_equal(np.sort(mine), layout.rows_of(part))
    with pytest.raises(ValueError, match=r"partitions node types \['author', 'paper'\]; pass ntype="):
        dgl_layout(tmp_path / "h.json", orig["paper"])
