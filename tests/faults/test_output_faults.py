"""Issue 19: `prepare` never deletes or overwrites a user's files, and a full disk fails cleanly.

It writes only into an absent or empty folder or its own earlier output, never into or
over its input; a full disk is an error naming the path and the bytes needed, exit 1,
with no work folder left behind (it was SIGBUS, and the user's folder deleted).
"""
import errno
import hashlib
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ibp_graph import files
from ibp_graph.cli import main as cli
from ibp_graph.data import graphgen, ogb_mag
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.prepared import PreparedDataset, add_store
from tests.data.test_ogb_mag import write_mag, write_mag240m
from tests.data.test_ogb_prepare import write_binary, write_csv
from tests.faults.isolated import ROOT


def synthetic(out, nodes=300, *extra):
    return ["prepare", "--dataset", "synthetic", "--set", f"data.synthetic.num_nodes={nodes}", "--out", str(out),
            "--quiet", *extra]


def snapshot(root: Path) -> dict:
    """Every file under `root` with a digest of its bytes."""
    return {str(p.relative_to(root)): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def user_folder(d: Path) -> dict:
    (d / "results").mkdir(parents=True)
    (d / "notes.txt").write_text("a week of work\n")
    (d / "results" / "run1.json").write_text("{}\n")
    return snapshot(d)


@pytest.mark.parametrize("dataset", ["synthetic", "synthetic-mag"])
def test_a_folder_of_the_users_files_is_refused_and_left_as_it_was(tmp_path, capsys, dataset):
    d = tmp_path / "mine"
    before = user_folder(d)
    argv = ["prepare", "--dataset", dataset, "--out", str(d), "--quiet", "--no-store", "--set",
            "data.synthetic.num_nodes=300" if dataset == "synthetic" else "data.mag.num_papers=200"]
    assert cli(argv) == 1
    err = capsys.readouterr().err
    assert f"ibp-graph prepare: output folder {d} holds files ibp-graph did not write (notes.txt, results/)" in err
    assert "pass a new or empty folder" in err and "Traceback" not in err
    assert snapshot(d) == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_file_or_a_link_as_the_output_is_refused(tmp_path, capsys):
    f = tmp_path / "data.bin"
    f.write_bytes(b"keep")
    assert cli(synthetic(f)) == 1
    assert f"output folder {f} is a file, not a folder" in capsys.readouterr().err and f.read_bytes() == b"keep"
    target = tmp_path / "elsewhere"
    user_folder(target)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert cli(synthetic(link)) == 1
    assert f"output folder {link} is a symbolic link (to {target})" in capsys.readouterr().err
    assert link.is_symlink() and (target / "notes.txt").is_file()


def test_an_empty_folder_is_prepared_and_marked_then_a_file_added_there_is_kept(tmp_path, capsys):
    d = tmp_path / "empty"
    d.mkdir()
    assert cli(synthetic(d)) == 0 and PreparedDataset.is_complete(d)
    marker = json.loads((d / files.MARKER).read_text())
    assert marker["written_by"] == "ibp-graph" and "x.npy" in marker["entries"] and "store" in marker["entries"]
    (d / "notes.txt").write_text("mine\n")  # the user keeps something in it: no longer only ibp-graph's
    assert cli(synthetic(d, 400)) == 1
    assert "holds files ibp-graph did not write" in capsys.readouterr().err
    assert (d / "notes.txt").read_text() == "mine\n" and PreparedDataset.load(d).num_nodes == 300


def test_its_own_earlier_output_is_replaced_also_one_written_before_markers(tmp_path, capsys):
    d = tmp_path / "ds"
    assert cli(synthetic(d, 300, "--no-store")) == 0
    add_store(d, progress=False)  # as make train's cache does: the store is recorded in the marker
    assert "store" in json.loads((d / files.MARKER).read_text())["entries"]
    assert cli(synthetic(d, 400)) == 0 and PreparedDataset.load(d).num_nodes == 400
    (d / files.MARKER).unlink()  # as an earlier ibp-graph left it: known by meta.json's format
    assert cli(synthetic(d, 500)) == 0 and PreparedDataset.load(d).num_nodes == 500
    (d / files.MARKER).unlink()
    (d / "notes.txt").write_text("mine\n")  # ... but not with the user's files in it
    assert cli(synthetic(d, 600)) == 1 and "holds files ibp-graph did not write" in capsys.readouterr().err
    assert (d / "notes.txt").is_file() and PreparedDataset.load(d).num_nodes == 500
    (d / "notes.txt").unlink()
    (d / files.MARKER).write_text('{"written_by": "someone", "entries": []}')  # a marker not ibp-graph's
    assert cli(synthetic(d, 600)) == 1 and PreparedDataset.load(d).num_nodes == 500


def test_replace_dir_never_removes_a_folder_that_is_not_ibp_graphs(tmp_path):
    final, tmp = tmp_path / "final", tmp_path / "work"
    before = user_folder(final)
    tmp.mkdir()
    (tmp / "x.npy").write_bytes(b"new")
    with pytest.raises(files.OutputFolderError, match=rf"output folder {final} holds files ibp-graph did not write"):
        files.replace_dir(tmp, final)
    assert snapshot(final) == before and sorted(p.name for p in tmp_path.iterdir()) == ["final", "work"]



@pytest.mark.parametrize("when", ["between the renames", "while the earlier output is removed"])
def test_ctrl_c_during_replace_dir_takes_effect_once_the_new_folder_is_in_place_and_the_old_gone(tmp_path, monkeypatch,
                                                                                              when):
    # the earlier output is renamed aside, then the new one moved in: a KeyboardInterrupt between the two left no
    # folder at `final` (the process alive, nothing put it back); one between them or during the removal of the
    # earlier output left a copy of it (133 GB for papers100M) beside the new one. It is held until both are done.
    import os
    import signal

    final, tmp = tmp_path / "final", tmp_path / "work"
    for folder, content in ((final, b"old"), (tmp, b"new")):
        folder.mkdir()
        (folder / "x.npy").write_bytes(content)
    (final / files.MARKER).write_text(json.dumps({"written_by": "ibp-graph", "entries": ["x.npy"],
                                                  "files": ["x.npy"]}))
    renames = []
    real_replace, real_rmtree = os.replace, files.shutil.rmtree

    def replace(src, dst):
        real_replace(src, dst)
        if src == final or dst == final:
            renames.append(dst)
        if src == final and when == "between the renames":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right after the earlier output went aside

    def rmtree(path, *args, **kwargs):
        if when != "between the renames" and ".old" in Path(path).name:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the removal starts
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(files.os, "replace", replace)
    monkeypatch.setattr(files.shutil, "rmtree", rmtree)
    with pytest.raises(KeyboardInterrupt):
        files.replace_dir(tmp, final)
    assert len(renames) == 2 and (final / "x.npy").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]  # neither the old copy nor the work folder
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is the user's again


@pytest.mark.parametrize("marker", ["with its file list", "without one (an earlier ibp-graph)",
                                    "none (before markers)"])
def test_a_users_file_in_a_subfolder_of_a_prepared_folder_is_refused_and_kept(tmp_path, capsys, marker):
    d = tmp_path / "ds"
    assert cli(synthetic(d)) == 0
    if marker.startswith("without"):
        m = json.loads((d / files.MARKER).read_text())
        (d / files.MARKER).write_text(json.dumps({"written_by": "ibp-graph", "entries": m["entries"]}))
    elif marker.startswith("none"):
        (d / files.MARKER).unlink()
    assert files.is_own_output(d)
    (d / "store" / "notes.txt").write_text("a week of work\n")
    (d / "graph" / "mine.txt").write_text("mine\n")
    before = snapshot(d)
    assert cli(synthetic(d, 400)) == 1
    err = capsys.readouterr().err
    assert f"output folder {d} holds files ibp-graph did not write (graph/mine.txt, store/notes.txt)" in err
    assert snapshot(d) == before and PreparedDataset.load(d).num_nodes == 300
    for name in ("store/notes.txt", "graph/mine.txt"):
        (d / name).unlink()
    (d / "store" / "x" / "results").mkdir()  # a folder of the user's, deeper down
    (d / "store" / "x" / "results" / "run1.json").write_text("{}\n")
    assert not files.is_own_output(d)
    shutil.rmtree(d / "store" / "x" / "results")
    assert cli(synthetic(d, 400)) == 0 and PreparedDataset.load(d).num_nodes == 400


def test_a_store_added_later_is_the_folders_own_and_a_file_in_it_is_not(tmp_path, capsys):
    d = tmp_path / "ds"
    assert cli(synthetic(d, 300, "--no-store")) == 0
    add_store(d, progress=False)
    assert "store/x/payload.bin" in json.loads((d / files.MARKER).read_text())["files"] and files.is_own_output(d)
    (d / "store" / "x" / "notes.txt").write_text("mine\n")
    assert cli(synthetic(d, 400)) == 1 and "(store/x/notes.txt)" in capsys.readouterr().err
    assert (d / "store" / "x" / "notes.txt").read_text() == "mine\n"


def test_only_the_exact_names_of_its_own_temporaries_count_as_ibp_graphs(tmp_path, capsys):
    d = tmp_path / "ds"
    assert cli(synthetic(d)) == 0
    leftover = d / f"meta.json.tmp-{socket.gethostname()}-123"  # an atomic write cut short
    leftover.write_text("{}")
    assert files.is_own_output(d)
    for name in ("meta.json.tmp-backup", "x.npy.tmp-mine", f"meta.json.tmp-{socket.gethostname()}-12a"):
        (d / name).write_text("keep\n")
        assert cli(synthetic(d, 400)) == 1 and f"did not write ({name})" in capsys.readouterr().err
        assert (d / name).read_text() == "keep\n"
        (d / name).unlink()
    assert cli(synthetic(d, 400)) == 0 and PreparedDataset.load(d).num_nodes == 400


def test_prepare_shards_reuses_a_folder_only_when_it_holds_what_was_asked_for(tmp_path, capsys):
    d = tmp_path / "ds"
    assert cli(synthetic(d)) == 0
    loud = lambda *args: [a for a in synthetic(d, *args) if a != "--quiet"]  # noqa: E731
    assert cli(loud(300, "--shards", "2")) == 0  # the same: only its shards are written
    assert f"{d} is prepared already: writing its shards only" in capsys.readouterr().out
    assert cli(loud(400, "--shards", "2", "--set", "data.synthetic.dim=8")) == 0
    assert f"{d} holds another generated data set (num_nodes 300, asked for 400; dim 128, asked for 8): " \
           "preparing it again" in capsys.readouterr().out
    ds = PreparedDataset.load(d)
    assert ds.num_nodes == 400 and ds.x.shape[1] == 8 and (d / "shards-2" / "shards.json").is_file()
    other = "ibp" if ds.store_codec == "identity" else "identity"
    assert cli(synthetic(d, 400, "--shards", "2", "--set", "data.synthetic.dim=8", "--codec", other)) == 0
    assert PreparedDataset.load(d).store_codec == other
    (d / "notes.txt").write_text("mine\n")  # preparing again would lose it: refused, as without --shards
    assert cli(synthetic(d, 500, "--shards", "2")) == 1
    assert "holds files ibp-graph did not write (notes.txt)" in capsys.readouterr().err
    assert PreparedDataset.load(d).num_nodes == 400 and (d / "notes.txt").is_file()


def test_prepare_shards_prepares_an_ogb_folder_again_for_other_edge_directions(tmp_path):
    write_csv(tmp_path)
    d = tmp_path / "arxiv"
    args = ["prepare", "--dataset", "ogbn-arxiv", "--root", str(tmp_path), "--out", str(d), "--quiet"]
    assert cli(args) == 0 and PreparedDataset.load(d).meta["undirected"] is True
    assert cli(args + ["--shards", "2", "--directed"]) == 0 and PreparedDataset.load(d).meta["undirected"] is False

def _ogb_outs(root: Path, dataset_dir: str, input_dir: str) -> dict:
    d = root / dataset_dir
    return {"root": root, "dataset folder": d, "input folder": d / input_dir, "inside the input": d / input_dir / "new"}


OGB = {  # (writer, prepare arguments, the data set folder, one input folder)
    "ogbn-arxiv": (write_csv, ["--dataset", "ogbn-arxiv"], "ogbn_arxiv", "raw"),
    "ogbn-papers100M": (write_binary, ["--dataset", "ogbn-papers100M"], "ogbn_papers100M", "split"),
    "ogbn-mag": (write_mag, ["--dataset", "ogbn-mag"], "ogbn_mag", "raw"),
    "mag240m": (write_mag240m, ["--dataset", "mag240m"], "mag240m_kddcup2021", "processed"),
}


@pytest.mark.parametrize("where", ["root", "dataset folder", "input folder", "inside the input"])
@pytest.mark.parametrize("name", list(OGB))
def test_the_ogb_input_as_output_is_refused_with_the_raw_files_intact(tmp_path, capsys, name, where):
    write, args, dataset_dir, input_dir = OGB[name]
    write(tmp_path)
    before = snapshot(tmp_path)
    out = _ogb_outs(tmp_path, dataset_dir, input_dir)[where]
    assert cli(["prepare", *args, "--root", str(tmp_path), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    rel = {"root": "contains", "dataset folder": "contains", "input folder": "is", "inside the input": "lies inside"}
    assert f"ibp-graph prepare: output folder {out} {rel[where]} the input " in err, err
    assert "choose an output folder outside it" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before  # nothing deleted, nothing added (no work folder)


def test_the_default_ogb_output_beside_the_input_is_still_accepted_and_replaced(tmp_path):
    write_mag(tmp_path)
    out = ogb_mag.prepare(tmp_path, store=False, progress=False)
    assert out == tmp_path / "ogbn_mag" / "ibp_prepared"
    assert ogb_mag.prepare(tmp_path, store=False, progress=False) == out and (out / files.MARKER).is_file()


# ---------------------------------------------------------------------------------------------
# A full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs mounted at tmp_path/disk, unmounted after (needs the right to mount)."""
    d = tmp_path / "disk"
    d.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: a real full disk cannot be made here")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here ({r.stderr.strip()}); the monkeypatched "
                    "ENOSPC tests below still run")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


@pytest.mark.parametrize("nodes", [3000, 3500, 20000])  # fills it: writing the store, allocating x, checked ahead
def test_prepare_onto_a_full_disk_exits_1_naming_the_path_and_bytes_and_leaves_nothing(small_disk, nodes):
    out = small_disk / "ds"
    # a child process: the code before this change died of SIGBUS there
    r = subprocess.run([sys.executable, "-m", "ibp_graph.cli", *synthetic(out, nodes)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert r.stderr.startswith("ibp-graph prepare: no space left for ") and str(out) in r.stderr, r.stderr
    assert " bytes (" in r.stderr and "are free on its file system" in r.stderr and "Traceback" not in r.stderr
    assert list(small_disk.iterdir()) == []  # no work folder, no partial output


def test_the_size_known_ahead_is_checked_before_any_work(tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    spec = GraphSpec(num_nodes=5000)
    with pytest.raises(files.DiskFullError) as e:
        graphgen.generate(spec, tmp_path / "ds", progress=False)
    need = graphgen.disk_bytes(spec, store=True)  # what generate writes, at most (tests/train/test_cli_checks.py)
    assert e.value.errno == errno.ENOSPC and e.value.needed == need > 2 * 5000 * 128 * 4 and e.value.free == 1000
    assert str(e.value).startswith(f"no space left for the generated data set of 5,000 nodes (graph, x, y, split, "
                                   f"store) in {tmp_path / 'ds'}: it needs {need:,} bytes (")
    assert list(tmp_path.iterdir()) == []


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_allocation_failing_with_enospc_is_a_disk_full_error_and_the_work_folder_goes(tmp_path, monkeypatch):
    monkeypatch.setattr("os.posix_fallocate", _no_space)
    out = tmp_path / "ds"
    with pytest.raises(files.DiskFullError) as e:
        graphgen.generate(GraphSpec(num_nodes=2000), out, store=False, progress=False)
    assert isinstance(e.value, OSError) and e.value.path == out / "y.npy"  # the first memory-mapped file
    assert e.value.needed >= 2000 and f"no space left for {e.value.path}: it needs {e.value.needed:,} bytes" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_without_fallocate_support_the_free_space_is_checked_instead(tmp_path, monkeypatch):
    def unsupported(*args):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr("os.posix_fallocate", unsupported)
    x = files.open_npy(tmp_path / "a.npy", np.float32, (1000, 4))  # enough space: a plain sparse file
    x[:] = 1
    del x
    assert np.load(tmp_path / "a.npy").sum() == 4000
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=100))
    with pytest.raises(files.DiskFullError, match=r"b.npy: it needs [\d,]+ bytes .* and 100 bytes"):
        files.open_npy(tmp_path / "b.npy", np.float32, (1000, 4))


def test_a_save_that_fills_the_disk_names_the_file_and_bytes_and_leaves_no_temporary(tmp_path, monkeypatch):
    monkeypatch.setattr(np, "save", _no_space)
    with pytest.raises(files.DiskFullError, match=rf"no space left for {tmp_path / 'a.npy'}: it needs 4,\d{{3}} bytes"):
        files.save_npy(tmp_path / "a.npy", np.zeros(100, np.int64))
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_add_store_leaves_a_folder_that_is_still_its_own(tmp_path, monkeypatch):
    from ibp_graph.data import prepared

    d = tmp_path / "ds"
    assert cli(synthetic(d, 300, "--no-store")) == 0

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepared, "encode_store", interrupted)
    with pytest.raises(KeyboardInterrupt):
        add_store(d, progress=False)
    monkeypatch.undo()
    assert not (d / "store" / "x").exists() and files.is_own_output(d)
    assert cli(synthetic(d, 400)) == 0 and PreparedDataset.load(d).num_nodes == 400


def test_add_store_never_claims_files_the_user_keeps_in_store(tmp_path):
    # add_store records store/ and every path under it as ibp-graph's: a user's file there would be
    # deleted by the next prepare into the folder. It is refused before any work, and nothing changes.
    d = tmp_path / "ds"
    assert cli(synthetic(d, 300, "--no-store")) == 0
    marker = (d / files.MARKER).read_text()
    (d / "store").mkdir()
    (d / "store" / "notes.txt").write_text("mine\n")
    with pytest.raises(files.OutputFolderError, match=r"store holds files ibp-graph did not write "
                                                      r"\(store/notes.txt\); the feature store would go there"):
        add_store(d, progress=False)
    assert sorted(p.name for p in (d / "store").iterdir()) == ["notes.txt"]
    assert (d / files.MARKER).read_text() == marker
    (d / "store" / "notes.txt").unlink()  # an empty store/ of the user's holds nothing to claim
    add_store(d, progress=False)
    assert PreparedDataset.load(d).num_nodes == 300 and files.is_own_output(d)
    (d / "store" / "x" / "mine.txt").write_text("mine\n")  # recorded as ibp-graph's, but this file is not
    shutil.rmtree(d / "store" / "x" / "chunks", ignore_errors=True)
    (d / "store" / "x" / "meta.json").unlink()  # a store to add again
    with pytest.raises(files.OutputFolderError, match=r"store/x/mine.txt"):
        add_store(d, progress=False)
    assert (d / "store" / "x" / "mine.txt").read_text() == "mine\n"
    (d / "store").rename(tmp_path / "aside")
    (d / "store").write_text("a file named store\n")
    with pytest.raises(files.OutputFolderError, match=r"store is a file, not a folder ibp-graph wrote; the feature store"):
        add_store(d, progress=False)
