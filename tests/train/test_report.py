"""`ibp-graph report`: the comparison table (each codec vs identity) and the PNG plot."""
import json

import pytest

from ibp_graph.cli import main as cli
from ibp_graph.train.loop import RUN_FORMAT
from ibp_graph.train.report import load_runs, table


def _run(codec, seconds, sent, raw=1000e6, name="bench", world=1, acc=0.8):
    epochs = [{"epoch": e, "loss": 1.0, "train_acc": acc, "valid_acc": acc, "test_acc": acc, "seconds": seconds,
               "train_seconds": seconds * 0.9, "eval_seconds": seconds * 0.1, "sent_bytes": sent, "raw_bytes": raw,
               "fraction": sent / raw} for e in (1, 2)]
    final = {"test_acc": acc, "valid_acc": acc, "best_epoch": 2, "test_acc_at_best_valid": acc,
             "majority_test_acc": 0.04, "mean_epoch_seconds": seconds, "mean_train_seconds": seconds * 0.9,
             "sent_bytes_per_epoch": sent, "raw_bytes_per_epoch": raw, "fraction": sent / raw}
    return {"format": RUN_FORMAT, "version": 1, "name": name, "dataset": "synthetic", "codec": codec,
            "features": "store" if codec == "ibp" else "table", "arch": "sage", "world_size": world,
            "device": "cuda:0", "epochs": epochs, "final": final}


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "runs"
    (d / "bench").mkdir(parents=True)
    (d / "bench" / "1-ibp.json").write_text(json.dumps(_run("ibp", 8.0, 600e6)))
    (d / "bench" / "2-identity.json").write_text(json.dumps(_run("identity", 10.0, 1000e6)))
    (d / "bench" / "3-auto.json").write_text(json.dumps(_run("auto", 4.0, 500e6)))
    (d / "default").mkdir()
    (d / "default" / "1-ibp.json").write_text(json.dumps(_run("ibp", 5.0, 700e6, name="default")))
    (d / "bench" / "notes.json").write_text(json.dumps({"something": "else"}))
    return d


def test_table_compares_each_codec_with_identity(runs_dir, capsys):
    runs = load_runs([str(runs_dir)])
    assert len(runs) == 4 and "not a training run" in capsys.readouterr().err
    text = table(runs)
    assert "codecs vs identity" in text
    compared = text.split("codecs vs identity")[1].splitlines()
    ibp = [l for l in compared if l.startswith("bench") and " ibp " in l]
    assert ibp and "1.250" in ibp[0] and "0.600" in ibp[0]  # speedup 10/8, bytes ratio 600/1000
    auto = [l for l in compared if l.startswith("bench") and " auto " in l]
    assert auto and "2.500" in auto[0] and "0.500" in auto[0]  # speedup 10/4, bytes 500/1000
    assert not [l for l in compared if " identity " in l and l.startswith("bench")]
    assert "default" in text  # a run without a partner is listed, not compared


def test_the_latest_run_of_each_codec_is_compared_whatever_its_folder_or_same_second_number(tmp_path, capsys):
    """The comparison takes each codec's latest run by the time and number in its file name (train/loop.py's
    names), not by path: a newer run in a folder sorting first, and X-...-ibp-1.json written after X-...-ibp.json
    in the same second (it sorts before it by path), are the latest."""
    new, old = tmp_path / "a-new", tmp_path / "b-old"
    new.mkdir()
    old.mkdir()
    (old / "bench-20261201-120000-identity.json").write_text(json.dumps(_run("identity", 10.0, 1000e6)))
    (old / "bench-20261201-120000-ibp.json").write_text(json.dumps(_run("ibp", 8.0, 600e6)))
    (new / "bench-20261205-090000-identity.json").write_text(json.dumps(_run("identity", 20.0, 1000e6)))
    (new / "bench-20261205-090000-ibp.json").write_text(json.dumps(_run("ibp", 40.0, 900e6)))
    (new / "bench-20261205-090000-ibp-1.json").write_text(json.dumps(_run("ibp", 16.0, 700e6)))  # same second
    compared = table(load_runs([str(tmp_path)])).split("codecs vs identity")[1].splitlines()
    ibp = [line for line in compared if line.startswith("bench") and " ibp " in line]
    assert len(ibp) == 1 and "1.250" in ibp[0] and "0.700" in ibp[0], ibp  # 20/16 and 700/1000


def test_report_command_writes_a_png(runs_dir, tmp_path, capsys):
    png = tmp_path / "out" / "report.png"
    assert cli(["report", str(runs_dir / "bench" / "1-ibp.json"), str(runs_dir / "bench" / "2-identity.json"),
                "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and f"wrote {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_command_errors(tmp_path, capsys):
    assert cli(["report", str(tmp_path / "nothing-here")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli(["report", str(tmp_path / "empty"), "--no-plot"]) == 1
    assert "no training runs" in capsys.readouterr().err


def _native(run: dict) -> dict:
    """`run` as the `--baseline` run (the framework's own loader) writes it: no bytes counted, no fraction."""
    for rec in run["epochs"] + [run["final"]]:
        rec["fraction"] = None
    run["epochs"] = [dict(e, sent_bytes=0, raw_bytes=0) for e in run["epochs"]]
    run["final"].update(sent_bytes_per_epoch=0.0, raw_bytes_per_epoch=0.0)
    return run


def test_a_run_that_counted_no_bytes_is_reported_without_a_fraction(tmp_path, capsys):
    # the --baseline run (DGL's own loader) once claimed "1.000 of the raw bytes" and a bytes ratio of 0
    (tmp_path / "bench-20261201-120000-identity.json").write_text(json.dumps(_run("identity", 10.0, 1000e6)))
    (tmp_path / "bench-20261201-120000-native.json").write_text(json.dumps(_native(_run("native", 9.0, 0.0))))
    runs = load_runs([str(tmp_path)])
    assert [r["codec"] for r in runs] == ["identity", "native"] and "malformed" not in capsys.readouterr().err
    compared = table(runs).split("codecs vs identity")[1]
    (native,) = [l for l in compared.splitlines() if " native " in l]
    assert "1.111" in native and native.split()[-1] == "-"  # speedup 10/9; bytes ratio: none
    listed = [l for l in table(runs).split("codecs vs identity")[0].splitlines() if " native " in l]
    assert listed and " 1.000 " not in listed[0]


def test_the_plot_gives_each_codec_its_own_colour(tmp_path, monkeypatch):
    # auto was drawn in matplotlib's first colour, the blue of ibp's bars
    import matplotlib.axes

    from ibp_graph.train.report import plot

    drawn = {}
    bar = matplotlib.axes.Axes.bar
    monkeypatch.setattr(matplotlib.axes.Axes, "bar", lambda self, *a, label=None, color=None, **k: (
        drawn.__setitem__(label, color), bar(self, *a, label=label, color=color, **k))[1])
    runs = [dict(_run(c, 5.0, 500e6), path=str(tmp_path / f"{c}.json")) for c in ("identity", "ibp", "auto", "ebp",
                                                                                   "zstd")]
    runs.append(dict(_native(_run("native", 5.0, 0.0)), path=str(tmp_path / "native.json")))
    assert plot(runs, tmp_path / "r.png").is_file()
    assert set(drawn) == {"identity", "ibp", "auto", "ebp", "zstd", "native"}
    assert None not in drawn.values() and len(set(drawn.values())) == len(drawn)
