"""Issue 13, config and command rows: mistakes are refused before any data is made, naming key, value and accepted."""
import json
import os
import re
from pathlib import Path

import pytest

from ibp_graph.data import graphgen
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.train import loop
from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train.report import main as report_main

TINY = ["data.synthetic.num_nodes=800", "data.synthetic.avg_citations=4", "data.synthetic.labeled_fraction=0.6",
        "loader.num_workers=0", "model.hidden=16", "output.progress=false", "loader.device=cpu"]


@pytest.mark.parametrize("override, message", [
    ("loader.num_neighbors=[10, -3]", r"loader.num_neighbors\[1\]=-3 is not accepted; expected an integer >= 1, or -1"),
    ("loader.num_neighbors=[10, 0]", r"loader.num_neighbors\[1\]=0 is not accepted"),
    ("loader.num_neighbors=[]", r"loader.num_neighbors=\[\] is not accepted; expected one entry per hop"),
    ("loader.codecs=[]", r"loader.codecs=\[\] is not accepted; expected at least one of"),
    ("loader.device=tpu", r"loader.device='tpu' is not accepted; expected auto, cpu, cuda or cuda:N"),
    ("loader.device=cuda:x", r"loader.device='cuda:x' is not accepted"),
    ("name=../x", r"name='../x' is not accepted; expected a plain name"),
    ("name=a/b", r"name='a/b' is not accepted"),
    ("name=..", r"name='..' is not accepted"),
])
def test_bad_values_are_refused_before_any_data_is_made(tmp_path, capsys, override, message):
    root = tmp_path / "data"
    argv = [f"--set={s}" for s in TINY + [f"data.root={root}", f"output.dir={tmp_path / 'runs'}", override]]
    assert loop.main(argv) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not root.exists()  # nothing generated


def test_gat_heads_must_divide_hidden(tmp_path):
    with pytest.raises(ConfigError, match=r"model.hidden=30 is not accepted with model.heads=4 \(arch gat\); "
                                          r"expected a multiple of model.heads, e.g. 28"):
        load_config(None, ["model.arch=gat", "model.hidden=30", "model.heads=4"])
    load_config(None, ["model.arch=sage", "model.hidden=30", "model.heads=4"])  # heads matter for gat only


def test_an_output_dir_that_is_a_file_is_refused_before_training(tmp_path, capsys):
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"output.dir='.*runs' is not accepted: it is a file"):
        load_config(None, [f"output.dir={blocker}"])
    with pytest.raises(ConfigError, match=r"output.dir='.*runs/sub' is not accepted: '.*runs' is a file"):
        load_config(None, [f"output.dir={blocker / 'sub'}"])
    cfg = load_config(None, TINY + [f"data.root={tmp_path / 'data'}", f"output.dir={tmp_path / 'ok'}"])
    cfg.output.dir = str(blocker)  # a config made in code is checked by run() too
    with pytest.raises(ConfigError, match="it is a file"):
        loop.run(cfg)
    assert not (tmp_path / "data").exists()


def test_a_binary_config_and_a_folder_are_named(tmp_path):
    binary = tmp_path / "x.yaml"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match=r"x.yaml' is not a text file .*expected a YAML file"):
        load_config(binary)
    binary.write_bytes(b"name: a\x00b\n")
    with pytest.raises(ConfigError, match=r"x.yaml' is binary"):
        load_config(binary)
    with pytest.raises(ConfigError, match=r"is a folder; expected a YAML file, e.g. one of x.yaml"):
        load_config(tmp_path)


def test_prepare_no_store_output_is_reused_by_train_and_only_the_store_is_made(tmp_path):
    cfg = load_config(None, TINY + [f"data.root={tmp_path}", f"output.dir={tmp_path / 'runs'}"])
    d = graphgen.cache_dir(cfg.data.synthetic, tmp_path)
    graphgen.generate(cfg.data.synthetic, d, store=False, progress=False)  # ibp-graph prepare --no-store
    stamp = {p: os.stat(d / p).st_ino for p in ("x.npy", "y.npy", "graph/indices.npy")}
    ds = loop.open_dataset(cfg.data, progress=False)
    assert ds.has_store() and ds.meta["store_codec"] == ds.store().codec.name
    assert stamp == {p: os.stat(d / p).st_ino for p in stamp}  # the same files: nothing regenerated
    assert graphgen.ensure(cfg.data.synthetic, tmp_path, progress=False) == d
    assert stamp == {p: os.stat(d / p).st_ino for p in stamp}
    assert sorted(p.name for p in tmp_path.iterdir()) == [d.name]  # no work folders left


def _run_file(path, **changes):
    run = {"format": "ibp_graph.run", "version": 1, "name": "x", "dataset": "synthetic", "codec": "ibp",
           "world_size": 1, "epochs": [{}], "final": {"mean_epoch_seconds": 1.0, "sent_bytes_per_epoch": 5e6,
                                                     "raw_bytes_per_epoch": 1e7, "fraction": 0.5, "test_acc": 0.5,
                                                     "majority_test_acc": 0.1}}
    run.update(changes)
    for k, v in list(run.items()):
        if v is None:
            del run[k]
    path.write_text(json.dumps(run))


def test_report_skips_malformed_run_files_and_says_which(tmp_path, capsys):
    _run_file(tmp_path / "good.json")
    _run_file(tmp_path / "nofinal.json", final=None)
    _run_file(tmp_path / "nocodec.json", codec=None)
    _run_file(tmp_path / "badfinal.json", final={"mean_epoch_seconds": "slow"})
    assert report_main([str(tmp_path), "--no-plot"]) == 0
    out, err = capsys.readouterr()
    assert "skipping " + str(tmp_path / "nofinal.json") + ": a malformed training run (no 'final')" in err
    assert "nocodec.json: a malformed training run (no 'codec')" in err
    assert "badfinal.json: a malformed training run (final.mean_epoch_seconds='slow' is not a number)" in err
    assert "good.json" not in err and out.count("synthetic") == 1


def test_an_output_dir_that_takes_no_file_or_has_no_room_is_refused_before_training(tmp_path, capsys, monkeypatch):
    """Issue 19: a read-only or full output.dir failed with an OSError after training; the checker
    now probes it (a file written and removed, the free space) and names it."""
    argv = [f"--set={s}" for s in TINY + [f"data.root={tmp_path / 'data'}"]]
    assert loop.main(argv + ["--set=output.dir=/proc/ibp-graph-runs"]) == 2  # writable by mode bits for root
    assert re.search(r"output.dir='/proc/ibp-graph-runs' is not accepted: '/proc' does not take a file",
                     capsys.readouterr().err)
    from ibp_graph.train import config

    runs = tmp_path / "runs"
    runs.mkdir()
    usage, real = config.shutil.disk_usage(tmp_path), config.shutil.disk_usage
    monkeypatch.setattr(config.shutil, "disk_usage",  # the results' disk is full
                        lambda p: usage._replace(free=4096) if Path(p) == runs else real(p))
    assert loop.main(argv + [f"--set=output.dir={runs}", "--set=loader.codecs=[ibp, ebp]"]) == 2
    assert re.search(r"output.dir='.*runs' is not accepted: '.*runs' has 4,096 bytes free; the results need "
                     r"2,097,152 \(2 run\(s\)\)", capsys.readouterr().err)
    assert not (tmp_path / "data").exists() and not list(runs.iterdir())
    assert not list(tmp_path.glob(".ibp-graph-probe-*"))  # the probe file is gone


def test_results_that_cannot_be_written_after_training_are_a_config_error(tmp_path, capsys, monkeypatch):
    """The disk filling up during the run: the checker's message and exit status, not a traceback."""
    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loop, "write_text", full)
    argv = [f"--set={s}" for s in TINY + [f"data.root={tmp_path / 'data'}", f"output.dir={tmp_path / 'runs'}",
                                          "train.epochs=1", "train.max_batches=1", "loader.codecs=[identity]"]]
    assert loop.main(argv) == 2
    assert re.search(r"output.dir='.*runs' is not accepted: the results of codec identity could not be written "
                     r"there \(No space left on device\)", capsys.readouterr().err)
