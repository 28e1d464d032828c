"""DistDGL on the sharded benchmark's graph: DistNodeDataLoader with servers and trainers on one loopback.

`run` (called by benchmarks.sharded with ``--distdgl``) uses a Python where dgl imports (``--dgl-python``;
DGLBACKEND=pytorch) for three steps, each in processes of its own:

1. partition: the same graph, features and labels as the sharded benchmark's ranks (benchmarks.sharded
   .build: power-law CSC, tiled 128-d float32 rows) as a DGLGraph, split by
   ``dgl.distributed.partition_graph(g, "bench", N, part_method=...)`` (node ids reshuffled, as DistDGL
   wants them);
2. N servers (``DGL_ROLE=server``, one per partition, ``dgl.distributed.initialize``), ip_config lines
   ``127.0.0.1 PORT`` (one "machine" per partition, all on 127.0.0.1);
3. N trainers: ``initialize``, torch.distributed (gloo), ``DistGraph``, their seeds by ``node_split``
   (``force_even``), ``dgl.dataloading.DistNodeDataLoader`` with a ``NeighborSampler`` of the same
   fan-outs (DGL lists them from the input layer) and batch size; each batch's input-node features
   pulled with ``g.ndata["x"][input_nodes]`` as DistDGL's training examples do. Timed as ours: rounds of
   a warm-up batch then `batches` batches between barriers, batches over the slowest trainer's seconds.

DistDGL sends rows raw (float32) over its own socket RPC. Two things stand in for separate hosts:

- DGL 2.1's servers put their partition's tensors in shared memory named by graph and feature only
  (kvstore ``name + "-kvdata-"``), so two servers on one host overwrite each other's (a trainer then
  fails in ``fast_pull``: ``Check failed: l_id < local_data_shape[0]``). Each server past the first runs
  in a mount namespace of its own with an empty /dev/shm (``unshare -m``), as on a host of its own.
- With every server on 127.0.0.1, DGL's ``get_local_machine_id`` matches every trainer to machine 0 (the
  first ip_config line with a local address): each trainer reads partition 0 through shared memory and
  the other partitions' rows over the RPC; "local rows" is the share of partition 0 in a batch. With the
  default random partitioning that share is ~1/N for any trainer, as on N hosts.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

#: the graph's name in the partition folder.
GRAPH = "bench"
#: a command prefix that runs a server in a mount namespace of its own with an empty /dev/shm (DGL names its
#: shared-memory tensors by graph and feature only: two servers of one host would write the same names).
OWN_SHM = ["unshare", "-m", "bash", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "bash"]


def partition(cfg: dict, folder: str) -> dict:
    """Build the benchmark graph and partition it into cfg["ranks"] parts under `folder` (DGL env)."""
    import dgl
    import numpy as np
    import torch

    from .graphs import tile_rows
    from .ranks import build

    t = time.perf_counter()
    graph, base, y = build(cfg["num_nodes"], cfg["avg_degree"], cfg["base_rows"])
    n = graph.num_nodes
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.indptr))
    g = dgl.graph((torch.from_numpy(graph.indices.astype(np.int64)), torch.from_numpy(dst)), num_nodes=n)
    g.ndata["x"] = tile_rows(base, n)
    g.ndata["y"] = y
    built = time.perf_counter() - t
    dgl.distributed.partition_graph(g, GRAPH, cfg["ranks"], folder, part_method=cfg["part_method"],
                                    balance_edges=False)
    return {"build_s": built, "partition_s": time.perf_counter() - t - built, "num_edges": int(g.num_edges())}


def server_main(ip_config: str) -> None:
    """One DistDGL server (its id and the rest in DGL_* environment variables); returns when trainers exit."""
    import dgl

    dgl.distributed.initialize(ip_config)


def trainer_main(config_path: str, rank: int) -> None:
    """One DistDGL trainer: time its DistNodeDataLoader; write trainer<R>.json next to the config."""
    import datetime

    import dgl
    import torch
    import torch.distributed as dist

    cfg = json.loads(Path(config_path).read_text())
    torch.set_num_threads(cfg["threads"])
    dgl.distributed.initialize(cfg["ip_config"])
    dist.init_process_group("gloo", rank=rank, world_size=cfg["ranks"],
                            timeout=datetime.timedelta(seconds=cfg["timeout"]))
    g = dgl.distributed.DistGraph(GRAPH, part_config=cfg["part_config"])
    book = g.get_partition_book()
    seeds = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), book, force_even=True)
    sampler = dgl.dataloading.NeighborSampler(list(reversed(cfg["num_neighbors"])))
    torch.manual_seed(rank)
    loader = dgl.dataloading.DistNodeDataLoader(g, seeds, sampler, batch_size=cfg["batch_size"], shuffle=True,
                                                drop_last=False)
    local = book.partid
    rounds = []
    for r in range(cfg["rounds"]):
        it = iter(loader)
        input_nodes, _, _ = next(it)
        g.ndata["x"][input_nodes]  # warm-up
        dist.barrier()
        rows = local_rows = 0
        t = time.perf_counter()
        for _ in range(cfg["batches"]):
            input_nodes, _, _ = next(it)
            x = g.ndata["x"][input_nodes]
            rows += int(input_nodes.numel())
            local_rows += int((book.nid2partid(input_nodes) == local).sum())
        wall = time.perf_counter() - t
        rounds.append({"round": r, "seconds": wall, "batches": cfg["batches"], "rows": rows,
                       "local_rows": local_rows, "row_nbytes": x[0].numel() * x.element_size()})
        del it
    Path(config_path).with_name(f"trainer{rank}.json").write_text(json.dumps({"rank": rank, "rounds": rounds}))
    dist.barrier()
    dist.destroy_process_group()
    dgl.distributed.exit_client()


def dgl_python(given: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(a Python where dgl and dgl.distributed import, None) or (None, why not)."""
    python = given or sys.executable
    done = subprocess.run([python, "-c", "import dgl, dgl.distributed; print(dgl.__version__)"],
                          capture_output=True, text=True, env={**os.environ, "DGLBACKEND": "pytorch"})
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, (f"dgl does not import in {python} ({last}); pass --dgl-python with an environment that "
                      "has dgl (e.g. .venv-dgl/bin/python: torch 2.2.1, dgl 2.1.0)")
    return python, None


def run(cfg: dict, env: dict, *, python: Optional[str] = None, timeout: float = 900, quiet: bool = False) -> dict:
    """Partition, start servers and trainers, time them: batches/s (median and best of rounds), raw MB of
    remote rows per batch, local-row fraction; or {"reason": why it could not run}."""
    from .ranks import free_port, launch

    python, why = dgl_python(python)
    if python is None:
        return {"reason": why}
    ranks = cfg["ranks"]
    env = {**env, "DGLBACKEND": "pytorch"}
    with tempfile.TemporaryDirectory(prefix="ibp-bench-distdgl-") as tmp:
        config = Path(tmp) / "config.json"
        ip_config = Path(tmp) / "ip_config.txt"
        ip_config.write_text("".join(f"127.0.0.1 {free_port()}\n" for _ in range(ranks)))
        part_config = str(Path(tmp) / "parts" / f"{GRAPH}.json")
        dcfg = {**cfg, "ip_config": str(ip_config), "part_config": part_config}
        config.write_text(json.dumps(dcfg))
        t = time.perf_counter()
        done = subprocess.run([python, "-c", "import json, sys; from ibp_graph.benchmarks.distdgl import partition; "
                               "print(json.dumps(partition(json.load(open(sys.argv[1])), sys.argv[2])))",
                               str(config), str(Path(tmp) / "parts")], env=env, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode:
            return {"reason": f"dgl.distributed.partition_graph failed: {done.stderr.strip()[-2000:]}"}
        parted = json.loads(done.stdout.strip().splitlines()[-1])
        if not quiet:
            print(f"  DistDGL: partitioned ({cfg['part_method']}) in {time.perf_counter() - t:.1f} s", flush=True)
        common = {**env, "DGL_DIST_MODE": "distributed", "DGL_IP_CONFIG": str(ip_config), "DGL_NUM_SERVER": "1",
                  "DGL_NUM_CLIENT": str(ranks), "DGL_CONF_PATH": part_config, "DGL_NUM_SAMPLER": "0",
                  "DGL_GRAPH_FORMAT": "csc"}
        if shutil.which("unshare") is None:
            return {"reason": "DistDGL's servers need a /dev/shm each (one host) and util-linux unshare is not "
                              "on PATH to give them one", **parted}
        server = [python, "-c", "import sys; from ibp_graph.benchmarks.distdgl import server_main; "
                  "server_main(sys.argv[1])", str(ip_config)]
        servers = [(server if i == 0 else [*OWN_SHM, *server], {**common, "DGL_ROLE": "server", "DGL_SERVER_ID": str(i)})
                   for i in range(ranks)]
        trainers = [([python, "-c", "import sys; from ibp_graph.benchmarks.distdgl import trainer_main; "
                      "trainer_main(sys.argv[1], int(sys.argv[2]))", str(config), str(r)],
                     {**common, "DGL_ROLE": "client"}) for r in range(ranks)]
        try:
            launch(servers + trainers, timeout, "DistDGL", names=[f"server {i}" for i in range(ranks)]
                   + [f"trainer {r}" for r in range(ranks)])
        except RuntimeError as e:
            return {"reason": str(e), **parted}
        per = [json.loads((Path(tmp) / f"trainer{r}.json").read_text()) for r in range(ranks)]
    n_rounds = len(per[0]["rounds"])
    rates = [cfg["batches"] / max(p["rounds"][i]["seconds"] for p in per) for i in range(n_rounds)]
    first = per[0]["rounds"]
    rows = sum(r["rows"] for r in first)
    local = sum(r["local_rows"] for r in first)
    batches = sum(r["batches"] for r in first)
    return {"batches_per_s": statistics.median(rates), "best_batches_per_s": max(rates), "rates": rates,
            "rounds": n_rounds, "local_fraction": local / rows if rows else 0.0,
            "raw_mb_per_batch": (rows - local) * first[0]["row_nbytes"] / batches / 1e6,
            "rows_per_batch": rows / batches, "part_method": cfg["part_method"], "python": python,
            "trainers": per, **parted}


__all__ = ["partition", "server_main", "trainer_main", "dgl_python", "run"]
