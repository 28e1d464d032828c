"""argparse types of the benchmarks' options (and report's --plot): a bad value is a usage error (exit 2) that
names the option, the value and what is accepted, before anything is measured."""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

__all__ = ["positive_int", "nonnegative_int", "positive_float", "fan_out", "device", "out_file"]


def _refuse(text: str, accepted: str):
    return argparse.ArgumentTypeError(f"{text!r} is not accepted; expected {accepted}")


def _int_at_least(text: str, lo: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if value < lo:
        raise _refuse(text, f"an integer >= {lo}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise _refuse(text, "a finite number > 0")
    return value


def fan_out(text: str) -> int:
    """Neighbours sampled per hop: an integer >= 1, or -1 (all)."""
    if text.strip() == "-1":
        return -1
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise _refuse(text, "an integer >= 1, or -1 for all neighbours") from None


def device(text: str) -> str:
    """cpu, cuda or cuda:N (a device torch.device takes)."""
    from ..train.config import MAX_DEVICE_INDEX, valid_device

    if text == "auto" or not valid_device(text):
        raise _refuse(text, f"cpu, cuda or cuda:N (N in [0, {MAX_DEVICE_INDEX}])")
    if text.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():  # before any data is built, not a traceback after it
            raise argparse.ArgumentTypeError(f"{text!r}: torch sees no CUDA device here; accepted: cpu")
    return text


def out_file(text: str) -> str:
    """A file to write: not a folder, in a folder that exists or can be made, writable by this user."""
    from ..train.config import existing_folder

    path = Path(text)
    folder = existing_folder(path.parent)
    if path.is_dir():
        raise _refuse(text, "a file path (it is a folder)")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        why = "a file" if not folder.is_dir() else "not writable by this user"
        raise _refuse(text, f"a file path in a writable folder ({str(folder)!r} is {why})")
    return text
