"""loaders._common: what both front-ends share (worker-death naming, host-memory checks, warm-up)."""
import multiprocessing as mp
import os
import signal
import time

import pytest
import torch

from ibp_graph.loaders import _common


def _sleep():
    time.sleep(60)


def _deaths(exc_factory, *, kill=True):
    """Run name_worker_deaths over an iterator that kills a real worker process and raises."""
    proc = mp.get_context("fork").Process(target=_sleep, daemon=True)
    proc.start()

    def batches():
        yield 1
        if kill:
            os.kill(proc.pid, signal.SIGKILL)  # its exit code is not visible yet when the error comes
        raise exc_factory()

    try:
        return list(_common.name_worker_deaths(batches(), "SomeLoader", "encoding", lambda: [proc]))
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)


@pytest.mark.parametrize("exc", [lambda: ConnectionResetError(104, "Connection reset by peer"),
                                 lambda: ConnectionRefusedError(111, "Connection refused"), EOFError,
                                 lambda: RuntimeError("DataLoader worker (pid(s) 1) exited unexpectedly"),
                                 lambda: RuntimeError("DataLoader worker (pid 1) is killed by signal: Killed.")],
                         ids=["reset", "refused", "eof", "exited", "sigchld"])
def test_a_worker_killed_by_a_signal_is_always_the_loaders_message(exc):
    with pytest.raises(RuntimeError, match=r"SomeLoader: a worker process died while encoding a batch "
                                           r"\(pid \d+ killed by signal SIGKILL") as info:
        _deaths(exc)
    assert info.value.__cause__ is not None  # the original error stays attached


def test_a_broken_connection_with_every_worker_alive_is_not_a_death(monkeypatch):
    monkeypatch.setattr(_common, "DEATH_WAIT_S", 0.2)
    with pytest.raises(ConnectionResetError, match="reset by peer"):
        _deaths(lambda: ConnectionResetError(104, "Connection reset by peer"), kill=False)
    with pytest.raises(ValueError, match="unrelated"):
        _deaths(lambda: ValueError("unrelated"))


def test_exit_status_is_named_too():
    assert _common._how(-9) == "killed by signal SIGKILL" and _common._how(3) == "exited with status 3"


def test_host_table_checks():
    t = torch.zeros(4, 2)
    assert _common.host_table(t, "features['x']", 4) is t
    with pytest.raises(ValueError, match=r"features\['x'\] has 4 rows; the graph has 5 nodes"):
        _common.host_table(t, "features['x']", 5)
    with pytest.raises(TypeError, match=r"graph.ndata\['x'\] must be a tensor, got list"):
        _common.host_table([1], "graph.ndata['x']")
    meta = torch.zeros(4, 2, device="meta")
    with pytest.raises(ValueError, match="is on meta; the loader reads features from host memory"):
        _common.host_table(meta, "data.x")


def test_warm_up_touches_no_random_generator():
    from ibp_graph.pipeline.codec_setup import build_codecs

    x = torch.randn(300, 8).half().float()
    codecs = build_codecs({"x": x}, {}, num_nodes=300, num_edges=0, codec="ebp")
    torch.manual_seed(3)
    before = torch.get_rng_state()
    _common.warm_up(codecs, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), before)


def test_nothing_is_set_on_import_and_a_starting_loader_picks_a_forksafe_layer():
    import subprocess
    import sys

    code = (
        "import os, numba\n"
        "import ibp_graph.threads, ibp_graph.pipeline.decode, ibp_graph.pipeline.producer, ibp_graph.loaders.pyg\n"
        "assert numba.config.THREADING_LAYER == 'default', numba.config.THREADING_LAYER\n"
        "assert 'DGLBACKEND' not in os.environ\n"
        "import torch\n"
        "from torch_geometric.data import Data\n"
        "from ibp_graph.loaders.pyg import CompressedNeighborLoader\n"
        "data = Data(x=torch.randn(50, 4), edge_index=torch.randint(0, 50, (2, 200)), num_nodes=50)\n"
        "CompressedNeighborLoader(data, [2], batch_size=10)\n"
        "assert numba.config.THREADING_LAYER == 'forksafe', numba.config.THREADING_LAYER\n"
        "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_THREADING_LAYER", "DGLBACKEND")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    # a layer the user chose is kept
    r = subprocess.run([sys.executable, "-c", "import numba; from ibp_graph.threads import use_forksafe_layer; "
                        "numba.config.THREADING_LAYER = 'workqueue'; assert not use_forksafe_layer(); "
                        "assert numba.config.THREADING_LAYER == 'workqueue'"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_first_parallel_kernel_already_runs_on_a_forksafe_layer():
    """Fitting a codec before any loader (as `prepare` does) must not fix numba on GNU OpenMP,
    whose forked children (the loader's workers) die with SIGTERM."""
    import subprocess
    import sys

    code = ("import numba, torch\n"
            "from ibp_graph.codec import fit_codec\n"
            "fit_codec(torch.randn(200000, 16).half().float())\n"
            "print(numba.config.THREADING_LAYER, numba.threading_layer())\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    chosen, layer = r.stdout.split()
    assert chosen == "forksafe" and layer in ("tbb", "workqueue"), r.stdout


def _run_python(code: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]


_LOADER = ("import os, signal, time, torch\n"
           "from torch_geometric.data import Data\n"
           "from ibp_graph.loaders.pyg import CompressedNeighborLoader\n"
           "data = Data(x=torch.randn(200, 4), edge_index=torch.randint(0, 200, (2, 800)), num_nodes=200)\n"
           "def epoch():\n"
           "    return list(CompressedNeighborLoader(data, [2], batch_size=50, num_workers=2))\n")


def test_a_users_sigchld_handler_keeps_working_and_ours_goes_when_the_iteration_ends():
    """Issue #20: the handler that names worker deaths is there only while a loader iterates; a handler
    the user set before or after a loader ran is called, and stays theirs."""
    _run_python(_LOADER + (
        "calls = []\n"
        "def ping():\n"
        "    n = len(calls); os.kill(os.getpid(), signal.SIGCHLD); time.sleep(0.05); return len(calls) > n\n"
        "signal.signal(signal.SIGCHLD, lambda s, f: calls.append('before'))\n"
        "it = iter(CompressedNeighborLoader(data, [2], batch_size=50, num_workers=2))\n"
        "next(it)\n"
        "assert getattr(signal.getsignal(signal.SIGCHLD), 'wraps_torch', False)  # ours, while iterating\n"
        "assert ping()  # and it calls the one it wraps\n"
        "list(it)\n"
        "assert not getattr(signal.getsignal(signal.SIGCHLD), 'wraps_torch', False), 'ours stayed'\n"
        "assert ping() and calls[-1] == 'before'\n"
        "def after(s, f):\n"
        "    calls.append('after')\n"
        "signal.signal(signal.SIGCHLD, after)  # set after a loader ran\n"
        "epoch()\n"
        "assert signal.getsignal(signal.SIGCHLD) is after and 'after' in calls  # called during the epoch\n"
        "assert ping() and calls[-1] == 'after'\n"
        "print('ok')\n"))


def test_the_kernel_cache_is_refreshed_once_per_process():
    _run_python(_LOADER + (
        "import ibp_graph.loaders._common as c\n"
        "calls = []\n"
        "c.refresh_kernel_cache = lambda: calls.append(1)\n"
        "epoch(); epoch()\n"
        "assert calls == [1], calls\n"
        "print('ok')\n"))
