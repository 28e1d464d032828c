"""Link prediction (`task: link`): train a GraphSAGE encoder + decoder on a prepared link folder, rank the
held-out edges as OGB's ogbl-citation2 evaluator does; one run per codec, DDP-aware like train/loop.py.

Training: batches of positive training edges with binary negatives (the front-end's loader
factory, train/link_frontends.py), binary cross-entropy on the decoder's logits.
Evaluation: every node's embedding from a node loader over all nodes, then each valid/test
edge's score against its ``target_node_neg`` candidates' scores, ranked as OGB's
``Evaluator("ogbl-citation2")`` ranks (``ogb_ranks``): MRR and Hits@K.

train/loop.py's ``run`` hands `task: link` experiments to ``run_link`` with what it shares
(joining the process group, writing a run's JSON, opening the shards of `loader.features: sharded`), so
this module does not import the loop.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from ..data.link import LinkPreparedDataset
from . import epoch_record, frontends, sharding, startup
from .config import Config, to_dict

__all__ = ["ogb_ranks", "rank_metrics", "random_mrr", "open_link_dataset", "link_dataset_path", "train_epoch",
           "evaluate", "run_link", "run_one"]


def ogb_ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """The rank of each positive score `pos` (n,) among its candidates' scores `neg` (n, K), as OGB's
    ogbl-citation2 evaluator ranks it: the mean of the optimistic rank (ties ranked below the positive)
    and the pessimistic one (ties above), plus one."""
    if pos.dim() != 1 or neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"pos has shape {tuple(pos.shape)} and neg {tuple(neg.shape)}; expected (n,) and (n, K)")
    pos = pos.view(-1, 1)
    optimistic = (neg > pos).sum(1)
    pessimistic = (neg >= pos).sum(1)
    return 0.5 * (optimistic + pessimistic) + 1


def rank_metrics(ranks: torch.Tensor, hits_k: Sequence[int]) -> dict:
    """Sums over the ranked edges (for adding over ranks and chunks): ``mrr`` (of 1 / rank), ``hits@K``
    (rank <= K, per K) and ``count``."""
    out = {"mrr": float((1.0 / ranks.double()).sum()), "count": float(ranks.numel())}
    for k in hits_k:
        out[f"hits@{k}"] = float((ranks <= k).sum())
    return out


def random_mrr(num_negatives: int) -> float:
    """The expected MRR of a ranker that scores at random: the positive's rank is uniform in 1..K+1."""
    return sum(1.0 / r for r in range(1, num_negatives + 2)) / (num_negatives + 1)


def link_dataset_path(data) -> Path:
    """The prepared link folder a DataConfig names."""
    if data.name == "synthetic-citation":
        from ..data import citegen

        return citegen.cache_dir(data.citation, data.root)
    if data.prepared:
        return Path(data.prepared)
    from ..data import ogb_link

    return ogb_link.default_prepared_dir(data.root)


def open_link_dataset(data, dist, *, progress: bool = True, features: bool = True) -> LinkPreparedDataset:
    """The prepared link folder a DataConfig names, generated or prepared first if missing (by each machine's
    first rank while the others wait; a distributed run does not prepare ogbl-citation2 itself); `dist`: this
    process's place in the run (train/loop.py's Dist). ``features=False`` (`loader.features: sharded`): opened
    without x.npy, and ready without it and the store where the run's shards are there."""
    path = link_dataset_path(data)
    startup.check_prepared_name(data, path)  # before anything is prepared into it
    ready = LinkPreparedDataset.is_complete(path) and (
        not data.store or (path / "store" / "x" / "meta.json").is_file()
        or (not features and sharding.has_shards(data, path, dist.world_size)))
    if not ready:
        if dist.world_size > 1 and data.name != "synthetic-citation":
            raise FileNotFoundError(f"{path} is not prepared; a distributed run does not prepare {data.name} (it "
                                    "would outlast the process group's timeout): run `ibp-graph prepare --dataset "
                                    f"{data.name} --root {data.root}{'' if features else f' --shards {dist.world_size}'}` "
                                    "first")
        if dist.local_rank == 0:
            if data.name == "synthetic-citation":
                from ..data import citegen

                citegen.ensure(data.citation, data.root, store=data.store, progress=progress and dist.main)
            else:
                from ..data import ogb_link
                from ..data.prepared import add_store

                if LinkPreparedDataset.is_complete(path):  # prepared with --no-store: make only the store
                    add_store(path, progress=progress and dist.main, kind=LinkPreparedDataset)
                else:
                    ogb_link.prepare(data.root, path, store=data.store, progress=progress and dist.main,
                                     keep_complete=True)
    dist.barrier()
    return LinkPreparedDataset.load(path, features=features)


def train_epoch(model, loader, optimizer, front, *, max_batches: Optional[int] = None, progress: bool = False,
                desc: str = "train") -> dict:
    """One pass over the training batches: binary cross-entropy of the pairs' logits against their labels."""
    from tqdm import tqdm

    model.train()
    loss_sum = count = 0.0
    total = len(loader) if max_batches is None else min(len(loader), max_batches)
    bar = tqdm(total=total, desc=desc, unit="batch", disable=not progress, leave=False, file=sys.stderr,
               dynamic_ncols=True)
    t = time.perf_counter()
    for i, batch in enumerate(frontends.batches(loader, f"{desc}: training")):
        logits, labels = front.forward(model, batch)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += float(loss.detach()) * labels.numel()
        count += labels.numel()
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum / count:.4f}", refresh=False)
        if max_batches is not None and i + 1 >= max_batches:
            break
    bar.close()
    return {"loss_sum": loss_sum, "count": count, "seconds": time.perf_counter() - t}


@torch.no_grad()
def evaluate(model, embeddings: torch.Tensor, part: dict, hits_k: Sequence[int], *,
             max_edges: Optional[int] = None, rank: int = 0, world_size: int = 1, chunk_scores: int = 1 << 22) -> dict:
    """`rank_metrics` sums over this rank's share of the `part`'s edges (the first `max_edges` when given):
    each edge's score (source, target) ranked among its (source, target_node_neg[i, :]) scores."""
    model.eval()
    src, dst, neg = part["source_node"], part["target_node"], part["target_node_neg"]
    if max_edges is not None:
        src, dst, neg = src[:max_edges], dst[:max_edges], neg[:max_edges]
    mine = torch.arange(rank, src.shape[0], world_size)
    src, dst, neg = src[mine], dst[mine], neg[mine]
    dev = embeddings.device
    step = max(1, chunk_scores // max(1, neg.shape[1] * embeddings.shape[1]))
    sums = rank_metrics(torch.zeros(0), hits_k)
    for lo in range(0, src.shape[0], step):
        h_src = embeddings[src[lo:lo + step].to(dev)]
        pos = model.score(h_src, embeddings[dst[lo:lo + step].to(dev)])
        negs = model.score(h_src.unsqueeze(1), embeddings[neg[lo:lo + step].to(dev)])
        for key, value in rank_metrics(ogb_ranks(pos, negs), hits_k).items():
            sums[key] += value
    return sums


def run_link(cfg: Config, *, setup: Callable, write: Callable, shards: Optional[Callable] = None,
             baseline: bool = False, front=None) -> list[dict]:
    """Run the (checked) link experiment once per codec (and, with `baseline`, with the framework's own loader:
    codec "native"); return the results. `front` (default: ``link_frontends.get(loader.framework)``) is the
    loader factory and model runner; `setup(device_name)` joins the process group and returns (dist,
    device), `write(cfg, codec, dist, result)` writes a result's JSON on rank 0, `shards(cfg.data, ds, dist,
    progress=)` opens this rank's shards for `loader.features: sharded` (train/loop.py's ``setup_distributed``,
    ``_write`` and ``open_shards``)."""
    from . import link_frontends

    front = front or link_frontends.get(cfg.loader.framework)
    started = startup.start(cfg, front, setup=setup, open_data=open_link_dataset, open_shards=shards,
                            baseline=baseline)
    results = [run_one(cfg, codec, started.ds, started.dist, started.device, front=front, graph=started.graph,
                       write=write, shards=started.shards) for codec in started.codecs]
    started.dist.barrier()
    return results


def run_one(cfg: Config, codec: str, ds: LinkPreparedDataset, dist, device: torch.device, *, front, write: Callable,
            graph=None, shards: Optional[sharding.RankShards] = None) -> dict:
    """Train and evaluate the link model with one codec; one line per epoch; the result (and JSON on rank 0,
    by `write`). `shards`: this rank's shards (loop.open_shards: sharding.RankShards), served to both loaders as
    one ShardedSource per table (train/sharding.py), and the model's input width and statistics; the sources are
    closed however the run ends (sharding.serving)."""
    with sharding.serving(None if shards is None else shards.tables, cfg.loader) as tables:
        return _run_one(cfg, codec, ds, dist, device, front=front, write=write, graph=graph, shards=shards,
                        tables=tables)


def _run_one(cfg: Config, codec: str, ds: LinkPreparedDataset, dist, device: torch.device, *, front,
             write: Callable, graph, shards: Optional[sharding.RankShards], tables) -> dict:
    """run_one, given the run's sharded sources (`tables`: {table: ShardedSource}, or None)."""
    t_start = time.perf_counter()
    front.seed(cfg.train.seed)
    say = print if dist.main else (lambda *a, **k: None)
    lc, lk = cfg.loader, cfg.link
    # the sharded sources `tables` are shared by both loaders
    train_loader = front.make_train_loader(ds, graph, cfg, codec, device=device, rank=dist.rank,
                                           world_size=dist.world_size, tables=tables)
    node_loader = front.make_node_loader(ds, graph, cfg, codec, device=device, tables=tables)
    model = front.build_model(cfg, ds, None if shards is None else shards.inputs).to(device)
    core = model
    if dist.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    feature_src = "shards" if shards is not None else "store" if front.from_store(ds, codec, cfg.data.store) else "table"
    group_codecs = {k: c.name for k, c in sorted(train_loader.codecs.items())}
    chosen = ", ".join(f"{k}: {v}" for k, v in group_codecs.items())  # none for the framework's own loader
    sizes = {p: ds.split[p]["source_node"].numel() for p in ("train", "valid", "test")}
    chance = random_mrr(ds.num_negatives)
    say(f"[{cfg.name}] {ds.name}: {ds.num_nodes:,} nodes, {ds.num_edges:,} graph edges; train/valid/test "
        f"{sizes['train']:,}/{sizes['valid']:,}/{sizes['test']:,} edges, {ds.num_negatives} negatives each; "
        f"sage x{len(lc.num_neighbors)} + {lk.decoder} ({front.name}), fan-out {list(lc.num_neighbors)}, batch "
        f"{lc.batch_size} edges, codec {codec} ({chosen + '; ' if chosen else ''}features from the {feature_src}), "
        f"device {device}, {dist.world_size} process(es)", flush=True)
    metrics = ["mrr"] + [f"hits@{k}" for k in lk.hits_k]
    epochs = []
    for epoch in range(1, cfg.train.epochs + 1):
        for ld in (train_loader, node_loader):
            ld.stats.reset()
        front.set_epoch(train_loader, epoch)
        tr = train_epoch(model, train_loader, optimizer, front, max_batches=cfg.train.max_batches,
                         progress=cfg.output.progress and dist.main, desc=f"epoch {epoch}")
        ev, eval_s = {}, 0.0
        if epoch % cfg.train.eval_every == 0 or epoch == cfg.train.epochs:
            t = time.perf_counter()
            core.eval()
            with torch.no_grad():
                emb = front.embed(core, frontends.batches(node_loader, f"epoch {epoch}: embedding"), ds.num_nodes,
                                  device)
            for part in ("valid", "test"):
                ev[part] = evaluate(core, emb, ds.split[part], lk.hits_k, max_edges=lk.max_eval_edges,
                                    rank=dist.rank, world_size=dist.world_size)
            eval_s = dist.max(time.perf_counter() - t)
        keys = ["count"] + metrics
        summed = dist.sum([tr["loss_sum"], tr["count"], *[ev.get(p, {}).get(k, 0.0) for p in ("valid", "test")
                                                          for k in keys]])
        loss_sum, count = summed[:2]
        parts = {p: dict(zip(keys, summed[2 + i * len(keys):2 + (i + 1) * len(keys)])) for i, p in
                 enumerate(("valid", "test"))}
        rec = {"epoch": epoch, "loss": loss_sum / max(count, 1), "train_pairs": int(count)}
        for p, sums in parts.items():
            for m in metrics:
                rec[f"{p}_{m}"] = sums[m] / sums["count"] if ev and sums["count"] else None
        rec.update(epoch_record.transfer(dist, (train_loader.stats, node_loader.stats), train_loader.stats,
                                         train_s=dist.max(tr["seconds"]), eval_s=eval_s, sharded=shards is not None))
        epochs.append(rec)
        shown = "".join(f"  {p} mrr {rec[p + '_mrr']:.4f}" for p in ("valid", "test") if rec[p + "_mrr"] is not None)
        say(f"epoch {epoch:>2}/{cfg.train.epochs}  loss {rec['loss']:.4f}{shown}  {epoch_record.describe(rec)}",
            flush=True)

    final = _summary(epochs, metrics, chance)
    result = {"task": "link", "name": cfg.name, "dataset": ds.name,
              "codec": codec, "framework": front.name, "group_codecs": group_codecs, "features": feature_src,
              "arch": cfg.model.arch, "decoder": lk.decoder, "world_size": dist.world_size, "device": str(device),
              "num_nodes": ds.num_nodes, "num_edges": ds.num_edges, "num_negatives": ds.num_negatives,
              "config": to_dict(cfg), "epochs": epochs, "final": final,
              "wall_seconds": dist.max(time.perf_counter() - t_start)}
    if dist.main:
        result["path"] = str(write(cfg, codec, dist, result))
    mrr = "n/a" if final["test_mrr"] is None else f"{final['test_mrr']:.4f}"
    say(f"[{cfg.name}] codec {codec}: test MRR {mrr} (random ranker {chance:.4f}); "
        f"{final['mean_epoch_seconds']:.1f} s per epoch; {epoch_record.moved(final)}; "
        f"wrote {result.get('path')}", flush=True)
    del train_loader, node_loader  # their persistent workers exit with them; then run_one closes the sharded sources
    return result


def _summary(epochs: list[dict], metrics: list[str], chance: float) -> dict:
    """The run's headline numbers: the last evaluation's metrics, test MRR at the best valid MRR, means."""
    n = len(epochs)
    evaluated = [e for e in epochs if e["valid_mrr"] is not None] or epochs[-1:]
    best = max(evaluated, key=lambda e: e["valid_mrr"] or 0.0)
    final = {f"{p}_{m}": evaluated[-1][f"{p}_{m}"] for p in ("valid", "test") for m in metrics}
    final.update({"best_epoch": best["epoch"], "test_mrr_at_best_valid": best["test_mrr"], "random_mrr": chance,
                  "mean_epoch_seconds": sum(e["seconds"] for e in epochs) / n,
                  "mean_train_seconds": sum(e["train_seconds"] for e in epochs) / n,
                  "sent_bytes_per_epoch": sum(e["sent_bytes"] for e in epochs) / n,
                  "raw_bytes_per_epoch": sum(e["raw_bytes"] for e in epochs) / n})
    raw = final["raw_bytes_per_epoch"]
    final["fraction"] = epoch_record.fraction(final["sent_bytes_per_epoch"], raw)
    return final
