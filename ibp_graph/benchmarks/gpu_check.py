"""The one table that ends scripts/gpu_check.sh, from the JSON its benchmark steps wrote.

Sections (one row per feature family or loader variant):

- ``decode dev``: decode of random rows from device memory, GB/s of decoded rows (IBP,
  EBP), against a raw gather from device memory (the reference; ratio = IBP / reference);
- ``decode seq``: the whole compressed table decoded in order, GB/s (same reference);
- ``zero-copy``: fused gather + decode of random rows read from pinned host memory, GB/s
  (IBP, EBP), against the pinned host -> device copy (the ceiling; ratio = IBP / ceiling);
  ratio 2 = IBP / the PCIe floor (pinned copy speed / the selected rows' compressed fraction);
- ``epoch``: one loader epoch per feature mode, batches/s, against features resident on the
  GPU (ratio = variant / resident; ratio 2 = variant / identity-worker).

``exact`` says whether every result in the row was compared bit for bit with the CPU path
before it was timed, and matched.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from ..tables import format_table

COLUMNS = [("section", "section", "s"), ("case", "case", "s"), ("ibp", "IBP | value", ".2f"),
           ("ebp", "EBP", ".2f"), ("ref", "reference", ".2f"), ("ratio", "ratio", ".3f"),
           ("ratio2", "ratio 2", ".3f"), ("exact", "exact", "s")]
LEGEND = ("decode dev / seq, zero-copy: GB/s of decoded rows (1e9 B/s); reference: raw gather from device memory "
          "(decode), pinned H2D copy (zero-copy); ratio = IBP / reference; zero-copy ratio 2 = IBP / PCIe floor "
          "(H2D / compressed fraction of the rows). epoch: batches/s of one loader epoch; reference: features "
          "resident on the GPU; ratio = / resident, ratio 2 = / identity-worker.")


def _div(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def family_rows(report: dict) -> list[dict]:
    """Rows of the decode and zero-copy sections from scripts/bench_gpu.py's JSON."""
    rows = []
    for r in report.get("families", []):
        g, e = r["GBps"], r["ebp"]["GBps"]
        exact = "yes" if all(r["bit_exact"].values()) and all(r["ebp"]["bit_exact"].values()) else "NO"
        for section, key in (("decode dev", "decode_rand_dev"), ("decode seq", "decode_seq")):
            rows.append({"section": section, "case": r["family"], "ibp": g[key], "ebp": e[key],
                         "ref": g["dev_gather_raw"], "ratio": _div(g[key], g["dev_gather_raw"]), "exact": exact})
        rows.append({"section": "zero-copy", "case": r["family"], "ibp": g["fetch_zc"], "ebp": e["fetch_zc"],
                     "ref": g["h2d_raw"], "ratio": _div(g["fetch_zc"], g["h2d_raw"]),
                     "ratio2": _div(g["fetch_zc"], r["fetch_floor_GBps"]), "exact": exact})
    for name in report.get("failures", {}):
        rows.append({"section": "decode", "case": name, "exact": "FAILED"})
    return rows


def epoch_rows(report: dict) -> list[dict]:
    """Rows of the epoch section from ibp_graph.benchmarks.features' JSON."""
    rows = []
    n = report.get("num_nodes", 0)
    for r in report.get("results", []):
        rows.append({"section": f"epoch {n / 1e6:.3g}M", "case": r["variant"], "ibp": r["batches_per_s"],
                     "ref": next((q["batches_per_s"] for q in report["results"] if q["variant"] == "resident"), None),
                     "ratio": r.get("vs_resident"), "ratio2": r.get("vs_identity"), "exact": r["exact"]})
    return rows


def _load(path: Optional[str]) -> Optional[dict]:
    if not path or not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def summary(gpu_json: Optional[str], features_json: Optional[str]) -> tuple[str, bool]:
    """(the table with its legend, whether every section is present and exact)."""
    gpu_r, feat_r = _load(gpu_json), _load(features_json)
    rows = []
    rows += family_rows(gpu_r) if gpu_r else [{"section": "decode", "case": f"missing: {gpu_json}", "exact": "-"}]
    rows += epoch_rows(feat_r) if feat_r else [{"section": "epoch", "case": f"missing: {features_json}", "exact": "-"}]
    ok = gpu_r is not None and feat_r is not None and all(r["exact"] == "yes" for r in rows)
    return f"{LEGEND}\n{format_table(rows, COLUMNS)}", ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the table from the JSON files; exit 1 when a section is missing or a result is not exact."""
    p = argparse.ArgumentParser(prog="python -m ibp_graph.benchmarks.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("--gpu-json", required=True, help="scripts/bench_gpu.py --out")
    p.add_argument("--features-json", required=True, help="scripts/bench_features.py --out")
    a = p.parse_args(argv)
    table, ok = summary(a.gpu_json, a.features_json)
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(main())
