"""The built-in link-prediction data set: a generated, ogbl-citation2-like directed citation graph.

Papers are numbered in publication order (years from 2000 on, evenly). Every paper
belongs to a research community (``num_communities``, Zipf-like sizes) and its
features are ``graphgen.embedding_rows``'s averaged word vectors leaning towards its
community's topic words (the node-task set's recipe), so features carry the community.
Each paper cites a log-normal number of earlier papers (mean ``avg_citations``): a
fraction ``homophily`` of them within its community, the rest anywhere, drawn in
proportion to a Pareto "fitness" (preferential attachment: power-law in-degrees).
Repeated citations are dropped. A GNN with a dot-product decoder learns who cites
whom from the features and the graph: its MRR is well above a random ranker's.

The split is ogbl-citation2's: for each of the latest ``eval_fraction`` of papers with at
least two references, one reference is held out for validation and another for test,
each ranked against ``num_negatives`` candidates drawn uniformly among the other nodes;
the remaining citations are the training edges, and the message-passing graph holds
them only (undirected, as OGB's citation2 examples use it).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

from ..codec.auto import CodecSpec, check_kind
from ..files import check_free, check_output, open_npy, replace_dir, save_npy, work_dir
from . import graphgen
from .graphgen import spec_field
from .link import LinkPreparedDataset, check_split, draw_negatives, write_link_meta, write_split
from .prepared import add_store, build_csc, encode_store

__all__ = ["CitationSpec", "NAME", "generate", "ensure", "cache_dir", "disk_bytes"]

PathLike = Union[str, os.PathLike]
#: the data set's name (data.name, prepare --dataset).
NAME = "synthetic-citation"
_CITEGEN = 9  # stream family, distinct from graphgen's 7, maggen's 8 and synthetic.py's 1..6
_NODES, _EDGES, _HOLDOUT, _NEGATIVES = range(4)
_FIRST_YEAR, _YEARS = 2000, 20
#: community sizes p(c) ~ 1 / (c + shift).
_COMMUNITY_SHIFT = 4.0
_CITE_SIGMA, _CITE_MAX = 0.8, 1000


@dataclass(frozen=True)
class CitationSpec:
    """Size and statistics of the generated citation set; the defaults are configs/link.yaml's."""

    num_nodes: int = spec_field(12_000, 3, 2 ** 31 - 1, "papers")
    avg_citations: float = spec_field(8.0, 0.0, float(_CITE_MAX), "mean references per paper (log-normal)")
    num_communities: int = spec_field(32, 1, 32767, "research communities (Zipf-like sizes); features lean to theirs")
    dim: int = spec_field(64, 1, 1 << 16, "feature columns (float32)")
    homophily: float = spec_field(0.8, 0.0, 1.0, "share of references within the citing paper's community")
    topic_fraction: float = spec_field(0.4, 0.0, 1.0, "share of a paper's words drawn from its community's topic")
    degree_exponent: float = spec_field(2.5, 1.5, 100.0, "Pareto exponent of the papers' fitness (in-degree tail)")
    eval_fraction: float = spec_field(0.1, 0.0, 1.0, "latest share of papers with one valid and one test reference held out")
    num_negatives: int = spec_field(100, 1, 1 << 20, "candidate negatives per held-out reference (OGB: 1000)")
    seed: int = spec_field(0, 0, 2 ** 63 - 1, "random streams")

    def __post_init__(self) -> None:
        graphgen.check_spec_fields(self)

    def key(self) -> str:
        """A short name for this spec's cache folder (changes whenever any field does)."""
        return graphgen.spec_key(self)


def disk_bytes(spec: CitationSpec, store: bool = True) -> int:
    """Disk `generate` takes at most for `spec`: the split (the training citations, each held-out one with its
    negatives), the undirected training graph, and the larger of the graph's copy while duplicates are removed
    and what is written after it: the years, the features and, with `store`, their feature store."""
    n, edges = spec.num_nodes, spec.num_nodes * spec.avg_citations
    held_out = math.ceil(spec.eval_fraction * n)
    graph = graphgen.csc_bytes(n, n, 2 * edges)
    return 16 * math.ceil(edges) + 2 * held_out * (16 + 8 * spec.num_negatives) + 10 * graphgen.FILE_BYTES + \
        graph + max(graph, 8 * n + graphgen.table_bytes(n, spec.dim, store))


def cache_dir(spec: CitationSpec, root: PathLike) -> Path:
    """Where `ensure` keeps the prepared data set of `spec` under `root`."""
    return Path(root) / f"{NAME}-{spec.num_nodes}-{spec.key()}"


def ensure(spec: CitationSpec, root: PathLike = "data_cache", *, store: bool = True, progress: bool = True) -> Path:
    """The prepared folder of `spec` under `root`, generated first if it is not there yet (or given its store)."""
    final = cache_dir(spec, root)
    if LinkPreparedDataset.is_complete(final):
        if store:
            add_store(final, progress=progress, kind=LinkPreparedDataset)
        return final
    return generate(spec, final, store=store, progress=progress, keep_complete=True)


def _rng(purpose: int, seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([_CITEGEN, purpose, seed]))


def _nodes(spec: CitationSpec) -> tuple[np.ndarray, np.ndarray]:
    """Community (int16) and fitness of every paper."""
    rng = _rng(_NODES, spec.seed)
    p = 1.0 / (np.arange(spec.num_communities) + _COMMUNITY_SHIFT)
    community = rng.choice(spec.num_communities, spec.num_nodes, p=p / p.sum()).astype(np.int16)
    fitness = (1.0 - rng.random(spec.num_nodes)) ** (-1.0 / (spec.degree_exponent - 1.0))
    return community, fitness


def _citations(spec: CitationSpec, community: np.ndarray, fitness: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (citing, cited) pairs, each cited paper earlier than its citing one, sorted by citing paper."""
    n = spec.num_nodes
    rng = _rng(_EDGES, spec.seed)
    mu = math.log(max(spec.avg_citations, 1e-9)) - _CITE_SIGMA ** 2 / 2
    deg = np.minimum(np.rint(rng.lognormal(mu, _CITE_SIGMA, n)), _CITE_MAX).astype(np.int64)
    deg[0] = 0  # the first paper has nothing earlier to cite
    if spec.avg_citations == 0:
        deg[:] = 0
    src = np.repeat(np.arange(n, dtype=np.int64), deg)
    # earlier papers overall: fitness mass before each paper; within a community: the same over the
    # papers ordered by (community, id), from the community's first member up to the citing paper
    before_all = np.concatenate([[0.0], np.cumsum(fitness)])
    order = np.argsort(community, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    before_comm = np.concatenate([[0.0], np.cumsum(fitness[order])])
    first = np.searchsorted(community[order], community)  # each paper's community's first position
    lo, hi = before_comm[first[src]], before_comm[rank[src]]
    same = (rng.random(src.shape[0]) < spec.homophily) & (hi > lo)  # a community with no earlier paper: anywhere
    u = rng.random(src.shape[0])
    dst = np.empty_like(src)
    dst[same] = order[np.minimum(np.searchsorted(before_comm[1:], lo[same] + u[same] * (hi[same] - lo[same]),
                                                 side="right"), n - 1)]
    dst[~same] = np.minimum(np.searchsorted(before_all[1:], u[~same] * before_all[src[~same]], side="right"), n - 1)
    keep = dst < src  # a draw at a boundary's edge (float rounding) can land on the citing paper: dropped
    key = np.unique(src[keep] * n + dst[keep])
    return key // n, key % n


def _split(spec: CitationSpec, src: np.ndarray, dst: np.ndarray) -> dict:
    """ogbl-citation2's split of the citations (sorted by citing paper): one valid and one test reference
    for each of the latest eval_fraction of papers with two references or more; the rest train."""
    n = spec.num_nodes
    rng = _rng(_HOLDOUT, spec.seed)
    starts = np.searchsorted(src, np.arange(n + 1))
    refs = np.diff(starts)
    latest = np.arange(n) >= n - int(round(spec.eval_fraction * n))
    sources = np.flatnonzero(latest & (refs >= 2))
    # two distinct references of each: a random one, and another at a random non-zero offset from it
    first = (rng.random(sources.shape[0]) * refs[sources]).astype(np.int64)
    offset = 1 + (rng.random(sources.shape[0]) * (refs[sources] - 1)).astype(np.int64)
    valid_pos = starts[sources] + first
    test_pos = starts[sources] + (first + offset) % refs[sources]
    train = np.ones(src.shape[0], dtype=bool)
    train[valid_pos] = train[test_pos] = False
    neg = _rng(_NEGATIVES, spec.seed)
    split = {"train": {"source_node": src[train], "target_node": dst[train]}}
    for part, pos in (("valid", valid_pos), ("test", test_pos)):
        split[part] = {"source_node": src[pos], "target_node": dst[pos],
                       "target_node_neg": draw_negatives(neg, src[pos], dst[pos], n, spec.num_negatives)}
    return check_split(split, n, NAME, spec.num_negatives)


def generate(spec: CitationSpec, directory: PathLike, *, store: bool = True, codec: CodecSpec = "auto",
             progress: bool = True, keep_complete: bool = False) -> Path:
    """Write the prepared link data set of `spec` into `directory` (replaced if present); return it.

    `store` pre-encodes the features with `codec` ("auto": fit_codec's choice; meta.json names
    it). `directory` must be absent, empty or an earlier output of ibp-graph
    (``files.check_output``); the work happens in a temporary folder beside it, moved into
    place at the end (with `keep_complete`, a data set another process finished first is kept).
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")
    final = check_output(directory)
    n = spec.num_nodes
    check_free(final, disk_bytes(spec, store), f"the generated citation set of {n:,} nodes (x, year, graph, split"
               f"{', store' if store else ''})")
    with work_dir(final) as tmp:
        t0 = time.perf_counter()
        community, fitness = _nodes(spec)
        src, dst = _citations(spec, community, fitness)
        del fitness
        split = _split(spec, src, dst)
        del src, dst
        write_split(tmp, split)
        train = split["train"]
        graph = build_csc(lambda: iter([(train["source_node"], train["target_node"])]), n, tmp / "graph",
                          undirected=True, dedup=True, progress=progress)
        num_edges = graph.num_edges
        del graph
        save_npy(tmp / "year.npy", _FIRST_YEAR + (np.arange(n, dtype=np.int64) * _YEARS) // n)
        x = open_npy(tmp / "x.npy", np.float32, (n, spec.dim))
        graphgen.embedding_rows(x, 0, community, seed=spec.seed, topic_fraction=spec.topic_fraction,
                                num_classes=spec.num_communities)
        del x
        stored = encode_store(tmp, codec, progress=progress) if store else {"store_fraction": None}
        write_link_meta(tmp, name=NAME, source={"generator": "ibp_graph.data.citegen",
                                                "spec": dataclasses.asdict(spec)}, undirected=True, **stored)
        replace_dir(tmp, final, keep=LinkPreparedDataset.is_complete if keep_complete else lambda p: False)
    if progress:
        sizes = {p: split[p]["source_node"].shape[0] for p in split}
        print(f"generated {final}: {n:,} nodes, {num_edges:,} graph edges, train/valid/test {sizes['train']:,}/"
              f"{sizes['valid']:,}/{sizes['test']:,} citations, {spec.num_negatives} negatives each, "
              f"{spec.dim}-d float32 features in {time.perf_counter() - t0:.1f} s", flush=True)
    return final
