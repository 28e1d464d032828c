"""A generated ogbn-mag-like heterogeneous data set: papers, authors, institutions, fields of study.

ogbn-mag's shape, at a size the config chooses: four node types, four edge types
(author-writes-paper, author-affiliated_with-institution, paper-cites-paper,
paper-has_topic-field_of_study) plus the reverse types PyG's ``OGB_MAG`` gains from
``ToUndirected()`` (``rev_writes``, ``rev_affiliated_with``, ``rev_has_topic``; cites
made undirected), so messages reach papers from every type. Only papers have features
(128-d float32 averaged word embeddings, the homogeneous generator's recipe) and labels
(a venue; ogbn-mag has 349) with OGB's year split (train up to 2017, valid 2018, test 2019+).

The papers are the homogeneous generator's nodes (``ibp_graph.data.graphgen``: the same
classes, years, citation graph and features for the same sizes and seed). Every
author, institution and field of study has a latent class too; a paper's authors and
fields, and an author's institutions, share its class with probability ``homophily``
(else any, by preferential attachment), so the graph carries the label as ogbn-mag's
does and features lean toward the label: a classifier beats the majority class clearly.

Generated once into ``data_cache/`` (``ensure``), atomically, checksummed, in the
heterogeneous prepared layout (``ibp_graph.data.hetero``).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

from ..codec.auto import CodecSpec, check_kind
from ..files import check_free, check_output, replace_dir, save_npy, work_dir
from . import graphgen
from .graphgen import spec_field, spec_field_of
from .hetero import HeteroPreparedDataset, add_stores, encode_stores, write_hetero_meta, write_relations

__all__ = ["MagSpec", "NODE_TYPES", "EDGE_TYPES", "TARGET", "cache_dir", "ensure", "generate", "disk_bytes"]

PathLike = Union[str, os.PathLike]
#: node types, in OGB_MAG's order; only papers have features and labels.
NODE_TYPES = ("paper", "author", "institution", "field_of_study")
TARGET = "paper"
#: ogbn-mag's edge types, as its raw relations/ folder names them.
EDGE_TYPES = (("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
              ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study"))
_MAGGEN = 8  # stream family, distinct from graphgen's 7 and synthetic.py's 1..6
_AUTHORS, _INSTITUTIONS, _FIELDS, _WRITES, _AFFILIATED, _TOPICS = range(6)


@dataclass(frozen=True)
class MagSpec:
    """Sizes and statistics of a generated ogbn-mag-like data set (ogbn-mag: 736 k papers, 1.1 M authors,
    8.7 k institutions, 60 k fields, 349 classes)."""

    num_papers: int = spec_field(20_000, 2, help="papers (the labelled, featured type)")
    num_authors: int = spec_field(30_000, 1, help="authors")
    num_institutions: int = spec_field(400, 1, help="institutions")
    num_fields: int = spec_field(2_000, 1, help="fields of study")
    avg_citations: float = spec_field(7.0, 0.0, help="mean references per paper (log-normal)")
    authors_per_paper: float = spec_field(3.0, 1.0, help="mean authors per paper (1 + Poisson)")
    fields_per_paper: float = spec_field(5.0, 0.0, help="mean fields of study per paper (Poisson)")
    institutions_per_author: float = spec_field(1.0, 0.0, help="mean institutions per author (Poisson)")
    num_classes: int = spec_field(349, 2, 32767, "venues: the papers' labels")
    # the papers' features and class signal: GraphSpec's defaults and ranges (`papers` passes them on)
    dim: int = spec_field_of(graphgen.GraphSpec, "dim")
    homophily: float = spec_field_of(graphgen.GraphSpec, "homophily")
    topic_fraction: float = spec_field_of(graphgen.GraphSpec, "topic_fraction")
    degree_exponent: float = spec_field_of(graphgen.GraphSpec, "degree_exponent")
    seed: int = spec_field_of(graphgen.GraphSpec, "seed")

    def __post_init__(self) -> None:
        graphgen.check_spec_fields(self)

    @property
    def num_nodes(self) -> dict[str, int]:
        """Nodes per type."""
        return {"paper": self.num_papers, "author": self.num_authors, "institution": self.num_institutions,
                "field_of_study": self.num_fields}

    def papers(self) -> graphgen.GraphSpec:
        """The homogeneous spec whose nodes, citations and features are this data set's papers (all labeled)."""
        return graphgen.GraphSpec(num_nodes=self.num_papers, avg_citations=self.avg_citations,
                                  num_classes=self.num_classes, dim=self.dim, labeled_fraction=1.0,
                                  homophily=self.homophily, topic_fraction=self.topic_fraction,
                                  degree_exponent=self.degree_exponent, seed=self.seed)

    def key(self) -> str:
        """A short name for this spec's cache folder (changes whenever any field does)."""
        return graphgen.spec_key(self)


def disk_bytes(spec: MagSpec, store: bool = True) -> int:
    """Disk `generate` takes at most for `spec`: the papers' labels and split, every edge type (cites undirected,
    the others with their reverse types), and the larger of an edge type's copy while its duplicates are removed
    and what is written after them: the paper features and, with `store`, their feature store."""
    p, a, f, i = spec.num_papers, spec.num_authors, spec.num_fields, spec.num_institutions
    writes, topics, affiliations = p * spec.authors_per_paper, p * spec.fields_per_paper, \
        a * spec.institutions_per_author
    relations = [graphgen.csc_bytes(s, d, e) for s, d, e in ((p, p, 2 * p * spec.avg_citations), (a, p, writes),
                 (p, a, writes), (p, f, topics), (f, p, topics), (a, i, affiliations), (i, a, affiliations))]
    return 16 * p + 5 * graphgen.FILE_BYTES + sum(relations) + max(*relations, graphgen.table_bytes(p, spec.dim, store))


def cache_dir(spec: MagSpec, root: PathLike) -> Path:
    """Where `ensure` keeps the prepared data set of `spec` under `root`."""
    return Path(root) / f"synthetic-mag-{spec.num_papers}-{spec.key()}"


def ensure(spec: MagSpec, root: PathLike = "data_cache", *, store: bool = True, progress: bool = True) -> Path:
    """The prepared folder of `spec` under `root`, generated first if it is not there yet (or given its stores)."""
    final = cache_dir(spec, root)
    if HeteroPreparedDataset.is_complete(final):
        if store:
            add_stores(final, progress=progress)
        return final
    return generate(spec, final, store=store, progress=progress, keep_complete=True)


# ---------------------------------------------------------------------------------------------
# Generation


def _rng(purpose: int, chunk: int, seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([_MAGGEN, purpose, chunk, seed]))


def _members(spec: MagSpec, purpose: int, n: int) -> tuple[np.ndarray, graphgen._Targets]:
    """Latent classes of `n` nodes of one type, and the preferential-attachment draw over them."""
    classes = np.empty(n, dtype=np.int16)
    fitness = np.empty(n, dtype=np.float64)
    probs = graphgen._class_probs(spec.num_classes)
    for chunk, lo in enumerate(range(0, n, graphgen.NODE_CHUNK)):
        hi = min(n, lo + graphgen.NODE_CHUNK)
        rng = _rng(purpose, chunk, spec.seed)
        classes[lo:hi] = rng.choice(spec.num_classes, hi - lo, p=probs)
        fitness[lo:hi] = (1.0 - rng.random(hi - lo)) ** (-1.0 / (spec.degree_exponent - 1.0))
    return classes, graphgen._Targets(classes, fitness, spec.num_classes)


def _links(spec: MagSpec, purpose: int, src_classes: np.ndarray, targets: graphgen._Targets, mean: float,
           at_least_one: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Edges from each source node to targets of its class (probability homophily) or any, chunk by chunk.

    A source has ``1 + Poisson(mean - 1)`` targets when `at_least_one`, else ``Poisson(mean)``.
    """
    n = src_classes.shape[0]
    for chunk, lo in enumerate(range(0, n, graphgen.NODE_CHUNK)):
        hi = min(n, lo + graphgen.NODE_CHUNK)
        rng = _rng(purpose, chunk, spec.seed)
        deg = 1 + rng.poisson(mean - 1.0, hi - lo) if at_least_one else rng.poisson(mean, hi - lo)
        src = np.repeat(np.arange(lo, hi, dtype=np.int64), deg)
        yield src, targets.draw_for(rng, src, src_classes, spec.homophily)


def _flip(chunks) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for a, b in chunks():
        yield b, a


def generate(spec: MagSpec, directory: PathLike, *, store: bool = True, codec: CodecSpec = "auto",
             progress: bool = True, keep_complete: bool = False) -> Path:
    """Write the heterogeneous prepared data set of `spec` into `directory` (replaced if present); return it.

    `store` pre-encodes the paper features with `codec` ("auto": fit_codec's choice; meta.json
    names it). `directory` must be absent, empty or an earlier output of ibp-graph
    (``files.check_output``). Work happens in a temporary folder beside `directory`, moved into place at the
    end and removed however the run ends (with `keep_complete`, a data set another process
    finished first is kept).
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")  # before the data set is generated, not after
    final = check_output(directory)  # never over a folder of someone else's files
    check_free(final, disk_bytes(spec, store), f"the generated data set of {spec.num_papers:,} papers (edge types, "
               f"features, labels, split{', store' if store else ''})")
    papers = spec.papers()
    with work_dir(final) as tmp:
        t0 = time.perf_counter()
        n = spec.num_papers
        classes = np.empty(n, dtype=np.int16)
        year = np.empty(n, dtype=np.int16)
        fitness = np.empty(n, dtype=np.float64)
        for chunk, lo in enumerate(range(0, n, graphgen.NODE_CHUNK)):
            hi = min(n, lo + graphgen.NODE_CHUNK)
            part = graphgen._node_chunk(papers, chunk, hi - lo)
            classes[lo:hi], year[lo:hi], fitness[lo:hi] = part["class"], part["year"], part["fitness"]
        save_npy(tmp / "y.npy", classes.astype(np.int64))
        (tmp / "split").mkdir()
        splits = {"train": year <= graphgen._TRAIN_LAST_YEAR, "valid": year == graphgen._VALID_YEAR,
                  "test": year > graphgen._VALID_YEAR}
        for name, mask in splits.items():
            save_npy(tmp / "split" / f"{name}.npy", np.flatnonzero(mask).astype(np.int64))

        paper_targets = graphgen._Targets(classes, fitness, spec.num_classes)
        author_cls, author_targets = _members(spec, _AUTHORS, spec.num_authors)
        _, institution_targets = _members(spec, _INSTITUTIONS, spec.num_institutions)
        _, field_targets = _members(spec, _FIELDS, spec.num_fields)
        # a paper's authors are drawn for the paper, then stored author -> paper
        writes = functools.partial(_links, spec, _WRITES, classes, author_targets, spec.authors_per_paper, True)
        sources = {
            ("author", "affiliated_with", "institution"): functools.partial(
                _links, spec, _AFFILIATED, author_cls, institution_targets, spec.institutions_per_author, False),
            ("author", "writes", "paper"): functools.partial(_flip, writes),
            ("paper", "cites", "paper"): functools.partial(graphgen._edge_chunks, papers, classes, paper_targets),
            ("paper", "has_topic", "field_of_study"): functools.partial(
                _links, spec, _TOPICS, classes, field_targets, spec.fields_per_paper, False),
        }
        edge_types = write_relations(tmp, sources, spec.num_nodes, progress=progress)
        del paper_targets, author_targets, institution_targets, field_targets

        (tmp / "nodes" / TARGET).mkdir(parents=True)
        graphgen._write_features(tmp / "nodes" / TARGET / "x.npy", classes, papers, progress, workers=1)
        stored = encode_stores(tmp, codec, progress=progress) if store else {}
        meta = write_hetero_meta(tmp, name="synthetic-mag", num_classes=spec.num_classes, target=TARGET,
                                 num_nodes=spec.num_nodes, edge_types=edge_types,
                                 source={"generator": "ibp_graph.data.maggen", "spec": dataclasses.asdict(spec)})
        replace_dir(tmp, final, keep=HeteroPreparedDataset.is_complete if keep_complete else lambda p: False)
    if progress:
        num_edges = sum(e[3] for e in meta["edge_types"])
        codec_note = (f" (store {stored[TARGET]['store_codec']} {stored[TARGET]['store_fraction']:.4f} of raw)"
                      if store else "")
        print(f"generated {final}: {sum(spec.num_nodes.values()):,} nodes of 4 types, {num_edges:,} edges of "
              f"{len(edge_types)} types, paper features {spec.dim}-d float32{codec_note} "
              f"in {time.perf_counter() - t0:.1f} s", flush=True)
    return final
