"""Run an example's per-rank function in `world_size` gloo processes, as a user's DDP script runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_ranks(module: str, function: str, out_dir: Path, world_size: int = 2) -> None:
    """``torch.multiprocessing.spawn(module.function, (world_size, init file, out_dir))`` in a fresh
    Python (no loaders or signal handlers of other tests), failing with the ranks' stderr."""
    script = ("import torch.multiprocessing as mp\n"
              f"from {module} import {function}\n"
              "if __name__ == '__main__':\n"
              f"    mp.spawn({function}, args=({world_size}, {str(out_dir / 'init')!r}, {str(out_dir)!r}), "
              f"nprocs={world_size})\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-6000:]
