"""What the processes of a multi-rank benchmark share: a free port, launching them (one failing or
running out of time ends the others, with its output in the error), and the papers-like data every
rank builds alike (benchmarks.sharded, benchmarks.distdgl)."""
from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from typing import Optional, Sequence

#: the feature family: averaged word vectors, as ogbn-papers100M's 128-d float32 rows.
FAMILY = "embedding_f32"


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(num_nodes: int, avg_degree: float, base_rows: int, seed: int = 0):
    """(graph, base rows, labels): the papers-like graph of every rank (the same on each, by seed), and the
    feature block that tiles its table (row i is base[i % base_rows])."""
    import torch

    from ..data.synthetic import make_family
    from .graphs import power_law_csc

    graph = power_law_csc(num_nodes, avg_degree, seed=seed)
    base = make_family(FAMILY, base_rows, seed=seed)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(seed))
    return graph, base, y


def launch(commands: Sequence[tuple[list, dict]], timeout: float, what: str,
           names: Optional[Sequence[str]] = None) -> None:
    """Run every (argv, environment) of `commands` at once and wait for all; if one fails or `timeout`
    passes, end the others and raise RuntimeError naming it (`names`, default "rank i") with its output."""
    names = list(names) if names is not None else [f"rank {i}" for i in range(len(commands))]
    logs = [tempfile.TemporaryFile() for _ in commands]
    procs = [subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
             for (argv, env), log in zip(commands, logs)]
    deadline, failed = time.monotonic() + timeout, None
    try:
        while failed is None and any(p.poll() is None for p in procs):
            failed = next((i for i, p in enumerate(procs) if p.returncode not in (None, 0)), None)
            if failed is None and time.monotonic() > deadline:
                failed = next(i for i, p in enumerate(procs) if p.poll() is None)
            time.sleep(0.2)
        failed = next((i for i, p in enumerate(procs) if p.returncode not in (None, 0)), failed)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if failed is not None:
        logs[failed].seek(0)
        tail = logs[failed].read().decode(errors="replace")[-4000:]
        code = procs[failed].returncode
        state = f"was ended after timeout={timeout:g} s" if code in (None, -15) else f"exited with status {code}"
        raise RuntimeError(f"{what}: {names[failed]} of {len(commands)} processes {state}; its output:\n{tail}")
