"""Run an example's per-rank function in `world_size` gloo processes, as a user's DDP script runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def exit_after(rank: int, module: str, function: str, *args) -> None:
    """A rank: `module.function(rank, *args)`, then the process ends at once (os._exit), its output flushed.

    What the tests check is done when the function returns (results written, process group destroyed).
    Once in five CI runs a rank then hung in interpreter shutdown for good (no traceback from its
    faulthandler watchdog, which the function had cancelled); skipping finalization ends that, and the
    watchdog stays armed up to here, so a hang in the function itself still prints where it is."""
    import importlib

    getattr(importlib.import_module(module), function)(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(module: str, function: str, out_dir: Path, world_size: int = 2) -> None:
    """``torch.multiprocessing.spawn(module.function, (world_size, init file, out_dir))`` in a fresh
    Python (no loaders or signal handlers of other tests), failing with the ranks' stderr."""
    script = ("import torch.multiprocessing as mp\n"
              "from tests.examples.ranks import exit_after\n"
              "if __name__ == '__main__':\n"
              f"    mp.spawn(exit_after, args=({module!r}, {function!r}, {world_size}, "
              f"{str(out_dir / 'init')!r}, {str(out_dir)!r}), nprocs={world_size})\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-6000:]
