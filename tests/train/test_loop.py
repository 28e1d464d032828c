"""Training: models, the loop (auto and identity train identically), and DDP with gloo in 2 processes."""
import json
import os
import subprocess
import sys

import pytest
import torch

from ibp_graph.cli import main as cli
from ibp_graph.data import graphgen
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.train.config import load_config
from ibp_graph.train.loop import make_loader, run
from ibp_graph.train.models import NodeClassifier, feature_stats
from tests.train import tiny

TINY = ["data.synthetic.num_nodes=1500", "data.synthetic.avg_citations=5", "data.synthetic.labeled_fraction=0.6",
        "loader.batch_size=128", "loader.eval_batch_size=512", "loader.num_workers=0", "model.hidden=32",
        "output.progress=false", "loader.device=cpu"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tiny.generated_root(tmp_path_factory, TINY, lambda data, root: graphgen.ensure(data.synthetic, root, progress=False))


def _cfg(data_root, out, *extra):
    return tiny.config(TINY, data_root, out, *extra)


def test_auto_and_identity_train_identically_and_learn(data_root, tmp_path, capsys):
    cfg = _cfg(data_root, tmp_path / "runs", "loader.codecs=[auto, identity]", "train.epochs=2", "name=tiny")
    auto, ident = run(cfg)
    out = capsys.readouterr().out
    assert out.count("epoch  1/2") == 2 and "test accuracy" in out
    for a, b in zip(auto["epochs"], ident["epochs"]):  # lossless features, same seeds: same numbers
        assert a["loss"] == b["loss"] and a["test_acc"] == b["test_acc"]
        assert a["raw_bytes"] == b["raw_bytes"] and b["sent_bytes"] == b["raw_bytes"]
        assert a["sent_bytes"] < a["raw_bytes"]
    assert auto["features"] == "store" and ident["features"] == "table"
    ds = PreparedDataset.load(graphgen.cache_dir(cfg.data.synthetic, data_root))
    assert auto["group_codecs"]["x@store"] == ds.store_codec and f"x@store: {ds.store_codec}" in out
    assert set(ident["group_codecs"].values()) == {"identity"}
    final = auto["final"]
    assert final["test_acc"] > final["majority_test_acc"] + 0.08  # 0.18 vs 0.03 after 2 tiny epochs
    files = sorted((tmp_path / "runs").glob("tiny-*.json"))
    assert [json.loads(f.read_text())["codec"] for f in files] == ["auto", "identity"]
    saved = json.loads(files[0].read_text())
    assert saved["config"]["loader"]["batch_size"] == 128 and "machine" in saved


def test_per_batch_encoding_without_the_store(data_root, tmp_path):
    cfg = _cfg(data_root, tmp_path, "data.store=false", "train.max_batches=2", "model.arch=gcn")
    (result,) = run(cfg)
    assert result["features"] == "table" and result["epochs"][0]["train_batches"] == 2
    assert result["final"]["fraction"] < 1.0


def test_the_store_is_auto_encoded_and_serves_auto_and_its_own_codec(data_root):
    from ibp_graph.codec import fit_codec
    from ibp_graph.codec.auto import KINDS

    cfg = _cfg(data_root, "unused")
    ds = PreparedDataset.load(graphgen.cache_dir(cfg.data.synthetic, data_root))
    chosen = fit_codec(ds.x)  # what prepare's default (codec="auto") must have picked
    assert ds.meta["store_codec"] == ds.store_codec == chosen.name != "identity"
    assert ds.store().codec.fingerprint == chosen.fingerprint
    seeds = ds.split["train"][:64]
    for codec in KINDS:
        loader = make_loader(ds, seeds, cfg.loader, codec, batch_size=64, shuffle=False, device=torch.device("cpu"))
        assert ("x@store" in loader.codecs) == (codec in ("auto", ds.store_codec)), codec
        batch = next(iter(loader))
        assert torch.equal(batch.x, ds.x[batch.n_id]), codec


@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
def test_models_trim_layers_without_changing_seed_outputs(data_root, arch):
    cfg = _cfg(data_root, "unused", "loader.num_neighbors=[4, 3, 2]")
    ds = PreparedDataset.load(graphgen.cache_dir(cfg.data.synthetic, data_root))
    loader = make_loader(ds, ds.split["train"], cfg.loader, "ibp", batch_size=64, shuffle=False,
                         device=torch.device("cpu"))
    batch = next(iter(loader))
    torch.manual_seed(0)
    model = NodeClassifier(arch, 128, 32, 172, 3, dropout=0.0, heads=4)
    model.set_feature_stats(*feature_stats(ds.x))
    model.eval()
    trimmed = model(batch.x, batch.edge_index, batch.batch_size, batch.num_sampled_nodes, batch.num_sampled_edges)
    full = model(batch.x, batch.edge_index, batch.batch_size)
    assert trimmed.shape == (64, 172)
    torch.testing.assert_close(trimmed, full, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="multiple of model.heads"):
        NodeClassifier("gat", 128, 30, 172, 2, heads=4)
    with pytest.raises(ValueError, match="arch='mlp'"):
        NodeClassifier("mlp", 128, 32, 172, 2)


def _torchrun(program: list[str], data_root, out) -> subprocess.CompletedProcess:
    """torchrun, 2 CPU processes, each running `program` with the tiny one-epoch config as --set pairs."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    sets = TINY + [f"data.root={data_root}", f"output.dir={out}", "train.epochs=1", "name=ddp"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           *program] + [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_ddp_gloo_two_processes(data_root, tmp_path):
    """torchrun, 2 CPU processes: each trains on half the seeds; rank 0 writes the summed result."""
    proc = _torchrun(["-m", "ibp_graph.cli", "train"], data_root, tmp_path)
    assert proc.stdout.count("epoch  1/1") == 1  # one rank prints
    (path,) = tmp_path.glob("ddp-*.json")  # one rank writes
    result = json.loads(path.read_text())
    assert result["world_size"] == 2 and path.name.endswith("-auto-w2.json")
    n_train = PreparedDataset.load(graphgen.cache_dir(load_config(None, TINY).data.synthetic, data_root)) \
        .split["train"].numel()
    for epoch in result["epochs"]:
        assert epoch["train_seeds"] == (n_train // 2) * 2  # every rank an equal share, summed
        assert 0 < epoch["fraction"] < 1 and epoch["test_acc"] is not None


RANK_THREADS = """\
import json, os, sys
import torch
from ibp_graph.train.config import load_config
from ibp_graph.train.loop import main_config, setup_distributed

def threads():
    return [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]

cfg = load_config(None, [a for a in sys.argv[1:] if a != "--set"])
setup_distributed(cfg.loader.device)  # the group main_config then trains with and tears down
torch.distributed.barrier()
own = open("/proc/self/comm").read().strip()
group = sorted({t for t in threads() if t != own})  # gloo's: pt_gloo_runloop, gloo_tcp_loop
rc = main_config(cfg)
report = {"rc": rc, "group": group, "after": sorted(set(threads()))}
# one file per rank: the two ranks' prints can land on one line of torchrun's shared stdout
with open(os.path.join(cfg.output.dir, f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(report, f)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads thread names from Linux's /proc")
def test_ddp_teardown_ends_the_process_groups_threads(data_root, tmp_path):
    """After a distributed run, none of the process group's threads is alive: one that lives into
    interpreter shutdown can drop the last collective's tensors there, wait for the GIL, be ended
    by Python and abort its rank ("terminate called without an active exception", now and then)."""
    script = tmp_path / "rank_threads.py"
    script.write_text(RANK_THREADS)
    proc = _torchrun([str(script)], data_root, tmp_path)
    ranks = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*.json"))]
    assert len(ranks) == 2, proc.stdout[-3000:]
    for rank in ranks:
        assert rank["rc"] == 0 and rank["group"], rank  # the group had threads of its own
        assert not set(rank["group"]) & set(rank["after"]), rank
    assert "terminate called" not in proc.stderr


def test_a_distributed_run_does_not_prepare_large_data_sets(tmp_path, monkeypatch):
    import collections
    import shutil

    from ibp_graph.train.loop import Dist, open_dataset

    # the config checker sizes generated data against the free disk (papers100M-like: ~66 GB); this
    # test is about the distributed refusal, on any machine's disk
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 50, 0, 1 << 50))

    cfg = load_config(None, ["data.name=ogbn-papers100M", f"data.root={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="ibp-graph prepare --dataset ogbn-papers100M"):
        open_dataset(cfg.data, Dist(rank=1, world_size=2, local_rank=1))
    big = load_config(None, [f"data.root={tmp_path}", "data.synthetic.num_nodes=111059956"])
    with pytest.raises(FileNotFoundError, match="data.synthetic.num_nodes=111059956"):
        open_dataset(big.data, Dist(rank=0, world_size=2))


def test_framework_key_unknown_value_and_dgl_missing_are_clear_errors(tmp_path, monkeypatch, capsys):
    from ibp_graph.train.config import ConfigError
    from ibp_graph.train.loop import main_config

    with pytest.raises(ConfigError, match=r"loader.framework='jax' is not accepted; choose from \['pyg', 'dgl'\]"):
        load_config(None, ["loader.framework=jax"])
    assert load_config(None).loader.framework == "pyg"
    monkeypatch.setitem(sys.modules, "dgl", None)  # `import dgl` raises ImportError
    monkeypatch.delitem(sys.modules, "ibp_graph.loaders.dgl", raising=False)
    cfg = load_config(None, TINY + [f"data.root={tmp_path / 'data'}", f"output.dir={tmp_path}",
                                    "loader.framework=dgl"])
    assert main_config(cfg) == 1
    err = capsys.readouterr().err
    assert "loader.framework='dgl' needs dgl, which does not import here" in err
    assert "make test-dgl" in err and ".venv-dgl" in err
    assert not (tmp_path / "data").exists()  # refused before any data was generated


def test_the_pyg_loop_imports_no_dgl_and_the_dgl_loop_no_torch_geometric():
    """The loop, its front-ends and models import each framework only when it is used."""
    code = ("import sys; sys.modules['dgl'] = None; sys.modules['torch_geometric'] = None\n"
            "import ibp_graph.train.loop, ibp_graph.train.frontends, ibp_graph.train.models\n"
            "from ibp_graph.train import frontends; frontends.get('dgl'); frontends.get('pyg')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_dgl_epoch_hook_takes_a_ddp_loader_without_set_epoch():
    """DGL 2.1's node DataLoader with use_ddp=True reshuffles each rank's share itself and has no
    set_epoch: the training loop's epoch hook called it (AttributeError in every DDP run on DGL)."""
    from ibp_graph.train.frontends import DGL

    calls = []

    class Loader:
        use_ddp = True

    class WithEpochs(Loader):
        def set_epoch(self, epoch):
            calls.append(epoch)

    hook = DGL.set_epoch.__get__(object.__new__(DGL))
    hook(Loader(), 3)
    hook(WithEpochs(), 4)
    assert calls == [4]


def test_a_prepared_folder_of_another_data_set_is_refused_naming_both(data_root, tmp_path, capsys):
    """data.prepared pointing at a folder prepared from another data set (here the generated one, asked for as
    ogbn-arxiv) trained on it silently, its results labelled with the asked-for experiment."""
    from ibp_graph.train.loop import main_config

    d = graphgen.cache_dir(_cfg(data_root, "unused").data.synthetic, data_root)
    cfg = _cfg(data_root, tmp_path, "data.name=ogbn-arxiv", f"data.prepared={d}", "train.epochs=1",
               "train.max_batches=1")
    assert main_config(cfg) == 2
    err = capsys.readouterr().err
    assert f"data.prepared={str(d)!r}" in err and "'synthetic'" in err and "data.name='ogbn-arxiv'" in err
    assert not list(tmp_path.glob("*.json"))  # nothing trained, nothing written


def test_dgl_refuses_a_normalisation_its_model_does_not_have(tmp_path):
    """DGL's BlockSAGE has no normalisation layers: model.norm was silently ignored with loader.framework=dgl."""
    from ibp_graph.train.config import ConfigError

    with pytest.raises(ConfigError, match=r"model.norm='batch_norm' is not accepted with loader.framework='dgl'.*"
                                          r"expected null"):
        load_config(None, [f"data.root={tmp_path}", "loader.framework=dgl", "model.norm=batch_norm"])
    with pytest.raises(ConfigError, match=r"model.norm='layer_norm' is not accepted with loader.framework='dgl'"):
        load_config(None, [f"data.root={tmp_path}", "loader.framework=dgl", "model.norm=layer_norm", "task=link",
                           "data.name=synthetic-citation"])
    assert load_config(None, [f"data.root={tmp_path}", "loader.framework=dgl"]).model.norm is None


def test_a_model_the_framework_does_not_build_is_a_config_error_naming_the_file(tmp_path, capsys):
    """model.arch=gat with DGL was refused by the DGL front-end: exit 1, without the config file's name."""
    config = tmp_path / "c.yaml"
    config.write_text(f"data:\n  root: {tmp_path}\nloader:\n  framework: dgl\nmodel:\n  arch: gat\n")
    assert cli(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: model.arch='gat' is not accepted with loader.framework='dgl'; expected one of ['sage']" in err
    assert not (tmp_path / "synthetic").exists() and not list(tmp_path.glob("*.json"))


def test_a_result_file_another_run_writes_meanwhile_is_kept(tmp_path, monkeypatch):
    """Two runs of one name and codec finishing in the same second (a sweep into one output.dir): the name was
    checked free, then written with a rename over whatever was there by then, losing the other run's results."""
    from pathlib import Path

    import ibp_graph.tables
    from ibp_graph.train import loop

    cfg = load_config(None, [f"output.dir={tmp_path}", "name=race"])
    monkeypatch.setattr(loop.time, "strftime", lambda fmt, *a: "20260101-000000")
    others = []

    def another_run(path):  # another process writes its results under the name while this one writes
        if not Path(path).exists():
            Path(path).write_text(f'{{"other": {len(others)}}}\n')
            others.append(Path(path))

    real_machine, real_write = ibp_graph.tables.machine, loop.write_text
    monkeypatch.setattr(ibp_graph.tables, "machine", lambda: another_run(tmp_path / "race-20260101-000000-ibp.json")
                        or real_machine())
    monkeypatch.setattr(loop, "write_text", lambda path, text: another_run(path) or real_write(path, text))
    path = loop._write(cfg, "ibp", loop.Dist(), {"codec": "ibp"})
    texts = {p.name: p.read_text() for p in tmp_path.glob("race-*.json")}
    assert json.loads(path.read_text())["codec"] == "ibp"
    assert others and all(f'"other": {i}' in texts.get(p.name, "") for i, p in enumerate(others)), texts


@pytest.mark.parametrize("cold", [True, False])
def test_a_run_says_first_when_it_will_compile_the_kernels(tmp_path, capsys, monkeypatch, cold):
    """The first run in an environment compiles for about a minute before its first line: it says so."""
    from ibp_graph.train import loop

    class Started(Exception):
        pass

    def start(*a, **k):
        raise Started

    monkeypatch.setattr(loop.jit_cache, "cold", lambda: cold)
    monkeypatch.setattr(loop.startup, "start", start)
    with pytest.raises(Started):
        run(load_config(None, [f"data.root={tmp_path}"]))
    out = capsys.readouterr().out
    assert ("compiling ibp-graph's kernels (numba): once per environment" in out) == cold
    with pytest.raises(Started):  # progress off: nothing printed
        run(load_config(None, [f"data.root={tmp_path}", "output.progress=false"]))
    assert capsys.readouterr().out == ""
