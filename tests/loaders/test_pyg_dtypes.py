"""Every dtype torch has, as node, label and edge attribute, through the loader bit for bit;
dtypes no codec has travel as identity bytes, and `codecs` / `stats` say so."""
import warnings

import pytest
import torch
from torch_geometric.data import Data

from ibp_graph.layout.dtypes import SUPPORTED_DTYPES
from ibp_graph.loaders.pyg import CompressedNeighborLoader


def _every_dtype():
    """torch's dtypes whose tensors can be made from bytes (quantized ones cannot)."""
    out = []
    for name in sorted(dir(torch)):
        dtype = getattr(torch, name)
        if not isinstance(dtype, torch.dtype) or dtype in out:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.zeros(16, dtype=torch.uint8).view(dtype)
        except (RuntimeError, TypeError):
            continue
        out.append(dtype)
    return out


DTYPES = _every_dtype()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).view(torch.uint8)


def _random(dtype, rows, cols, g):
    """Random bytes seen as `dtype` (every bit pattern, NaN payloads included)."""
    if dtype == torch.bool:
        return torch.rand(rows, cols, generator=g) > 0.5
    size = torch.empty((), dtype=dtype).element_size()
    return torch.randint(0, 256, (rows, cols * size), dtype=torch.uint8, generator=g).view(dtype)


def test_the_list_covers_the_dtypes_the_issue_names():
    for name in ("complex64", "complex128", "uint16", "uint32", "uint64", "bool", "int8", "bfloat16",
                 "float8_e4m3fn", "float8_e5m2"):
        assert getattr(torch, name) in DTYPES, name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    num_nodes, num_edges = 80, 400
    x = _random(dtype, num_nodes, 6, g)
    y = _random(dtype, num_nodes, 1, g).reshape(num_nodes)
    ea = _random(dtype, num_edges, 2, g)
    data = Data(x=x, y=y, ea=ea, edge_index=torch.randint(0, num_nodes, (2, num_edges), generator=g))
    name = str(dtype).removeprefix("torch.")
    for codec in ("auto", "ibp", "identity"):
        loader = CompressedNeighborLoader(data, [3, 2], batch_size=32, codec=codec, device="cpu")
        n = 0
        for batch in loader:
            for key, table, index in (("x", x, batch.n_id), ("y", y, batch.n_id), ("ea", ea, batch.e_id)):
                assert batch[key].dtype == dtype and batch[key].shape[1:] == table.shape[1:], key
                assert torch.equal(_bytes(batch[key]), _bytes(table).index_select(0, index)), (codec, key)
            n += 1
        assert n == 3
        if dtype not in SUPPORTED_DTYPES.values():
            note = loader.stats.codecs[f"{name}[6]"]
            assert note == (f"identity (the bytes of {name})" if codec == "identity"
                            else f"identity (fallback: {codec} has no {name})")
            assert str(loader.codecs[f"{name}[*]"]) == note
            assert note in loader.stats.table()


def test_stats_name_every_group_s_codec():
    g = torch.Generator().manual_seed(1)
    data = Data(x=torch.randn(300, 16, generator=g).repeat(1, 4), z=_random(torch.complex64, 300, 3, g),
                edge_index=torch.randint(0, 300, (2, 2000), generator=g))
    loader = CompressedNeighborLoader(data, [4], batch_size=100, codec="ibp")
    assert loader.stats.codecs == {"float32[64]": "ibp", "complex64[3]": "identity (fallback: ibp has no complex64)",
                                   "int64[*]": "ibp"}
    list(loader)
    assert loader.stats.as_dict()["codecs"] == loader.stats.codecs
