"""OGB's raw ogbn-mag (the files of mag.zip) -> a heterogeneous prepared folder (``ibp_graph.data.hetero``).

Reads the layout OGB unzips to ``ROOT/ogbn_mag`` (``mag/`` in the zip; see
``ogb/io/read_graph_raw.py: read_csv_heterograph_raw, read_node_label_hetero,
read_nodesplitidx_split_hetero``) without the ``ogb`` package::

    raw/num-node-dict.csv.gz                          a header of node types, one row of counts
    raw/node-feat/paper/node-feat.csv.gz              736,389 x 128 float32 (averaged word2vec)
    raw/node-label/paper/node-label.csv.gz            the venue of each paper (349 classes)
    raw/relations/<src>___<rel>___<dst>/edge.csv.gz   one "src,dst" line per edge, four edge types
    split/time/paper/{train,valid,test}.csv.gz        paper ids (OGB's year split)

and writes what PyG's ``OGB_MAG(transform=ToUndirected())`` trains on: paper features
(and their pre-encoded store), labels, splits, and the four edge types with cites made
undirected and the reverse types ``rev_writes``, ``rev_affiliated_with``,
``rev_has_topic``. Files are streamed in chunks; the folder is written atomically,
checksummed, and checked when opened.
"""
from __future__ import annotations

import csv
import gzip
import io
import os
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..codec.auto import CodecSpec, check_kind
from ..files import replace_dir, work_dir
from .hetero import HeteroPreparedDataset, encode_stores, write_hetero_meta, write_relations
from .maggen import EDGE_TYPES, NODE_TYPES, TARGET
from .ogb import (CHUNK_ROWS, DamagedOGBFileError, MissingOGBFilesError, _csv_chunks, _damaged, _labels_to_int,
                  check_present, find_dataset_dir)
from .prepared import SPLITS, progress_bar

__all__ = ["NAME", "URL", "NUM_CLASSES", "required_files", "dataset_dir", "default_prepared_dir", "check_files",
           "prepare", "prepare_mag240m", "MAG240M_NUM_NODES", "MAG240M_NUM_CLASSES", "MAG240M_DIM"]

PathLike = Union[str, os.PathLike]
NAME = "ogbn-mag"
#: where OGB publishes the raw files (a zip with the top folder mag/).
URL = "http://snap.stanford.edu/ogb/data/nodeproppred/mag.zip"
NUM_CLASSES = 349
_DIR_NAME, _DOWNLOAD_NAME = "ogbn_mag", "mag"


def required_files() -> list[str]:
    """The raw files (relative to the data set folder) that `prepare` reads."""
    rel = [f"raw/relations/{'___'.join(et)}/edge.csv.gz" for et in EDGE_TYPES]
    return (["raw/num-node-dict.csv.gz", f"raw/node-feat/{TARGET}/node-feat.csv.gz",
             f"raw/node-label/{TARGET}/node-label.csv.gz"] + rel
            + [f"split/time/{TARGET}/{part}.csv.gz" for part in SPLITS])


def dataset_dir(root: PathLike) -> Path:
    """The data set folder under `root`: ROOT itself, ROOT/ogbn_mag (OGB's) or ROOT/mag (the zip's)."""
    return find_dataset_dir(root, _DIR_NAME, _DOWNLOAD_NAME)


def default_prepared_dir(root: PathLike) -> Path:
    """Where `prepare` writes unless told otherwise: <data set folder>/ibp_prepared."""
    return dataset_dir(root) / "ibp_prepared"


def check_files(root: PathLike) -> Path:
    """The data set folder, or MissingOGBFilesError naming each missing file and where OGB publishes it."""
    return check_present(NAME, root, dataset_dir(root), required_files(), URL, _DIR_NAME, _DOWNLOAD_NAME)


def _num_nodes(path: Path) -> dict[str, int]:
    """num-node-dict.csv.gz: a header naming the node types and one row of counts."""
    with _damaged(path), gzip.open(path, "rt", newline="") as f:
        rows = [r for r in csv.reader(io.StringIO(f.read())) if r]
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise DamagedOGBFileError(path, f"expected a header of node types and one row of counts, found "
                                        f"{len(rows)} row(s)")
    try:
        counts = {t.strip(): int(v) for t, v in zip(rows[0], rows[1])}
    except ValueError:
        raise DamagedOGBFileError(path, f"the counts {rows[1]} are not integers") from None
    lacking = [t for t in NODE_TYPES if t not in counts]
    if lacking or any(v < 0 for v in counts.values()):
        raise DamagedOGBFileError(path, f"it lists {counts}; expected non-negative counts of {list(NODE_TYPES)}")
    return {t: counts[t] for t in NODE_TYPES}


def _edge_source(path: Path, num_src: int, num_dst: int, chunk_rows: int):
    """The (src, dst) chunks of one edge.csv.gz, each checked against the node counts."""
    def chunks():
        for c in _csv_chunks(path, np.int64, chunk_rows):
            if c.shape[1] != 2:
                raise DamagedOGBFileError(path, f"a line holds {c.shape[1]} values; expected 'src,dst'")
            for col, limit, what in ((0, num_src, "source"), (1, num_dst, "destination")):
                if c.shape[0] and (c[:, col].min() < 0 or c[:, col].max() >= limit):
                    bad = c[:, col].min() if c[:, col].min() < 0 else c[:, col].max()
                    raise DamagedOGBFileError(path, f"it names {what} node {bad}, outside [0, {limit}) "
                                                    "(num-node-dict.csv.gz's count)")
            yield c[:, 0], c[:, 1]
    return chunks


def _write_rows(path: Path, shape: tuple[int, int], dtype, blocks, where: Path, progress: bool) -> None:
    """A (rows, dim) .npy at `path` from row blocks, checked against `shape` (a DamagedOGBFileError names `where`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = shape[0]
    x = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    pos = 0
    bar = progress_bar(n, f"{path.parent.name} features", progress)
    for block in blocks:
        if block.ndim != 2 or block.shape[1] != shape[1] or pos + block.shape[0] > n:
            raise DamagedOGBFileError(where, f"rows {pos}.. have shape {block.shape[1:]} (expected ({shape[1]},)) "
                                             f"or there are more than {n} rows")
        x[pos:pos + block.shape[0]] = block
        pos += block.shape[0]
        bar.update(block.shape[0])
    bar.close()
    if pos != n:
        raise DamagedOGBFileError(where, f"it has {pos} rows; expected {n} (one per node)")
    del x


def _write_labels(path: Path, n: int, blocks, num_classes: int, where: Path) -> np.ndarray:
    """y.npy (int64, -1 unlabeled) from label blocks (float with NaN for unlabeled, or int); returns it."""
    y = np.empty(n, dtype=np.int64)
    pos = 0
    for block in blocks:
        if pos + block.shape[0] > n:
            raise DamagedOGBFileError(where, f"it has more than {n} labels")
        y[pos:pos + block.shape[0]] = _labels_to_int(block, num_classes, str(where))
        pos += block.shape[0]
    if pos != n:
        raise DamagedOGBFileError(where, f"it has {pos} labels; expected {n} (one per node)")
    np.save(path, y)
    return y


def _write_splits(directory: Path, y: np.ndarray, parts: dict) -> dict[str, int]:
    """split/<part>.npy for {part: (node ids, the file they came from)}: labeled nodes only; returns the sizes."""
    (directory / "split").mkdir()
    n, sizes = y.shape[0], {}
    for part, (idx, where) in parts.items():
        idx = np.asarray(idx).reshape(-1)
        if idx.dtype.kind not in "iu":
            raise DamagedOGBFileError(where, f"its {part} ids are {idx.dtype}; expected integers")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise DamagedOGBFileError(where, f"it names paper {idx.min() if idx.min() < 0 else idx.max()}, "
                                             f"outside [0, {n})")
        idx = idx[y[idx] >= 0]
        np.save(directory / "split" / f"{part}.npy", idx)
        sizes[part] = idx.shape[0]
    return sizes


def prepare(root: PathLike, out: Optional[PathLike] = None, *, store: bool = True, codec: CodecSpec = "auto",
            progress: bool = True, chunk_rows: int = CHUNK_ROWS, keep_complete: bool = False) -> Path:
    """Convert OGB's raw ogbn-mag under `root` into a heterogeneous prepared folder (default
    <data set folder>/ibp_prepared); return it.

    `store` pre-encodes the paper features with `codec` ("auto": fit_codec's choice on a
    row sample; "ibp", "ebp", "identity" or a fitted codec). With `keep_complete`, a
    preparation another process finished first is kept.
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")  # before the conversion, not after
    src = check_files(root)
    raw = src / "raw"
    final = Path(out) if out is not None else src / "ibp_prepared"
    try:
        with work_dir(final) as tmp:
            t0 = time.perf_counter()
            say = print if progress else (lambda *a, **k: None)
            say(f"preparing {NAME} from {src} into {final}", flush=True)
            num_nodes = _num_nodes(raw / "num-node-dict.csv.gz")
            n = num_nodes[TARGET]

            # ---- edges: cites undirected, the three bipartite types with their reverses (ToUndirected)
            sources = {et: _edge_source(raw / "relations" / "___".join(et) / "edge.csv.gz", num_nodes[et[0]],
                                        num_nodes[et[2]], chunk_rows) for et in EDGE_TYPES}
            edge_types = write_relations(tmp, sources, num_nodes, dedup_bipartite=False, progress=progress)

            # ---- paper features, labels, splits
            feat_path = raw / "node-feat" / TARGET / "node-feat.csv.gz"
            first = next(_csv_chunks(feat_path, np.float32, 1), None)
            if first is None:
                raise DamagedOGBFileError(feat_path, "it is empty")
            _write_rows(tmp / "nodes" / TARGET / "x.npy", (n, first.shape[1]), np.float32,
                        _csv_chunks(feat_path, np.float32, chunk_rows), feat_path, progress)
            label_path = raw / "node-label" / TARGET / "node-label.csv.gz"
            y = _write_labels(tmp / "y.npy", n, _csv_chunks(label_path, np.float64, chunk_rows), NUM_CLASSES,
                              label_path)
            split_dir = src / "split" / "time" / TARGET
            sizes = _write_splits(tmp, y, {part: (np.concatenate(
                [c.reshape(-1) for c in _csv_chunks(split_dir / f"{part}.csv.gz", np.int64)]
                or [np.zeros(0, np.int64)]), split_dir / f"{part}.csv.gz") for part in SPLITS})

            stored = encode_stores(tmp, codec, progress=progress) if store else {}
            meta = write_hetero_meta(tmp, name=NAME, num_classes=NUM_CLASSES, target=TARGET, num_nodes=num_nodes,
                                     edge_types=edge_types, source={"ogb": NAME, "raw": str(src), "url": URL})
            replace_dir(tmp, final, keep=HeteroPreparedDataset.is_complete if keep_complete else lambda p: False)
    except DamagedOGBFileError as e:
        if e.source:
            raise
        rel = e.path.relative_to(src).as_posix() if e.path.is_relative_to(src) else e.path.name
        raise DamagedOGBFileError(e.path, e.what, f"a good copy is in {URL} as {_DOWNLOAD_NAME}/{rel}") from None
    num_edges = sum(e[3] for e in meta["edge_types"])
    say(f"prepared {NAME} in {final}: " + ", ".join(f"{v:,} {t}" for t, v in num_nodes.items())
        + f"; {num_edges:,} edges of {len(edge_types)} types; train {sizes['train']:,} / valid {sizes['valid']:,}"
          f" / test {sizes['test']:,}"
        + (f"; paper store ({stored[TARGET]['store_codec']}) {stored[TARGET]['store_fraction']:.4f} of raw"
           if store else "; no feature store") + f" in {time.perf_counter() - t0:.1f} s", flush=True)
    return final


# ---------------------------------------------------------------------------------------------
# MAG240M (OGB-LSC): the layout is known; converting it is not implemented yet

MAG240M_NAME = "mag240m"
#: where OGB-LSC publishes MAG240M (a zip with the top folder mag240m_kddcup2021/; 202 GB unzipped).
MAG240M_URL = "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/mag240m_kddcup2021.zip"
#: MAG240M's sizes (ogb/lsc/mag240m.py; its meta.pt).
MAG240M_NUM_NODES = {"paper": 121_751_666, "author": 122_383_112, "institution": 25_721}
MAG240M_NUM_CLASSES = 153
MAG240M_DIM = 768
_MAG240M_DIR = "mag240m_kddcup2021"
_MAG240M_FILES = ("meta.pt", "split_dict.pt", "processed/paper/node_feat.npy", "processed/paper/node_label.npy",
                  "processed/paper/node_year.npy", "processed/author___writes___paper/edge_index.npy",
                  "processed/author___affiliated_with___institution/edge_index.npy",
                  "processed/paper___cites___paper/edge_index.npy")


def prepare_mag240m(root: PathLike, out: Optional[PathLike] = None, *, store: bool = True,
                    codec: CodecSpec = "auto", progress: bool = True) -> Path:
    """MAG240M (OGB-LSC's mag240m_kddcup2021 layout) -> a heterogeneous prepared folder: not implemented yet.

    Checks the files first (a MissingOGBFilesError names each missing one and the URL),
    then raises NotImplementedError naming what is missing in this reader.
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")
    root = Path(root)
    d = root if (root / "processed").is_dir() else root / _MAG240M_DIR
    missing = [f for f in _MAG240M_FILES if not (d / f).is_file()]
    if missing:
        lines = "\n".join(f"  {d / f}" for f in missing)
        raise MissingOGBFilesError(f"{MAG240M_NAME}: {len(missing)} file(s) missing under {d}:\n{lines}\n"
                                   f"Download {MAG240M_URL} and unzip it in {root} (or run OGB-LSC's "
                                   f"MAG240MDataset(root=...) once where there is internet and pass that root).")
    raise NotImplementedError(
        f"preparing {MAG240M_NAME} from {d} is not implemented: this reader does not yet read meta.pt and "
        "split_dict.pt (torch pickles; they must be read without unpickling arbitrary objects) nor serve "
        "processed/paper/node_feat.npy (174 GiB float16) in place instead of copying it; "
        "configs/mag240m.yaml documents the layout and the memory a run needs")
