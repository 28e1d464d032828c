"""Train and evaluate a GNN on a prepared data set, one run per codec; multi-GPU/multi-node via DDP.

One loop for both front-ends (``loader.framework``: ``pyg``, the default, or ``dgl``;
train/frontends.py holds what differs: the loader, the model, one forward step).

Under ``torchrun`` (``WORLD_SIZE > 1``) every process joins the default process group
(NCCL on GPUs, gloo on CPUs), the loaders give each rank an equal share of every
epoch's seeds, gradients are averaged by DistributedDataParallel, and losses,
accuracies and byte counts are summed over ranks before rank 0 prints and writes them.
Prepared data are memory-mapped, so the ranks of one machine share one copy of the pages.
With ``loader.features: sharded`` each rank opens only its shard of every feature table
(`open_shards`) and fetches other rows compressed from their owners (pipeline.sharded; train/sharding.py).
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

from .. import jit_cache
from ..files import DiskFullError, write_text
from ..threads import CollectiveTensors
from ..data.prepared import PreparedDataset, add_store
from . import epoch_record, frontends, sharding, startup
from .config import GENERATED_DATASETS, HETERO_DATASETS, Config, ConfigError, LoaderConfig, check_config, to_dict

__all__ = ["Dist", "setup_distributed", "resolve_device", "open_dataset", "open_shards", "make_loader", "train_epoch",
           "evaluate", "run", "run_one", "main", "main_config", "RUN_FORMAT"]

RUN_FORMAT = "ibp_graph.run"


@dataclass(frozen=True)
class Dist:
    """This process's place in a (possibly single-process) run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    #: the tensors of this process's last sums and maxima (threads.CollectiveTensors)
    held: CollectiveTensors = field(default_factory=CollectiveTensors, compare=False, repr=False)

    @property
    def main(self) -> bool:
        """Whether this process prints and writes results."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (no-op in a single process)."""
        if self.world_size > 1:
            torch.distributed.barrier()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks."""
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        if torch.distributed.get_backend() == "nccl":
            t = t.cuda()
        torch.distributed.all_reduce(t)
        self.held.hold(t)  # freed here, not by gloo's thread (threads.CollectiveTensors)
        return t.cpu().tolist()

    def max(self, value: float) -> float:
        """Maximum over ranks."""
        if self.world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        if torch.distributed.get_backend() == "nccl":
            t = t.cuda()
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        self.held.hold(t)
        return float(t.item())


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """'auto' -> cuda:<local rank> when torch sees a GPU, else cpu; other names as given."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"loader.device={name!r} but torch sees no CUDA device; use cpu or auto")
        if dev.index is None:
            dev = torch.device(f"cuda:{local_rank}")
    elif dev.type != "cpu":
        raise ValueError(f"loader.device={name!r} is not accepted; use auto, cpu, cuda or cuda:N")
    return dev


def setup_distributed(device_name: str = "auto") -> tuple[Dist, torch.device]:
    """Join torchrun's process group when WORLD_SIZE > 1; return this rank and its device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local)
    if world > 1 and not torch.distributed.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        _import_before_init()
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    return Dist(rank, world, local), device


def _import_before_init() -> None:
    """Import torch.distributed.nn while no default process group exists, so that
    destroy_process_group can free the group.

    Its functions take ``group=group.WORLD`` as a default argument, evaluated on import, and
    DistributedDataParallel's constructor imports it (through torch._dynamo). Imported after
    init_process_group, those defaults keep the default group alive after destroy_process_group:
    gloo's worker threads then live into interpreter shutdown, and one that drops the last
    collective's tensors there waits for the GIL, is ended by Python, and aborts the process
    ("terminate called without an active exception"). Imported before, the defaults are None.
    """
    import torch.distributed.nn  # noqa: F401


#: largest generated data set a distributed run makes itself (bigger ones: `ibp-graph prepare` first).
DDP_GENERATE_MAX_NODES = 5_000_000


def open_dataset(cfg, dist: Dist = Dist(), *, progress: bool = True, features: bool = True):
    """The prepared data set a DataConfig names (PreparedDataset, or HeteroPreparedDataset for
    HETERO_DATASETS), generated or prepared first if missing.

    In a distributed run each machine's first rank does it while the others wait, and
    only for generated data sets of up to DDP_GENERATE_MAX_NODES nodes: preparing
    papers100M takes longer than a process group waits, so that is refused with the
    command to run beforehand. ``features=False`` (`loader.features: sharded`): opened without
    its feature tables (load(features=False)), and ready without them and without the store
    where the run's shards are there (a host of a sharded run needs neither).
    """
    path = _prepared_path(cfg)
    startup.check_prepared_name(cfg, path)  # before anything is prepared into it
    if dist.world_size > 1 and not _ready(cfg, path, features, dist.world_size):
        if not _makes_itself(cfg):
            shards = "" if features else f" --shards {dist.world_size}"
            raise FileNotFoundError(f"{path} is not prepared; a distributed run does not prepare large data sets "
                                    f"(it would outlast the process group's timeout): run "
                                    f"`{_prepare_command(cfg, path, shards)}` first, once per machine unless the "
                                    "folder is on a shared disk")
    if dist.local_rank == 0 and not _ready(cfg, path, features, dist.world_size):
        _prepare(cfg, path, progress=progress and dist.main)
    dist.barrier()
    if cfg.name in HETERO_DATASETS:
        from ..data.hetero import HeteroPreparedDataset

        return HeteroPreparedDataset.load(path, features=features)
    return PreparedDataset.load(path, features=features)


def _makes_itself(cfg) -> bool:
    """Whether a distributed run prepares the data set (and its shards) itself: small generated ones only."""
    return cfg.name in GENERATED_DATASETS and _generated_nodes(cfg) <= DDP_GENERATE_MAX_NODES


def _prepare_command(cfg, path: Path, extra: str = "") -> str:
    """The `ibp-graph prepare` command that makes the prepared folder `path` of DataConfig `cfg` (+ `extra`)."""
    if cfg.name not in GENERATED_DATASETS:
        return f"ibp-graph prepare --dataset {cfg.name} --root {cfg.root}" + (f" --out {path}" if cfg.prepared else "") \
            + extra
    if cfg.name == "synthetic":
        return (f"ibp-graph prepare --dataset synthetic --root {cfg.root} --set data.synthetic.num_nodes="
                f"{cfg.synthetic.num_nodes}{extra} (and the other data.synthetic keys of the config)")
    return f"ibp-graph prepare --dataset {cfg.name} --root {cfg.root} --config <this config>{extra}"


def open_shards(cfg, ds, dist: Dist, *, progress: bool = True) -> sharding.RankShards:
    """This rank's shard of every feature table of the prepared data set `ds` and its layout, ``tables: {table:
    (EncodedTable, ShardLayout)}`` (``x``, or one table per featured node type of a heterogeneous data set),
    and each table's model input (``inputs``: width and statistics from the manifest), for `loader.features:
    sharded`: from data.shards, default the prepared folder's shards-<world size>.

    Missing shards are written by each machine's first rank (the others wait) only where the run prepares
    the data set itself (small generated ones); otherwise the error names the `ibp-graph prepare --shards`
    command to run first. Only this rank's shard is opened; neither x.npy nor the store is read, except the
    feature table where a manifest written before the statistics were recorded has none (`_shard_inputs`).
    """
    from ..data.shards import SHARDS_MANIFEST, load_shard, write_shards

    path = sharding.shards_dir(cfg, ds.directory, dist.world_size)
    if not (path / SHARDS_MANIFEST).is_file():
        if cfg.shards or not _makes_itself(cfg):
            raise FileNotFoundError(f"{path} holds no shards ({SHARDS_MANIFEST}); a distributed run does not cut "
                                    f"the feature table of a large data set itself: run {_shards_command(cfg, ds, dist)}"
                                    " first, once per machine unless the folder is on a shared disk")
        if dist.local_rank == 0:
            write_shards(ds.directory, dist.world_size, path, progress=progress and dist.main, keep_complete=True)
    dist.barrier()
    tables = {t: load_shard(path, dist.rank, t, world_size=dist.world_size, verify=ds.verify)
              for t in sorted(ds.feature_shapes)}
    return sharding.RankShards(tables, _shard_inputs(cfg, ds, dist, path, tables))


def _shards_command(cfg, ds, dist: Dist) -> str:
    """The `ibp-graph prepare ... --shards W` command that cuts the shards of a run (and where to point
    data.shards when the run names another folder)."""
    from ..data.shards import default_shards_dir

    how = _prepare_command(cfg, ds.directory, f" --shards {dist.world_size}")
    return f"`{how}`" + (f" (it writes {default_shards_dir(ds.directory, dist.world_size)}; point data.shards there)"
                         if cfg.shards else "")


def _shard_inputs(cfg, ds, dist: Dist, path: Path, tables: dict) -> dict:
    """Each feature table's model input (FeatureInput) as the manifest of shards folder `path` records it, checked
    against the data set (the table's rows and width in its meta.json, the raw table it was cut from as its
    checksums.json records it: data.shards.check_source); for a manifest written before the
    statistics were recorded, those of the data set's own table, where its file (x.npy) is on this host."""
    from ..data.input_stats import FeatureInput
    from ..data.shards import SHARDS_MANIFEST, ShardManifestError, check_source, table_input

    inputs, whole = {}, None
    for t, (rows, width) in ds.feature_shapes.items():
        layout = tables[t][1]
        got = table_input(path, t)
        if got is None:
            if not ds.feature_file(t).is_file():
                raise FileNotFoundError(f"{path / SHARDS_MANIFEST} records no input statistics of table {t!r} (its "
                                        f"shards were cut by an older ibp-graph) and {ds.feature_file(t)} is not on "
                                        f"this host to take them from: cut the shards again with "
                                        f"{_shards_command(cfg, ds, dist)}")
            whole = whole or type(ds).load(ds.directory, verify=ds.verify)  # the feature tables, once
            got = FeatureInput.of(whole.feature(t))
        if (layout.num_rows, got.width) != (rows, width):
            raise ShardManifestError(f"{path / SHARDS_MANIFEST}: table {t!r} has {layout.num_rows} rows of width "
                                     f"{got.width}; {ds.directory} records ({rows}, {width}) for it: shards of another "
                                     f"data set; cut them with {_shards_command(cfg, ds, dist)}")
        check_source(path, t, ds.directory, ds.feature_file(t).relative_to(ds.directory).as_posix())
        inputs[t] = got
    return inputs


def _generated_nodes(cfg) -> int:
    if cfg.name == "synthetic":
        return cfg.synthetic.num_nodes
    return cfg.citation.num_nodes if cfg.name == "synthetic-citation" else sum(cfg.mag.num_nodes.values())


def _prepared_path(cfg) -> Path:
    if cfg.name == "synthetic":
        from ..data import graphgen

        return graphgen.cache_dir(cfg.synthetic, cfg.root)
    if cfg.name == "synthetic-mag":
        from ..data import maggen

        return maggen.cache_dir(cfg.mag, cfg.root)
    if cfg.prepared:
        return Path(cfg.prepared)
    if cfg.name == "ogbn-mag":
        from ..data import ogb_mag

        return ogb_mag.default_prepared_dir(cfg.root)
    if cfg.name == "mag240m":
        from ..data import ogb_mag

        return ogb_mag.mag240m_dir(cfg.root) / "ibp_prepared"
    from ..data import ogb

    return ogb.default_prepared_dir(cfg.name, cfg.root)


def _ready(cfg, path: Path, features: bool = True, world_size: int = 1) -> bool:
    """Whether the prepared folder `path` holds what the run needs: the store unless data.store is off; without
    `features` (a sharded run), the run's shards (sharding.shards_dir) will do instead."""
    if cfg.name in HETERO_DATASETS:
        from ..data.hetero import HeteroPreparedDataset

        if not HeteroPreparedDataset.is_complete(path):
            return False
        if not features and sharding.has_shards(cfg, path, world_size):
            return True
        return not cfg.store or HeteroPreparedDataset.load(path, verify="none", features=features).has_store()
    if not PreparedDataset.is_complete(path):
        return False
    if not features and sharding.has_shards(cfg, path, world_size):
        return True
    return not cfg.store or (path / "store" / "x" / "meta.json").is_file()


def _prepare(cfg, path: Path, *, progress: bool) -> None:
    if cfg.name in HETERO_DATASETS:
        from ..data import hetero, maggen, ogb_mag

        if hetero.HeteroPreparedDataset.is_complete(path):  # prepared with --no-store: make only the stores
            hetero.add_stores(path, progress=progress)
        elif cfg.name == "synthetic-mag":
            maggen.generate(cfg.mag, path, store=cfg.store, progress=progress, keep_complete=True)
        elif cfg.name == "ogbn-mag":
            ogb_mag.prepare(cfg.root, path, store=cfg.store, progress=progress, keep_complete=True)
        else:
            ogb_mag.prepare_mag240m(cfg.root, path, store=cfg.store, progress=progress, keep_complete=True)
        return
    if PreparedDataset.is_complete(path):  # prepared with --no-store: make only the store, regenerate nothing
        add_store(path, progress=progress)
        return
    if cfg.name == "synthetic":
        from ..data import graphgen

        graphgen.generate(cfg.synthetic, path, store=cfg.store, progress=progress, keep_complete=True)
    else:
        from ..data import ogb

        ogb.prepare(cfg.name, cfg.root, path, store=cfg.store, progress=progress, keep_complete=True)


def make_loader(ds, input_nodes: torch.Tensor, cfg: LoaderConfig, codec: str, *,
                batch_size: int, shuffle: bool, device: torch.device, use_store: bool = True, graph=None,
                dist: Dist = Dist(), tables=None):
    """The loader of `cfg.framework` over the prepared data set (for dgl, `graph`: its DGL graph; for a
    HeteroPreparedDataset, its HeteroData; built from `ds` when not given); features from the store when the
    front-end says so, or from `tables` ({table: source}, e.g. sharding.sources(open_shards(...).tables)))."""
    front = frontends.get(cfg.framework, hetero=not isinstance(ds, PreparedDataset))
    if graph is None:
        graph = front.prepare(ds)
    return front.make_loader(ds, graph, input_nodes, cfg, codec, batch_size=batch_size, shuffle=shuffle,
                             device=device, use_store=use_store, rank=dist.rank, world_size=dist.world_size,
                             tables=tables)


def train_epoch(model, loader, optimizer, labels: Optional[torch.Tensor], *, max_batches: Optional[int] = None,
                progress: bool = False, desc: str = "train", front=None) -> dict:
    """One pass over `loader`; `labels[i]` is the class of the loader's i-th input node (on its device)
    for PyG; DGL's batches carry their labels. `front`: the front-end (default PyG's)."""
    from tqdm import tqdm

    front = front or frontends.PyG()
    model.train()
    loss_sum = correct = count = 0.0
    total = len(loader) if max_batches is None else min(len(loader), max_batches)
    bar = tqdm(total=total, desc=desc, unit="batch", disable=not progress, leave=False, file=sys.stderr,
               dynamic_ncols=True)
    t = time.perf_counter()
    for i, batch in enumerate(frontends.batches(loader, f"{desc}: training")):
        out, y = front.forward(model, batch, labels)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        n = y.numel()
        loss_sum += float(loss.detach()) * n
        correct += float((out.detach().argmax(1) == y).sum())
        count += n
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum / count:.3f}", acc=f"{correct / count:.3f}", refresh=False)
        if max_batches is not None and i + 1 >= max_batches:
            break  # before the loader makes another batch
    bar.close()
    return {"loss_sum": loss_sum, "correct": correct, "count": count, "seconds": time.perf_counter() - t}


@torch.no_grad()
def evaluate(model, loader, labels: Optional[torch.Tensor], *, front=None, stage: str = "evaluation") -> dict:
    """Correct predictions and count over `loader` (this rank's share; `stage`: what errors call it)."""
    front = front or frontends.PyG()
    model.eval()
    correct = count = 0.0
    t = time.perf_counter()
    for batch in frontends.batches(loader, stage):
        out, y = front.forward(model, batch, labels)
        correct += float((out.argmax(1) == y).sum())
        count += y.numel()
    return {"correct": correct, "count": count, "seconds": time.perf_counter() - t}


def run(cfg: Config, *, baseline: bool = False) -> list[dict]:
    """Run the experiment once per codec in `cfg.loader.codecs` (and, with `baseline`, once with the
    framework's own uncompressed loader: codec "native"); return the results (rank 0 writes JSON)."""
    check_config(cfg)  # the whole config, before any data is generated or loaded
    if cfg.output.progress and os.environ.get("RANK", "0") == "0" and jit_cache.cold():
        print("compiling ibp-graph's kernels (numba): once per environment and after an update, about a minute "
              "on 2 cores; later runs load them from the cache", flush=True)
    if cfg.task == "link":
        from .link import run_link

        return run_link(cfg, baseline=baseline, setup=setup_distributed, write=_write, shards=open_shards)
    front = frontends.get(cfg.loader.framework, hetero=cfg.data.name in HETERO_DATASETS)
    started = startup.start(cfg, front, setup=setup_distributed, open_data=open_dataset, open_shards=open_shards,
                            baseline=baseline)
    dist = started.dist
    if started.ds.split["train"].numel() == 0:
        raise ValueError(f"{started.ds.directory}: the train split of {started.ds.name} is empty (no labelled "
                         "training node to train on); expected a data set with labelled training nodes (for "
                         "data.name=synthetic: a larger data.synthetic.labeled_fraction or num_nodes)")
    results = [run_one(cfg, codec, started.ds, dist, started.device, front=front, graph=started.graph,
                       shards=started.shards) for codec in started.codecs]
    if dist.world_size > 1:
        dist.barrier()
    return results


def run_one(cfg: Config, codec: str, ds: PreparedDataset, dist: Dist, device: torch.device, *,
            front=None, graph=None, shards=None) -> dict:
    """Train and evaluate with one codec; one line per epoch; the result as a dict (and JSON on rank 0).
    `shards`: this rank's shards (open_shards: sharding.RankShards), served to the loaders as one ShardedSource
    per table (train/sharding.py), and the model's input widths and statistics; the sources are closed however
    the run ends (sharding.serving)."""
    with sharding.serving(None if shards is None else shards.tables, cfg.loader) as tables:
        return _run_one(cfg, codec, ds, dist, device, front=front, graph=graph, shards=shards, tables=tables)


def _run_one(cfg: Config, codec: str, ds: PreparedDataset, dist: Dist, device: torch.device, *, front, graph,
             shards, tables) -> dict:
    """run_one, given the run's sharded sources (`tables`: {table: ShardedSource}, or None)."""
    t_start = time.perf_counter()
    front = front or frontends.get(cfg.loader.framework, hetero=cfg.data.name in HETERO_DATASETS)
    if graph is None:
        graph = front.prepare(ds)
    front.seed(cfg.train.seed)
    say = print if dist.main else (lambda *a, **k: None)
    lc = cfg.loader
    splits = {k: ds.split[k] for k in ("train", "valid", "test")}
    loaders, labels = {}, {}
    for part, idx in splits.items():  # the sharded sources `tables` are shared by the three loaders
        train = part == "train"
        loaders[part] = front.make_loader(ds, graph, idx, lc, codec, shuffle=train, device=device,
                                          batch_size=lc.batch_size if train else lc.eval_batch_size,
                                          use_store=cfg.data.store, rank=dist.rank, world_size=dist.world_size,
                                          tables=tables)
        labels[part] = ds.y[idx].to(device)
    num_layers = len(lc.num_neighbors)
    model = front.build_model(cfg, ds, None if shards is None else shards.inputs).to(device)
    if dist.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=front.find_unused_parameters)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    majority = ds.majority_accuracy("test")
    feature_src = "shards" if shards is not None else "store" if front.from_store(ds, codec, cfg.data.store) else "table"
    group_codecs = {k: c.name for k, c in sorted(loaders["train"].codecs.items())}  # what auto chose
    chosen = ", ".join(f"{k}: {v}" for k, v in group_codecs.items())
    say(f"[{cfg.name}] {ds.name}: {ds.num_nodes:,} nodes, {ds.num_edges:,} edges, {ds.num_classes} classes; "
        f"train/valid/test {splits['train'].numel():,}/{splits['valid'].numel():,}/{splits['test'].numel():,}; "
        f"{cfg.model.arch} x{num_layers} ({front.name}), fan-out {list(lc.num_neighbors)}, batch {lc.batch_size}, codec {codec} "
        f"({chosen + '; ' if chosen else ''}features from the {feature_src}), device {device}, "
        f"{dist.world_size} process(es)", flush=True)

    epochs = []
    for epoch in range(1, cfg.train.epochs + 1):
        for ld in loaders.values():
            ld.stats.reset()
        front.set_epoch(loaders["train"], epoch)
        tr = train_epoch(model, loaders["train"], optimizer, labels["train"], max_batches=cfg.train.max_batches,
                         progress=cfg.output.progress and dist.main, desc=f"epoch {epoch}", front=front)
        ev = {}
        if epoch % cfg.train.eval_every == 0 or epoch == cfg.train.epochs:
            for part in ("valid", "test"):
                ev[part] = evaluate(model, loaders[part], labels[part], front=front, stage=f"epoch {epoch}: {part}")
        summed = dist.sum([tr["loss_sum"], tr["correct"], tr["count"],
                           *[ev.get(p, {}).get(k, 0.0) for p in ("valid", "test") for k in ("correct", "count")]])
        (loss_sum, correct, count, v_ok, v_n, t_ok, t_n) = summed
        rec = {"epoch": epoch, "loss": loss_sum / max(count, 1), "train_acc": correct / max(count, 1),
               "valid_acc": v_ok / v_n if ev and v_n else None, "test_acc": t_ok / t_n if ev and t_n else None,
               "train_seeds": int(count)}
        rec.update(epoch_record.transfer(dist, [ld.stats for ld in loaders.values()], loaders["train"].stats,
                                         train_s=dist.max(tr["seconds"]),
                                         eval_s=dist.max(sum(e["seconds"] for e in ev.values())),
                                         sharded=shards is not None))
        epochs.append(rec)
        acc = "".join(f"  {p} {rec[p + '_acc']:.4f}" for p in ("valid", "test") if rec[p + "_acc"] is not None)
        say(f"epoch {epoch:>2}/{cfg.train.epochs}  loss {rec['loss']:.4f}  train {rec['train_acc']:.4f}{acc}  "
            f"{epoch_record.describe(rec)}", flush=True)

    final = _summary(epochs, majority)
    result = {"format": RUN_FORMAT, "version": 1, "name": cfg.name, "dataset": ds.name, "codec": codec,
              "framework": front.name,
              "group_codecs": group_codecs, "features": feature_src, "arch": cfg.model.arch, "world_size": dist.world_size, "device": str(device),
              "num_nodes": ds.num_nodes, "num_edges": ds.num_edges, "config": to_dict(cfg),
              "epochs": epochs, "final": final, "wall_seconds": dist.max(time.perf_counter() - t_start)}
    test_acc = "n/a" if final["test_acc"] is None else f"{final['test_acc']:.4f}"
    say(f"[{cfg.name}] codec {codec}: test accuracy {test_acc} (majority class {majority:.4f}); "
        f"{final['mean_epoch_seconds']:.1f} s per epoch; {epoch_record.moved(final)}", flush=True)
    if dist.main:
        result["path"] = str(_write(cfg, codec, dist, result))
        say(f"wrote {result['path']}", flush=True)
    loaders.clear()  # the loaders' persistent workers exit with them; then run_one closes the sharded sources
    return result


def _summary(epochs: list[dict], majority: float) -> dict:
    """The run's headline numbers: last and best-valid accuracies, means per epoch."""
    n = len(epochs)
    evaluated = [e for e in epochs if e["valid_acc"] is not None] or epochs[-1:]
    best = max(evaluated, key=lambda e: e["valid_acc"] or 0.0)
    final = {"test_acc": evaluated[-1]["test_acc"], "valid_acc": evaluated[-1]["valid_acc"],
             "best_epoch": best["epoch"], "test_acc_at_best_valid": best["test_acc"],
             "majority_test_acc": majority,
             "mean_epoch_seconds": sum(e["seconds"] for e in epochs) / n,
             "mean_train_seconds": sum(e["train_seconds"] for e in epochs) / n,
             "sent_bytes_per_epoch": sum(e["sent_bytes"] for e in epochs) / n,
             "raw_bytes_per_epoch": sum(e["raw_bytes"] for e in epochs) / n}
    raw = final["raw_bytes_per_epoch"]
    final["fraction"] = epoch_record.fraction(final["sent_bytes_per_epoch"], raw)
    return final


def _write(cfg: Config, codec: str, dist: Dist, result: dict) -> Path:
    """OUTPUT.DIR/<name>-<time>-<codec>[-w<ranks>].json (so `ibp-graph report runs/*.json` finds it)."""
    from ..tables import machine

    d = Path(cfg.output.dir)
    stem = f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}-{codec}" + (f"-w{dist.world_size}" if dist.world_size > 1 else "")
    text = json.dumps({"format": RUN_FORMAT, "version": 1, **result, "machine": machine()}, indent=2) + "\n"
    claimed = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        for k in itertools.count():
            path = d / (f"{stem}.json" if k == 0 else f"{stem}-{k}.json")
            try:  # the name is claimed (O_EXCL): a run writing the same name meanwhile takes the next one
                open(path, "x").close()
                claimed = path
                break
            except FileExistsError:
                continue
        write_text(path, text)  # atomically over the claimed (empty) file
    except OSError as e:  # filled up or made read-only during the run (check_config checked it before)
        if claimed is not None:
            claimed.unlink(missing_ok=True)  # our claim, never written
        raise ConfigError(f"output.dir={cfg.output.dir!r} is not accepted: the results of codec {codec} could "
                          f"not be written there ({e.strerror or e}); expected a writable folder with room for "
                          "them") from None
    return path


def _worker_message(e: BaseException) -> str:
    """The message of `e`; of an error a DataLoader worker raised, the worker's own message: torch raises it
    again in the main process, of the same type, with "Caught ... in DataLoader worker process N" and the
    worker's traceback as its message, whose last entry is the original error's ``module.Type: message``."""
    text = str(e)
    kind = type(e).__qualname__
    if type(e).__module__ not in ("builtins", "__main__"):
        kind = f"{type(e).__module__}.{kind}"
    if text.startswith("Caught ") and "\nOriginal Traceback" in text and f"\n{kind}: " in text:
        return text.rsplit(f"\n{kind}: ", 1)[1].rstrip("\n")
    return text


def main(argv=None) -> int:
    """`ibp-graph train --config FILE [--set KEY=VALUE ...]`."""
    import argparse

    from .config import ConfigError, describe, load_config

    p = argparse.ArgumentParser(prog="ibp-graph train", description="Train a GNN as a YAML experiment describes; "
                                "under torchrun, one process per GPU (or CPU rank, gloo).")
    p.add_argument("--config", help="the experiment (configs/*.yaml); without it, the defaults")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key, e.g. --set loader.batch_size=2048 (VALUE is YAML)")
    p.add_argument("--keys", action="store_true", help="list every key with its type and default, then exit")
    p.add_argument("--baseline", action="store_true", help="also train with the framework's own, uncompressed "
                   "loader (codec 'native'; loader.framework=dgl)")
    a = p.parse_args(argv)
    if a.keys:
        print("\n".join(describe()))
        return 0
    try:
        cfg = load_config(a.config, a.set)
    except ConfigError as e:
        print(f"ibp-graph train: {e}", file=sys.stderr)
        return 2
    return main_config(cfg, baseline=a.baseline)


def main_config(cfg: Config, *, baseline: bool = False) -> int:
    """Run an experiment as a command does: errors about the config, the environment or the data as
    messages, exit status. (The whole config is validated first, before any data is touched.)"""
    try:
        run(cfg, baseline=baseline)
    except ConfigError as e:  # as `main` reports a config the checker refuses
        print(f"ibp-graph train: {e}", file=sys.stderr)
        return 2
    except DiskFullError as e:  # generating the data set under data.root
        print(f"ibp-graph train: {e.naming('data.root')}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError, ImportError, TimeoutError) as e:
        print(f"ibp-graph train: {_worker_message(e)}", file=sys.stderr)
        return 1
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0
