"""Experiment configuration: a typed YAML schema (dataclasses) with command-line overrides.

A config file holds up to six sections (``name``, ``data``, ``loader``, ``model``,
``train``, ``output``); anything left out keeps its default. Unknown keys and values of
the wrong type are rejected with the list of valid keys or the accepted type; any key
can be overridden from the command line as ``--set loader.batch_size=2048`` (the value
is read as YAML: ``--set loader.num_neighbors=[15,10,5]``).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import tempfile
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import yaml

from ..codec.auto import KINDS
from ..data.citegen import CitationSpec
from ..data.graphgen import GraphSpec, finite
from ..data.maggen import MagSpec
from ..pipeline.sharded import DEFAULT_TIMEOUT, MAX_TIMEOUT
from .models import DECODERS, FRAMEWORK_ARCHS

__all__ = ["Config", "DataConfig", "LoaderConfig", "ModelConfig", "TrainConfig", "OutputConfig", "LinkConfig",
           "ConfigError", "load_config", "check_config", "from_dict", "apply_overrides", "to_dict", "DATASETS",
           "HETERO_DATASETS", "LINK_DATASETS", "TASKS", "DECODERS", "FRAMEWORKS", "FEATURES"]

#: front-ends `loader.framework` accepts: the loader and model of PyG or of DGL.
FRAMEWORKS = ("pyg", "dgl")
#: where a rank's feature rows live (`loader.features`): the whole table on every rank, or a shard per rank.
FEATURES = ("local", "sharded")
#: data sets `data.name` accepts.
DATASETS = ("synthetic", "ogbn-papers100M", "ogbn-products", "ogbn-arxiv", "synthetic-mag", "ogbn-mag", "mag240m",
            "synthetic-citation", "ogbl-citation2")
#: the heterogeneous ones (papers, authors, institutions, fields; papers labeled): trained with a heterogeneous model.
HETERO_DATASETS = ("synthetic-mag", "ogbn-mag", "mag240m")
#: the link-prediction ones (directed citations, ogbl-citation2's split): `task: link`.
LINK_DATASETS = ("synthetic-citation", "ogbl-citation2")
#: the data sets ibp-graph generates (into data.root; a run makes them and their shards itself) rather than reads
#: from downloaded files (synthetic-citation by train/link.py's open_link_dataset).
GENERATED_DATASETS = ("synthetic", "synthetic-mag", "synthetic-citation")
#: what `task` accepts: node classification or link prediction.
TASKS = ("node", "link")


_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class ConfigError(ValueError):
    """A config file or override names an unknown key, or a value of the wrong type."""


def _choice(default, choices: Sequence[Any], help: str):
    return field(default=default, metadata={"choices": tuple(choices), "help": help})


def _num(default, help: str, minimum=None, maximum=None, *, min_open: bool = False, max_open: bool = False):
    """A numeric field accepting [minimum, maximum] (an open end with min_open / max_open); floats finite."""
    return field(default=default, metadata={"min": minimum, "max": maximum, "min_open": min_open,
                                            "max_open": max_open, "help": help})


#: the largest fan-out, batch or model size a key accepts (int32: the samplers' and models' indices).
MAX_COUNT = 2 ** 31 - 1
#: bytes a run's result file needs at most in output.dir (one JSON per codec run).
RESULT_BYTES = 1 << 20
#: bytes of memory per generated node (class, year, fitness and the citation draw's arrays), at least.
GEN_NODE_BYTES = 48


@dataclass
class DataConfig:
    """Which data set, and where it lives."""

    name: str = _choice("synthetic", DATASETS, "the data set")
    root: str = field(default="data_cache", metadata={
        "help": "synthetic, synthetic-mag: the cache folder; OGB: the folder holding OGB's data set folder "
                "(e.g. ROOT/ogbn_papers100M/raw/data.npz, ROOT/ogbn_mag/raw/...)"})
    prepared: Optional[str] = field(default=None, metadata={
        "help": "OGB: the prepared folder (default ROOT/<ogb folder>/ibp_prepared)"})
    shards: Optional[str] = field(default=None, metadata={
        "help": "loader.features sharded: the shards folder (default PREPARED/shards-<world size>, where "
                "`ibp-graph prepare --shards W` writes them)"})
    store: bool = field(default=True, metadata={
        "help": "serve features from the pre-encoded store (no per-batch encoding) for codec auto "
                "and for the codec the store was encoded with"})
    synthetic: GraphSpec = field(default_factory=GraphSpec, metadata={
        "help": "the generated data set (name: synthetic); its per-node arrays must fit in memory and its "
                "files under data.root (checked before it is generated)"})
    mag: MagSpec = field(default_factory=MagSpec, metadata={
        "help": "the generated ogbn-mag-like heterogeneous data set (name: synthetic-mag); sizes checked "
                "as for data.synthetic"})
    citation: CitationSpec = field(default_factory=CitationSpec, metadata={
        "help": "the generated ogbl-citation2-like link data set (name: synthetic-citation); sizes checked "
                "as for data.synthetic"})


@dataclass
class LoaderConfig:
    """Loader settings: the front-end (CompressedNeighborLoader or CompressedDGLDataLoader) and its batches."""

    batch_size: int = _num(1024, "seed nodes (task link: positive edges) per training batch", 1, MAX_COUNT)
    eval_batch_size: int = _num(2048, "seed nodes per evaluation batch", 1, MAX_COUNT)
    num_neighbors: list[int] = field(default_factory=lambda: [10, 5], metadata={
        "help": "neighbours sampled per hop, each in [1, 2**31 - 1] or -1 (all); also the number of GNN layers"})
    num_workers: int = _num(1, "DataLoader worker processes per loader", 0, 1024)
    worker_timeout: float = _num(300.0, "seconds the main process waits for its workers' next batch before it stops "
                                        "with an error naming the stage (a hung worker; the other ranks of a run "
                                        "then stop too, instead of waiting); 0: forever", 0.0, 1e7)
    codecs: list[str] = field(default_factory=lambda: ["auto"], metadata={
        "choices": KINDS, "help": "one run per codec listed: auto (per group the smallest of ibp and "
                                  "ebp, identity when neither gains), ibp, ebp, identity"})
    prefetch: int = _num(2, "batches decoded ahead on the device", 0, 1024)
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda or cuda:N"})
    framework: str = _choice("pyg", FRAMEWORKS, "pyg: CompressedNeighborLoader and PyG's models; dgl: "
                             "CompressedDGLDataLoader and DGL's GraphSAGE (runs in .venv-dgl, `make venv-dgl`)")
    features: str = _choice("local", FEATURES, "local: every rank holds the whole feature table (memory-mapped); "
                            "sharded: under torchrun each rank opens only its shard (data.shards, written by "
                            "`ibp-graph prepare --shards W`) and fetches other rows compressed from their owners "
                            "(the topology stays whole on every rank)")
    shard_cache_bytes: int = _num(0, "features sharded: bytes of the hottest remote rows kept compressed in host "
                                     "memory, per feature table (one cache for all the run's loaders)", 0,
                                  2 ** 63 - 1)
    shard_device_cache_bytes: int = _num(0, "features sharded, on a GPU: bytes of the hottest remote rows of all "
                                            "kept compressed in device memory, per feature table (before the host "
                                            "memory's shard_cache_bytes)", 0, 2 ** 63 - 1)
    shard_exchange_timeout: float = _num(DEFAULT_TIMEOUT, "features sharded: seconds a rank's row exchange waits for "
                                                          "a silent rank (one that hung, or is slower than that) "
                                                          "before every rank stops with an error naming the "
                                                          "exchange; a rank that dies stops them at once",
                                         0.0, MAX_TIMEOUT, min_open=True)


@dataclass
class ModelConfig:
    """The GNN."""

    arch: str = _choice("sage", ("sage", "gcn", "gat"), "GraphSAGE, GCN or GAT")
    hidden: int = _num(256, "hidden channels", 1, 1 << 16)
    dropout: float = _num(0.5, "dropout probability", 0.0, 1.0, max_open=True)
    heads: int = _num(4, "attention heads (gat; hidden must be a multiple)", 1, 1 << 10)
    norm: Optional[str] = _choice(None, (None, "batch_norm", "layer_norm"), "normalisation after each layer "
                                 "(PyG, homogeneous data sets)")


@dataclass
class TrainConfig:
    """Optimisation and evaluation."""

    epochs: int = _num(3, "passes over the training nodes", 1, 1 << 20)
    lr: float = _num(0.01, "Adam learning rate", 0.0, 1e3, min_open=True)
    weight_decay: float = _num(0.0, "Adam weight decay", 0.0, 1e3)
    max_batches: Optional[int] = _num(None, "cap on training batches per epoch (smoke tests)", 1, MAX_COUNT)
    eval_every: int = _num(1, "evaluate valid/test every this many epochs (and after the last)", 1, 1 << 20)
    seed: int = _num(0, "torch seed (model init, shuffling, sampling)", 0, 2 ** 63 - 1)


@dataclass
class LinkConfig:
    """Link prediction (`task: link`): the decoder, the training negatives and the evaluation."""

    decoder: str = _choice("dot", DECODERS, "score of an edge: dot (of the two ends' embeddings) or mlp (an MLP "
                           "on their element-wise product, as OGB's citation2 examples)")
    neg_sampling_ratio: float = _num(1.0, "negatives per positive training edge (PyG's binary neg_sampling_ratio)",
                                     0.0, 1000.0, min_open=True)
    hits_k: list[int] = field(default_factory=lambda: [1, 3, 10], metadata={
        "help": "the K of each Hits@K reported beside MRR (OGB's ogbl-citation2 evaluator: 1, 3, 10), each >= 1"})
    max_eval_edges: Optional[int] = _num(None, "cap on the valid/test edges ranked (quick runs; null: all)",
                                         1, MAX_COUNT)


@dataclass
class OutputConfig:
    """Where results go."""

    dir: str = field(default="runs", metadata={"help": "results folder: DIR/<name>-<time>-<codec>.json"})
    progress: bool = field(default=True, metadata={"help": "tqdm progress bars"})


@dataclass
class Config:
    """One experiment."""

    name: str = field(default="default", metadata={"help": "the experiment's name (results folder)"})
    data: DataConfig = field(default_factory=DataConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    task: str = _choice("node", TASKS, "node (classification) or link (prediction, on the LINK_DATASETS)")
    link: LinkConfig = field(default_factory=LinkConfig)


# ---------------------------------------------------------------------------------------------
# Validation


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        item = typing.get_args(tp)[0]
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(item, _type_name(item))
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false",
            type(None): "null"}.get(tp, getattr(tp, "__name__", str(tp)))


def _yaml_list(choices) -> str:
    """Accepted values as a list, None written as YAML writes it (null)."""
    return "[" + ", ".join("null" if c is None else repr(c) for c in choices) + "]"


def _convert(value, tp, where: str, meta: dict):
    """`value` as type `tp` (nested dataclasses built from mappings), or a ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        if (set(args) == {str, type(None)} and "choices" not in meta and isinstance(value, str)
                and value.strip().lower() in ("none", "null", "~", "")):
            # Python's None, or a quoted null: a string in YAML, which would be taken as a folder name
            raise ConfigError(f"{where}={value!r} is a string; for no value write null unquoted (or leave the key "
                              "out)")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(value, a, where, meta)
            except ConfigError as e:
                errors.append(e)
        if len(errors) == 1 and type(None) in args:  # an optional key: YAML's null is accepted too
            raise ConfigError(f"{errors[0]} or null") from None
        raise errors[0] if len(errors) == 1 else ConfigError(
            f"{where}={value!r} is not accepted; expected {_type_name(tp)}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={value!r} is not accepted; expected {_type_name(tp)}")
        (item,) = typing.get_args(tp)
        out = [_convert(v, item, f"{where}[{i}]", {}) for i, v in enumerate(value)]
        choices = meta.get("choices")
        for i, v in enumerate(out):
            if choices is not None and v not in choices:
                raise ConfigError(f"{where}[{i}]={v!r} is not accepted; choose from {_yaml_list(choices)}")
        return out
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={value!r} is not accepted; expected true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}={value!r} is not accepted; expected an integer")
    elif tp is float:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):
            what = "a number" if isinstance(value, bool) or not isinstance(value, (int, float)) else "a finite number"
            raise ConfigError(f"{where}={value!r} is not accepted; expected {what} {_bounds(meta)}".rstrip())
        value = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}={value!r} is not accepted; expected a string")
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and (value < lo or meta.get("min_open") and value == lo) or \
            hi is not None and (value > hi or meta.get("max_open") and value == hi):
        raise ConfigError(f"{where}={value!r} is not accepted; expected a value {_bounds(meta)}")
    return value


def _bounds(meta: dict) -> str:
    """The accepted range of a numeric field, as messages and --keys write it ("" when unbounded)."""
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        return f"in {'(' if meta.get('min_open') else '['}{lo}, {hi}{')' if meta.get('max_open') else ']'}"
    if lo is not None:
        return f"{'>' if meta.get('min_open') else '>='} {lo}"
    return f"{'<' if meta.get('max_open') else '<='} {hi}" if hi is not None else ""


def from_dict(cls, values: Any, where: str = ""):
    """Build dataclass `cls` from a mapping, rejecting unknown keys and mistyped values."""
    label = where or "the config"
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{label} must be a mapping of keys to values, got {type(values).__name__} "
                          f"{values!r}; valid keys: {', '.join(f.name for f in dataclasses.fields(cls))}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in values if k not in fields]
    if unknown:
        keys = ", ".join(f"{where}.{k}" if where else str(k) for k in unknown)
        raise ConfigError(f"unknown key {keys} in {label}; valid keys: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        f = fields[name]
        path = f"{where}.{name}" if where else name
        value = _convert(value, hints[name], path, dict(f.metadata))
        choices = f.metadata.get("choices")
        if choices is not None and not isinstance(value, list) and value not in choices:
            raise ConfigError(f"{path}={value!r} is not accepted; choose from {_yaml_list(choices)}")
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # a dataclass's own checks (GraphSpec)
        raise ConfigError(f"{label}: {e}") from None


_DEVICE = re.compile(r"auto|cpu|cuda(?::(0|[1-9][0-9]*))?", re.ASCII)
#: the largest device index torch takes (its DeviceIndex is 8 bits: torch.device("cuda:128") is cuda:-128).
MAX_DEVICE_INDEX = 127
#: the longest a result file's name gets beyond `name` (train/loop.py's _write: -<time>-<codec>[-w<ranks>][-<k>].json).
_RESULT_SUFFIX = len(f"-20260101-000000-{max(KINDS, key=len)}-w99999-999.json")
#: the longest `name` accepted: its result files' names must fit in a file name's 255 bytes.
MAX_NAME = 255 - _RESULT_SUFFIX


def valid_device(name: str) -> bool:
    """Whether `name` is auto, cpu, cuda or cuda:N with N in [0, MAX_DEVICE_INDEX] (what torch.device takes)."""
    m = _DEVICE.fullmatch(name)
    return m is not None and int(m.group(1) or 0) <= MAX_DEVICE_INDEX
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9._+-]*$")


def check_config(cfg: Config) -> Config:
    """Check what types alone cannot (fan-outs, model shapes, names, devices, the output folder); return `cfg`.

    Run before any data is generated or loaded, so a mistake costs seconds, not a
    data set generation or a whole training run.
    """
    if not _PLAIN_NAME.fullmatch(cfg.name) or cfg.name in (".", ".."):
        raise ConfigError(f"name={cfg.name!r} is not accepted; expected a plain name (letters, digits, '.', '_', "
                          "'+', '-'; no path separators, not starting with '.'): it names the result files")
    if len(cfg.name) > MAX_NAME:
        raise ConfigError(f"name={cfg.name!r} ({len(cfg.name)} characters) is not accepted; expected at most "
                          f"{MAX_NAME} characters: it names the result files, whose names have at most 255")
    lc = cfg.loader
    if not lc.num_neighbors:
        raise ConfigError("loader.num_neighbors=[] is not accepted; expected one entry per hop, e.g. [10, 5]")
    for i, k in enumerate(lc.num_neighbors):
        if (k < 1 or k > MAX_COUNT) and k != -1:
            raise ConfigError(f"loader.num_neighbors[{i}]={k!r} is not accepted; expected an integer >= 1, "
                              f"or -1 for all neighbours (at most {MAX_COUNT})")
    if not lc.codecs:
        raise ConfigError(f"loader.codecs=[] is not accepted; expected at least one of {list(KINDS)} "
                          "(one run per codec)")
    if not valid_device(lc.device):
        raise ConfigError(f"loader.device={lc.device!r} is not accepted; expected auto, cpu, cuda or cuda:N (N in "
                          f"[0, {MAX_DEVICE_INDEX}])")
    m = cfg.model
    _check_task(cfg)
    if cfg.data.name in HETERO_DATASETS:
        if lc.framework != "pyg":
            raise ConfigError(f"loader.framework={lc.framework!r} is not accepted with data.name="
                              f"{cfg.data.name!r} (heterogeneous); expected 'pyg': heterogeneous training runs "
                              "with CompressedNeighborLoader and PyG's HeteroConv")
        if m.arch != "sage":
            raise ConfigError(f"model.arch={m.arch!r} is not accepted with data.name={cfg.data.name!r} "
                              "(heterogeneous); expected 'sage' (a GraphSAGE layer per edge type)")
        if m.norm is not None:
            raise ConfigError(f"model.norm={m.norm!r} is not accepted with data.name={cfg.data.name!r} "
                              "(heterogeneous); expected null")
    if m.arch not in FRAMEWORK_ARCHS[lc.framework]:  # checked here too, so with the file's name and exit status 2
        raise ConfigError(f"model.arch={m.arch!r} is not accepted with loader.framework={lc.framework!r}; "
                          f"expected one of {list(FRAMEWORK_ARCHS[lc.framework])}")
    if lc.framework == "dgl" and m.norm is not None:  # BlockSAGE would train without it, silently
        raise ConfigError(f"model.norm={m.norm!r} is not accepted with loader.framework='dgl' (DGL's GraphSAGE has "
                          "no normalisation layers); expected null, or loader.framework=pyg")
    if m.arch == "gat" and m.hidden % m.heads:
        raise ConfigError(f"model.hidden={m.hidden} is not accepted with model.heads={m.heads} (arch gat); "
                          f"expected a multiple of model.heads, e.g. {m.hidden - m.hidden % m.heads or m.heads}")
    _check_sharded(cfg)
    if cfg.data.prepared is not None and cfg.data.name in GENERATED_DATASETS:  # it would be ignored, silently
        raise ConfigError(f"data.prepared={cfg.data.prepared!r} is not accepted with data.name={cfg.data.name!r}: a "
                          "generated data set lives in data.root (<root>/<name>-<nodes>-<hash>); expected null, "
                          "and data.root for where it goes")
    check_folder("data.root", cfg.data.root)
    if cfg.data.name == "synthetic" and cfg.data.synthetic.labeled_fraction == 0:
        raise ConfigError("data.synthetic.labeled_fraction=0.0 is not accepted: no node would carry a label, so the "
                          "train split would be empty; expected a value in (0, 1]")
    _check_generated_size(cfg.data)
    _check_output_dir(cfg.output.dir, len(lc.codecs))
    return cfg


def _check_sharded(cfg: Config) -> None:
    """`loader.features: sharded` takes the pre-encoded store, which the shards are cut from (every front-end,
    task and data set takes sharded tables: train/sharding.py); the world size is checked when the run
    starts (train.loop)."""
    lc = cfg.loader
    if lc.features == "sharded" and not cfg.data.store:
        raise ConfigError("loader.features='sharded' is not accepted with data.store=false: the shards are cut "
                          "from the pre-encoded feature store (and serve its encoded rows); use data.store=true")
    if lc.shard_device_cache_bytes and (lc.features != "sharded" or lc.device == "cpu"):
        raise ConfigError(f"loader.shard_device_cache_bytes={lc.shard_device_cache_bytes} is not accepted with "
                          f"loader.features={lc.features!r} and loader.device={lc.device!r}: it keeps remote rows "
                          "of sharded features in GPU memory; use loader.features=sharded on a GPU device, or 0")


def _check_task(cfg: Config) -> None:
    """`task` and `data.name` agree; a link run's model is GraphSAGE and its Hits@K are distinct Ks >= 1."""
    if cfg.task == "link":
        if cfg.data.name not in LINK_DATASETS:
            raise ConfigError(f"data.name={cfg.data.name!r} is not accepted with task='link'; expected one of "
                              f"{list(LINK_DATASETS)}")
        if cfg.model.arch != "sage":
            raise ConfigError(f"model.arch={cfg.model.arch!r} is not accepted with task='link'; expected 'sage' "
                              "(the GraphSAGE encoder of the link model)")
        ks = cfg.link.hits_k
        for i, k in enumerate(ks):
            if k < 1 or k > MAX_COUNT:
                raise ConfigError(f"link.hits_k[{i}]={k!r} is not accepted; expected an integer in [1, {MAX_COUNT}]")
        if len(set(ks)) != len(ks):
            raise ConfigError(f"link.hits_k={ks!r} is not accepted; expected distinct values")
    elif cfg.data.name in LINK_DATASETS:
        raise ConfigError(f"data.name={cfg.data.name!r} is a link-prediction data set; expected task='link' with it "
                          f"(task={cfg.task!r})")


def existing_folder(path: Path) -> Path:
    """`path`, or its nearest existing folder above (the one a mkdir would write into)."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 1e12 else f"{n:.3g} bytes"


def check_folder(key: str, path: str) -> Path:
    """The folder `path` (key `key`'s value) or, when it is missing, the existing folder above it that a mkdir
    would write into; a ConfigError when it, or that path above it, is a file."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise ConfigError(f"{key}={path!r} is not accepted: it is a file; expected a folder (made if missing)")
    probe = existing_folder(d)
    if not probe.is_dir():
        raise ConfigError(f"{key}={path!r} is not accepted: {str(probe)!r} is a file; expected a folder")
    return probe


def _check_output_dir(path: str, runs: int = 1) -> None:
    """output.dir exists or can be made, takes a file (a probe written and removed), and has room for
    `runs` result files (RESULT_BYTES each)."""
    probe = check_folder("output.dir", path)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"output.dir={path!r} is not accepted: {str(probe)!r} is not writable by this user")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".ibp-graph-probe-"):
            pass
        free = shutil.disk_usage(probe).free
    except OSError as e:
        raise ConfigError(f"output.dir={path!r} is not accepted: {str(probe)!r} does not take a file "
                          f"({e.strerror or e}); expected a writable folder") from None
    if free < runs * RESULT_BYTES:
        raise ConfigError(f"output.dir={path!r} is not accepted: {str(probe)!r} has {free:,} bytes free; the "
                          f"results need {runs * RESULT_BYTES:,} ({runs} run(s)); expected a folder with room for them")


def _generated_needs(data: DataConfig) -> Optional[tuple[str, int, int]]:
    """(the spec's key, bytes of memory, bytes of disk) that generating data.synthetic / data.mag /
    data.citation needs (its per-node arrays at least; the files its generator writes, as its disk_bytes counts
    them), or None: nothing to generate."""
    if data.name == "synthetic":
        from ..data import graphgen
        from ..data.prepared import PreparedDataset

        g = data.synthetic
        if PreparedDataset.is_complete(graphgen.cache_dir(g, data.root)):
            return None
        return "data.synthetic", GEN_NODE_BYTES * g.num_nodes, graphgen.disk_bytes(g, data.store)
    if data.name == "synthetic-mag":
        from ..data import maggen
        from ..data.hetero import HeteroPreparedDataset

        m = data.mag
        if HeteroPreparedDataset.is_complete(maggen.cache_dir(m, data.root)):
            return None
        return "data.mag", GEN_NODE_BYTES * sum(m.num_nodes.values()), maggen.disk_bytes(m, data.store)
    if data.name == "synthetic-citation":
        from ..data import citegen
        from ..data.link import LinkPreparedDataset

        c = data.citation
        if LinkPreparedDataset.is_complete(citegen.cache_dir(c, data.root)):
            return None
        edges = math.ceil(c.num_nodes * c.avg_citations)
        # per node: community, fitness, cumulative sums and ranks; per citation: its draws and the pair keys
        return "data.citation", GEN_NODE_BYTES * c.num_nodes + 64 * edges, citegen.disk_bytes(c, data.store)
    return None


def _check_generated_size(data: DataConfig) -> None:
    """A generated data set must fit: its per-node arrays in memory, its files under data.root."""
    needs = _generated_needs(data)
    if needs is None:
        return
    from ..resources import available_memory

    key, memory, disk = needs
    spec = dataclasses.asdict({"data.synthetic": data.synthetic, "data.mag": data.mag,
                               "data.citation": data.citation}[key])
    sizes = ", ".join(f"{k}={v}" for k, v in spec.items() if k.startswith("num_") or k in ("dim", "avg_citations"))
    available = available_memory()
    if memory > available:
        raise ConfigError(f"{key} ({sizes}) is not accepted: generating it needs at least {_mb(memory)} of memory, "
                          f"{_mb(available)} available; expected fewer nodes")
    where = existing_folder(Path(data.root))
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return  # data.root is checked where the data set is made
    if disk > free:
        raise ConfigError(f"{key} ({sizes}) is not accepted: its files need at least {_mb(disk)} under "
                          f"data.root={data.root!r}, {_mb(free)} free on {str(where)!r}; expected fewer nodes, "
                          "a smaller dim or another data.root")


def to_dict(cfg) -> dict:
    """The config as plain values (what a run's JSON records)."""
    return dataclasses.asdict(cfg)


def apply_overrides(values: dict, overrides: Sequence[str]) -> dict:
    """Apply `KEY.PATH=VALUE` overrides (VALUE read as YAML) to a raw config mapping."""
    out = _deep_copy(values)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} is not accepted; expected KEY=VALUE, e.g. loader.batch_size=2048")
        key, text = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"--set {item!r}: the key {key!r} is malformed; expected e.g. loader.batch_size")
        try:
            value = _load_yaml(text) if text.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({e})") from None
        except ConfigError as e:
            raise ConfigError(f"--set {item!r}: the value: {e}") from None
        node = out
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            elif not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:i + 1])} is a value, not a section")
            node = nxt
        node[parts[-1]] = value
    return out


def _deep_copy(values: dict) -> dict:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in (values or {}).items()}


#: the most values (keys, items, scalars) an experiment's YAML may expand to, aliases counted each time used.
MAX_VALUES = 100_000


class _Loader(yaml.SafeLoader):
    """YAML as safe_load reads it, but a key twice in one mapping, an alias inside the value it names (a
    recursive value) or aliases that expand to more than `MAX_VALUES` values are ConfigErrors naming the line."""

    def compose_document(self):
        node = super().compose_document()
        _count_values(node, {}, set())
        return node

    def construct_mapping(self, node, deep=False):
        lines = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line, name = key.start_mark.line + 1, (key.tag, key.value)
                if name in lines:
                    raise ConfigError(f"line {line}: key {key.value!r} appears twice in one mapping (first on line "
                                      f"{lines[name]}); expected each key once")
                lines[name] = line
        return super().construct_mapping(node, deep)


def _count_values(node, counted: dict, open_: set) -> int:
    """The values `node` expands to (its aliases' each time), or a ConfigError for a recursive or too large one."""
    if id(node) in counted:
        return counted[id(node)]
    if id(node) in open_:
        raise ConfigError(f"line {node.start_mark.line + 1}: the value starting here holds an alias of itself (a "
                          "recursive value); expected values without recursion")
    open_.add(id(node))
    children = [] if isinstance(node, yaml.ScalarNode) else \
        [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
    n = 1 + sum(_count_values(c, counted, open_) for c in children)
    if n > MAX_VALUES:
        raise ConfigError(f"line {node.start_mark.line + 1}: this value expands to more than {MAX_VALUES:,} values "
                          "(aliases counted each time they are used); expected an experiment's few keys")
    open_.discard(id(node))
    counted[id(node)] = n
    return n


def _load_yaml(text: str):
    """`text` read as YAML by `_Loader`; a yaml.YAMLError when it is not YAML, a ConfigError as `_Loader` says."""
    try:
        return yaml.load(text, Loader=_Loader)
    except RecursionError:
        raise ConfigError("it nests values too deeply to be read; expected an experiment's few sections") from None


def load_config(path: Union[str, os.PathLike, None], overrides: Sequence[str] = ()) -> Config:
    """Read a YAML experiment (or the defaults when `path` is None), apply overrides, validate."""
    values: dict = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"config file {str(p)!r} is a folder; expected a YAML file"
                              + (f", e.g. one of {', '.join(sorted(x.name for x in p.glob('*.yaml')))}"
                                 if any(p.glob("*.yaml")) else ""))
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist"
                              + (f"; configs in {p.parent}: {', '.join(sorted(x.name for x in p.parent.glob('*.yaml')))}"
                                 if p.parent.is_dir() else ""))
        try:
            text = p.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file {str(p)!r} is not a text file ({e}); expected a YAML file") from None
        if "\x00" in text:
            raise ConfigError(f"config file {str(p)!r} is binary (it holds NUL bytes); expected a YAML file")
        try:
            values = _load_yaml(text) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p} is not valid YAML: {e}") from None
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{p} must hold a mapping of sections, got {type(values).__name__}")
    values = apply_overrides(values, overrides)
    try:
        return check_config(from_dict(Config, values))
    except ConfigError as e:
        if path is None:
            raise
        # a value refused from an override (a --set, or a script's flag) is not the file's: say so
        given = [o for o in overrides if (key := o.split("=", 1)[0].strip()) and key in str(e)]
        where = f"the override {given[0]!r} (over {path})" if given else path
        raise ConfigError(f"{where}: {e}") from None


def describe(cls=Config, prefix: str = "") -> list[str]:
    """One line per key: dotted name, type, default and help (for `ibp-graph train --keys`)."""
    lines = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            lines.extend(describe(tp, path + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        text = f"{path} ({_type_name(tp)}, default {default!r})"
        if f.metadata.get("choices") is not None:
            text += f" one of {list(f.metadata['choices'])}"
        if _bounds(f.metadata):
            text += f" {_bounds(f.metadata)}"
        if f.metadata.get("help"):
            text += f": {f.metadata['help']}"
        lines.append(text)
    return lines
