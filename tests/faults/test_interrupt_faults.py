"""Issue 13, files rows: interrupted generation leaves no work folder; saves are atomic; nothing is lost."""
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from ibp_graph import files
from ibp_graph.data import graphgen
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.prepared import PreparedDataset
from tests.faults.isolated import ROOT

GENERATE = """
import sys
from ibp_graph.data import graphgen
from ibp_graph.data.graphgen import GraphSpec
graphgen.generate(GraphSpec(num_nodes=int(sys.argv[2]), avg_citations=6.0), sys.argv[1], progress=False)
"""


def work_folders(out):
    return sorted(out.parent.glob(f"{out.name}.tmp-*"))


def start_and_signal(out, sig, num_nodes=300_000, command=None):
    """Start a generation, send `sig` once its work folder exists; return (exit code, work folders seen)."""
    command = command or [sys.executable, "-c", GENERATE, str(out), str(num_nodes)]
    # SIGINT as a user's Ctrl-C finds it, even when this run inherited it ignored (a background job of a
    # non-interactive shell: `cmd &`), which a child Python would keep ignoring
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not work_folders(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    seen = work_folders(out)
    assert seen and proc.poll() is None, "the generation ended before it could be interrupted"
    time.sleep(0.5)
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    return proc.returncode, seen


def test_sigint_removes_the_work_folder_on_exit(tmp_path):
    out = tmp_path / "ds"
    rc, seen = start_and_signal(out, signal.SIGINT)
    assert rc != 0 and seen[0].name.startswith(f"ds.tmp-{socket.gethostname()}-")
    assert work_folders(out) == [] and not out.exists()


def test_sigterm_to_prepare_removes_the_work_folder_on_exit(tmp_path):
    spec = GraphSpec(num_nodes=300_000, avg_citations=6.0)
    out = graphgen.cache_dir(spec, tmp_path)
    command = [sys.executable, "-m", "ibp_graph.cli", "prepare", "--dataset", "synthetic", "--root", str(tmp_path),
               "--quiet", "--set", "data.synthetic.num_nodes=300000", "--set", "data.synthetic.avg_citations=6.0"]
    rc, seen = start_and_signal(out, signal.SIGTERM, command=command)
    assert rc == 128 + signal.SIGTERM and seen
    assert work_folders(out) == [] and not out.exists()


def test_a_killed_generations_folder_is_removed_by_the_next_start(tmp_path):
    out = tmp_path / "ds"
    rc, seen = start_and_signal(out, signal.SIGKILL)
    assert rc == -signal.SIGKILL and work_folders(out) == seen  # nothing can run on SIGKILL
    other = tmp_path / f"ds.tmp-another-host-{os.getpid()}"  # another machine's (shared disk): not ours to judge
    other.mkdir()
    graphgen.generate(GraphSpec(num_nodes=500, avg_citations=3.0), out, progress=False)
    assert work_folders(out) == [other] and PreparedDataset.is_complete(out)


def test_a_live_processs_work_folder_is_left_alone(tmp_path):
    out = tmp_path / "ds"
    live = tmp_path / f"ds.tmp-{socket.gethostname()}-{os.getppid()}"
    live.mkdir()
    assert files.remove_stale(out) == [] and live.is_dir()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a.npy"
    files.save_npy(path, np.arange(5))
    with pytest.raises(ValueError):
        files.save_npy(path, np.array([object()], dtype=object))  # np.save refuses pickles midway
    assert np.array_equal(np.load(path), np.arange(5)) and sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


def test_replacing_a_folder_keeps_a_finished_one_when_asked(tmp_path):
    final, tmp = tmp_path / "f", tmp_path / "t"
    for name in ("old", "new"):  # the first one moved into place is ibp-graph's own (marked): it may be replaced
        tmp.mkdir()
        (tmp / name).write_text("1")
        files.replace_dir(tmp, final)
    assert sorted(p.name for p in final.iterdir()) == [files.MARKER, "new"] and not tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # the old one renamed aside, then removed
    tmp.mkdir()
    files.replace_dir(tmp, final, keep=lambda p: True)
    assert sorted(p.name for p in final.iterdir()) == [files.MARKER, "new"] and not tmp.exists()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("left", ["both copies", "the old copy only"])
def test_a_crash_between_replace_dirs_renames_keeps_a_complete_copy(tmp_path, left):
    final, tmp = tmp_path / "f", tmp_path / "t"
    for name in ("old", "new"):
        tmp.mkdir()
        (tmp / name).write_text(name)
        if name == "new":  # replace_dir killed between its renames, as a power loss leaves it
            break
        files.replace_dir(tmp, final)
    pid = dead_pid()
    files.os.replace(final, tmp_path / f"f.old.tmp-{socket.gethostname()}-{pid}")
    (tmp / files.MARKER).write_text('{"written_by": "ibp-graph", "entries": ["new"]}')
    files.os.replace(tmp, tmp_path / f"f.tmp-{socket.gethostname()}-{pid}")
    if left != "both copies":
        (tmp_path / f"f.tmp-{socket.gethostname()}-{pid}" / files.MARKER).unlink()  # not finished: no marker
    with pytest.raises(KeyboardInterrupt):
        with files.work_dir(final):  # the next run, interrupted
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert sorted(p.name for p in final.iterdir()) == [files.MARKER, "new" if left == "both copies" else "old"]
