"""OGB node-property data sets from a local folder in OGB's own layout -> a prepared folder.

Reads the raw files exactly where OGB's ``NodePropPredDataset(name, root)`` keeps them
(``ROOT/ogbn_papers100M/raw/data.npz`` ...; see ``ogb/nodeproppred/dataset.py`` and
``ogb/io/read_graph_raw.py``) without needing the ``ogb`` package, and writes a
prepared folder (``ibp_graph.data.prepared``): CSC graph, features, int64 labels (-1
where OGB has NaN or no label), splits of labeled nodes, and the features
pre-encoded with the codec fit_codec picks on a row sample (or the one asked for).
Large arrays are streamed in chunks from the zip/gzip files straight into memory-mapped
outputs, so the 57 GB feature table of papers100M never has to fit in memory.
"""
from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..codec.auto import CodecSpec, check_kind
from ..files import check_free, check_output, open_npy, replace_dir, save_npy, work_dir
from .prepared import (PreparedDataset, SPLITS, EdgeIdError, build_csc, encode_store, progress_bar,
                       write_prepared_meta)

__all__ = ["OGBSpec", "OGBFiles", "OGB_DATASETS", "MissingOGBFilesError", "DamagedOGBFileError", "prepare", "check_files",
           "dataset_dir", "find_dataset_dir", "check_present", "with_copy_source", "required_files", "default_prepared_dir",
           "write_rows"]

PathLike = Union[str, os.PathLike]
_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/"
#: rows (features, labels) or edges read per step.
CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class OGBSpec:
    """What OGB's master.csv says about a node-property data set (the fields this reader needs)."""

    name: str
    dir_name: str        # the folder under ROOT (OGB renames the unzipped folder to it)
    download_name: str   # the zip's name and its top folder
    binary: bool         # raw/data.npz (True) or raw/*.csv.gz (False)
    split: str           # split/<split>/{train,valid,test}.csv.gz
    num_classes: int
    add_inverse_edge: bool

    @property
    def url(self) -> str:
        """Where OGB publishes the data set (a zip)."""
        return f"{_URL}{self.download_name}.zip"

    @property
    def raw(self) -> "OGBFiles":
        """Its raw files: where they are and which `prepare` reads."""
        raw = ["raw/data.npz", "raw/node-label.npz"] if self.binary else [
            "raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
            "raw/node-label.csv.gz"]
        return OGBFiles(self.name, self.dir_name, self.download_name, self.url,
                        tuple(raw + [f"split/{self.split}/{part}.csv.gz" for part in SPLITS]))


@dataclass(frozen=True)
class OGBFiles:
    """An OGB data set's raw files as OGB publishes them: the data set's `name`, the folder OGB keeps them in
    under ROOT (`dir_name`), the zip's name and top folder (`download_name`), where the zip is (`url`) and the
    files a reader needs (`required`, relative to the data set folder), and the OGB call that downloads them
    (`loader`; default ``NodePropPredDataset(name=..., root=...)``)."""

    name: str
    dir_name: str
    download_name: str
    url: str
    required: tuple[str, ...]
    loader: str = ""

    def dataset_dir(self, root: PathLike) -> Path:
        """The data set folder under `root`: ROOT itself, ROOT/<dir_name> (OGB's) or ROOT/<download_name> (the
        zip's), the first that holds raw/ or split/."""
        return find_dataset_dir(root, self.dir_name, self.download_name)

    def prepared_dir(self, root: PathLike) -> Path:
        """Where `prepare` writes unless told otherwise: <data set folder>/ibp_prepared."""
        return self.dataset_dir(root) / "ibp_prepared"

    def check(self, root: PathLike) -> Path:
        """The data set folder, or MissingOGBFilesError naming each missing file and where OGB publishes it."""
        return check_present(self.name, root, self.dataset_dir(root), list(self.required), self.url, self.dir_name,
                             self.download_name, self.loader)

    def with_copy_source(self, e: "DamagedOGBFileError", src: Path) -> "DamagedOGBFileError":
        """`e` (about a file of the data set folder `src`), naming where in the zip a good copy is."""
        return with_copy_source(e, src, self.url, self.download_name)


OGB_DATASETS: dict[str, OGBSpec] = {
    "ogbn-papers100M": OGBSpec("ogbn-papers100M", "ogbn_papers100M", "papers100M-bin", True, "time", 172, False),
    "ogbn-products": OGBSpec("ogbn-products", "ogbn_products", "products", False, "sales_ranking", 47, True),
    "ogbn-arxiv": OGBSpec("ogbn-arxiv", "ogbn_arxiv", "arxiv", False, "time", 40, False),
}


class MissingOGBFilesError(FileNotFoundError):
    """Some raw files of an OGB data set are not in the folder given."""


class DamagedOGBFileError(ValueError):
    """A raw file of an OGB data set cannot be read: truncated, not a zip/gzip, or damaged."""

    def __init__(self, path: PathLike, what: str, source: str = ""):
        self.path, self.what, self.source = Path(path), what, source
        super().__init__(f"{self.path} is damaged: {what}" + (f"; {source}" if source else "; download it again"))


@contextlib.contextmanager
def _damaged(path: Path) -> Iterator[None]:
    """Turn what zip/gzip/npy/csv readers raise on a damaged file into a DamagedOGBFileError naming it."""
    try:
        yield
    except DamagedOGBFileError:
        raise
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError, ValueError, UnicodeDecodeError, KeyError) as e:
        raise DamagedOGBFileError(path, f"{type(e).__name__}: {e}") from None


def with_copy_source(e: DamagedOGBFileError, src: Path, url: str, folder: str) -> DamagedOGBFileError:
    """`e`, naming where a good copy of its file is (in the zip at `url`, under `folder`/) if it names none yet;
    `src` is the data set folder the file's path is relative to."""
    if e.source:
        return e
    rel = e.path.relative_to(src).as_posix() if e.path.is_relative_to(src) else e.path.name
    return DamagedOGBFileError(e.path, e.what, f"a good copy is in {url} as {folder}/{rel}")


def _spec(name: str) -> OGBSpec:
    try:
        return OGB_DATASETS[name]
    except KeyError:
        raise ValueError(f"dataset={name!r} is not supported; choose from {', '.join(OGB_DATASETS)}") from None


def required_files(name: str) -> list[str]:
    """The raw files (relative to the data set folder) that `prepare` reads."""
    return list(_spec(name).raw.required)


def dataset_dir(name: str, root: PathLike) -> Path:
    """The data set folder under `root`: ROOT itself, ROOT/<dir_name> (OGB's) or ROOT/<zip folder>."""
    return _spec(name).raw.dataset_dir(root)


def find_dataset_dir(root: PathLike, dir_name: str, download_name: str) -> Path:
    """The first of ROOT, ROOT/`dir_name` (OGB's name) and ROOT/`download_name` (the zip's top folder) that
    holds raw/ or split/; ROOT/`dir_name` when none does."""
    root = Path(root)
    for cand in (root, root / dir_name, root / download_name):
        if (cand / "raw").is_dir() or (cand / "split").is_dir():
            return cand
    return root / dir_name


def default_prepared_dir(name: str, root: PathLike) -> Path:
    """Where `prepare` writes unless told otherwise: <data set folder>/ibp_prepared."""
    return _spec(name).raw.prepared_dir(root)


def check_files(name: str, root: PathLike) -> Path:
    """The data set folder, or MissingOGBFilesError naming each missing file and where OGB publishes it."""
    return _spec(name).raw.check(root)


def check_present(name: str, root: PathLike, d: Path, files: list[str], url: str, dir_name: str,
                  download_name: str, loader: str = "") -> Path:
    """`d`, or MissingOGBFilesError naming each of `files` (relative to `d`) that is missing, the zip (`url`, top
    folder `download_name`, which OGB renames `dir_name`) that holds it and the OGB call that downloads it
    (`loader`; default ``NodePropPredDataset(name=..., root=...)``)."""
    missing = [f for f in files if not (d / f).is_file()]
    if missing:
        lines = "\n".join(f"  {d / f}   (in {url} as {download_name}/{f})" for f in missing)
        raise MissingOGBFilesError(
            f"{name}: {len(missing)} raw file(s) missing under {d}:\n{lines}\n"
            f"Download {url}, unzip it in {Path(root)}"
            + (f" and rename {download_name}/ to {dir_name}/" if download_name != dir_name else "")
            + f" (or run OGB's {loader or f'NodePropPredDataset(name={name!r}, root=...)'} once where there is "
              "internet and pass that root).")
    return d


# ---------------------------------------------------------------------------------------------
# Readers


def _read_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        return fmt.read_array_header_1_0(f)
    if version == (2, 0):
        return fmt.read_array_header_2_0(f)
    return fmt._read_array_header(f, version)  # (3, 0): no public reader


class _NpzArray:
    """One array of an .npz file, read in row chunks without loading it whole."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key
        with _damaged(path), zipfile.ZipFile(path) as zf:
            if f"{key}.npy" not in zf.namelist():
                keys = sorted(n[:-4] for n in zf.namelist() if n.endswith(".npy"))
                raise DamagedOGBFileError(path, f"it holds no array {key!r} (it holds {keys})")
            with zf.open(f"{key}.npy") as f:
                self.shape, self.fortran, self.dtype = _read_header(f)

    def _open(self, zf: zipfile.ZipFile):
        f = zf.open(f"{self.key}.npy")
        _read_header(f)
        return f

    def rows(self, chunk_rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        """Row blocks of a C-ordered array (first axis), in order."""
        if self.fortran and len(self.shape) > 1 and self.shape[1] > 1:
            raise ValueError(f"{self.path}:{self.key} is stored in Fortran order; expected C order")
        row = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        with _damaged(self.path), zipfile.ZipFile(self.path) as zf, self._open(zf) as f:
            for lo in range(0, self.shape[0], chunk_rows):
                n = min(chunk_rows, self.shape[0] - lo)
                yield _frombuffer(f.read(n * row), self.dtype, (n,) + tuple(self.shape[1:]), self)

    def edge_pairs(self, chunk: int = CHUNK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) chunks of a (2, E) edge_index, in edge order."""
        if len(self.shape) != 2 or self.shape[0] != 2:
            raise ValueError(f"{self.path}:{self.key} has shape {self.shape}; expected (2, num_edges)")
        E, item = self.shape[1], self.dtype.itemsize
        with _damaged(self.path):
            with zipfile.ZipFile(self.path) as zf:
                if self.fortran:  # (src, dst) pairs are adjacent
                    with self._open(zf) as f:
                        for lo in range(0, E, chunk):
                            n = min(chunk, E - lo)
                            pair = _frombuffer(f.read(2 * n * item), self.dtype, (n, 2), self)
                            yield pair[:, 0], pair[:, 1]
                    return
                # C order: all sources, then all destinations: two readers in step
                with self._open(zf) as fs, self._open(zf) as fd:
                    _skip(fd, E * item)
                    for lo in range(0, E, chunk):
                        n = min(chunk, E - lo)
                        yield (_frombuffer(fs.read(n * item), self.dtype, (n,), self),
                               _frombuffer(fd.read(n * item), self.dtype, (n,), self))


def _skip(f, nbytes: int) -> None:
    step = 1 << 26
    while nbytes > 0:
        got = len(f.read(min(step, nbytes)))
        if not got:
            raise EOFError("unexpected end of an .npy member: the file is truncated")
        nbytes -= got


def _frombuffer(buf: bytes, dtype: np.dtype, shape: tuple, src) -> np.ndarray:
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(buf) != need:
        raise EOFError(f"{src.path}:{src.key} ended early (read {len(buf)} of {need} bytes): the file is truncated")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _csv_chunks(path: Path, dtype, chunk_rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
    """2-d blocks of a headerless .csv.gz (pandas when installed, as OGB reads it; else numpy)."""
    with _damaged(path):
        try:
            import pandas as pd
        except ImportError:
            pd = None
        if pd is not None:
            with pd.read_csv(path, compression="gzip", header=None, chunksize=chunk_rows) as reader:
                for df in reader:
                    block = df.to_numpy()
                    if np.dtype(dtype).kind in "iu" and block.dtype.kind == "f":  # astype would truncate 1.5 to 1
                        bad = ~(np.isfinite(block) & (block == np.round(block)))
                        if bad.any():
                            raise DamagedOGBFileError(path, f"it holds {block[bad][0].item()!r} where an integer is "
                                                            "expected")
                    yield block.astype(dtype, copy=False)
            return
        with gzip.open(path, "rt") as f:
            while True:
                lines = list(itertools.islice(f, chunk_rows))
                if not lines:
                    return
                kind = np.int64 if np.dtype(dtype).kind in "iu" else np.float64
                parsed = np.loadtxt(lines, delimiter=",", dtype=kind, ndmin=2)
                yield parsed.astype(dtype, copy=False)


def _edge_columns(path: Path, chunk_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(src, dst) chunks of a headerless "source,target" edge.csv.gz; a DamagedOGBFileError naming it when a
    line holds another number of values."""
    for c in _csv_chunks(path, np.int64, chunk_rows):
        if c.ndim != 2 or c.shape[1] != 2:
            raise DamagedOGBFileError(path, f"a line holds {c.shape[-1]} values; expected 'source,target'")
        yield c[:, 0], c[:, 1]


def _csv_scalar(path: Path) -> int:
    values = np.concatenate([c.reshape(-1) for c in _csv_chunks(path, np.int64)])
    if values.shape[0] != 1:
        raise ValueError(f"{path} lists {values.shape[0]} graphs; node-property data sets have one")
    return int(values[0])


def _one_column(path: Path, block: np.ndarray) -> np.ndarray:
    """The node ids of a split file's block; a DamagedOGBFileError naming `path` when a line holds several."""
    if block.ndim == 2 and block.shape[1] != 1:
        raise DamagedOGBFileError(path, f"a line holds {block.shape[1]} values; expected one node id per line")
    return block.reshape(-1)


def _labels_to_int(block: np.ndarray, num_classes: int, where: str) -> np.ndarray:
    """OGB labels (float with NaN for unlabeled, or int) -> int64 with -1 for unlabeled."""
    lab = block.reshape(block.shape[0], -1)
    if lab.shape[1] != 1:
        raise ValueError(f"{where} has {lab.shape[1]} label columns; expected one (multi-class)")
    lab = lab[:, 0]
    if lab.dtype.kind == "f":
        unlabeled = np.isnan(lab)
        out = np.where(unlabeled, -1, np.nan_to_num(lab, nan=-1.0)).astype(np.int64)
    else:
        out = lab.astype(np.int64)
    bad = (out < -1) | (out >= num_classes)
    if bad.any():
        raise ValueError(f"{where} holds label {out[bad][0]}; expected classes in [0, {num_classes}) or NaN")
    return out


def write_rows(path: Path, blocks: Iterator[np.ndarray], shape: tuple, dtype, *, progress: bool, what: str) -> None:
    """Row blocks of a feature file into a new memory-mapped `path` of `shape`; a ValueError naming `what`
    when the file has another number of rows than the graph has nodes."""
    x = open_npy(path, dtype, shape)
    pos = 0
    bar = progress_bar(shape[0], "features", progress)
    for block in blocks:
        if pos + block.shape[0] > shape[0] or block.shape[1:] != shape[1:]:
            raise ValueError(f"{what}: the feature file has more than {shape[0]} rows or rows of shape "
                             f"{block.shape[1:]}; the graph has {shape[0]} nodes of {shape[1:]} features")
        x[pos:pos + block.shape[0]] = block
        pos += block.shape[0]
        bar.update(block.shape[0])
    bar.close()
    if pos != shape[0]:
        raise ValueError(f"{what}: the feature file has {pos} rows; the graph has {shape[0]} nodes")
    del x


# ---------------------------------------------------------------------------------------------
# prepare


def prepare(name: str, root: PathLike, out: Optional[PathLike] = None, *, undirected: bool = True,
            store: bool = True, codec: CodecSpec = "auto", progress: bool = True, chunk_rows: int = CHUNK_ROWS,
            keep_complete: bool = False) -> Path:
    """Convert OGB's raw files under `root` into a prepared folder (default <data set folder>/ibp_prepared).

    `undirected` stores every edge in both directions without duplicates (what PyG's
    papers100M and arxiv examples train on; ogbn-products' raw edges are one direction of
    an undirected graph). `store` pre-encodes the features with `codec`: "auto" (fit_codec's
    choice on a row sample: IBP, EBP, or identity when neither gains), "ibp", "ebp",
    "identity" or a fitted codec; meta.json names it (store_codec). Prints progress and a
    closing line with the store's codec and fraction. `out` must be absent, empty or an
    earlier output of ibp-graph, outside raw/ and split/ (``files.check_output``).
    With `keep_complete`, a preparation another process finished first is kept.
    """
    spec = _spec(name)
    if isinstance(codec, str):
        check_kind(codec, "codec")  # before hours of conversion, not after
    src = check_files(name, root)
    final = check_output(out if out is not None else src / "ibp_prepared", (src / "raw", src / "split"))
    try:
        with work_dir(final) as tmp:  # removed however this ends; dead processes' ones too
            t0 = time.perf_counter()
            say = print if progress else (lambda *a, **k: None)
            say(f"preparing {name} from {src} into {final}", flush=True)

            # ---- graph and node counts
            if spec.binary:
                npz = src / "raw" / "data.npz"
                num_nodes_list = np.concatenate(list(_NpzArray(npz, "num_nodes_list").rows()))
                if num_nodes_list.shape[0] != 1:
                    raise ValueError(f"{npz} holds {num_nodes_list.shape[0]} graphs; node-property data sets have one")
                num_nodes = int(num_nodes_list[0])
                edges = _NpzArray(npz, "edge_index")
                if len(edges.shape) != 2 or edges.shape[0] != 2:
                    raise DamagedOGBFileError(npz, f"its edge_index has shape {edges.shape}; expected (2, num_edges)")
                num_input_edges = edges.shape[1]
                # OGB's reader takes the edges num_edges_list counts: an edge_index of another length is not this
                # graph's (another release, or damaged)
                counted = np.concatenate(list(_NpzArray(npz, "num_edges_list").rows()))
                if counted.shape != (1,) or int(counted[0]) != num_input_edges:
                    raise DamagedOGBFileError(npz, f"its num_edges_list is {counted.tolist()} and its edge_index "
                                                   f"holds {num_input_edges} edges; expected one equal count")
                edge_file, chunks = npz, lambda: edges.edge_pairs(chunk_rows)  # noqa: E731
                feat = _NpzArray(npz, "node_feat")
                feat_rows, feat_shape, feat_dtype = (lambda: feat.rows(chunk_rows)), feat.shape, np.dtype(np.float32)
            else:
                raw = src / "raw"
                num_nodes = _csv_scalar(raw / "num-node-list.csv.gz")
                num_input_edges = _csv_scalar(raw / "num-edge-list.csv.gz")
                edge_file = raw / "edge.csv.gz"
                chunks = lambda: _edge_columns(edge_file, chunk_rows)  # noqa: E731
                first = next(_csv_chunks(raw / "node-feat.csv.gz", np.float32, 1))
                feat_shape, feat_dtype = (num_nodes, first.shape[1]), np.dtype(np.float32)
                feat_rows = lambda: _csv_chunks(raw / "node-feat.csv.gz", np.float32, chunk_rows)  # noqa: E731

            check_free(tmp, int(np.prod(feat_shape)) * feat_dtype.itemsize + 2 * 8 * num_nodes,
                       f"{name}'s features, labels and indptr")  # before the long graph build
            # OGB's add_inverse_edge duplicates each raw edge reversed: the same graph as undirected=True
            both = undirected or spec.add_inverse_edge
            try:
                graph = build_csc(chunks, num_nodes, tmp / "graph", undirected=both, dedup=undirected,
                                  progress=progress, total_edges=num_input_edges)
            except EdgeIdError as e:  # checked as the edges are counted, before the graph is written
                raise DamagedOGBFileError(edge_file, f"{e} (the graph's node count)") from None
            num_edges, read = graph.num_edges, graph.num_edge_ids // (2 if both else 1)
            del graph
            if not spec.binary and read != num_input_edges:  # OGB's reader takes the edges num-edge-list counts
                raise DamagedOGBFileError(src / "raw" / "edge.csv.gz", f"it lists {read} edges; "
                                          f"num-edge-list.csv.gz counts {num_input_edges}")

            # ---- features
            if len(feat_shape) != 2 or feat_shape[0] != num_nodes:
                raise ValueError(f"{name}: node features have shape {feat_shape}; expected ({num_nodes}, dim)")
            write_rows(tmp / "x.npy", feat_rows(), tuple(feat_shape), feat_dtype, progress=progress, what=name)

            # ---- labels
            y = open_npy(tmp / "y.npy", np.int64, (num_nodes,))
            if spec.binary:
                where = f"{src / 'raw' / 'node-label.npz'}"
                blocks = _NpzArray(src / "raw" / "node-label.npz", "node_label").rows(chunk_rows)
            else:
                where = f"{src / 'raw' / 'node-label.csv.gz'}"
                blocks = _csv_chunks(src / "raw" / "node-label.csv.gz", np.float64, chunk_rows)
            pos = 0
            for block in blocks:
                y[pos:pos + block.shape[0]] = _labels_to_int(block, spec.num_classes, where)
                pos += block.shape[0]
            if pos != num_nodes:
                raise ValueError(f"{where} has {pos} labels; the graph has {num_nodes} nodes")
            labeled = int((y >= 0).sum())
            y_mem = np.asarray(y)

            # ---- splits: labeled nodes only
            (tmp / "split").mkdir()
            sizes, dropped = {}, {}
            for part in SPLITS:
                path = src / "split" / spec.split / f"{part}.csv.gz"
                idx = np.concatenate([_one_column(path, c) for c in _csv_chunks(path, np.int64)]
                                     or [np.zeros(0, np.int64)])
                if idx.size and (idx.min() < 0 or idx.max() >= num_nodes):
                    bad = idx.min() if idx.min() < 0 else idx.max()
                    raise ValueError(f"{path} names node {bad}, outside [0, {num_nodes})")
                keep = y_mem[idx] >= 0
                dropped[part] = int((~keep).sum())
                idx = idx[keep]
                save_npy(tmp / "split" / f"{part}.npy", idx.astype(np.int64))
                sizes[part] = idx.shape[0]
            del y, y_mem

            # ---- the pre-encoded feature store
            stored = encode_store(tmp, codec, progress=progress) if store else {"store_fraction": None}
            write_prepared_meta(tmp, name=name, num_classes=spec.num_classes,
                                source={"ogb": name, "raw": str(src), "url": spec.url}, undirected=undirected,
                                labeled=labeled, unlabeled_split_nodes_dropped=dropped, **stored)
            replace_dir(tmp, final, keep=PreparedDataset.is_complete if keep_complete else lambda p: False)
    except DamagedOGBFileError as e:
        raise spec.raw.with_copy_source(e, src) from None
    raw_bytes = int(np.prod(feat_shape)) * feat_dtype.itemsize
    say(f"prepared {name} in {final}: {num_nodes:,} nodes, {num_edges:,} edges"
        f" ({'undirected' if undirected else 'as given'}), x {tuple(feat_shape)} float32, {labeled:,} labeled;"
        f" train {sizes['train']:,} / valid {sizes['valid']:,} / test {sizes['test']:,}"
        + (f"; feature store ({stored['store_codec']}) {stored['store_fraction']:.4f} of raw "
           f"({raw_bytes / 1e9:.3g} GB -> {stored['store_bytes'] / 1e9:.3g} GB)" if store else "; no feature store")
        + f" in {time.perf_counter() - t0:.1f} s", flush=True)
    return final

