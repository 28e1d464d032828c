"""Training with `loader.features: sharded`: under torchrun (2 gloo ranks) the same per-epoch losses as with the
whole table on every rank, for every front-end (PyG homogeneous, PyG heterogeneous, PyG link prediction; DGL node
classification in .venv-dgl), also on a host holding neither x.npy nor the store; refused in a single process,
without the store, and where no shards exist for a large data set."""
import json
import os
import subprocess
import sys

from pathlib import Path

import pytest
import torch

from ibp_graph.data import citegen, graphgen, maggen
from ibp_graph.data.input_stats import FeatureInput
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.data.shards import SHARDS_MANIFEST, ShardManifestError, write_shards
from ibp_graph.data.store import EncodedTable
from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train.loop import Dist, open_shards, run
from tests.data.host import sharded_host_copy
from tests.train import tiny

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sharded.yaml"
TINY = ["data.synthetic.num_nodes=1200", "data.synthetic.avg_citations=5", "data.synthetic.labeled_fraction=0.6",
        "data.synthetic.dim=16", "loader.batch_size=128", "loader.eval_batch_size=512", "loader.num_workers=0",
        "model.hidden=16", "output.progress=false", "loader.device=cpu", "train.epochs=2"]
#: configs/mag.yaml-like: only papers have features (one sharded table, "paper")
TINY_MAG = TINY + ["data.name=synthetic-mag", "data.mag.num_papers=900", "data.mag.num_authors=1200",
                   "data.mag.num_institutions=30", "data.mag.num_fields=100", "data.mag.num_classes=8"]
TINY_LINK = TINY + ["task=link", "data.name=synthetic-citation", "data.citation.num_nodes=1500",
                    "data.citation.num_negatives=20", "data.citation.dim=16", "data.citation.eval_fraction=0.15",
                    "loader.batch_size=256", "link.max_eval_edges=200"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tiny.generated_root(tmp_path_factory, TINY, lambda data, root: graphgen.ensure(data.synthetic, root, progress=False))


@pytest.fixture(scope="module")
def link_root(tmp_path_factory):
    return tiny.generated_root(tmp_path_factory, TINY_LINK,
                               lambda data, root: citegen.ensure(data.citation, root, progress=False))


@pytest.fixture(scope="module")
def mag_root(tmp_path_factory):
    return tiny.generated_root(tmp_path_factory, TINY_MAG, lambda data, root: maggen.ensure(data.mag, root, progress=False))


#: the generated data sets' makers, by data.name
ENSURE = {"synthetic": lambda data, root: graphgen.ensure(data.synthetic, root, progress=False),
          "synthetic-mag": lambda data, root: maggen.ensure(data.mag, root, progress=False),
          "synthetic-citation": lambda data, root: citegen.ensure(data.citation, root, progress=False)}


def host_root(sets: list, root: Path, tmp_path: Path) -> Path:
    """A data root holding only what a host of a 2-rank sharded run needs (tests.data.host) of the prepared folder
    CONFIG's run of overrides `sets` trains from under data root `root` (made, and its shards cut, first when no
    test before did)."""
    data = load_config(CONFIG, sets + [f"data.root={root}"]).data
    prepared = ENSURE[data.name](data, root)
    if not (prepared / "shards-2" / SHARDS_MANIFEST).is_file():
        write_shards(prepared, 2, progress=False)
    dest = tmp_path / f"host-{data.name}"
    sharded_host_copy(prepared, dest / prepared.name)
    return dest


def assert_still_a_host(root: Path) -> None:
    """The runs from `root` neither regenerated its data set nor encoded a store there."""
    assert not list(root.rglob("x.npy")) and not list(root.rglob("store"))


# Each rank trains once per labelled run of RUNS (the sharded ones and the whole-table one) in one process group
# and writes its own results file: two ranks' prints can share a line of torchrun's stdout.
RANK_RUNS = """\
import json, os
import torch
from ibp_graph.train.config import load_config
from ibp_graph.train.loop import run

sets, out = json.loads(os.environ["SETS"]), {}
for label, extra in json.loads(os.environ["RUNS"]).items():
    (result,) = run(load_config(os.environ["CONFIG"], sets + extra + [f"name={label}"]))
    test = "test_mrr" if result.get("task") == "link" else "test_acc"
    out[label] = {"features": result["features"], "world_size": result["world_size"],
                  "framework": result["framework"], "loss": [e["loss"] for e in result["epochs"]],
                  "test": [e[test] for e in result["epochs"]], "shard": [e.get("shard") for e in result["epochs"]],
                  "threads": len(os.listdir("/proc/self/task"))}  # gloo's and numba's too
with open(os.path.join(os.environ["OUT_DIR"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(out, f)
torch.distributed.destroy_process_group()
"""
SHARDED = ["loader.features=sharded", "loader.shard_cache_bytes=0"]
LOCAL = ["loader.features=local"]


def train_on_two_ranks(tmp_path, sets: list, runs: dict) -> list[dict]:
    """Each rank's results of the `runs` ({label: extra overrides}) of CONFIG with overrides `sets`, trained
    one after the other under torchrun with 2 gloo ranks."""
    script = tmp_path / "rank_runs.py"
    script.write_text(RANK_RUNS)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", OUT_DIR=str(tmp_path), CONFIG=str(CONFIG),
               SETS=json.dumps(sets + [f"output.dir={tmp_path / 'runs'}"]), RUNS=json.dumps(runs))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def assert_sharded_equals_local(rank: dict, sharded: str = "sharded", local: str = "local", store: str = "store"):
    """Run `sharded` of one rank's results trained from the shards, with exactly the losses and test metrics of
    run `local` (features from the `store`), fetching rows from the other rank every epoch."""
    mine, whole = rank[sharded], rank[local]
    assert whole["features"] == store and whole["world_size"] == 2
    assert mine["features"] == "shards" and mine["world_size"] == 2 and mine["framework"] == whole["framework"]
    assert mine["loss"] == whole["loss"] and mine["test"] == whole["test"], sharded  # exactly
    for sh in mine["shard"]:  # rows really came from the other rank
        assert sh["local_rows"] > 0 and sh["remote_rows"] + sh["remote_hits"] > 0
        assert (sh["wire_bytes"] > 0) == (sh["remote_rows"] > 0)  # bytes received for the rows not cached


def test_sharded_features_train_with_the_losses_of_the_whole_table(data_root, tmp_path):
    sets = TINY + [f"data.root={data_root}"]
    ranks = train_on_two_ranks(tmp_path, sets, {"sharded": SHARDED, "local": LOCAL, "sharded_cache":
                                                ["loader.features=sharded", "loader.shard_cache_bytes=3000"]})
    for rank in ranks:
        for label in ("sharded", "sharded_cache"):
            assert_sharded_equals_local(rank, label)
        assert all(sh["remote_hits"] == 0 and sh["wire_bytes"] > 0 for sh in rank["sharded"]["shard"])
        assert all(sh["remote_hits"] > 0 for sh in rank["sharded_cache"]["shard"])
        # each sharded run destroyed its exchange's gloo group at its end: no 3 threads more per run
        assert rank["sharded_cache"]["threads"] <= rank["sharded"]["threads"]
    assert ranks[0]["sharded"]["loss"] == ranks[1]["sharded"]["loss"]  # summed over ranks: one number
    prepared = graphgen.cache_dir(load_config(CONFIG, sets).data.synthetic, data_root)
    assert (prepared / "shards-2" / "shards.json").is_file()  # a small generated data set: cut by the run


# A run that raises on both ranks at its 2nd training batch (an injected error in the model step: a bad batch), between
# two runs that end well, in one process group: each rank's error, and its threads after each run.
RANK_FAILING_RUN = """\
import gc, json, os
import torch
from ibp_graph.train import frontends
from ibp_graph.train.config import load_config
from ibp_graph.train.loop import run

real, calls = frontends.PyG.forward, [0]

def forward(self, model, batch, labels):
    calls[0] += 1
    if FAIL and calls[0] == 2:
        raise ArithmeticError("injected: a bad batch")
    return real(self, model, batch, labels)
frontends.PyG.forward = forward

sets, out = json.loads(os.environ["SETS"]), {}
for label in ("first", "fails", "after"):
    FAIL, calls[0] = label == "fails", 0
    try:
        (result,) = run(load_config(os.environ["CONFIG"], sets + [f"name={label}"]))
        out[label] = {"loss": [e["loss"] for e in result["epochs"]]}
    except BaseException as e:  # noqa: BLE001 - the test reads it
        out[label] = {"error": f"{type(e).__name__}: {e}", "notes": getattr(e, "__notes__", [])}
    gc.collect()
    out[label]["threads"] = len(os.listdir("/proc/self/task"))  # gloo's and numba's too
with open(os.path.join(os.environ["OUT_DIR"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(out, f)
torch.distributed.destroy_process_group()
"""


def test_a_run_that_raises_closes_its_sharded_sources_and_raises_its_own_error(data_root, tmp_path):
    """A run that raises (here at its 2nd batch, on both ranks) closes its sharded sources on the way out, locally
    (no close message: after a failure the ranks' collectives need not pair): its error is the run's own, unmasked,
    no gloo group or thread of it stays (before, each failed run left its group: 3 threads more), and the next run
    in the same processes trains with the losses of the one before."""
    script = tmp_path / "rank_failing_run.py"
    script.write_text(RANK_FAILING_RUN)
    sets = TINY + [f"data.root={data_root}", f"output.dir={tmp_path / 'runs'}", "train.epochs=1"] + SHARDED
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", OUT_DIR=str(tmp_path), CONFIG=str(CONFIG),
               SETS=json.dumps(sets))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in range(2):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["fails"]["error"] == "ArithmeticError: injected: a bad batch" and not got["fails"]["notes"], got
        assert got["after"]["loss"] == got["first"]["loss"], got
        assert got["fails"]["threads"] <= got["first"]["threads"], got  # the failed run's group went with it
        assert got["after"]["threads"] <= got["first"]["threads"], got


def test_heterogeneous_training_takes_a_sharded_table_per_featured_node_type(mag_root, tmp_path):
    root = mag_root
    sets = TINY_MAG + [f"data.root={root}"]
    ranks = train_on_two_ranks(tmp_path, sets, {"sharded": SHARDED, "local": LOCAL})
    for rank in ranks:
        assert_sharded_equals_local(rank)
    shards = maggen.cache_dir(load_config(CONFIG, sets).data.mag, root) / "shards-2"
    assert json.loads((shards / "shards.json").read_text())["tables"].keys() == {"paper"}


def test_link_prediction_trains_from_the_shards_with_the_losses_of_the_whole_table(link_root, tmp_path):
    ranks = train_on_two_ranks(tmp_path, TINY_LINK + [f"data.root={link_root}"], {"sharded": SHARDED, "local": LOCAL})
    for rank in ranks:
        assert_sharded_equals_local(rank)
        assert all(m is not None for m in rank["sharded"]["test"])  # evaluated: every node embedded from shards


def test_a_host_without_x_npy_or_the_store_trains_with_the_losses_of_the_whole_table(data_root, mag_root, link_root,
                                                                                      tmp_path):
    """Node classification, heterogeneous and link prediction, each from a folder holding only what a host needs
    (no x.npy, no store/): widths and input statistics from shards.json; nothing regenerated there."""
    hosts = {name: host_root(sets, root, tmp_path) for name, sets, root in
             (("node", TINY, data_root), ("mag", TINY_MAG, mag_root), ("link", TINY_LINK, link_root))}
    mag_sets, link_sets = TINY_MAG[len(TINY):], TINY_LINK[len(TINY):]
    ranks = train_on_two_ranks(tmp_path, TINY, {
        "host": SHARDED + [f"data.root={hosts['node']}"], "local": LOCAL + [f"data.root={data_root}"],
        "mag_host": mag_sets + SHARDED + [f"data.root={hosts['mag']}"],
        "mag_local": mag_sets + LOCAL + [f"data.root={mag_root}"],
        "link_host": link_sets + SHARDED + [f"data.root={hosts['link']}"],
        "link_local": link_sets + LOCAL + [f"data.root={link_root}"]})
    for rank in ranks:
        for label in ("", "mag_", "link_"):
            assert_sharded_equals_local(rank, label + "host", label + "local")
        assert rank["link_local"]["threads"] <= rank["host"]["threads"]  # no gloo group kept by a sharded run
    for root in hosts.values():
        assert_still_a_host(root)


def bits(inp: FeatureInput) -> tuple:
    """A model input's width and statistics, the floats as their bit patterns (NaN compares equal to itself)."""
    return inp.width, inp.mean.view(torch.int32).tolist(), inp.std.view(torch.int32).tolist()


class SoloDist(Dist):
    """Rank 0 of 2 that waits for no one: open_shards without a process group."""

    def barrier(self) -> None:
        pass


def test_shards_cut_before_the_statistics_take_them_from_x_npy_or_name_the_command(data_root, tmp_path):
    cfg = tiny.config(TINY, data_root)
    d = graphgen.cache_dir(cfg.data.synthetic, data_root)
    shards = write_shards(d, 2, tmp_path / "shards", progress=False)
    data = tiny.config(TINY, data_root, None, f"data.shards={shards}").data
    whole = PreparedDataset.load(d)
    got = open_shards(data, PreparedDataset.load(d, features=False), SoloDist(0, 2)).inputs["x"]
    assert bits(got) == bits(FeatureInput.of(whole.x))  # from shards.json
    manifest = json.loads((shards / SHARDS_MANIFEST).read_text())
    del manifest["tables"]["x"]["stats"]  # as an older ibp-graph wrote it
    (shards / SHARDS_MANIFEST).write_text(json.dumps(manifest))
    got = open_shards(data, PreparedDataset.load(d, features=False), SoloDist(0, 2)).inputs["x"]
    assert bits(got) == bits(FeatureInput.of(whole.x))  # from x.npy, still on this host
    host = sharded_host_copy(d, tmp_path / "host" / d.name)
    with pytest.raises(FileNotFoundError, match=r"shards.json records no input statistics of table 'x' \(its shards "
                                                r"were cut by an older ibp-graph\) and .*host/.*/x.npy is not on this "
                                                r"host .*cut the shards again with `ibp-graph prepare --dataset "
                                                r"synthetic .*--shards 2"):
        open_shards(data, PreparedDataset.load(host, features=False), SoloDist(0, 2))


def test_shards_of_another_table_size_are_refused_naming_both(data_root, tmp_path):
    d = graphgen.cache_dir(tiny.config(TINY, data_root).data.synthetic, data_root)
    other = write_shards(EncodedTable.encode(torch.randn(10, 16), "ibp", progress=False), 2, tmp_path / "other",
                         progress=False)
    data = tiny.config(TINY, data_root, None, f"data.shards={other}").data
    with pytest.raises(ShardManifestError, match=r"table 'x' has 10 rows of width 16; .* records \(1200, 16\) for "
                                                 r"it: shards of another data set"):
        open_shards(data, PreparedDataset.load(d, features=False), SoloDist(0, 2))


@pytest.mark.dgl
def test_dgl_trains_from_the_shards_with_the_losses_of_the_whole_table(data_root, link_root, tmp_path):
    """Node classification, then link prediction (edge-wise batches, and the node batches of the evaluation's
    embeddings) in the same process group; both also on a host without x.npy or the store (no ndata "feat")."""
    sets = TINY + [f"data.root={data_root}", "loader.framework=dgl", "loader.num_workers=1"]  # ids from a worker
    link = TINY_LINK[len(TINY):] + [f"data.root={link_root}"]
    node_host, link_host = host_root(TINY, data_root, tmp_path), host_root(TINY_LINK, link_root, tmp_path)
    ranks = train_on_two_ranks(tmp_path, sets, {"sharded": SHARDED, "local": LOCAL, "link_sharded": link + SHARDED,
                                                "link_local": link + LOCAL,
                                                "host": SHARDED + [f"data.root={node_host}"],
                                                "link_host": link + SHARDED + [f"data.root={link_host}"]})
    for rank in ranks:  # DGL's loader encodes the graph's ndata in its workers: features from the table
        assert_sharded_equals_local(rank, store="table")
        assert_sharded_equals_local(rank, "link_sharded", "link_local", store="table")
        assert_sharded_equals_local(rank, "host", store="table")
        assert_sharded_equals_local(rank, "link_host", "link_local", store="table")
        assert rank["sharded"]["framework"] == rank["link_sharded"]["framework"] == "dgl"
        assert all(m is not None for m in rank["link_sharded"]["test"])
    assert_still_a_host(node_host)
    assert_still_a_host(link_host)


def test_a_hung_worker_stops_the_run_with_an_error_naming_the_stage(data_root, tmp_path, monkeypatch, capsys):
    """loader.worker_timeout: a DataLoader worker that sends no batch (here: one that sleeps) stops the run after
    that many seconds with an error naming the stage and the key, instead of leaving its rank waiting forever
    (and a sharded run's other ranks until the exchange's timeout)."""
    import time

    from torch.utils.data import get_worker_info

    from ibp_graph.loaders.pyg import CompressedNeighborLoader
    from ibp_graph.train.loop import main_config

    real = CompressedNeighborLoader.collate_fn

    def collate_fn(self, index):
        if get_worker_info() is not None:  # in the worker only: the main process warms up with the sampler
            time.sleep(300)
        return real(self, index)
    monkeypatch.setattr(CompressedNeighborLoader, "collate_fn", collate_fn)
    cfg = tiny.config(TINY, data_root, tmp_path, "loader.num_workers=1", "loader.worker_timeout=2")
    t = time.monotonic()
    assert main_config(cfg) == 1
    assert time.monotonic() - t < 120
    assert ("ibp-graph train: epoch 1: training: the loader's DataLoader workers sent no batch in "
            "loader.worker_timeout=2 s: a worker hung, or takes longer than that for a batch (raise "
            "loader.worker_timeout; 0 waits forever)") in capsys.readouterr().err


def test_sharded_features_are_refused_in_a_single_process(data_root, tmp_path):
    cfg = tiny.config(TINY, data_root, tmp_path, "loader.features=sharded")
    with pytest.raises(ConfigError, match=r"loader.features='sharded' is not accepted in a single process "
                                          r"\(world size 1\).*torchrun --nproc-per-node W"):
        run(cfg)


@pytest.mark.parametrize("extra", [[], ["loader.framework=dgl"], ["data.name=synthetic-mag"],
                                   ["task=link", "data.name=synthetic-citation"],
                                   ["task=link", "data.name=synthetic-citation", "loader.framework=dgl"]])
def test_sharded_features_are_refused_only_without_the_store(extra):
    assert load_config(None, ["loader.features=sharded"] + extra).loader.features == "sharded"
    with pytest.raises(ConfigError, match=r"loader.features='sharded' is not accepted with data.store=false: the "
                                          r"shards are cut from the pre-encoded feature store"):
        load_config(None, ["loader.features=sharded", "data.store=false"] + extra)
    with pytest.raises(ConfigError, match=r"loader.features='remote' is not accepted; choose from \['local', 'sharded'\]"):
        load_config(None, ["loader.features=remote"])


def test_the_device_cache_tier_is_refused_off_a_gpu_or_without_shards():
    cfg = load_config(None, ["loader.features=sharded", "loader.device=cuda", "loader.shard_device_cache_bytes=1000"])
    assert cfg.loader.shard_device_cache_bytes == 1000
    for extra in (["loader.features=sharded", "loader.device=cpu"], ["loader.device=cuda"]):
        with pytest.raises(ConfigError, match=r"loader.shard_device_cache_bytes=1000 is not accepted with "
                                              r"loader.features='(sharded|local)' and loader.device='(cpu|cuda)': it "
                                              r"keeps remote rows of sharded features in GPU memory"):
            load_config(None, extra + ["loader.shard_device_cache_bytes=1000"])


def test_sharded_sources_take_both_cache_budgets():
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.train.sharding import sources

    import torch

    store = EncodedTable.encode(torch.randn(16, 4), "ibp", progress=False)
    layout = ShardLayout.contiguous(16, 2)
    lc = load_config(None, ["loader.features=sharded", "loader.device=cuda", "loader.shard_cache_bytes=70",
                            "loader.shard_device_cache_bytes=30"]).loader
    (src,) = sources({"x": (shard_of(store, layout, 0), layout)}, lc).values()
    assert (src.cache_bytes, src.device_cache_bytes, src.cache_budget) == (70, 30, 100)


def test_a_sharded_run_takes_auto_or_the_codec_every_shard_has():
    import torch

    from ibp_graph.data.shards import ShardLayout
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.train.sharding import check_codecs

    x = torch.arange(64, dtype=torch.float32).view(16, 4)
    ibp, ebp = (EncodedTable.encode(x, c, progress=False) for c in ("ibp", "ebp"))
    layout = ShardLayout.contiguous(16, 1)
    check_codecs(["auto", "ibp"], {"paper": (ibp, layout), "author": (ibp, layout)})
    with pytest.raises(ConfigError, match=r"loader.codecs\[1\]='ebp' is not accepted with loader.features='sharded': "
                                          r"the shards serve their rows as encoded \(x: ibp\); use one of "
                                          r"\['auto', 'ibp'\]"):
        check_codecs(["auto", "ebp"], {"x": (ibp, layout)})
    with pytest.raises(ConfigError, match=r"loader.codecs\[0\]='ibp' .*\(author: ebp, paper: ibp\); use one of "
                                          r"\['auto'\]"):
        check_codecs(["ibp"], {"paper": (ibp, layout), "author": (ebp, layout)})


def test_a_distributed_run_does_not_cut_shards_of_large_data_sets(data_root, tmp_path):
    d = graphgen.cache_dir(tiny.config(TINY, data_root).data.synthetic, data_root)
    ds = PreparedDataset.load(d)
    arxiv = load_config(None, ["data.name=ogbn-arxiv", f"data.root={tmp_path}", f"data.prepared={d}"]).data
    with pytest.raises(FileNotFoundError, match=rf"ibp-graph prepare --dataset ogbn-arxiv --root {tmp_path} "
                                                rf"--out {d} --shards 4"):
        open_shards(arxiv, ds, Dist(rank=1, world_size=4, local_rank=1))
    elsewhere = load_config(None, [f"data.root={data_root}", f"data.shards={tmp_path / 'none'}"] + TINY).data
    with pytest.raises(FileNotFoundError, match=r"holds no shards .*point data.shards there"):
        open_shards(elsewhere, ds, Dist(rank=0, world_size=2))


def test_the_exchange_timeout_is_a_checked_key_that_reaches_the_sources():
    """loader.shard_exchange_timeout: seconds in (0, 1e7] (default 300, the exchange's own), refused by name
    otherwise, and the timeout of every sharded source (its exchange's) of the run."""
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.train.config import describe
    from ibp_graph.train.sharding import sources

    assert load_config(None, []).loader.shard_exchange_timeout == 300.0
    assert any(line.lstrip().startswith("loader.shard_exchange_timeout") for line in describe())
    for bad, shown in (("0", "0.0"), ("-5", "-5.0"), ("1e8", "100000000.0"), (".inf", "inf")):
        with pytest.raises(ConfigError, match=rf"^loader.shard_exchange_timeout={shown} is not accepted; expected a "
                                              r"(finite number|value) in \(0.0, 10000000.0\]"):
            load_config(None, [f"loader.shard_exchange_timeout={bad}"])
    with pytest.raises(ConfigError, match=r"loader.shard_exchange_timeout='soon' is not accepted"):
        load_config(None, ["loader.shard_exchange_timeout=soon"])
    with pytest.raises(ConfigError, match=r"shard_exchange_timout"):  # unknown keys: refused as before
        load_config(None, ["loader.shard_exchange_timout=5"])
    store = EncodedTable.encode(torch.randn(16, 4), "ibp", progress=False)
    layout = ShardLayout.contiguous(16, 2)
    lc = load_config(None, ["loader.features=sharded", "loader.shard_exchange_timeout=7.5"]).loader
    (src,) = sources({"x": (shard_of(store, layout, 0), layout)}, lc).values()
    assert src.exchange.timeout == 7.5


class Closing:
    """A run's sharded source (train/sharding.py) that records how it was closed in `log`; `fails`: its close raises."""

    def __init__(self, name, log, fails=False):
        self.name, self.log, self.fails = name, log, fails

    def close(self, collective=True):
        self.log.append((self.name, collective))
        if self.fails:
            raise RuntimeError(f"{self.name}'s close failed")


def test_a_runs_sources_are_closed_however_it_ends_and_its_own_error_is_raised(monkeypatch):
    """sharding.serving: a run that ends well closes its sources collectively, in one order (a failing close raised
    once all are closed, those after it locally); a run that raises (KeyboardInterrupt too) closes them locally and
    raises its own error, a close that fails as well only a note on it."""
    from ibp_graph.train import sharding

    def run(body, fails=(), shards=("paper", "author")):
        log = []
        monkeypatch.setattr(sharding, "sources", lambda s, loader: {n: Closing(n, log, n in fails) for n in s})
        with sharding.serving(list(shards), None) as tables:
            assert sorted(tables) == sorted(shards)
            body()
        return log

    assert run(lambda: None) == [("author", True), ("paper", True)]
    log = []
    monkeypatch.setattr(sharding, "sources", lambda s, loader: {n: Closing(n, log, n == "author") for n in s})
    with pytest.raises(RuntimeError, match="author's close failed"):
        with sharding.serving(["paper", "author"], None):
            pass
    assert log == [("author", True), ("paper", False)]  # after a failed close, the others locally

    for error in (ArithmeticError("a bad batch"), KeyboardInterrupt(), TimeoutError("a worker hung")):
        def body():
            raise error
        log = []
        monkeypatch.setattr(sharding, "sources", lambda s, loader: {n: Closing(n, log, n == "author") for n in s})
        with pytest.raises(type(error)) as got:
            with sharding.serving(["paper", "author"], None):
                body()
        assert got.value is error and log == [("author", False), ("paper", False)]
        if sys.version_info >= (3, 11):
            assert got.value.__notes__ == ["closing the run's sharded sources failed as well: RuntimeError: "
                                           "author's close failed"]
    with sharding.serving(None, None) as tables:  # a run without shards
        assert tables is None
