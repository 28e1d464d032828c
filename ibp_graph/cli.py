"""`ibp-graph`: the command line (demo, bench, prepare, verify, train, report)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


def _demo(argv: Sequence[str]) -> int:
    from .benchmarks.demo import main

    return main(argv)


def _bench(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="ibp-graph bench", usage="ibp-graph bench {codec,decode,gather,loader,sharded} "
                                "[options] (ibp-graph bench NAME --help: its options)")
    p.add_argument("what", choices=["codec", "decode", "gather", "loader", "sharded"],
                   help="which benchmark")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's options")
    a = p.parse_args(argv)
    rest = a.rest
    if a.what == "codec":
        from .benchmarks.codec import main
    elif a.what == "decode":
        from .benchmarks.decode import main
    elif a.what == "gather":
        from .benchmarks.gather import main
    elif a.what == "sharded":
        from .benchmarks.sharded import main
    else:
        from .benchmarks.loader import main
    return main(rest)


def _exit_on_sigterm() -> None:
    """In this command's process: SIGTERM raises SystemExit, so cleanup code (finally, with) runs."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _prepare(argv: Sequence[str]) -> int:
    from .codec.auto import KINDS
    from .train.config import DATASETS, HETERO_DATASETS, LINK_DATASETS, ConfigError, check_folder

    p = argparse.ArgumentParser(
        prog="ibp-graph prepare",
        description="Convert a data set once into memory-mappable arrays (CSC graph, features, labels, "
                    "splits) and a pre-encoded feature store.")
    p.add_argument("--dataset", required=True, choices=DATASETS, metavar="NAME",
                   help="ogbn-papers100M, ogbn-products, ogbn-arxiv, ogbn-mag (OGB's raw files under --root), "
                        "mag240m (OGB-LSC's mag240m_kddcup2021 under --root), "
                        "ogbl-citation2 (OGB's raw files and split/time/*.pt under --root; link prediction), "
                        "synthetic (the generated default data set), synthetic-mag (the generated "
                        "ogbn-mag-like one) or synthetic-citation (the generated ogbl-citation2-like one); "
                        "sizes of the generated ones from --config/--set")
    p.add_argument("--root", help="OGB: the folder holding OGB's data set folder (e.g. ROOT/ogbn_papers100M/raw); "
                                  "synthetic: the cache folder (default: the config's data.root, data_cache)")
    p.add_argument("--out", help="the prepared folder (default: <data set folder>/ibp_prepared; "
                                 "synthetic: <root>/synthetic-<nodes>-<hash>); it must be absent, empty or "
                                 "an earlier prepared folder, which is replaced, and outside the input")
    p.add_argument("--directed", action="store_true", help="keep OGB's edge directions (default: undirected)")
    p.add_argument("--no-store", action="store_true", help="skip the pre-encoded feature store")
    p.add_argument("--codec", choices=KINDS,
                   help="the feature store's codec (default auto: the smallest of ibp and ebp on a row "
                        "sample, identity when neither gains); the prepared folder records the choice. With "
                        "--shards, a folder prepared already keeps its store unless --codec is given: see --shards")
    p.add_argument("--config",
                   help="synthetic, synthetic-mag, synthetic-citation: take data.synthetic / data.mag / "
                        "data.citation from this experiment file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="synthetic, synthetic-mag: override a config key, e.g. data.synthetic.num_nodes=111059956")
    p.add_argument("--shards", type=int, metavar="W",
                   help="also cut the feature stores into W per-rank shards (PREPARED/shards-W, with a checksummed "
                        "shards.json) for `loader.features: sharded` under torchrun with W ranks; a folder "
                        "prepared already (with its store) from the same source and edge directions is kept and "
                        "only its shards are written, another one is prepared again. Without --codec its store is "
                        "kept whatever its codec; with --codec NAME only a store of that codec, and with --codec "
                        "auto only one of the codec auto picks now (fitted again on a row sample of the features)")
    p.add_argument("--partition", choices=("ranges", "metis", "dgl"), default="ranges",
                   help="with --shards: which rank holds which rows: contiguous ranges (default), METIS parts "
                        "of the graph, which keep neighbours together (homogeneous data sets; needs pymetis: "
                        "pip install 'ibp-graph[metis]'), or DistDGL's partitions of the same graph (--dgl-config, "
                        "--dgl-mapping)")
    p.add_argument("--dgl-config", metavar="JSON",
                   help="--partition dgl: the partition config dgl.distributed.partition_graph wrote")
    p.add_argument("--dgl-mapping", metavar="FILE",
                   help="--partition dgl: the orig_nids partition_graph returned with return_mapping=True, saved "
                        "with numpy.save (.npy) or torch.save (.pt); omit it if the prepared ids are DGL's own")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (no progress bars, no closing line)")
    a = p.parse_args(argv)
    if a.partition != "ranges" and a.shards is None:
        p.error(f"--partition {a.partition} without --shards is not accepted: it says how the shards split the rows")
    if (a.partition == "dgl") != (a.dgl_config is not None) or (a.dgl_mapping and a.dgl_config is None):
        p.error("--partition dgl and --dgl-config go together (--dgl-mapping only with them): the config names "
                "DGL's partitions")
    if a.shards is not None and a.shards < 1:
        p.error(f"--shards {a.shards} is not accepted; use the number of ranks of the run, an int >= 1")
    if a.shards is not None and a.no_store:
        p.error("--shards with --no-store is not accepted: the shards are cut from the feature store")
    homogeneous = [d for d in DATASETS if d not in HETERO_DATASETS + LINK_DATASETS]
    if a.partition != "ranges" and a.dataset not in homogeneous:
        p.error(f"--partition {a.partition} is not accepted with --dataset {a.dataset}: it partitions the graph of a "
                f"node classification data set of one node type ({', '.join(homogeneous)}); use --partition ranges")
    try:
        if a.root:
            check_folder("--root", a.root)
    except ConfigError as e:
        p.error(str(e))
    try:
        dgl = _dgl_layout(a)  # before anything is prepared
    except (FileNotFoundError, ValueError) as e:
        p.error(f"--partition dgl (--dgl-config {a.dgl_config}): {e}")
    _exit_on_sigterm()  # a scheduler's SIGTERM unwinds like Ctrl-C: the work folder is removed
    from .files import DiskFullError

    try:
        prepared = _prepared_already(a) if a.shards is not None else None
        if prepared is None:
            prepared = _prepare_dataset(a, p)
        if a.shards is not None:
            from .data.shards import write_shards

            write_shards(prepared, a.shards, layouts=_partition(prepared, a, dgl), progress=not a.quiet)
    except DiskFullError as e:
        print(f"ibp-graph prepare: {e.naming('--out')}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError, ImportError) as e:  # an output folder refused: OutputFolderError
        print(f"ibp-graph prepare: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; the work folder is gone already
        print("ibp-graph prepare: interrupted; the output folder holds what it held before (or the new preparation, "
              "where it was already moved into place), never part of one: run the command again to prepare it",
              file=sys.stderr)
        return 130
    return 0


def _dgl_layout(a):
    """`--partition dgl`'s ShardLayout, from --dgl-config and --dgl-mapping (read before the data set is prepared);
    else None."""
    if a.partition != "dgl":
        return None
    from .data.partition import dgl_layout

    return dgl_layout(a.dgl_config, _load_ids(a.dgl_mapping) if a.dgl_mapping else None)


def _partition(prepared, a, layout):
    """The ShardLayouts of `--partition` for the prepared folder (None: contiguous ranges); `layout`: --partition
    dgl's (`_dgl_layout`), checked against the folder's graph here."""
    if a.partition == "ranges":
        return None
    from .data.partition import metis_layout
    from .data.prepared import PreparedDataset

    graph = PreparedDataset.load(prepared, verify="none").graph
    if a.partition == "dgl":
        if (layout.num_rows, layout.world_size) != (graph.num_nodes, a.shards):
            raise ValueError(f"--dgl-config {a.dgl_config} partitions {layout.num_rows:,} nodes into "
                             f"{layout.world_size} parts; {prepared} has {graph.num_nodes:,} nodes and --shards is "
                             f"{a.shards}: partition the same graph into W = --shards parts")
        return {"x": layout}
    if not a.quiet:
        print(f"partitioning {graph.num_nodes:,} nodes into {a.shards} METIS parts", flush=True)
    return {"x": metis_layout(graph.indptr, graph.indices, graph.num_nodes, a.shards)}


def _load_ids(path: str):
    """Node ids saved with numpy.save (.npy, no pickles) or torch.save (.pt, tensors only)."""
    import pickle

    import numpy as np
    import torch

    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    try:
        ids = torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
        raise ValueError(f"--dgl-mapping {path} is not a tensor saved with torch.save: {e}") from None
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"--dgl-mapping {path} holds a {type(ids).__name__}; accepted: one tensor of node ids "
                         "(for a heterogeneous graph's dict, save the node type's tensor)")
    return ids


def _generated(a):
    """(spec, generator module) of a generated data set (`a.dataset` synthetic*), sizes from --config/--set."""
    from .data import citegen, graphgen, maggen
    from .train.config import load_config

    # named as the data set, so the config checks that this one (not data.synthetic) fits memory and disk
    extra = [f"data.name={a.dataset}"] + (["task=link"] if a.dataset == "synthetic-citation" else [])
    data = load_config(a.config, a.set + extra).data
    spec, gen = {"synthetic": (data.synthetic, graphgen), "synthetic-mag": (data.mag, maggen),
                 "synthetic-citation": (data.citation, citegen)}[a.dataset]
    return spec, gen, data.root


def _prepared_already(a):
    """The folder `prepare` would write (--out, or the data set's default), when it holds a finished preparation
    of what the arguments ask for (`_differs`) with its feature store(s); else None."""
    from .data import ogb, ogb_link, ogb_mag
    from .data.shards import prepared_kind
    from .train.config import GENERATED_DATASETS

    spec = gen = None
    if a.dataset in GENERATED_DATASETS:
        spec, gen, root = _generated(a)
    elif a.config or a.set or (a.directed and a.dataset in ("ogbn-mag", "mag240m")):
        return None  # refused by _prepare_dataset, saying why
    if a.out:
        d = a.out
    elif gen is not None:
        d = gen.cache_dir(spec, a.root or root)
    elif not a.root:
        return None
    else:
        d = {"ogbn-mag": lambda: ogb_mag.default_prepared_dir(a.root),
             "mag240m": lambda: ogb_mag.mag240m_dir(a.root) / "ibp_prepared",
             "ogbl-citation2": lambda: ogb_link.default_prepared_dir(a.root)}.get(
                 a.dataset, lambda: ogb.default_prepared_dir(a.dataset, a.root))()
    kind = prepared_kind(d)
    if kind is None:
        return None
    ds = kind.load(d, verify="none")
    if ds.name != a.dataset or not ds.has_store():
        return None
    differs = _differs(ds.meta, a, spec, gen) or _store_differs(ds, a.codec)
    if not a.quiet and differs:
        print(f"{d} holds {differs}: preparing it again", flush=True)
    elif not a.quiet:
        codecs = ", ".join(sorted({ds.store(t).codec.name for t in ds.feature_shapes}))
        kept = "" if a.codec is not None else f" (its store's codec, {codecs}, is kept: --codec NAME or --codec " \
                                              "auto asks for one)"
        print(f"{d} is prepared already: writing its shards only{kept}", flush=True)
    return None if differs else d


def _store_differs(ds, asked) -> str:
    """How the feature stores of the prepared folder `ds` differ from `--codec` (`asked`; "" when they do not):
    None keeps any; a codec name wants every table's store of that codec; "auto" wants each of the codec auto
    picks for its table now (fit_named on the table's row sample, as the store was encoded: a store encoded by
    auto is kept, one encoded with --codec identity where auto picks ebp is not)."""
    from .codec.auto import fit_named

    if asked is None:
        return ""
    for table in ds.feature_shapes:
        have = ds.store(table).codec.name
        want = fit_named(ds.feature(table), "auto").name if asked == "auto" else asked
        if have != want:
            which = f"table {table!r}'s" if len(ds.feature_shapes) > 1 else "a"
            picks = f", which picks {want} for it" if asked == "auto" else ""
            return f"{which} feature store encoded with {have} (asked for --codec {asked}{picks})"
    return ""


def _differs(meta: dict, a, spec, gen) -> str:
    """How the preparation `meta` records differs from what the arguments ask for ("" when it does not): the
    generator and its spec (generated data sets), edge directions (--directed, OGB's); the store's codec is
    `_store_differs`'."""
    import dataclasses
    import json

    source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    if gen is not None:
        wanted = {"generator": gen.__name__, "spec": json.loads(json.dumps(dataclasses.asdict(spec)))}
        if source.get("generator") != wanted["generator"] or not isinstance(source.get("spec"), dict):
            return f"a data set of another source ({source}; asked for {wanted['generator']})"
        changed = [f"{k} {source['spec'].get(k)!r}, asked for {v!r}" for k, v in wanted["spec"].items()
                   if source["spec"].get(k) != v]
        if changed:
            return f"another generated data set ({'; '.join(changed)})"
    undirected = meta.get("undirected", True)
    if gen is None and undirected == a.directed:  # generated ones are undirected, --directed or not
        return f"a graph prepared {'without' if undirected else 'with'} --directed"
    return ""


def _prepare_dataset(a, p):
    """Prepare (or generate) the data set the arguments name; return its folder."""
    from .train.config import GENERATED_DATASETS

    store, progress = not a.no_store, not a.quiet
    a = argparse.Namespace(**dict(vars(a), codec=a.codec or "auto"))  # --codec's default
    if a.dataset in GENERATED_DATASETS:
        spec, gen, root = _generated(a)
        return gen.generate(spec, a.out or gen.cache_dir(spec, a.root or root), store=store, codec=a.codec,
                            progress=progress)
    if a.dataset == "ogbl-citation2":
        from .data import ogb_link

        if a.config or a.set:
            p.error("--config and --set apply to the generated data sets only")
        if not a.root:
            p.error("--root is required for ogbl-citation2: the folder holding its data set folder")
        return ogb_link.prepare(a.root, a.out, undirected=not a.directed, store=store, codec=a.codec,
                                progress=progress)
    if a.dataset in ("ogbn-mag", "mag240m"):
        from .data import ogb_mag

        if a.config or a.set:
            p.error("--config and --set apply to --dataset synthetic and synthetic-mag only")
        if a.directed:
            p.error(f"--directed applies to homogeneous OGB data sets; {a.dataset} is prepared as PyG's "
                    "ToUndirected() leaves it (cites undirected, rev_ edge types added)")
        if not a.root:
            p.error(f"--root is required for {a.dataset}: the folder holding its data set folder")
        prepare = ogb_mag.prepare if a.dataset == "ogbn-mag" else ogb_mag.prepare_mag240m
        return prepare(a.root, a.out, store=store, codec=a.codec, progress=progress)
    from .data import ogb

    if a.config or a.set:
        p.error("--config and --set apply to --dataset synthetic only")
    if not a.root:
        p.error("--root is required for OGB data sets: the folder holding OGB's data set folder")
    return ogb.prepare(a.dataset, a.root, a.out, undirected=not a.directed, store=store, codec=a.codec,
                       progress=progress)


def _verify(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="ibp-graph verify",
        description="Check a feature store, a prepared folder (with its store and shards) or a shards folder "
                    "against its checksums and "
                    "structure; exit 0 when intact, 1 when damaged or without (complete) checksums.")
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a prepared folder, a feature store (store/x) or a shards folder (shards-W)")
    p.add_argument("--sample", action="store_true",
                   help="check a few random chunks per large file (what opening does), not every chunk")
    p.add_argument("--write", action="store_true",
                   help="record checksums for a folder written before they existed (trusting its present content)")
    a = p.parse_args(argv)
    from .data.verify import check_folder, record_checksums

    status = 0
    for d in a.dirs:
        try:
            if a.write:
                for path in record_checksums(d):
                    print(f"wrote {path}")
                continue
            for r in check_folder(d, "sample" if a.sample else "full"):
                label = "ok, " if r.ok else "UNVERIFIED\n  " if r.unverified else "DAMAGED\n  "
                print(f"{r.directory} ({r.kind}): {label}{r.message}")
                status = status or (0 if r.ok else 1)
        except (FileNotFoundError, ValueError) as e:
            print(f"ibp-graph verify: {e}", file=sys.stderr)
            status = 2
    return status


def _train(argv: Sequence[str]) -> int:
    from .train.loop import main

    return main(argv)


def _report(argv: Sequence[str]) -> int:
    from .train.report import main

    return main(argv)


COMMANDS = {
    "demo": (_demo, "encode and decode a generated papers100M-like feature table; print fraction and speed"),
    "bench": (_bench, "run a benchmark (codec, decode, gather, loader, sharded): prints a table, writes JSON"),
    "prepare": (_prepare, "convert OGB's raw files (or generate the default data set) into a prepared folder"),
    "verify": (_verify, "check a prepared folder or feature store against its checksums (exit 1 if damaged)"),
    "train": (_train, "train a GNN as a YAML experiment describes (--config, --set KEY=VALUE); JSON under runs/"),
    "report": (_report, "compare runs (runs/*.json): a table and a PNG plot, ibp vs identity"),
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the `ibp-graph` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: ibp-graph COMMAND [options]\n\ncommands:")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:8s} {text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"ibp-graph: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return COMMANDS[name][0](rest)


if __name__ == "__main__":
    sys.exit(main())
