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
import functools
import gzip
import io
import os
import pickle
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..codec.auto import CodecSpec, check_kind
from ..files import check_free, check_output, open_npy, replace_dir, save_npy, work_dir
from .hetero import HeteroPreparedDataset, encode_stores, write_hetero_meta, write_relations
from .maggen import EDGE_TYPES, NODE_TYPES, TARGET
from .ogb import (CHUNK_ROWS, DamagedOGBFileError, MissingOGBFilesError, OGBFiles, _csv_chunks, _damaged,
                  _labels_to_int, check_present, with_copy_source)
from .prepared import SPLITS, progress_bar

__all__ = ["NAME", "URL", "NUM_CLASSES", "OGB_FILES", "required_files", "dataset_dir", "default_prepared_dir",
           "check_files", "prepare", "prepare_mag240m", "mag240m_dir", "MAG240M_NUM_NODES", "MAG240M_NUM_CLASSES",
           "MAG240M_DIM", "MAG240M_EDGE_TYPES"]

PathLike = Union[str, os.PathLike]
NAME = "ogbn-mag"
#: where OGB publishes the raw files (a zip with the top folder mag/).
URL = "http://snap.stanford.edu/ogb/data/nodeproppred/mag.zip"
NUM_CLASSES = 349
#: its raw files: where they are (ROOT itself, ROOT/ogbn_mag as OGB keeps them, or ROOT/mag as the zip unpacks)
#: and which `prepare` reads.
OGB_FILES = OGBFiles(NAME, "ogbn_mag", "mag", URL, (
    "raw/num-node-dict.csv.gz", f"raw/node-feat/{TARGET}/node-feat.csv.gz",
    f"raw/node-label/{TARGET}/node-label.csv.gz",
    *(f"raw/relations/{'___'.join(et)}/edge.csv.gz" for et in EDGE_TYPES),
    *(f"split/time/{TARGET}/{part}.csv.gz" for part in SPLITS)))
dataset_dir = OGB_FILES.dataset_dir
default_prepared_dir = OGB_FILES.prepared_dir
check_files = OGB_FILES.check


def required_files() -> list[str]:
    """The raw files (relative to the data set folder) that `prepare` reads."""
    return list(OGB_FILES.required)


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


def _checked_edges(path: Path, src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int,
                   counts_from: str) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst), or a DamagedOGBFileError naming `path` when an id is outside its node type's count."""
    for ids, limit, what in ((src, num_src, "source"), (dst, num_dst, "destination")):
        if ids.size and (ids.min() < 0 or ids.max() >= limit):
            bad = ids.min() if ids.min() < 0 else ids.max()
            raise DamagedOGBFileError(path, f"it names {what} node {bad}, outside [0, {limit}) ({counts_from}'s count)")
    return src, dst


def _edge_source(path: Path, num_src: int, num_dst: int, chunk_rows: int):
    """The (src, dst) chunks of one edge.csv.gz, each checked against the node counts."""
    def chunks():
        for c in _csv_chunks(path, np.int64, chunk_rows):
            if c.shape[1] != 2:
                raise DamagedOGBFileError(path, f"a line holds {c.shape[1]} values; expected 'src,dst'")
            yield _checked_edges(path, c[:, 0], c[:, 1], num_src, num_dst, "num-node-dict.csv.gz")
    return chunks


def _write_rows(path: Path, shape: tuple[int, int], dtype, blocks, where: Path, progress: bool) -> None:
    """A (rows, dim) .npy at `path` from row blocks, checked against `shape` (a DamagedOGBFileError names `where`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = shape[0]
    x = open_npy(path, dtype, shape)
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
    save_npy(path, y)
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
        save_npy(directory / "split" / f"{part}.npy", idx)
        sizes[part] = idx.shape[0]
    return sizes


def _summary(name: str, final: Path, meta: dict, sizes: dict, stored: dict, seconds: float) -> str:
    """The closing line of a preparation: node and edge counts, split sizes, the store's codec and fraction."""
    num_edges = sum(e[3] for e in meta["edge_types"])
    nodes = ", ".join(f"{v['num_nodes']:,} {t}" for t, v in meta["node_types"].items())
    store = (f"paper store ({stored[TARGET]['store_codec']}) {stored[TARGET]['store_fraction']:.4f} of raw"
             if stored else "no feature store")
    return (f"prepared {name} in {final}: {nodes}; {num_edges:,} edges of {len(meta['edge_types'])} types; "
            f"train {sizes['train']:,} / valid {sizes['valid']:,} / test {sizes['test']:,}; {store} in {seconds:.1f} s")


def prepare(root: PathLike, out: Optional[PathLike] = None, *, store: bool = True, codec: CodecSpec = "auto",
            progress: bool = True, chunk_rows: int = CHUNK_ROWS, keep_complete: bool = False) -> Path:
    """Convert OGB's raw ogbn-mag under `root` into a heterogeneous prepared folder (default
    <data set folder>/ibp_prepared); return it.

    `store` pre-encodes the paper features with `codec` ("auto": fit_codec's choice on a
    row sample; "ibp", "ebp", "identity" or a fitted codec). `out` must be absent, empty or
    an earlier output of ibp-graph, outside raw/ and split/. With `keep_complete`, a
    preparation another process finished first is kept.
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")  # before the conversion, not after
    src = check_files(root)
    raw = src / "raw"
    final = check_output(out if out is not None else src / "ibp_prepared", (raw, src / "split"))
    try:
        with work_dir(final) as tmp:
            t0 = time.perf_counter()
            say = print if progress else (lambda *a, **k: None)
            say(f"preparing {NAME} from {src} into {final}", flush=True)
            num_nodes = _num_nodes(raw / "num-node-dict.csv.gz")
            n = num_nodes[TARGET]
            feat_path = raw / "node-feat" / TARGET / "node-feat.csv.gz"
            first = next(_csv_chunks(feat_path, np.float32, 1), None)
            if first is None:
                raise DamagedOGBFileError(feat_path, "it is empty")
            check_free(tmp, n * (first.shape[1] * 4 + 8), f"{NAME}'s paper features and labels")

            # ---- edges: cites undirected, the three bipartite types with their reverses (ToUndirected)
            sources = {et: _edge_source(raw / "relations" / "___".join(et) / "edge.csv.gz", num_nodes[et[0]],
                                        num_nodes[et[2]], chunk_rows) for et in EDGE_TYPES}
            edge_types = write_relations(tmp, sources, num_nodes, dedup_bipartite=False, progress=progress)

            # ---- paper features, labels, splits
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
        raise OGB_FILES.with_copy_source(e, src) from None
    say(_summary(NAME, final, meta, sizes, stored, time.perf_counter() - t0), flush=True)
    return final


# ---------------------------------------------------------------------------------------------
# MAG240M (OGB-LSC): mag240m_kddcup2021/, numpy arrays and two small torch pickles

MAG240M_NAME = "mag240m"
#: where OGB-LSC publishes MAG240M (a zip with the top folder mag240m_kddcup2021/; 202 GB unzipped).
MAG240M_URL = "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/mag240m_kddcup2021.zip"
#: MAG240M's sizes (ogb/lsc/mag240m.py; its meta.pt).
MAG240M_NUM_NODES = {"paper": 121_751_666, "author": 122_383_112, "institution": 25_721}
MAG240M_NUM_CLASSES = 153
MAG240M_DIM = 768
#: MAG240M's edge types (processed/<src>___<rel>___<dst>/edge_index.npy).
MAG240M_EDGE_TYPES = (("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
                      ("paper", "cites", "paper"))
_MAG240M_DIR = "mag240m_kddcup2021"
_MAG240M_FILES = ("meta.pt", "split_dict.pt", "processed/paper/node_feat.npy", "processed/paper/node_label.npy") + \
    tuple(f"processed/{'___'.join(et)}/edge_index.npy" for et in MAG240M_EDGE_TYPES)


def mag240m_dir(root: PathLike) -> Path:
    """MAG240M's folder under `root`: ROOT itself (holding processed/) or ROOT/mag240m_kddcup2021."""
    root = Path(root)
    return root if (root / "processed").is_dir() else root / _MAG240M_DIR


def _torch_file(path: Path) -> dict:
    """A torch.save'd dict of ints or id arrays, read without unpickling anything else (weights_only, numpy
    arrays allowed under the names numpy 1 and 2 pickle them by)."""
    import torch

    if not hasattr(torch.serialization, "safe_globals"):
        raise ImportError(f"reading {path} safely needs torch >= 2.5 (torch.serialization.safe_globals); this is "
                          f"torch {torch.__version__}")
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]  # numpy's array reconstructor, whatever its module
    allowed = [reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct"),
               (reconstruct, "numpy._core.multiarray._reconstruct"), np.ndarray, np.dtype]
    allowed += [type(np.dtype(t)) for t in ("i2", "i4", "i8", "u4", "u8", "f4", "f8")]
    with _damaged(path), torch.serialization.safe_globals(allowed):
        try:
            value = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError) as e:  # torch's "Weights only load failed"
            why = str(e).split("WeightsUnpickler error:")[-1].strip().split("\n")[0][:200]
            raise DamagedOGBFileError(path, f"it holds objects other than ints and arrays ({why})") from None
    if not isinstance(value, dict):
        raise DamagedOGBFileError(path, f"it holds a {type(value).__name__}; expected a dict")
    return value


def _npy(path: Path) -> np.ndarray:
    with _damaged(path):
        return np.load(path, mmap_mode="r", allow_pickle=False)


def prepare_mag240m(root: PathLike, out: Optional[PathLike] = None, *, store: bool = True,
                    codec: CodecSpec = "auto", progress: bool = True, chunk_rows: int = CHUNK_ROWS,
                    keep_complete: bool = False) -> Path:
    """Convert MAG240M (OGB-LSC's mag240m_kddcup2021 layout) into a heterogeneous prepared folder (default
    <folder>/ibp_prepared); return it.

    Reads meta.pt (node counts, classes) and split_dict.pt (train/valid/test paper ids)
    without unpickling arbitrary objects, processed/paper/node_feat.npy (float16,
    memory-mapped: hard-linked into the folder when it is on the same file system, else
    copied in chunks), node_label.npy (NaN: unlabeled) and the three edge types'
    edge_index.npy, streamed; cites is made undirected and writes/affiliated_with gain
    their reverse types, as for ogbn-mag. Splits keep labeled papers only (MAG240M's
    test labels are hidden, so its test split is empty). Authors and institutions have no
    features.
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")
    src = mag240m_dir(root)
    check_present(MAG240M_NAME, root, src, list(_MAG240M_FILES), MAG240M_URL, _MAG240M_DIR, _MAG240M_DIR,
                  "ogb.lsc.MAG240MDataset(root=...)")
    final = check_output(out if out is not None else src / "ibp_prepared",
                         [src / f for f in ("processed", "meta.pt", "split_dict.pt")])
    try:
        return _prepare_mag240m(src, final, store, codec, progress, chunk_rows, keep_complete)
    except DamagedOGBFileError as e:
        raise with_copy_source(e, src, MAG240M_URL, _MAG240M_DIR) from None


def _prepare_mag240m(src: Path, final: Path, store: bool, codec: CodecSpec, progress: bool, chunk_rows: int,
                     keep_complete: bool) -> Path:
    t0 = time.perf_counter()
    with work_dir(final) as tmp:
        meta_pt = _torch_file(src / "meta.pt")
        num_nodes = {}
        for t in ("paper", "author", "institution"):
            v = meta_pt.get(t)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise DamagedOGBFileError(src / "meta.pt", f"{t}={v!r}; expected a node count")
            num_nodes[t] = v
        num_classes = meta_pt.get("num_classes", MAG240M_NUM_CLASSES)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise DamagedOGBFileError(src / "meta.pt", f"num_classes={num_classes!r}; expected an integer >= 1")
        n = num_nodes["paper"]

        sources = {}
        for et in MAG240M_EDGE_TYPES:
            path = src / "processed" / "___".join(et) / "edge_index.npy"
            ei = _npy(path)
            if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
                raise DamagedOGBFileError(path, f"it holds {ei.dtype} {ei.shape}; expected integer (2, num_edges)")
            sources[et] = functools.partial(_npy_edges, path, ei, num_nodes[et[0]], num_nodes[et[2]], chunk_rows)
        edge_types = write_relations(tmp, sources, num_nodes, dedup_bipartite=False, progress=progress)

        feat_path = src / "processed" / "paper" / "node_feat.npy"
        feat = _npy(feat_path)
        if feat.ndim != 2 or feat.shape[0] != n or not feat.flags.c_contiguous:
            raise DamagedOGBFileError(feat_path, f"it holds {feat.dtype} {feat.shape}; expected C-ordered ({n}, dim)")
        x_path = tmp / "nodes" / TARGET / "x.npy"
        x_path.parent.mkdir(parents=True)
        try:
            os.link(feat_path, x_path)  # 174 GiB: shared with OGB-LSC's file, not copied (checksummed below)
        except OSError:
            _write_rows(x_path, feat.shape, feat.dtype, (feat[i:i + chunk_rows] for i in range(0, n, chunk_rows)),
                        feat_path, progress)
        label_path = src / "processed" / "paper" / "node_label.npy"
        labels = _npy(label_path)
        y = _write_labels(tmp / "y.npy", n, (labels[i:i + chunk_rows] for i in range(0, labels.shape[0], chunk_rows)),
                          num_classes, label_path)
        split_pt = _torch_file(src / "split_dict.pt")
        parts = {"train": "train", "valid": "valid", "test": "test" if "test" in split_pt else "test-whole"}
        missing = [k for k in parts.values() if k not in split_pt]
        if missing:
            raise DamagedOGBFileError(src / "split_dict.pt", f"it lacks {missing}; it holds {sorted(split_pt)}")
        sizes = _write_splits(tmp, y, {p: (np.asarray(split_pt[k]), src / "split_dict.pt") for p, k in parts.items()})

        stored = encode_stores(tmp, codec, progress=progress) if store else {}
        meta = write_hetero_meta(tmp, name=MAG240M_NAME, num_classes=num_classes, target=TARGET, num_nodes=num_nodes,
                                 edge_types=edge_types, source={"ogb-lsc": MAG240M_NAME, "raw": str(src),
                                                                "url": MAG240M_URL})
        replace_dir(tmp, final, keep=HeteroPreparedDataset.is_complete if keep_complete else lambda p: False)
    if progress:
        print(_summary(MAG240M_NAME, final, meta, sizes, stored, time.perf_counter() - t0), flush=True)
    return final


def _npy_edges(path: Path, ei: np.ndarray, num_src: int, num_dst: int, chunk: int):
    """(src, dst) chunks of a memory-mapped (2, E) edge_index, checked against the node counts."""
    for lo in range(0, ei.shape[1], chunk):
        with _damaged(path):
            src, dst = np.asarray(ei[0, lo:lo + chunk], np.int64), np.asarray(ei[1, lo:lo + chunk], np.int64)
        yield _checked_edges(path, src, dst, num_src, num_dst, "meta.pt")
