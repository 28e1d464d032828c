"""Plain-text tables and JSON result files (loader stats, training runs, reports, benchmarks)."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Optional, Sequence

import torch


def machine() -> dict:
    """What the numbers were measured on."""
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host_cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine()}
    try:
        import numba

        info["numba_threads"] = numba.get_num_threads()
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """Rows as an aligned text table; columns are (key, header, format spec)."""
    cells = [[h for _, h, _ in columns]]
    for r in rows:
        cells.append([("-" if r.get(k) is None else format(r[k], f)) for k, _, f in columns])
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = ["  ".join(c[i].rjust(widths[i]) if i else c[i].ljust(widths[i])
                       for i in range(len(columns))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path: str | os.PathLike, payload: dict) -> Path:
    """Write results (with the machine description) as JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(payload, machine=machine()), indent=2))
    return path


def report_results(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]], title: str,
           out: Optional[str | os.PathLike], payload: dict, *, quiet: bool = False) -> Optional[Path]:
    """A benchmark's closing: `title` and the rows' table printed (unless `quiet`), then `payload` with
    ``results=rows`` written as JSON to `out` (none when `out` is empty), its path printed; that path."""
    if not quiet:
        print(f"\n{title}")
        print(format_table(rows, columns))
    if not out:
        return None
    path = write_json(out, dict(payload, results=rows))
    if not quiet:
        print(f"\nwrote {path}")
    return path
