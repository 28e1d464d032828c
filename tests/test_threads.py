"""One parallel kernel at a time per process: numba's workqueue layer aborts on concurrent launches.

The sharded loaders decode on two threads of the main process (the exchange thread, the main thread);
with the workqueue layer (numba's fork-safe layer where TBB is missing) two parallel kernels launched
at once abort the process ("Concurrent access has been detected"), which left the other ranks waiting.
"""
import subprocess
import sys
import textwrap
import threading

import numpy as np

from ibp_graph import threads
from ibp_graph.layout import bitstream

CONCURRENT = textwrap.dedent("""
    import threading, numpy as np, torch, numba
    from ibp_graph.codec import EBPCodec, IBPCodec
    from ibp_graph.sampling.graph import CSCGraph
    from ibp_graph.sampling.neighbor import NeighborSampler

    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((30000, 32)).astype(np.float16).astype(np.float32))
    graph = CSCGraph.from_edge_index(rng.integers(0, 30000, (2, 300000)), 30000)
    seeds = np.arange(0, 30000, 3)
    work = []
    for codec in (IBPCodec.fit(x[:4000]), EBPCodec.fit(x[:4000])):
        ct = codec.encode(x)
        idx = torch.from_numpy(rng.permutation(30000)[:20000])
        work.append(lambda codec=codec, ct=ct, idx=idx: codec.decode(ct.index_select(idx)))
    sampler = NeighborSampler(graph, [10, 5], parallel=True)
    work.append(lambda: sampler.sample(seeds, seed=3).node)
    expected = [w() for w in work]
    failed = []

    def run(offset):
        for i in range(60):
            k = (i + offset) % len(work)
            if not torch.equal(work[k](), expected[k]):
                failed.append(k)

    ts = [threading.Thread(target=run, args=(o,)) for o in (0, 1)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(numba.threading_layer(), numba.get_num_threads(), "failed", failed)
""")


def test_two_threads_running_parallel_kernels_neither_abort_nor_change_the_results():
    """Without the lock this process aborts with numba's 'Concurrent access has been detected' (workqueue)."""
    env = {"NUMBA_THREADING_LAYER": "workqueue", "NUMBA_NUM_THREADS": "2"}
    import os

    r = subprocess.run([sys.executable, "-c", CONCURRENT], env={**os.environ, **env}, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["workqueue", "2", "failed", "[]"], r.stdout


def test_a_thread_that_finds_a_parallel_kernel_running_takes_the_serial_build():
    ran = []
    kernels = (lambda v: ran.append(("parallel", v)), lambda v: ran.append(("serial", v)))
    n = bitstream.PARALLEL_MIN_ROWS
    held, release = threading.Event(), threading.Event()

    def hold():
        with threads.parallel_slot() as free:
            assert free
            held.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    held.wait(10)
    try:
        bitstream.pick_kernel(kernels, n)(1)  # another thread's kernel runs: serial, no waiting
        with threads.parallel_slot() as free:
            assert not free
    finally:
        release.set()
        other.join()
    bitstream.pick_kernel(kernels, n)(2)
    bitstream.pick_kernel(kernels, 1)(3)  # too few rows: serial whatever runs
    parallel = threads.use_parallel(n, bitstream.PARALLEL_MIN_ROWS)
    assert ran == [("serial", 1), ("parallel" if parallel else "serial", 2), ("serial", 3)]
    with threads.parallel_slot(False) as free:  # not wanted: the slot stays free for others
        assert not free and threads._PARALLEL.acquire(blocking=False)
        threads._PARALLEL.release()


def test_the_sampler_gives_the_same_edges_when_another_thread_holds_the_parallel_slot():
    from ibp_graph.sampling.graph import CSCGraph
    from ibp_graph.sampling.neighbor import NeighborSampler

    rng = np.random.default_rng(1)
    sampler = NeighborSampler(CSCGraph.from_edge_index(rng.integers(0, 5000, (2, 60000)), 5000), [8, 4],
                              parallel=True)
    seeds = np.arange(0, 5000, 2)
    free_run = sampler.sample(seeds, seed=9)
    with threads.parallel_slot() as free:  # this thread holds it: the sampler runs its serial kernel
        assert free
        held_run = sampler.sample(seeds, seed=9)
    for f in ("node", "row", "col", "edge"):
        assert np.array_equal(getattr(free_run, f), getattr(held_run, f)), f
