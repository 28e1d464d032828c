"""OGB's ogbl-citation2 from a local folder in OGB's own layout -> a prepared link folder.

Reads the files where OGB's ``LinkPropPredDataset("ogbl-citation2", root)`` keeps them
(``ROOT/ogbl_citation2/``; ogb 1.3.6's ``linkproppred/dataset.py``, ``io/read_graph_raw.py``
and master.csv: csv layout, additional node file node_year, split "time") without needing
the ``ogb`` package:

    raw/edge.csv.gz            source,target per line: the citation graph (training edges)
    raw/node-feat.csv.gz       128 floats per node
    raw/node_year.csv.gz       one year per node
    raw/num-node-list.csv.gz   the node count; raw/num-edge-list.csv.gz the edge count
    split/time/train.pt        torch-saved dicts: {source_node, target_node} (train) and
    split/time/valid.pt        {source_node, target_node, target_node_neg [n, 1000]}
    split/time/test.pt

and writes a prepared link folder (``ibp_graph.data.link``): the graph of the training
edges with any validation or test edge removed (OGB's graph already holds none),
undirected unless asked otherwise (what OGB's citation2 GNN examples train on), the
features, years, the split, and the features pre-encoded. Nothing read is trusted:
every array's shape, dtype and node ids are checked, and a missing or malformed file
is named with what was expected. The .pt files are read with ``torch.load(weights_only=True)``
(tensors and plain containers only: no code runs from a downloaded pickle).
"""
from __future__ import annotations

import os
import pickle
import time
import zipfile
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..codec.auto import CodecSpec, check_kind
from ..files import check_free, check_output, replace_dir, save_npy, work_dir
from .link import LinkPreparedDataset, check_part, check_split, holdout_mask, write_link_meta, write_split
from .ogb import CHUNK_ROWS, DamagedOGBFileError, OGBFiles, _csv_chunks, _csv_scalar, write_rows
from .prepared import SPLITS, EdgeIdError, build_csc, encode_store

__all__ = ["NAME", "DIR_NAME", "DOWNLOAD_NAME", "URL", "OGB_FILES", "required_files", "dataset_dir",
           "default_prepared_dir", "check_files", "read_split", "prepare"]

PathLike = Union[str, os.PathLike]
NAME = "ogbl-citation2"
DIR_NAME = "ogbl_citation2"
DOWNLOAD_NAME = "citation-v2"
URL = "http://snap.stanford.edu/ogb/data/linkproppred/citation-v2.zip"
SPLIT = "time"
RAW = ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node_year.csv.gz", "raw/num-node-list.csv.gz",
       "raw/num-edge-list.csv.gz")


#: its raw files: where they are (ROOT itself, ROOT/ogbl_citation2 as OGB keeps them, or ROOT/citation-v2 as the
#: zip unpacks) and which `prepare` reads.
OGB_FILES = OGBFiles(NAME, DIR_NAME, DOWNLOAD_NAME, URL, RAW + tuple(f"split/{SPLIT}/{part}.pt" for part in SPLITS),
                     f"LinkPropPredDataset(name={NAME!r}, root=...)")
dataset_dir = OGB_FILES.dataset_dir
default_prepared_dir = OGB_FILES.prepared_dir
check_files = OGB_FILES.check


def required_files() -> list[str]:
    """The files (relative to the data set folder) that `prepare` reads."""
    return list(OGB_FILES.required)


def _load_pt(path: Path) -> dict:
    """A torch-saved dict of one split part, read without running code from the file."""
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise DamagedOGBFileError(path, f"not a torch-saved dict of tensors ({type(e).__name__}: {e})") from None
    if not isinstance(value, dict):
        raise DamagedOGBFileError(path, f"it holds a {type(value).__name__}; expected a dict of tensors")
    return value


def read_split(src: Path, num_nodes: int) -> dict:
    """split/time/{train,valid,test}.pt, checked (``link.check_part``: keys, shapes, dtypes, node ids; valid and
    test with as many candidates per edge); an error names the file and what was expected."""
    d = src / "split" / SPLIT
    parts = {}
    for part in SPLITS:
        path = d / f"{part}.pt"
        try:
            parts[part] = check_part(part, _load_pt(path), num_nodes, str(path))
        except ValueError as e:
            if isinstance(e, DamagedOGBFileError):
                raise
            raise DamagedOGBFileError(path, str(e).split(": ", 1)[1]) from None
    try:
        return check_split(parts, num_nodes, str(d))
    except ValueError as e:
        raise ValueError(f"{e}: valid.pt and test.pt must list as many candidates per edge") from None


def prepare(root: PathLike, out: Optional[PathLike] = None, *, undirected: bool = True, store: bool = True,
            codec: CodecSpec = "auto", progress: bool = True, chunk_rows: int = CHUNK_ROWS,
            keep_complete: bool = False) -> Path:
    """Convert ogbl-citation2's files under `root` into a prepared link folder (default <data set
    folder>/ibp_prepared); return it.

    `undirected` stores every graph edge in both directions without duplicates (the split keeps
    the citations' direction). `store` pre-encodes the features with `codec` ("auto": fit_codec's
    choice). `out` must be absent, empty or an earlier output of ibp-graph, outside raw/ and
    split/ (``files.check_output``); with `keep_complete`, a preparation another process finished
    first is kept.
    """
    if isinstance(codec, str):
        check_kind(codec, "codec")
    src = check_files(root)
    raw = src / "raw"
    final = check_output(out if out is not None else src / "ibp_prepared", (raw, src / "split"))
    say = print if progress else (lambda *a, **k: None)
    try:
        with work_dir(final) as tmp:
            t0 = time.perf_counter()
            say(f"preparing {NAME} from {src} into {final}", flush=True)
            num_nodes = _csv_scalar(raw / "num-node-list.csv.gz")
            num_input_edges = _csv_scalar(raw / "num-edge-list.csv.gz")
            if num_nodes < 3:
                raise DamagedOGBFileError(raw / "num-node-list.csv.gz", f"it counts {num_nodes} nodes; expected >= 3")
            split = read_split(src, num_nodes)
            held_src = np.concatenate([split[p]["source_node"] for p in ("valid", "test")])
            held_dst = np.concatenate([split[p]["target_node"] for p in ("valid", "test")])
            removed = [0]

            def chunks():
                removed[0] = 0
                for c in _csv_chunks(raw / "edge.csv.gz", np.int64, chunk_rows):
                    if c.ndim != 2 or c.shape[1] != 2:
                        raise DamagedOGBFileError(raw / "edge.csv.gz", f"a line has {c.shape[-1]} fields; "
                                                  "expected source,target")
                    drop = holdout_mask(c[:, 0], c[:, 1], held_src, held_dst, num_nodes)
                    removed[0] += int(drop.sum())
                    yield c[~drop, 0], c[~drop, 1]

            first = next(_csv_chunks(raw / "node-feat.csv.gz", np.float32, 1))
            feat_shape = (num_nodes, first.shape[1])
            check_free(tmp, num_nodes * (first.shape[1] * 4 + 3 * 8), f"{NAME}'s features, years and indptr")
            try:
                graph = build_csc(chunks, num_nodes, tmp / "graph", undirected=undirected, dedup=undirected,
                                  progress=progress, total_edges=num_input_edges)
            except EdgeIdError as e:  # a node id outside [0, num_nodes)
                raise DamagedOGBFileError(raw / "edge.csv.gz", str(e)) from None
            num_edges, kept = graph.num_edges, graph.num_edge_ids // (2 if undirected else 1)
            del graph
            if kept + removed[0] != num_input_edges:
                raise DamagedOGBFileError(raw / "edge.csv.gz", f"it lists {kept + removed[0]} edges; "
                                          f"num-edge-list.csv.gz counts {num_input_edges}")
            write_rows(tmp / "x.npy", _csv_chunks(raw / "node-feat.csv.gz", np.float32, chunk_rows), feat_shape,
                       np.dtype(np.float32), progress=progress, what=str(raw / "node-feat.csv.gz"))
            year = np.concatenate([c.reshape(c.shape[0], -1) for c in _csv_chunks(raw / "node_year.csv.gz", np.int64)])
            if year.shape != (num_nodes, 1):
                raise DamagedOGBFileError(raw / "node_year.csv.gz", f"it holds {year.shape} values; expected one "
                                          f"year per node ({num_nodes} lines of one value)")
            save_npy(tmp / "year.npy", year[:, 0])
            write_split(tmp, split)
            stored = encode_store(tmp, codec, progress=progress) if store else {"store_fraction": None}
            write_link_meta(tmp, name=NAME, source={"ogb": NAME, "raw": str(src), "url": URL},
                            undirected=undirected, heldout_edges_removed=removed[0], **stored)
            replace_dir(tmp, final, keep=LinkPreparedDataset.is_complete if keep_complete else lambda p: False)
    except DamagedOGBFileError as e:
        raise OGB_FILES.with_copy_source(e, src) from None
    sizes = {p: split[p]["source_node"].shape[0] for p in SPLITS}
    say(f"prepared {NAME} in {final}: {num_nodes:,} nodes, {num_edges:,} graph edges "
        f"({'undirected' if undirected else 'as given'}; {removed[0]:,} held-out edges removed), "
        f"x {feat_shape} float32; train {sizes['train']:,} / valid {sizes['valid']:,} / test {sizes['test']:,} "
        f"with {split['valid']['target_node_neg'].shape[1]} negatives each"
        + (f"; feature store ({stored['store_codec']}) {stored['store_fraction']:.4f} of raw" if store else
           "; no feature store") + f" in {time.perf_counter() - t0:.1f} s", flush=True)
    return final
