"""Compare training runs (runs/*.json): a table on stdout and a PNG of epoch time and bytes moved."""
from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

from ..tables import format_table
from .loop import RUN_FORMAT

__all__ = ["load_runs", "table", "plot", "main"]

COLUMNS = [
    ("name", "experiment", "s"), ("dataset", "data set", "s"), ("codec", "codec", "s"),
    ("features", "features", "s"), ("arch", "model", "s"), ("world_size", "procs", "d"),
    ("device", "device", "s"), ("epochs", "epochs", "d"), ("epoch_s", "s/epoch", ".2f"),
    ("sent_mb", "MB moved/epoch", ".1f"), ("raw_mb", "MB raw/epoch", ".1f"), ("fraction", "fraction", ".3f"),
    ("test_acc", "test acc/MRR", ".4f"), ("majority", "majority/random", ".4f"),
]
COMPARE_COLUMNS = [
    ("name", "experiment", "s"), ("dataset", "data set", "s"), ("procs", "procs", "d"),
    ("codec", "codec", "s"), ("codec_s", "codec s/epoch", ".2f"), ("identity_s", "identity s/epoch", ".2f"),
    ("speedup", "speedup", ".3f"), ("codec_mb", "codec MB/epoch", ".1f"),
    ("identity_mb", "identity MB/epoch", ".1f"), ("bytes_ratio", "bytes ratio", ".3f"),
]


def load_runs(paths: Sequence[str]) -> list[dict]:
    """Run results from files and folders (searched recursively for *.json); others are skipped with a note."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("*.json")))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p} does not exist; pass run files (runs/*.json) or folders")
    runs = []
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            print(f"skipping {f}: not JSON ({e})", file=sys.stderr)
            continue
        if not isinstance(data, dict) or data.get("format") != RUN_FORMAT:
            print(f"skipping {f}: not a training run (format {RUN_FORMAT!r})", file=sys.stderr)
            continue
        problem = _malformed(data)
        if problem:
            print(f"skipping {f}: a malformed training run ({problem})", file=sys.stderr)
            continue
        data["path"] = str(f)
        runs.append(data)
    return runs


#: what the report reads from a run file: key -> accepted types (final's keys: numbers, the test metric may be null).
_RUN_KEYS = {"name": str, "dataset": str, "codec": str, "world_size": int, "epochs": list, "final": dict}
_FINAL_KEYS = ("mean_epoch_seconds", "sent_bytes_per_epoch", "raw_bytes_per_epoch", "fraction")
#: final's test metric and what chance scores, per task: node classification's accuracy against the majority
#: class's, link prediction's (`task: link`, train/link.py) MRR against a random ranker's.
_TASK_KEYS = {"node": ("test_acc", "majority_test_acc"), "link": ("test_mrr", "random_mrr")}


def _task_keys(run: dict) -> tuple[str, str]:
    task = run.get("task", "node")
    return _TASK_KEYS.get(task, _TASK_KEYS["node"]) if isinstance(task, str) else _TASK_KEYS["node"]


def _malformed(run: dict) -> str:
    """What makes `run` unusable for the report ("" when nothing)."""
    for key, kind in _RUN_KEYS.items():
        if key not in run:
            return f"no {key!r}"
        if not isinstance(run[key], kind) or isinstance(run[key], bool):
            return f"{key}={run[key]!r} is not {kind.__name__}"
    test, chance = _task_keys(run)
    for key in _FINAL_KEYS + (chance, test):
        value = run["final"].get(key, "missing")
        if value == "missing":
            return f"no final.{key}"
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)) and not (
                key in (test, "fraction") and value is None):  # fraction: no bytes counted (codec native)
            return f"final.{key}={value!r} is not a number"
    return ""


def _row(run: dict) -> dict:
    f = run["final"]
    test, chance = _task_keys(run)
    return {"name": run["name"], "dataset": run["dataset"], "codec": run["codec"],
            "features": run.get("features", "-"), "arch": run.get("arch", "-"), "world_size": run["world_size"],
            "device": run.get("device", "-"), "epochs": len(run["epochs"]), "epoch_s": f["mean_epoch_seconds"],
            "sent_mb": f["sent_bytes_per_epoch"] / 1e6, "raw_mb": f["raw_bytes_per_epoch"] / 1e6,
            "fraction": f["fraction"], "test_acc": f[test], "majority": f[chance]}


#: a result file's name (train/loop.py's _write): <name>-<YYYYmmdd-HHMMSS>-<codec>[-w<ranks>][-<k>].json
_RESULT_NAME = re.compile(r".*-(\d{8}-\d{6})-[a-z]+(?:-w\d+)?(?:-(\d+))?\.json")


def _oldest_first(runs: list[dict]) -> list[dict]:
    """`runs` in the order they were written, by the time and number in their file names (then by path; a file
    named otherwise first): the last of each experiment's codec is its latest, whatever folder it is in."""
    def written(r: dict) -> tuple:
        m = _RESULT_NAME.fullmatch(Path(r["path"]).name)
        return (m.group(1), int(m.group(2) or 0), r["path"]) if m else ("", 0, r["path"])
    return sorted(runs, key=written)


def _pairs(runs: list[dict]) -> list[dict]:
    """Each compressing codec vs identity per (experiment, data set, processes), latest runs."""
    latest: dict = defaultdict(dict)
    for r in _oldest_first(runs):
        latest[(r["name"], r["dataset"], r["world_size"])][r["codec"]] = r
    out = []
    for (name, dataset, procs), by in latest.items():
        if "identity" not in by:
            continue
        b = by["identity"]["final"]
        for codec in sorted(set(by) - {"identity"}):
            a = by[codec]["final"]
            out.append({"name": name, "dataset": dataset, "procs": procs, "codec": codec,
                        "codec_s": a["mean_epoch_seconds"], "identity_s": b["mean_epoch_seconds"],
                        "speedup": b["mean_epoch_seconds"] / a["mean_epoch_seconds"] if a["mean_epoch_seconds"] else None,
                        "codec_mb": a["sent_bytes_per_epoch"] / 1e6, "identity_mb": b["sent_bytes_per_epoch"] / 1e6,
                        "bytes_ratio": a["sent_bytes_per_epoch"] / b["sent_bytes_per_epoch"]
                        if b["sent_bytes_per_epoch"] and a["fraction"] is not None else None})
    return out


def table(runs: list[dict]) -> str:
    """All runs, then each compressing codec vs identity where both were run."""
    text = format_table([_row(r) for r in runs], COLUMNS)
    pairs = _pairs(runs)
    if pairs:
        text += ("\n\ncodecs vs identity (speedup = identity time / codec time; bytes ratio = codec / "
                 "identity)\n")
        text += format_table(pairs, COMPARE_COLUMNS)
    return text


def plot(runs: list[dict], path: Path) -> Path:
    """Two bar charts (mean epoch time, MB moved per epoch), one group per experiment, a bar per codec."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("the plot needs matplotlib: pip install matplotlib") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest: dict = defaultdict(dict)
    for r in _oldest_first(runs):
        label = f"{r['name']}\n{r['dataset']}" + (f" x{r['world_size']}" if r["world_size"] > 1 else "")
        latest[label][r["codec"]] = r
    labels = list(latest)
    codecs = [c for c in ("identity", "ibp") if any(c in v for v in latest.values())] + sorted(
        {c for v in latest.values() for c in v} - {"identity", "ibp"})
    # a colour per codec (auto drew in matplotlib's first colour, ibp's blue); others take the rest in turn
    colors = {"identity": "#9e9e9e", "ibp": "#1f77b4", "auto": "#2ca02c", "ebp": "#ff7f0e", "native": "#8c564b"}
    spare = itertools.cycle(["#9467bd", "#e377c2", "#bcbd22", "#17becf", "#d62728"])
    colors.update({c: next(spare) for c in codecs if c not in colors})
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(labels) + 4), 4.2))
    width = 0.8 / max(len(codecs), 1)
    metrics = [("mean_epoch_seconds", 1.0, "seconds per epoch"), ("sent_bytes_per_epoch", 1e-6, "MB moved per epoch")]
    for ax, (key, scale, title) in zip(axes, metrics):
        for k, codec in enumerate(codecs):
            xs = [i + (k - (len(codecs) - 1) / 2) * width for i in range(len(labels))]
            ys = [latest[l][codec]["final"][key] * scale if codec in latest[l] else 0.0 for l in labels]
            bars = ax.bar(xs, ys, width, label=codec, color=colors.get(codec))
            for b, lbl in zip(bars, labels):
                if codec in latest[lbl] and key == "sent_bytes_per_epoch" \
                        and latest[lbl][codec]["final"]["fraction"] is not None:
                    ax.annotate(f"{latest[lbl][codec]['final']['fraction']:.2f}", (b.get_x() + b.get_width() / 2,
                                b.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(title + (" (label: fraction of raw)" if key == "sent_bytes_per_epoch" else ""), fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`ibp-graph report runs/*.json [--plot PATH]`."""
    p = argparse.ArgumentParser(prog="ibp-graph report", description=__doc__)
    p.add_argument("runs", nargs="*", default=["runs"], help="run files or folders (default: runs)")
    p.add_argument("--plot", default="runs/report.png", help="where to write the PNG (default runs/report.png)")
    p.add_argument("--no-plot", action="store_true", help="print the table only")
    a = p.parse_args(argv)
    if not a.no_plot:
        from ..benchmarks.args import out_file

        try:
            out_file(a.plot)  # before the runs are read
        except argparse.ArgumentTypeError as e:
            p.error(f"argument --plot: {e}")
    try:
        runs = load_runs(a.runs)
    except FileNotFoundError as e:
        print(f"ibp-graph report: {e}", file=sys.stderr)
        return 2
    if not runs:
        print(f"ibp-graph report: no training runs in {' '.join(a.runs)} (make some with `ibp-graph train`)",
              file=sys.stderr)
        return 1
    print(table(runs))
    if not a.no_plot:
        try:
            print(f"\nwrote {plot(runs, Path(a.plot))}")
        except (ImportError, OSError) as e:
            print(f"ibp-graph report: {e}", file=sys.stderr)
            return 1
    return 0
