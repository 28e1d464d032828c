"""Training with `loader.features: sharded`: under torchrun (2 gloo ranks) the same per-epoch losses as with the
whole table on every rank; refused in a single process, and where no shards exist for a large data set."""
import json
import os
import subprocess
import sys

from pathlib import Path

import pytest

from ibp_graph.data import graphgen
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train.loop import Dist, open_shards, run
from tests.train import tiny

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sharded.yaml"
TINY = ["data.synthetic.num_nodes=1200", "data.synthetic.avg_citations=5", "data.synthetic.labeled_fraction=0.6",
        "data.synthetic.dim=16", "loader.batch_size=128", "loader.eval_batch_size=512", "loader.num_workers=0",
        "model.hidden=16", "output.progress=false", "loader.device=cpu", "train.epochs=2"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tiny.generated_root(tmp_path_factory, TINY, lambda data, root: graphgen.ensure(data.synthetic, root, progress=False))


# Each rank trains three times in one process group (sharded without and with a remote-row cache, then with
# the whole table) and writes its own results file: two ranks' prints can share a line of torchrun's stdout.
RANK_RUNS = """\
import json, os, sys
import torch
from ibp_graph.train.config import load_config
from ibp_graph.train.loop import run

sets = [a for a in sys.argv[1:] if a != "--set"]
out = {}
for label, extra in (("sharded", ["loader.features=sharded", "loader.shard_cache_bytes=0"]),
                     ("sharded_cache", ["loader.features=sharded", "loader.shard_cache_bytes=3000"]),
                     ("local", ["loader.features=local"])):
    (result,) = run(load_config(os.environ["CONFIG"], sets + extra + [f"name={label}"]))
    out[label] = {"features": result["features"], "world_size": result["world_size"],
                  "loss": [e["loss"] for e in result["epochs"]], "test_acc": [e["test_acc"] for e in result["epochs"]],
                  "shard": [e.get("shard") for e in result["epochs"]]}
with open(os.path.join(os.environ["OUT_DIR"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(out, f)
torch.distributed.destroy_process_group()
"""


def test_sharded_features_train_with_the_losses_of_the_whole_table(data_root, tmp_path):
    script = tmp_path / "rank_runs.py"
    script.write_text(RANK_RUNS)
    sets = TINY + [f"data.root={data_root}", f"output.dir={tmp_path / 'runs'}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", OUT_DIR=str(tmp_path), CONFIG=str(CONFIG))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)] \
        + [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank in ranks:
        local = rank["local"]
        assert local["features"] == "store" and local["world_size"] == 2
        for label in ("sharded", "sharded_cache"):
            run_ = rank[label]
            assert run_["features"] == "shards" and run_["world_size"] == 2
            assert run_["loss"] == local["loss"] and run_["test_acc"] == local["test_acc"], label  # exactly
            for sh in run_["shard"]:  # rows really came from the other rank
                assert sh["local_rows"] > 0 and sh["remote_rows"] + sh["remote_hits"] > 0
        assert all(sh["remote_hits"] == 0 and sh["wire_bytes"] > 0 for sh in rank["sharded"]["shard"])
        assert all(sh["remote_hits"] > 0 for sh in rank["sharded_cache"]["shard"])
    assert ranks[0]["sharded"]["loss"] == ranks[1]["sharded"]["loss"]  # summed over ranks: one number
    prepared = graphgen.cache_dir(load_config(CONFIG, sets).data.synthetic, data_root)
    assert (prepared / "shards-2" / "shards.json").is_file()  # a small generated data set: cut by the run


def test_sharded_features_are_refused_in_a_single_process(data_root, tmp_path):
    cfg = tiny.config(TINY, data_root, tmp_path, "loader.features=sharded")
    with pytest.raises(ConfigError, match=r"loader.features='sharded' is not accepted in a single process "
                                          r"\(world size 1\).*torchrun --nproc-per-node W"):
        run(cfg)


@pytest.mark.parametrize("extra, message", [
    (["loader.framework=dgl"], r"with loader.framework='dgl' \(CompressedDGLDataLoader"),
    (["data.store=false"], r"with data.store=false"),
    (["data.name=synthetic-mag"], r"with data.name='synthetic-mag' \(heterogeneous"),
    (["task=link", "data.name=synthetic-citation"], r"with task='link'"),
])
def test_sharded_features_are_refused_where_a_front_end_cannot_take_them(extra, message):
    with pytest.raises(ConfigError, match=r"loader.features='sharded' is not accepted " + message):
        load_config(None, ["loader.features=sharded"] + extra)
    with pytest.raises(ConfigError, match=r"loader.features='remote' is not accepted; choose from \['local', 'sharded'\]"):
        load_config(None, ["loader.features=remote"])


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
