"""CompressedDGLDataLoader: the same batches as DGL's own DataLoader, bit for bit; errors; no-dgl import.

The dgl-marked tests run in .venv-dgl (`make test-dgl`: dgl 2.1.0, torch 2.2.1, numpy<2);
the import test runs everywhere.
"""
import importlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")
try:
    import dgl
except Exception:  # not installed, or installed for another torch
    dgl = None

needs_dgl = pytest.mark.dgl
# DGL's DataLoader suggests CPU affinity on every CPU epoch; it does not concern these tests.
pytestmark = pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")


def make_graph(num_nodes=2000, num_edges=16000, dim=16, seed=0):
    """A random graph whose features name their node (feat[i, 0] == i), with the bits DGL must keep.

    Labels are float32 with NaN for unlabeled nodes (ogbn-papers100M's convention); some
    features are -0.0 or subnormal, so equality is checked on the bits, not on values.
    """
    g_ = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g_)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g_)
    g = dgl.graph((src, dst), num_nodes=num_nodes)
    feat = torch.arange(num_nodes, dtype=torch.float32).unsqueeze(1).repeat(1, dim)
    feat[:, 1:] += torch.randn(num_nodes, dim - 1, generator=g_).mul(0.1).half().float()  # compressible
    feat[::7, 2] = -0.0
    feat[::11, 3] = 1e-42  # subnormal
    label = torch.randint(0, 9, (num_nodes,), generator=g_).float()
    label[::3] = float("nan")
    g.ndata["feat"] = feat
    g.ndata["label"] = label
    g.ndata["year"] = torch.randint(1990, 2021, (num_nodes,), generator=g_)
    g.edata["w"] = torch.rand(num_edges, 2, generator=g_)
    return g


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a tensor (so NaN == NaN and -0.0 != 0.0)."""
    if t.numel() == 0:  # DGL's empty columns may have zero strides, which no byte view takes
        return torch.empty(0, dtype=torch.uint8)
    return t.contiguous().view(-1).view(torch.uint8)


def assert_same_bits(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    assert torch.equal(bits(a), bits(b)), what


def assert_same_batch(ours, theirs) -> None:
    """Every tensor of two (input_nodes, output_nodes, blocks) batches, bit for bit."""
    (in_a, out_a, blocks_a), (in_b, out_b, blocks_b) = ours, theirs
    assert_same_bits(in_a, in_b, "input_nodes")
    assert_same_bits(out_a, out_b, "output_nodes")
    assert len(blocks_a) == len(blocks_b)
    for i, (a, b) in enumerate(zip(blocks_a, blocks_b)):
        assert (a.num_src_nodes(), a.num_dst_nodes()) == (b.num_src_nodes(), b.num_dst_nodes())
        for x, y, name in zip(a.edges(), b.edges(), ("src", "dst")):
            assert_same_bits(x, y, f"blocks[{i}] {name}")
        for view in ("srcdata", "dstdata", "edata"):
            da, db = getattr(a, view), getattr(b, view)
            assert sorted(da.keys()) == sorted(db.keys()), (i, view, sorted(da.keys()), sorted(db.keys()))
            for key in da.keys():
                assert_same_bits(da[key], db[key], f"blocks[{i}].{view}[{key!r}]")


def check_against_graph(batch, g) -> None:
    """The fetched rows are the graph's rows of the sampled ids, and the features name their node."""
    input_nodes, output_nodes, blocks = batch
    assert_same_bits(blocks[0].srcdata["feat"], g.ndata["feat"][input_nodes], "feat")
    assert torch.equal(blocks[0].srcdata["feat"][:, 0].long(), input_nodes)
    assert_same_bits(blocks[-1].dstdata["label"], g.ndata["label"][output_nodes], "label")


def sampler(fanouts=(4, 3), **prefetch):
    prefetch = prefetch or {"prefetch_node_feats": ["feat"], "prefetch_labels": ["label"]}
    return dgl.dataloading.NeighborSampler(list(fanouts), **prefetch)


def seed_all(seed: int) -> None:
    """numpy (DGL's shuffle), torch (worker seeds) and dgl (sampling).

    DGL's CPU sampling repeats under dgl.seed only with one OpenMP thread: with two,
    DGL's own DataLoader gives different batches from run to run. Its worker processes
    use one thread; the main process (num_workers=0) is set to one here.
    """
    dgl.utils.set_num_threads(1)
    np.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)


def run(loader_cls, g, indices, make_sampler, seed=0, **kwargs):
    """All batches of one epoch, seeded before the sampler is made (LaborSampler draws its seed then)."""
    seed_all(seed)
    return list(loader_cls(g, indices, make_sampler(), **kwargs))


@pytest.fixture(scope="module")
def graph():
    if dgl is None:
        pytest.skip("dgl is not importable here (make test-dgl)")
    return make_graph()


@needs_dgl
@pytest.mark.parametrize("num_workers,codec", [(0, "ibp"), (2, "ibp"), (0, "identity"), (0, "auto"),
                                               (2, "ebp")])
def test_batches_equal_dgls_own_dataloader_bit_for_bit(graph, num_workers, codec):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    indices = torch.arange(0, 2000, 4)
    s = sampler(prefetch_node_feats=["feat", "year"], prefetch_labels=["label"], prefetch_edge_feats=["w"])
    kw = dict(batch_size=64, shuffle=True, num_workers=num_workers)
    theirs = run(dgl.dataloading.DataLoader, graph, indices, lambda: s, **kw)
    loader = CompressedDGLDataLoader(graph, indices, s, codec=codec, **kw)
    seed_all(0)
    ours = list(loader)
    assert len(ours) == len(theirs) == len(loader) == 8
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
        check_against_graph(a, graph)
        for block in a[2]:
            assert_same_bits(block.edata["w"], graph.edata["w"][block.edata[dgl.EID]], "w")
    seen = torch.cat([b[1] for b in ours]).sort().values
    assert torch.equal(seen, indices)  # every seed once
    assert loader.stats.batches == 8
    assert set(loader.stats.sent_bytes) == {"float32[16]", "float32[*]", "float32[2]", "int64[*]"}
    if codec != "identity":
        assert loader.stats.fraction < 1.0
        assert loader.stats.sent_bytes["int64[*]"] < 0.5 * loader.stats.raw_bytes["int64[*]"]  # years
    if codec == "ebp":
        assert {k: c.name for k, c in loader.codecs.items()} == {
            "float32[16]": "ebp", "float32[*]": "ebp", "float32[2]": "ebp", "int64[*]": "ibp"}
    assert "sample" in str(loader.stats)
    # host bytes the workers copied: at least the gathered features (every raw byte sent)
    assert loader.stats.copied_bytes >= sum(loader.stats.raw_bytes.values()) > 0
    # another seed samples (and shuffles) differently: the equality above is not vacuous
    other = run(CompressedDGLDataLoader, graph, indices, lambda: s, seed=1, codec=codec, **kw)
    assert not torch.equal(other[0][0], ours[0][0])


@needs_dgl
def test_default_codec_is_auto(graph):
    import inspect

    from ibp_graph.codec import fit_codec
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    assert inspect.signature(CompressedDGLDataLoader).parameters["codec"].default == "auto"
    idx = torch.arange(0, 2000, 10)
    default = CompressedDGLDataLoader(graph, idx, sampler(), batch_size=50)
    auto = CompressedDGLDataLoader(graph, idx, sampler(), batch_size=50, codec="auto")
    assert {k: c.fingerprint for k, c in default.codecs.items()} == \
        {k: c.fingerprint for k, c in auto.codecs.items()}
    assert default.codecs["float32[16]"].fingerprint == fit_codec(graph.ndata["feat"]).fingerprint
    seed_all(0)
    for batch in default:
        check_against_graph(batch, graph)


@needs_dgl
@pytest.mark.parametrize("make_sampler", [
    lambda: dgl.dataloading.MultiLayerFullNeighborSampler(2, prefetch_node_feats=["feat"],
                                                          prefetch_labels=["label"]),
    lambda: dgl.dataloading.LaborSampler([3, 3], prefetch_node_feats=["feat"], prefetch_labels=["label"]),
    lambda: dgl.dataloading.ShaDowKHopSampler([3, 2], prefetch_node_feats=["feat"]),
], ids=["full", "labor", "shadow"])
def test_other_dgl_samplers_give_dgls_batches(graph, make_sampler):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    indices = torch.arange(0, 2000, 9)
    theirs = run(dgl.dataloading.DataLoader, graph, indices, make_sampler, batch_size=50, shuffle=True)
    ours = run(CompressedDGLDataLoader, graph, indices, make_sampler, batch_size=50, shuffle=True)
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        if isinstance(a[2], list):
            assert_same_batch(a, b)
        else:  # ShaDow-KHop: one subgraph
            assert_same_bits(a[0], b[0], "input_nodes")
            assert_same_bits(a[2].ndata["feat"], b[2].ndata["feat"], "ndata['feat']")
            assert_same_bits(a[2].ndata["feat"], graph.ndata["feat"][a[2].ndata[dgl.NID]], "feat")


def train_losses(loader_cls, epochs=2):
    """A two-layer GraphSAGE trained with DGL's usual loop; only the loader class changes."""
    g = make_graph(num_nodes=1200, num_edges=9000, dim=16, seed=3)
    g.ndata["feat"] = g.ndata["feat"] / 1200.0
    g.ndata["label"] = torch.randint(0, 5, (1200,), generator=torch.Generator().manual_seed(5))
    torch.manual_seed(0)

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = dgl.nn.SAGEConv(16, 32, "mean")
            self.c2 = dgl.nn.SAGEConv(32, 5, "mean")

        def forward(self, blocks, x):
            return self.c2(blocks[1], self.c1(blocks[0], x).relu())

    model = SAGE()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seed_all(0)
    loader = loader_cls(g, torch.arange(1200), sampler((5, 5)), batch_size=120, shuffle=True)
    losses = []
    for _ in range(epochs):
        for input_nodes, output_nodes, blocks in loader:
            opt.zero_grad()
            out = model(blocks, blocks[0].srcdata["feat"])
            loss = torch.nn.functional.cross_entropy(out, blocks[-1].dstdata["label"])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


@needs_dgl
def test_training_losses_identical_to_dgls_loader(graph):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    torch.use_deterministic_algorithms(True)
    try:
        ours = train_losses(CompressedDGLDataLoader)
        theirs = train_losses(dgl.dataloading.DataLoader)
    finally:
        torch.use_deterministic_algorithms(False)
    assert len(ours) == 20
    assert ours == theirs  # exactly, not approximately
    assert np.mean(ours[-5:]) < np.mean(ours[:5])


@needs_dgl
def test_unsupported_options_raise_naming_them(graph):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    idx = torch.arange(10)
    with pytest.raises(NotImplementedError, match="use_uva=True"):
        L(graph, idx, sampler(), use_uva=True)
    with pytest.raises(NotImplementedError, match="gpu_cache"):
        L(graph, idx, sampler(), gpu_cache={"node": {"feat": 10}})
    with pytest.raises(NotImplementedError, match="collate_fn"):
        L(graph, idx, sampler(), collate_fn=lambda b: b)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=rf"batch_size={bad!r} is not accepted; use an int >= 1"):
            L(graph, idx, sampler(), batch_size=bad)
    with pytest.raises(IndexError, match=r"indices contains node 2000 at position 1, outside \[0, 2000\)"):
        L(graph, torch.tensor([3, 2000]), sampler())
    with pytest.raises(KeyError, match=r"\['emb'\], not in graph.ndata"):
        L(graph, idx, sampler(prefetch_node_feats=["emb"]))
    with pytest.raises(ValueError, match=r"codec='zstd' is not accepted; use one of \('auto', 'ibp', 'ebp', "
                                         r"'identity'\)"):
        L(graph, idx, sampler(), codec="zstd")
    with pytest.raises(ValueError, match="prefetch=-1"):
        L(graph, idx, sampler(), prefetch=-1)
    with pytest.raises(TypeError, match="graph must be a dgl.DGLGraph"):
        L("graph", idx, sampler())
    hetero = dgl.heterograph({("a", "r", "b"): ([0, 1], [1, 0])})
    with pytest.raises(ValueError, match=r"prefetch_node_feats=\['feat'\] is a list, but the graph has 2 "
                                         r"node types.*e.g. graph_sampler.prefetch_node_feats=\{'a': \['feat'\]\}"):
        L(hetero, {"b": torch.arange(2)}, sampler())
    with pytest.raises(KeyError, match="names node type 'paper'; the graph has node types"):
        L(graph, idx, sampler(prefetch_node_feats={"paper": ["feat"]}))


class _FailingCodec:
    """Wraps a codec; raises (or kills its process) when asked to encode inside a worker."""

    def __init__(self, inner, mode):
        self.inner, self.mode = inner, mode
        self.name, self.dtype, self.row_shape = inner.name, inner.dtype, inner.row_shape
        self.fingerprint = inner.fingerprint

    def encode(self, tensor):
        if torch.utils.data.get_worker_info() is not None:
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError("encoder exploded on purpose")
        return self.inner.encode(tensor)

    def decode(self, ct, **kw):
        return self.inner.decode(ct, **kw)


@needs_dgl
@pytest.mark.parametrize("mode,error,match", [("raise", ValueError, "encoder exploded on purpose"),
                                              ("kill", RuntimeError, "worker process died")])
def test_worker_failures_reach_the_main_process(graph, mode, error, match):
    from ibp_graph.codec import IBPCodec
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    codec = _FailingCodec(IBPCodec.fit(graph.ndata["feat"]), mode)
    loader = CompressedDGLDataLoader(graph, torch.arange(100), sampler(), batch_size=50, num_workers=1,
                                     codec=codec, timeout=120)
    with pytest.raises(error, match=match):
        next(iter(loader))


@needs_dgl
def test_papers100m_script_trains_identically_with_both_loaders(graph, tmp_path):
    """The DGL script on a small generated prepared folder: compressed, identity and DGL's loader agree."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sets = ["data.name=synthetic", f"data.root={tmp_path / 'data'}", "data.synthetic.num_nodes=3000",
            "train.epochs=2", "loader.num_workers=0", "loader.batch_size=256", "loader.num_neighbors=[5,5]",
            f"output.dir={tmp_path / 'runs'}", "output.progress=false", "loader.device=cpu",
            "loader.codecs=[ibp,identity]"]
    cmd = [sys.executable, str(root / "scripts" / "train_papers100m_dgl.py"), "--baseline",
           "--config", str(root / "configs" / "papers100m_dgl.yaml")]
    r = subprocess.run(cmd + [x for kv in sets for x in ("--set", kv)], capture_output=True, text=True,
                       timeout=600, cwd=root, env=dict(os.environ, DGLBACKEND="pytorch"))
    assert r.returncode == 0, r.stdout + r.stderr
    runs = {}
    for f in (tmp_path / "runs").glob("papers100m_dgl-*.json"):
        rec = json.loads(f.read_text())
        assert rec["framework"] == "dgl"
        runs[rec["codec"]] = [e["loss"] for e in rec["epochs"]]
    assert set(runs) == {"ibp", "identity", "native"}  # native: DGL's own DataLoader
    assert runs["ibp"] == runs["identity"] == runs["native"]  # exactly
    assert "moved" in r.stdout and "valid" in r.stdout


@needs_dgl
def test_importing_the_loader_leaves_dgl_backend_unset(tmp_path):
    """Importing the loader writes nothing into os.environ (issue #20): dgl picks its backend itself
    (without DGLBACKEND: PyTorch, DGL's default, noted in its config folder, here `tmp_path`)."""
    code = ("import os\n"
            "writes = []\n"
            "E = type(os.environ)\n"
            "set_, del_ = E.__setitem__, E.__delitem__\n"
            "E.__setitem__ = lambda self, k, v: (writes.append(k), set_(self, k, v))[1]\n"
            "E.__delitem__ = lambda self, k: (writes.append(k), del_(self, k))[1]\n"
            "before = dict(os.environ)\n"
            "import ibp_graph.loaders.dgl as m\n"
            "assert 'DGLBACKEND' not in writes and 'DGLBACKEND' not in os.environ, writes\n"
            "assert m.dgl.backend.backend_name == 'pytorch'\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "DGLBACKEND"}
    env["DGLDEFAULTDIR"] = str(tmp_path)  # where dgl notes its default; never the user's home
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_import_without_dgl_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dgl", None)  # `import dgl` now raises ImportError
    monkeypatch.delitem(sys.modules, "ibp_graph.loaders.dgl", raising=False)
    with pytest.raises(ImportError, match=r"needs dgl.*pip install 'dgl==2\.1\.0' 'torch==2\.2\.1' 'numpy<2'"):
        importlib.import_module("ibp_graph.loaders.dgl")


def test_nothing_else_in_the_library_imports_dgl():
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        sys.modules["dgl"] = None
        import ibp_graph
        bad = []
        names = [m.name for m in pkgutil.walk_packages(ibp_graph.__path__, "ibp_graph.")]
        names += ["ibp_graph.loaders", "ibp_graph.loaders.pyg"]  # installed from ./loaders
        for name in names:
            if name == "ibp_graph.loaders.dgl":
                continue
            try:
                importlib.import_module(name)
            except ImportError as e:  # other optional extras (torch_geometric, cupy) may be missing
                if "dgl" in str(e):
                    bad.append(f"{name}: {e}")
        print("\\n".join(bad))
        sys.exit(1 if bad else 0)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_dgl
def test_workers_send_parent_columns_as_row_indices_and_no_raw_prefetched_rows(graph):
    """What a worker hands back: the prefetched features only inside the encoded batch, and every other
    column sliced from the graph's features (on source, destination and edge frames) without its
    storage: DGL gathers those only when read, so the worker must not gather (and send) them."""
    from dgl.frame import LazyFeature

    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    s = sampler(prefetch_node_feats=["feat"], prefetch_labels=["label"], prefetch_edge_feats=["w"])
    loader = CompressedDGLDataLoader(graph, torch.arange(64), s, batch_size=64)
    (input_nodes, output_nodes, blocks), encoded = loader.collate_fn(torch.arange(64))  # a worker's result
    prefetched = {(0, 0, "feat"), (1, 1, "label"), (0, 2, "w"), (1, 2, "w")}  # (block, frame, key)
    detached = 0
    for i, block in enumerate(blocks):
        for f, frame in enumerate(block._node_frames + block._edge_frames):
            for key, column in frame._columns.items():
                assert not isinstance(column, LazyFeature), key  # taken off, into the encoded batch
                if (i, f, key) in prefetched:  # an empty placeholder holds its place: no row is sent raw
                    assert column.storage.numel() == 0, key
                elif key in ("feat", "label", "year", "w"):
                    assert column.storage is None and column.index is not None, key
                    detached += 1
    assert len(blocks) == 2
    assert detached == 2 * 2 * 3 - 2  # per block, source and destination feat/label/year; less the prefetched
    names = {m.name for layout in encoded.batch.layouts.values() for m in layout.members}
    assert names == {"blocks[0].srcnodes['_N'].data['feat']", "blocks[1].dstnodes['_N'].data['label']",
                     "blocks[0].edges[('_N', '_E', '_N')].data['w']", "blocks[1].edges[('_N', '_E', '_N')].data['w']"}


@needs_dgl
@pytest.mark.parametrize("num_workers", [0, 1])
def test_node_and_edge_columns_of_one_name_keep_their_own_rows(num_workers):
    """A node feature and an edge feature both called "w": the lazily sliced columns the workers send
    as row indices are re-attached to the right parent column (DGL pairs frames by position, which
    would mix them up for destination frames)."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    g = make_graph(num_nodes=600, num_edges=4000, seed=2)
    g.ndata["w"] = torch.arange(600 * 3, dtype=torch.float64).view(600, 3)
    indices = torch.arange(0, 600, 5)
    kw = dict(batch_size=40, shuffle=True, num_workers=num_workers)
    theirs = run(dgl.dataloading.DataLoader, g, indices, sampler, **kw)
    ours = run(CompressedDGLDataLoader, g, indices, sampler, **kw)
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
        for block in a[2]:
            assert_same_bits(block.dstdata["w"], g.ndata["w"][block.dstdata[dgl.NID]], "dstdata w")
            assert_same_bits(block.edata["w"], g.edata["w"][block.edata[dgl.EID]], "edata w")


@needs_dgl
@pytest.mark.parametrize("codec", ["identity", "ibp"])
def test_worker_batches_travel_in_reused_ring_slots_and_kept_batches_are_never_overwritten(graph, codec):
    """Workers write each batch into a slot of the loader's ring (pipeline.transport): the hand-over
    copies nothing more than the main process would, released slots are written again, and a batch
    the user keeps is never overwritten by a later one (CPU: a slot is released once no tensor of
    its batch is alive)."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    indices = torch.arange(0, 2000, 4)
    s = sampler(prefetch_node_feats=["feat", "year"], prefetch_labels=["label"])
    kw = dict(batch_size=32, shuffle=True)
    theirs = run(dgl.dataloading.DataLoader, graph, indices, lambda: s, num_workers=0, **kw)
    in_main = CompressedDGLDataLoader(graph, indices, s, codec=codec, num_workers=0, **kw)
    seed_all(0)
    assert len(list(in_main)) == len(theirs) == 16
    assert int(in_main._compressing.ring.counters.abs().sum()) == 0  # no worker: no slot used
    for keep in (True, False):
        loader = CompressedDGLDataLoader(graph, indices, s, codec=codec, num_workers=1, **kw)
        seed_all(0)
        kept = []
        for i, batch in enumerate(loader):
            assert_same_batch(batch, theirs[i])
            if keep:
                kept.append(batch)
        del batch
        for a, b in zip(kept, theirs):  # intact after every later batch was written
            assert_same_batch(a, b)
        # identity: the worker copied what the main process copies (its gathers) and torch's
        # hand-over nothing; ibp: the encoder's private output copied once into the slot
        placed = 0 if codec == "identity" else loader.stats.total_sent_bytes
        assert loader.stats.copied_bytes == in_main.stats.copied_bytes + placed
        claims = loader._compressing.ring.counters[:, :, 0]
        assert int(claims[0].sum()) > 0 and int(claims[1:].abs().sum()) == 0  # worker 0's slots
        if not keep:  # released slots were written again
            assert int(claims.max()) > 1


@needs_dgl
def test_two_live_iterators_keep_each_others_held_batches_intact(graph):
    # each iterator's workers (ids 0 and 1 both times) claim slots on a lane of their own
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    indices = torch.arange(0, 2000, 4)
    loader = CompressedDGLDataLoader(graph, indices, sampler(), codec="ibp", batch_size=50, shuffle=True,
                                     num_workers=2)
    first, second = iter(loader), iter(loader)
    held = [b for pair in zip(first, second) for b in pair]
    assert len(held) == 2 * len(loader) == 20
    for batch in held:
        check_against_graph(batch, graph)
    claims = loader._compressing.ring.lanes[:, :2, :, 0]  # [lane, worker, slot]
    assert int(claims[0].sum()) > 0 and int(claims[1].sum()) > 0 and int(claims[2:].abs().sum()) == 0


@needs_dgl
@pytest.mark.parametrize("in_worker", [False, True])
def test_features_of_a_dtype_no_codec_has_arrive_bit_for_bit(monkeypatch, in_worker):
    """complex64 rows and labels (outside layout.dtypes.SUPPORTED_DTYPES) are gathered in private
    memory and sent as their bytes, like PyG's path: DGL's batches, bit for bit. DGL cannot hand
    sampled graphs with complex columns over from its own workers (its frame schemes have no
    complex dtypes), so `in_worker` writes the batches into ring slots as a worker would."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader
    from ibp_graph.pipeline.transport import OutputBuffers

    if in_worker:
        monkeypatch.setattr(OutputBuffers, "for_this_process", classmethod(lambda cls, ring: cls(ring, 0)))
    g = make_graph(num_nodes=600, num_edges=4000, seed=3)
    g.ndata["c"] = torch.randn(600, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
    g.ndata["phase"] = torch.randn(600, dtype=torch.complex64, generator=torch.Generator().manual_seed(4))
    s = lambda: sampler(prefetch_node_feats=["feat", "c"], prefetch_labels=["phase"])  # noqa: E731
    kw = dict(batch_size=40, shuffle=True)
    indices = torch.arange(0, 600, 5)
    theirs = run(dgl.dataloading.DataLoader, g, indices, s, **kw)
    seed_all(0)
    loader = CompressedDGLDataLoader(g, indices, s(), codec="ibp", **kw)
    ours = list(loader)
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
        assert a[2][0].srcdata["c"].dtype == torch.complex64
    assert (int(loader._compressing.ring.counters[0, :, 0].sum()) > 0) == in_worker


@needs_dgl
@pytest.mark.parametrize("make_sampler", [
    lambda: dgl.dataloading.MultiLayerFullNeighborSampler(2),
    lambda: dgl.dataloading.NeighborSampler([4, 3]),
], ids=["full", "neighbor"])
def test_samplers_that_prefetch_nothing_give_dgls_batches(graph, make_sampler):
    """DGL's entity_sample.py / hetero_rgcn.py read g.ndata themselves: their samplers prefetch no
    features. DGL's loader takes them, so does ours (it refused them): the batches are DGL's own,
    only their id columns travel compressed, and loader.stats says so."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    indices = torch.arange(0, 2000, 11)
    for num_workers in (0, 2):
        theirs = run(dgl.dataloading.DataLoader, graph, indices, make_sampler, batch_size=40, shuffle=True,
                     num_workers=num_workers)
        seed_all(0)
        loader = CompressedDGLDataLoader(graph, indices, make_sampler(), batch_size=40, shuffle=True,
                                         num_workers=num_workers)
        ours = list(loader)
        assert len(ours) == len(theirs) == 5
        for a, b in zip(ours, theirs):
            assert_same_batch(a, b)
        assert all(name.startswith("int64") for name in loader.codecs)  # the id columns only
        assert "prefetches no features: only the batches' id columns travel compressed" in str(loader.stats)
        assert loader.stats.as_dict()["note"] == loader.stats.note


_BAD_GRAPH = """
import sys, torch, dgl
from ibp_graph.loaders.dgl import CompressedDGLDataLoader
indptr, indices, eids = torch.tensor([0, 2, 3, 4]), torch.tensor([1, 0, 0, 2]), torch.arange(4)
case = sys.argv[1]
if case == "negative":
    indices = torch.tensor([1, -7, 0, 2])
elif case == "decreasing":
    indptr = torch.tensor([0, 3, 2, 4])
elif case == "edge ids":
    eids = torch.tensor([0, 0, 3, 1])
g = dgl.graph(("csc", (indptr, indices, eids)), num_nodes=3)
g.ndata["feat"] = torch.randn(3, 4)
s = dgl.dataloading.NeighborSampler([2], prefetch_node_feats=["feat"])
try:
    print(len(list(CompressedDGLDataLoader(g, torch.arange(3), s, batch_size=2))))
except ValueError as e:
    print("ERROR", e)
"""


@needs_dgl
@pytest.mark.parametrize("case,message", [
    ("negative", r"graph: its csc indices must be in \[0, 3\); \[1\] is -7"),
    ("decreasing", r"graph: its csc indptr decreases at 1 \(3 -> 2\)"),
    ("edge ids", r"graph: its csc edge ids repeat 0 at 1"),
])
def test_a_graph_dgl_would_crash_on_is_refused_by_name(case, message):
    """DGL builds such graphs without a word and its samplers then crash (SIGSEGV or wrong rows);
    the loader checks every stored format before DGL samples."""
    import re

    from tests.faults.isolated import expect_clean_exit, run_python

    out = expect_clean_exit(run_python(_BAD_GRAPH, case)).strip()
    assert out.startswith("ERROR") and re.search(message, out), out
    assert "DGL does not check" in out


def _small_loader(graph):
    """(**DataLoader options) -> a small CompressedDGLDataLoader on `graph`, for the lifetime checks."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    s = sampler(prefetch_node_feats=["feat"], prefetch_labels=["label"])
    return lambda **kw: CompressedDGLDataLoader(graph, torch.arange(0, 2000, 4), s, batch_size=100, **kw)


@needs_dgl
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dropped_loader_is_freed_without_the_cyclic_collector(graph, num_workers):
    from tests.loaders.lifetime import check_freed_by_refcount

    check_freed_by_refcount(_small_loader(graph), num_workers)


@needs_dgl
def test_workers_stop_at_once_when_the_loader_is_freed_in_a_cycle(graph):
    from tests.loaders.lifetime import check_workers_stop_when_freed_in_a_cycle

    check_workers_stop_when_freed_in_a_cycle(_small_loader(graph))


@needs_dgl
def test_exit_with_open_iterators_is_quiet():
    from tests.loaders.lifetime import check_exit_is_quiet

    check_exit_is_quiet("""
        import torch, dgl
        from ibp_graph.loaders.dgl import CompressedDGLDataLoader
        g = dgl.rand_graph(2000, 10000)
        g.ndata["feat"] = torch.randn(2000, 16)
        s = dgl.dataloading.NeighborSampler([5, 5], prefetch_node_feats=["feat"])
        for w in (0, 2):
            globals()[f"loader{w}"] = loader = CompressedDGLDataLoader(
                g, torch.arange(2000), s, batch_size=256, num_workers=w, persistent_workers=w > 0)
            globals()[f"it{w}"] = it = iter(loader)
            next(it)
        print("exiting")
    """)
