"""The built-in default data set: a generated, papers100M-like citation graph with a class signal.

Every paper (node) has a latent subject (one of ``num_classes``, Zipf-like frequencies)
and a publication year. Features are the ``embedding_f32`` family of
``ibp_graph.data.synthetic`` (averaged word vectors, 128-d float32) whose words lean
towards the subject's topic words, so features carry the class. Citations: each paper
cites a log-normal number of others (mean ``avg_citations``), a fraction ``homophily``
of them within its subject; cited papers are drawn in proportion to a Pareto
"fitness", so in-degrees follow a power law. The graph is stored undirected without
duplicate edges, as PyG's papers100M examples use it. Like OGB, only some papers
carry a label (``labeled_fraction``), and labeled papers are split by year: up to
2017 train, 2018 valid, 2019 on test (about 78 / 8 / 14 %, OGB's proportions).

The same generator scales to papers100M size (``GraphSpec.papers100m()``): all
randomness comes from per-chunk streams, features and edges are written chunk by
chunk into memory-mapped files, and memory stays at a few bytes per node (class,
fitness, the per-class sampling tables) plus one chunk.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

from ..codec.auto import CodecSpec, check_kind
from . import synthetic as _syn
from ..files import check_free, check_output, open_npy, replace_dir, save_npy, work_dir
from ..sampling.graph import edge_id_dtype, index_dtype
from .prepared import (PreparedDataset, add_store, build_csc, encode_store, progress_bar,
                       write_prepared_meta)

__all__ = ["GraphSpec", "generate", "ensure", "cache_dir", "embedding_rows", "check_spec_fields", "spec_field",
           "spec_field_of", "spec_key", "finite", "disk_bytes", "table_bytes", "csc_bytes"]

PathLike = Union[str, os.PathLike]
#: nodes per random stream of the node and edge generators (fixed: outputs are prefix-stable).
NODE_CHUNK = 65_536
_GRAPHGEN = 7  # stream family, distinct from synthetic.py's 1..6
_NODES, _EDGES = range(2)
#: year boundaries of the split (train <= 2017 < valid <= 2018 < test), as OGB's papers100M.
_TRAIN_LAST_YEAR, _VALID_YEAR = 2017, 2018
#: share of papers per period: (1990..2017, 2018, 2019..2020): OGB's 78 / 8 / 14 split.
_YEAR_SHARES = (0.78, 0.08, 0.14)
#: class frequencies p(c) ~ 1 / (c + shift): the largest of 172 classes holds about 4 %.
_CLASS_SHIFT = 8.0
#: out-degree spread (log-normal sigma) and cap.
_CITE_SIGMA, _CITE_MAX = 0.8, 1000
_FEATURE_VOCAB = 30_000


def spec_field(default, lo, hi=None, help: str = ""):
    """A generator spec's dataclass field with its accepted range, ``[lo, hi]``, that `check_spec_fields`
    checks (an int `lo`: an integer field, else a number; `hi` None: no upper bound), and the range and `help`
    the config checks and `ibp-graph train --keys` lists."""
    return dataclasses.field(default=default, metadata={"range": (lo, hi), "min": lo, "max": hi, "help": help})


def spec_field_of(spec_cls: type, name: str):
    """A spec field with the default and accepted range of field `name` of generator spec `spec_cls` (for a
    spec that shares that statistic: MagSpec's papers are a GraphSpec's nodes)."""
    f = next(f for f in dataclasses.fields(spec_cls) if f.name == name)
    return dataclasses.field(default=f.default, metadata=dict(f.metadata))


@dataclass(frozen=True)
class GraphSpec:
    """Size and statistics of a generated data set; the defaults are `make train`'s."""

    num_nodes: int = spec_field(60_000, 2, help="papers")
    avg_citations: float = spec_field(10.0, 0.0, help="mean references per paper (log-normal)")
    num_classes: int = spec_field(172, 2, 32767, "subjects (Zipf-like frequencies): the labels")
    dim: int = spec_field(128, 1, help="feature columns (float32)")
    labeled_fraction: float = spec_field(0.3, 0.0, 1.0, "share of papers with a label (train/valid/test by year)")
    homophily: float = spec_field(0.7, 0.0, 1.0, "share of references within the citing paper's subject")
    topic_fraction: float = spec_field(0.2, 0.0, 1.0, "share of a paper's words drawn from its subject's topic")
    degree_exponent: float = spec_field(2.5, 1.5, help="Pareto exponent of the papers' fitness (in-degree tail)")
    seed: int = spec_field(0, 0, 2 ** 63 - 1, "random streams")

    def __post_init__(self) -> None:
        check_spec_fields(self)

    @classmethod
    def papers100m(cls, **changes) -> "GraphSpec":
        """ogbn-papers100M's size: 111 M nodes, ~14.5 citations each, 1.4 % labeled."""
        base = dict(num_nodes=_syn.PAPERS100M_NUM_NODES, avg_citations=14.5, labeled_fraction=0.0136)
        return cls(**{**base, **changes})

    def key(self) -> str:
        """A short name for this spec's cache folder (changes whenever any field does)."""
        return spec_key(self)


def check_spec_fields(spec, checks: Optional[dict] = None) -> None:
    """Check a generator spec's fields, ``{name: (value, lo, hi)}`` (an int `lo`: an integer field, else a
    number; `hi` None: no upper bound); a ValueError names the first bad one. Numbers are stored as floats
    (3 and 3.0: one spec, one cache folder). Without `checks`: every field declared with `spec_field`, in
    declaration order."""
    if checks is None:
        checks = {f.name: (getattr(spec, f.name), *f.metadata["range"])
                  for f in dataclasses.fields(spec) if "range" in f.metadata}
    for name, (value, lo, hi) in checks.items():
        kind = (int,) if isinstance(lo, int) else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) \
                or value < lo or (hi is not None and value > hi) or (kind != (int,) and not finite(value)):
            rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
            what = "an integer" if kind == (int,) else "a number"
            raise ValueError(f"{type(spec).__name__}.{name}={value!r} is not accepted; expected {what} {rng}")
        if kind != (int,):
            object.__setattr__(spec, name, float(value))


def finite(value) -> bool:
    """Whether the number `value` is finite as a float (an int too large for one is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def spec_key(spec) -> str:
    """A short name for a generator spec's cache folder (changes whenever any field does)."""
    text = json.dumps(dataclasses.asdict(spec), sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=5).hexdigest()


#: disk counted per file beyond its array (an .npy header, a meta.json, a checksums.json, the output marker).
FILE_BYTES = 4096
#: disk of a feature store's codec state per feature column, at most (EBP's tables take about 2.3 kB).
_CODEC_COLUMN_BYTES = 4096


def table_bytes(rows: int, dim: int, store: bool) -> int:
    """Disk a float32 feature table of `rows` x `dim` takes: its x.npy and, with `store`, its feature store (a
    payload of at most the raw rows, 8-byte offsets per row, the codec's state per column, its small files)."""
    raw = 4 * rows * dim
    return raw + FILE_BYTES + (raw + 8 * (rows + 1) + _CODEC_COLUMN_BYTES * (dim + 1) + 4 * FILE_BYTES if store else 0)


def csc_bytes(num_src: int, num_dst: int, edges: float) -> int:
    """Disk `prepared.build_csc` writes for at most `edges` edges (reverses counted) from `num_src` to `num_dst`
    nodes: indptr, indices and e_id. While it removes duplicate edges it holds a copy of those once more (as
    much again, at most, until it ends: a generator's disk_bytes counts it beside the files written later)."""
    e = math.ceil(edges)
    return 8 * (num_dst + 1) + e * (index_dtype(num_src).itemsize + edge_id_dtype(e).itemsize) + 4 * FILE_BYTES


def disk_bytes(spec: GraphSpec, store: bool = True) -> int:
    """Disk `generate` takes at most for `spec`: y and the split (8 bytes per node each), the undirected graph
    (every citation and its reverse), and the larger of the graph's copy while duplicates are removed and what
    is written after it: the features and, with `store`, their feature store."""
    n = spec.num_nodes
    graph = csc_bytes(n, n, 2 * n * spec.avg_citations)
    return 16 * n + 5 * FILE_BYTES + graph + max(graph, table_bytes(n, spec.dim, store))


def cache_dir(spec: GraphSpec, root: PathLike) -> Path:
    """Where `ensure` keeps the prepared data set of `spec` under `root`."""
    return Path(root) / f"synthetic-{spec.num_nodes}-{spec.key()}"


def ensure(spec: GraphSpec, root: PathLike = "data_cache", *, store: bool = True,
           progress: bool = True, workers: Optional[int] = None) -> Path:
    """The prepared folder of `spec` under `root`, generated first if it is not there yet (or given its store)."""
    final = cache_dir(spec, root)
    if PreparedDataset.is_complete(final):
        if store:
            add_store(final, progress=progress)  # prepared with --no-store: only the store is made
        return final
    return generate(spec, final, store=store, progress=progress, workers=workers, keep_complete=True)


# ---------------------------------------------------------------------------------------------
# Generation


def _rng(purpose: int, chunk: int, seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([_GRAPHGEN, purpose, chunk, seed]))


def _class_probs(num_classes: int) -> np.ndarray:
    p = 1.0 / (np.arange(num_classes) + _CLASS_SHIFT)
    return p / p.sum()


def _node_chunk(spec: GraphSpec, chunk: int, n: int) -> dict[str, np.ndarray]:
    """Class, year, labeled flag and fitness of the `n` nodes of one chunk."""
    rng = _rng(_NODES, chunk, spec.seed)
    cls = rng.choice(spec.num_classes, n, p=_class_probs(spec.num_classes)).astype(np.int16)
    u = rng.random(n)
    train, valid, _ = _YEAR_SHARES
    year = np.where(u < train, 1990 + (u / train * (_TRAIN_LAST_YEAR - 1990 + 1)).astype(np.int64),
                    np.where(u < train + valid, _VALID_YEAR,
                             _VALID_YEAR + 1 + ((u - train - valid) / (1 - train - valid) * 2).astype(np.int64)))
    labeled = rng.random(n) < spec.labeled_fraction
    fitness = (1.0 - rng.random(n)) ** (-1.0 / (spec.degree_exponent - 1.0))
    return {"class": cls, "year": np.minimum(year, 2020).astype(np.int16), "labeled": labeled,
            "fitness": fitness}


class _Targets:
    """Draws cited papers: by fitness, within a class or over all papers."""

    def __init__(self, classes: np.ndarray, fitness: np.ndarray, num_classes: int):
        self.order = np.argsort(classes, kind="stable")
        self.cum = np.cumsum(fitness[self.order])
        starts = np.searchsorted(classes[self.order], np.arange(num_classes + 1))
        self.lo = np.concatenate([[0.0], self.cum])[starts[:-1]]
        self.hi = np.concatenate([[0.0], self.cum])[starts[1:]]

    def draw(self, u: np.ndarray, cls: Optional[np.ndarray]) -> np.ndarray:
        """Papers at quantiles `u` of the fitness mass (of class `cls` where given)."""
        if cls is None:
            pos = u * self.cum[-1]
        else:
            pos = self.lo[cls] + u * (self.hi[cls] - self.lo[cls])
        idx = np.searchsorted(self.cum, pos, side="right")
        return self.order[np.minimum(idx, self.order.shape[0] - 1)]

    def draw_for(self, rng: np.random.Generator, src: np.ndarray, src_classes: np.ndarray,
                 homophily: float) -> np.ndarray:
        """One target per source in `src`: with probability `homophily` one of the source's class
        (`src_classes[src]`), else any; `rng` gives the class coin flips, then the quantiles."""
        same = rng.random(src.shape[0]) < homophily
        u = rng.random(src.shape[0])
        dst = np.empty_like(src)
        dst[same] = self.draw(u[same], src_classes[src[same]])
        dst[~same] = self.draw(u[~same], None)
        return dst


def _edge_chunks(spec: GraphSpec, classes: np.ndarray, targets: _Targets) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Citations of every paper, chunk by chunk of citing papers (self-citations dropped)."""
    sigma = _CITE_SIGMA
    mu = math.log(max(spec.avg_citations, 1e-9)) - sigma * sigma / 2
    for chunk, lo in enumerate(range(0, spec.num_nodes, NODE_CHUNK)):
        hi = min(spec.num_nodes, lo + NODE_CHUNK)
        rng = _rng(_EDGES, chunk, spec.seed)
        deg = np.minimum(np.rint(rng.lognormal(mu, sigma, hi - lo)), _CITE_MAX).astype(np.int64)
        if spec.avg_citations == 0:
            deg[:] = 0
        src = np.repeat(np.arange(lo, hi, dtype=np.int64), deg)
        dst = targets.draw_for(rng, src, classes, spec.homophily)
        keep = src != dst
        yield src[keep], dst[keep]


def embedding_rows(out: np.ndarray, start: int, labels: np.ndarray, *, seed: int, topic_fraction: float,
                   num_classes: int, vocab_size: int = _FEATURE_VOCAB) -> None:
    """Rows ``start .. start + len(out)`` of ``synthetic.averaged_embeddings(n, labels=...)``, in place.

    `start` must be a multiple of ``synthetic.CHUNK_ROWS``; the rows are bit for bit those
    of the whole-table function (same streams), so a table can be written piece by piece
    into a memory map. `labels` are the rows' classes.
    """
    if start % _syn.CHUNK_ROWS:
        raise ValueError(f"start={start} must be a multiple of CHUNK_ROWS={_syn.CHUNK_ROWS}")
    topics = _topic_table(seed, num_classes, vocab_size) if topic_fraction > 0 else None
    vectors = _syn._word_vectors(seed, vocab_size, out.shape[1])
    for off in range(0, out.shape[0], _syn.CHUNK_ROWS):
        part = out[off:off + _syn.CHUNK_ROWS]
        chunk = (start + off) // _syn.CHUNK_ROWS
        rows = part.shape[0]
        lengths = _syn._lognormal_lengths(_syn._rng(_syn._EMBEDDING, _syn._TABLE.lengths, chunk, seed), rows,
                                          _syn._EMB_LEN_MEDIAN, _syn._EMB_LEN_SIGMA, _syn._EMB_LEN_RANGE)
        words = _syn._zipf_ranks(_syn._rng(_syn._EMBEDDING, _syn._TABLE.words, chunk, seed)
                                 .random(int(lengths.sum())), vocab_size, _syn._ZIPF_SHIFT_TEXT)
        if topics is not None:
            _syn._mix_topics(words, lengths, topics[labels[off:off + rows]], topic_fraction,
                             _syn._rng(_syn._EMBEDDING, _syn._TABLE.topic_draws, chunk, seed))
        sums = _syn._sum_rows(lengths, words, vectors)
        sums /= lengths[:, None]
        part[...] = sums


_TOPICS: dict = {}


def _topic_table(seed: int, num_classes: int, vocab_size: int) -> np.ndarray:
    key = (seed, num_classes, vocab_size)
    if key not in _TOPICS:
        _TOPICS[key] = np.stack([_syn._topic_words(_syn._EMBEDDING, seed, c, vocab_size)
                                 for c in range(num_classes)])
    return _TOPICS[key]


def _single_threaded() -> None:
    import torch

    torch.set_num_threads(1)


def _feature_task(path: str, lo: int, hi: int, labels: np.ndarray, spec: GraphSpec) -> int:
    x = np.load(path, mmap_mode="r+")
    embedding_rows(x[lo:hi], lo, labels, seed=spec.seed, topic_fraction=spec.topic_fraction,
                   num_classes=spec.num_classes)
    x.flush()
    return hi - lo


def _write_features(path: Path, classes: np.ndarray, spec: GraphSpec, progress: bool, workers: int,
                    step: int = 16 * _syn.CHUNK_ROWS) -> None:
    """x.npy, `step` rows at a time (a multiple of CHUNK_ROWS), by `workers` processes."""
    x = open_npy(path, np.float32, (spec.num_nodes, spec.dim))
    bar = progress_bar(spec.num_nodes, "features", progress)
    ranges = [(lo, min(spec.num_nodes, lo + step)) for lo in range(0, spec.num_nodes, step)]
    if workers <= 1:
        for lo, hi in ranges:
            embedding_rows(x[lo:hi], lo, classes[lo:hi], seed=spec.seed, topic_fraction=spec.topic_fraction,
                           num_classes=spec.num_classes)
            bar.update(hi - lo)
    else:
        x.flush()
        import multiprocessing

        # forked writers run torch single-threaded (as DataLoader workers do): a forked OpenMP pool is unsafe
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_single_threaded) as pool:
            futures = [pool.submit(_feature_task, str(path), lo, hi, classes[lo:hi], spec) for lo, hi in ranges]
            for f in futures:
                bar.update(f.result())
    bar.close()
    del x


def generate(spec: GraphSpec, directory: PathLike, *, store: bool = True, codec: CodecSpec = "auto",
             progress: bool = True, workers: Optional[int] = None, keep_complete: bool = False) -> Path:
    """Write the prepared data set of `spec` into `directory` (replaced if present); return it.

    `store` pre-encodes the features with `codec` ("auto": fit_codec's choice; "ibp",
    "ebp", "identity" or a fitted codec; meta.json names it). `directory` must be absent,
    empty or an earlier output of ibp-graph (``files.check_output``). Work happens in a temporary
    folder beside it, moved into place at the end and removed however the run ends, so an
    interrupted run leaves no half-written data set behind (a killed run's folder is removed
    by the next run beside it; with `keep_complete`, a data set another process finished
    first is kept). `workers` processes write the features (default: 1 below 2 M nodes,
    else all cores).
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")  # before the data set is generated, not after
    final = check_output(directory)  # never over a folder of someone else's files
    n = spec.num_nodes
    check_free(final, disk_bytes(spec, store), f"the generated data set of {n:,} nodes (graph, x, y, split"
               f"{', store' if store else ''})")
    with work_dir(final) as tmp:  # removed however this ends; dead processes' ones too
        t0 = time.perf_counter()
        if workers is None:
            workers = 1 if n < 2_000_000 else (os.cpu_count() or 1)

        classes = np.empty(n, dtype=np.int16)
        year = np.empty(n, dtype=np.int16)
        labeled = np.empty(n, dtype=bool)
        fitness = np.empty(n, dtype=np.float64)
        for chunk, lo in enumerate(range(0, n, NODE_CHUNK)):
            hi = min(n, lo + NODE_CHUNK)
            part = _node_chunk(spec, chunk, hi - lo)
            classes[lo:hi], year[lo:hi], labeled[lo:hi], fitness[lo:hi] = (
                part["class"], part["year"], part["labeled"], part["fitness"])

        y = open_npy(tmp / "y.npy", np.int64, (n,))
        y[:] = np.where(labeled, classes, -1)
        del y
        (tmp / "split").mkdir()
        splits = {"train": labeled & (year <= _TRAIN_LAST_YEAR),
                  "valid": labeled & (year == _VALID_YEAR),
                  "test": labeled & (year > _VALID_YEAR)}
        for name, mask in splits.items():
            save_npy(tmp / "split" / f"{name}.npy", np.flatnonzero(mask).astype(np.int64))
        del year, labeled

        targets = _Targets(classes, fitness, spec.num_classes)
        del fitness
        graph = build_csc(functools.partial(_edge_chunks, spec, classes, targets), n, tmp / "graph", undirected=True,
                          dedup=True, progress=progress, total_edges=int(n * spec.avg_citations))
        num_edges = graph.num_edges
        del graph, targets

        _write_features(tmp / "x.npy", classes, spec, progress, workers)
        del classes
        stored = encode_store(tmp, codec, progress=progress) if store else {"store_fraction": None}
        write_prepared_meta(tmp, name="synthetic", num_classes=spec.num_classes,
                            source={"generator": "ibp_graph.data.graphgen", "spec": dataclasses.asdict(spec)},
                            undirected=True, **stored)
        replace_dir(tmp, final, keep=PreparedDataset.is_complete if keep_complete else lambda p: False)
    if progress:
        print(f"generated {final}: {n:,} nodes, {num_edges:,} edges, {spec.dim}-d float32 features"
              + (f" (store {stored['store_codec']} {stored['store_fraction']:.4f} of raw)" if store else "")
              + f" in {time.perf_counter() - t0:.1f} s", flush=True)
    return final
