"""The codec demo: a generated papers100M-like feature table, compressed and restored bit for bit."""
from __future__ import annotations

import argparse
import time
from typing import Optional, Sequence

import numpy as np
import torch

from ..codec import IBPCodec
from ..layout.dtypes import as_row_bytes
from ..data.synthetic import make_family


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Encode/decode `--rows` averaged-embedding rows; print fraction, speeds and the check."""
    p = argparse.ArgumentParser(prog="ibp-graph demo", description=__doc__)
    p.add_argument("--rows", type=int, default=500_000, help="feature rows (default 500k = 256 MB)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    t = time.perf_counter()
    x = make_family("embedding_f32", a.rows, seed=a.seed)
    print(f"generated {a.rows:,} x {x.shape[1]} float32 averaged-embedding rows "
          f"({x.numel() * 4 / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    codec = IBPCodec.fit(x)
    print(f"fitted {codec} in {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    ct = codec.encode(x)
    t_enc = time.perf_counter() - t
    t = time.perf_counter()
    y = codec.decode(ct)
    t_dec = time.perf_counter() - t
    same = np.array_equal(as_row_bytes(x), as_row_bytes(y))
    gb = x.numel() * 4 / 1e9
    print(f"compressed to {ct.nbytes / 1e6:.1f} MB = {ct.fraction:.4f} of raw "
          f"(per-row metadata {4 * (ct.n_rows + 1) / 1e6:.1f} MB included)")
    print(f"encode {gb / t_enc:.2f} GB/s, decode {gb / t_dec:.2f} GB/s "
          f"(all cores of this machine: {torch.get_num_threads()})")
    print(f"bit-exact: {same}")
    return 0 if same else 1
