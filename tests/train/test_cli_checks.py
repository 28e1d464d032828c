"""`ibp-graph train` refuses bad input before any work, with one line naming the key (exit 2), and reports errors
of the run (a full disk, a damaged file met in a DataLoader worker, an empty train split) as one line."""
import pytest

from ibp_graph.cli import main
from ibp_graph.data import citegen, graphgen, maggen
from ibp_graph.data.checksums import ChecksumError
from ibp_graph.files import DiskFullError
from ibp_graph.train import loop
from ibp_graph.train.config import MAX_NAME

HUGE = "1" + "0" * 400


def _train(capsys, tmp_path, *sets, baseline=False):
    argv = ["train", "--set", f"output.dir={tmp_path / 'runs'}", "--set", f"data.root={tmp_path / 'data'}",
            "--set", "loader.device=cpu"] + [x for s in sets for x in ("--set", s)] + (["--baseline"] if baseline else [])
    status = main(argv)
    err = capsys.readouterr().err
    return status, err


@pytest.mark.parametrize("key", ["train.lr", "link.neg_sampling_ratio", "data.synthetic.avg_citations",
                                 "data.mag.avg_citations", "data.citation.avg_citations", "data.synthetic.seed"])
def test_a_huge_integer_is_a_config_error_naming_the_key(capsys, tmp_path, key):
    status, err = _train(capsys, tmp_path, f"{key}={HUGE}")
    assert status == 2 and f"{key}={HUGE} is not accepted" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_a_huge_integer_in_a_spec_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match=r"GraphSpec.avg_citations=1000+ is not accepted"):
        graphgen.GraphSpec(avg_citations=int(HUGE))


@pytest.mark.parametrize("device", ["cuda:99999999999999999999", "cuda:128", "cpu\n", "cuda:01", "cuda:\u0663"])
def test_a_device_torch_would_not_take_is_refused(capsys, tmp_path, device):
    status, err = _train(capsys, tmp_path, f"loader.device={device!r}".replace("'", '"'))
    assert status == 2 and "loader.device=" in err and "cuda:N (N in [0, 127])" in err


def test_data_root_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    for root in (tmp_path / "f", tmp_path / "f" / "below"):
        status, err = _train(capsys, tmp_path, f"data.root={root}")
        assert status == 2 and f"data.root={str(root)!r} is not accepted" in err and "Traceback" not in err


def test_a_name_too_long_for_its_result_files_is_refused_up_front(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "run", lambda *a, **k: pytest.fail("the run started"))
    status, err = _train(capsys, tmp_path, "name=" + "a" * (MAX_NAME + 1))
    assert status == 2 and f"expected at most {MAX_NAME} characters" in err
    assert len(f"{'a' * MAX_NAME}-20260101-000000-identity-w99999-999.json") <= 255


@pytest.mark.parametrize("store", [True, False])
def test_the_disk_estimate_covers_what_the_generators_write(tmp_path, store):
    def size(d):
        return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())

    for gen, spec in ((graphgen, graphgen.GraphSpec(num_nodes=3000, dim=16, num_classes=5)),
                      (maggen, maggen.MagSpec(num_papers=1500, num_authors=2000, num_fields=100, dim=16)),
                      (citegen, citegen.CitationSpec(num_nodes=2000, dim=16))):
        d = gen.generate(spec, tmp_path / gen.__name__, store=store, progress=False)
        actual, estimate = size(d), gen.disk_bytes(spec, store)
        assert actual <= estimate < 2 * actual, gen.__name__


def test_the_config_checks_the_disk_with_the_generators_estimate(capsys, tmp_path, monkeypatch):
    import shutil

    spec = graphgen.GraphSpec(num_nodes=3000, dim=16, num_classes=5)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=graphgen.disk_bytes(spec) - 1))
    status, err = _train(capsys, tmp_path, "data.synthetic.num_nodes=3000", "data.synthetic.dim=16",
                         "data.synthetic.num_classes=5")
    assert status == 2 and "its files need at least" in err and "data.root=" in err


def test_a_full_disk_while_generating_is_one_line_naming_data_root(capsys, tmp_path, monkeypatch):
    def full(*a, **k):
        raise DiskFullError(tmp_path / "data" / "x.npy", 1000, 10, "the features")

    monkeypatch.setattr(loop, "run", full)
    status, err = _train(capsys, tmp_path)
    assert status == 1 and err.startswith("ibp-graph train: no space left") and err.rstrip().endswith("(data.root)")
    assert "--out" not in err and err.count("\n") == 1


def test_an_error_of_a_dataloader_worker_is_reported_as_its_own_message(capsys, tmp_path, monkeypatch):
    from torch._utils import ExceptionWrapper

    try:
        raise ChecksumError("store/x/payload.bin: chunk 7 differs from its checksum")
    except ChecksumError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")

    def fail(*a, **k):
        wrapped.reraise()  # as torch's DataLoader does in the main process

    monkeypatch.setattr(loop, "run", fail)
    status, err = _train(capsys, tmp_path)
    assert (status, err) == (1, "ibp-graph train: store/x/payload.bin: chunk 7 differs from its checksum\n")


def test_baseline_with_pyg_is_refused_before_any_data_is_made(capsys, tmp_path):
    status, err = _train(capsys, tmp_path, "data.synthetic.num_nodes=500", "data.synthetic.dim=8", baseline=True)
    assert status == 2 and "--baseline is not accepted with loader.framework='pyg'" in err
    assert not (tmp_path / "data").exists()


def test_no_labelled_nodes_is_refused_before_training(capsys, tmp_path):
    status, err = _train(capsys, tmp_path, "data.synthetic.labeled_fraction=0")
    assert status == 2 and "data.synthetic.labeled_fraction=0.0 is not accepted" in err
    status, err = _train(capsys, tmp_path, "data.synthetic.num_nodes=20", "data.synthetic.dim=4",
                         "data.synthetic.num_classes=2", "data.synthetic.labeled_fraction=0.001", "loader.num_workers=0",
                         "output.progress=false")
    assert status == 1 and "the train split of synthetic is empty" in err and "loss" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_keys_lists_ranges_and_help_of_the_generated_data_sets(capsys):
    assert main(["train", "--keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for key in ("data.synthetic.num_nodes", "data.mag.num_papers", "data.mag.authors_per_paper",
                "data.synthetic.avg_citations"):
        (line,) = [x for x in lines if x.startswith(key + " ")]
        assert (" in [" in line or ") >= " in line) and ": " in line.split(")", 1)[1]


@pytest.mark.parametrize("name", ["synthetic", "synthetic-mag", "synthetic-citation"])
def test_data_prepared_with_a_generated_data_set_is_refused_not_ignored(capsys, tmp_path, name):
    """A generated data set lives in data.root: data.prepared was ignored, and the run trained on (and wrote) a
    folder the user did not name."""
    task = ["task=link"] if name == "synthetic-citation" else []
    status, err = _train(capsys, tmp_path, f"data.name={name}", f"data.prepared={tmp_path / 'mine'}", *task)
    assert status == 2 and f"data.prepared={str(tmp_path / 'mine')!r} is not accepted with data.name={name!r}" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "mine").exists()


@pytest.mark.parametrize("flag", ["--dataset", "--prepared"])
def test_the_papers100m_script_refuses_a_flag_synthetic_would_ignore(capsys, tmp_path, flag):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "train_papers100m_pyg.py"
    spec = importlib.util.spec_from_file_location("train_papers100m_pyg", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    value = "ogbn-arxiv" if flag == "--dataset" else str(tmp_path / "mine")
    with pytest.raises(SystemExit) as e:
        script.main(["--synthetic", "3000", flag, value, "--root", str(tmp_path / "data"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"{flag} {value} is not accepted with --synthetic 3000" in err
    assert not (tmp_path / "data").exists()
