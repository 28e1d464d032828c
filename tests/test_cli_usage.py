"""`ibp-graph prepare`, `bench` and `report` refuse bad arguments before any work: a usage error (exit 2), one
line naming the option, the value and what is accepted; no traceback."""
import pytest

from ibp_graph.cli import main
from ibp_graph.data import ogb_link, ogb_mag
from ibp_graph.train.config import DATASETS

TINY = ["--set", "data.synthetic.num_nodes=300", "--set", "data.synthetic.dim=4", "--set",
        "data.synthetic.num_classes=2", "--set", "data.mag.num_papers=300", "--set", "data.mag.dim=4", "--quiet"]


def _usage_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize("below", ["", "below"])
def test_prepare_root_a_file_is_a_usage_error(capsys, tmp_path, below):
    f = tmp_path / "f"
    f.write_text("x")
    line = _usage_error(capsys, ["prepare", "--dataset", "synthetic", "--root", str(f / below if below else f), *TINY])
    assert "--root=" in line and "is a file; expected a folder" in line


def test_prepare_checks_the_partition_before_generating(capsys, tmp_path):
    out = tmp_path / "out"
    line = _usage_error(capsys, ["prepare", "--dataset", "synthetic", "--out", str(out), "--shards", "2",
                                 "--partition", "dgl", "--dgl-config", str(tmp_path / "none.json"), *TINY])
    assert "--dgl-config" in line and "no such file" in line
    line = _usage_error(capsys, ["prepare", "--dataset", "synthetic-mag", "--out", str(out), "--shards", "2",
                                 "--partition", "metis", *TINY])
    assert "--partition metis is not accepted with --dataset synthetic-mag" in line
    assert not out.exists() and not list(tmp_path.glob("out.tmp-*"))


def test_prepare_lists_every_data_set(capsys, tmp_path):
    line = _usage_error(capsys, ["prepare", "--dataset", "bogus", "--root", str(tmp_path)])
    assert "'bogus'" in line and all(repr(d) in line for d in DATASETS)


def test_missing_ogb_files_name_the_right_download(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        ogb_mag.prepare_mag240m(tmp_path, progress=False)
    assert "MAG240MDataset" in str(e.value) and "rename" not in str(e.value) and "NodePropPred" not in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        ogb_link.prepare(tmp_path, progress=False)
    assert "LinkPropPredDataset(name='ogbl-citation2'" in str(e.value) and "NodePropPred" not in str(e.value)


def test_bench_help_shows_the_benchmarks_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "codec", "--help"])
    assert e.value.code == 0 and "--mbytes" in capsys.readouterr().out


@pytest.mark.parametrize("argv, option", [
    (["codec", "--threads", "0"], "--threads"), (["codec", "--mbytes", "nan"], "--mbytes"),
    (["codec", "--mbytes", "-1"], "--mbytes"), (["codec", "--repeat", "0"], "--repeat"),
    (["loader", "--batches", "0"], "--batches"), (["loader", "--num-nodes", "0"], "--num-nodes"),
    (["loader", "--device", "gpu"], "--device"), (["loader", "--num-neighbors", "0"], "--num-neighbors"),
    (["loader", "--rounds", "0"], "--rounds"), (["decode", "--rows", "0"], "--rows"),
    (["gather", "--table-gb", "inf"], "--table-gb"), (["sharded", "--batches", "0"], "--batches"),
    (["codec", "--out", "/etc/passwd/x.json"], "--out"),
])
def test_bench_bad_values_are_usage_errors_naming_the_option(capsys, argv, option):
    line = _usage_error(capsys, ["bench", *argv])
    assert f"argument {option}: {argv[-1]!r} is not accepted; expected" in line


@pytest.mark.parametrize("bench", ["loader", "features"])
def test_bench_on_cuda_without_a_cuda_device_is_a_usage_error(capsys, monkeypatch, bench):
    # once torch's "Torch not compiled with CUDA enabled" traceback, after the graph was built
    import torch

    from ibp_graph.benchmarks import features

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        main(["bench", "loader", "--device", "cuda"]) if bench == "loader" else features.main(["--device", "cuda"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert "argument --device: 'cuda': torch sees no CUDA device here; accepted: cpu" in err.splitlines()[-1]


def test_report_plot_in_an_unwritable_place_is_a_usage_error(capsys, tmp_path):
    line = _usage_error(capsys, ["report", str(tmp_path), "--plot", "/etc/passwd/x.png"])
    assert "argument --plot: '/etc/passwd/x.png' is not accepted" in line


def test_prepare_checks_that_the_generated_data_set_asked_for_fits(capsys, tmp_path):
    # each generated data set is checked by its own sizes (synthetic-mag's once by data.synthetic's: it
    # started generating 1.5 billion papers on a 24 GB machine)
    out = tmp_path / "out"
    assert main(["prepare", "--dataset", "synthetic-mag", "--out", str(out), "--set",
                 "data.mag.num_papers=1500000000", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "data.mag (num_papers=1500000000" in err and "generating it needs at least" in err
    assert "Traceback" not in err and not out.exists()


def test_ctrl_c_during_prepare_is_one_line_and_exit_130(capsys, tmp_path, monkeypatch):
    """Ctrl-C in a long prepare: a line saying what the output folder holds, exit status 130, no traceback."""
    from ibp_graph.data import ogb

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ogb, "prepare", interrupted)
    assert main(["prepare", "--dataset", "ogbn-papers100M", "--root", str(tmp_path), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("ibp-graph prepare: interrupted; the output folder holds what it held before")
    assert err.count("\n") == 1
