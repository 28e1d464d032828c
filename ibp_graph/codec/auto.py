"""fit_codec: try the codecs on a sample of a tensor and keep the one that sends the fewest bytes."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch

from ..layout.dtypes import check_rows_tensor
from ..layout.tensor import CompressedTensor
from .base import DEFAULT_SAMPLE_ROWS, Codec, random_rows
from .ebp import EBPCodec
from .ibp import IBPCodec
from .identity import IdentityCodec

#: a codec as callers name it: one of KINDS (fitted on the data), or a fitted codec object.
CodecSpec = Union[str, Codec]
#: codecs fit_codec tries with kind="auto", in order of preference on ties.
CANDIDATES: tuple[str, ...] = ("ibp", "ebp")
#: every kind fit_codec accepts.
KINDS: tuple[str, ...] = ("auto", "ibp", "ebp", "identity")
#: tensors smaller than this (raw bytes) get the identity codec: the header costs outweigh gains.
MIN_BYTES = 1 << 16
#: a codec must save at least this fraction of raw bytes (offsets included) to beat identity.
MIN_GAIN = 0.02
#: elements fit_codec samples at most when sample_rows is not given (and at most
#: DEFAULT_SAMPLE_ROWS rows: half to fit, half to measure).
DEFAULT_SAMPLE_ELEMENTS = 1 << 22

#: the codec class of each codec name (what CompressedTensor.codec and state_dict()["codec"] hold).
CODEC_CLASSES = {IBPCodec.name: IBPCodec, EBPCodec.name: EBPCodec, IdentityCodec.name: IdentityCodec}


@dataclass(frozen=True)
class Candidate:
    """One codec tried by rank_codecs: its name, measured size and decode speed on held-out rows."""

    name: str
    fraction: float               # bytes sent (payload + offsets) / raw bytes, on held-out rows
    decode_gbps: Optional[float]  # decoded GB/s on `device`, when a speed target asked for it
    codec: Codec                  # fitted on the fit half of the sample


def check_sample_rows(sample_rows) -> None:
    """Refuse a sample_rows that is not None or an int >= 1, naming it (as the codecs' own fits do)."""
    if sample_rows is not None and (isinstance(sample_rows, bool) or not isinstance(sample_rows, int)
                                    or sample_rows < 1):
        raise ValueError(f"sample_rows={sample_rows!r} is not accepted; use None or an int >= 1")


def _sample(tensor: torch.Tensor, sample_rows: Optional[int], seed: int) -> torch.Tensor:
    per_row = max(1, math.prod(tensor.shape[1:]))
    limit = sample_rows if sample_rows is not None else \
        max(256, min(DEFAULT_SAMPLE_ROWS, DEFAULT_SAMPLE_ELEMENTS // per_row))
    return random_rows(tensor, limit, seed)


#: a decoder for speed targets: decode(codec, ct, out=None) -> tensor (e.g. ibp_graph.gpu.decode).
Decoder = Callable[..., torch.Tensor]


def _cpu_decode(codec: Codec, ct: CompressedTensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    return codec.decode(ct, out=out)


def _decode_rate(codec: Codec, ct, device: torch.device, decode: Optional[Decoder],
                 repeat: int = 3) -> float:
    """Decoded GB/s of ct on `device` (best of `repeat`, after one warm-up)."""
    if device.type == "cpu":
        decode = decode or _cpu_decode
    elif decode is None:
        raise ValueError(f"device={device} needs a decoder for it: pass decode=ibp_graph.gpu.decode "
                         "(codecs decode on the CPU only); accepted without one: device='cpu'")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    if device.type != "cpu":
        ct = ct.to(device)
    out = decode(codec, ct)
    best = float("inf")
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        decode(codec, ct, out=out)
        sync()
        best = min(best, time.perf_counter() - t)
    return ct.raw_nbytes / max(best, 1e-9) / 1e9


def rank_codecs(tensor: torch.Tensor, *, candidates: tuple[str, ...] = CANDIDATES,
                device: Union[str, torch.device, None] = None,
                min_decode_gbps: Optional[float] = None, sample_rows: Optional[int] = None,
                seed: int = 0, decode: Optional[Decoder] = None) -> list[Candidate]:
    """Fit each candidate on half of a row sample and measure it on the other half; smallest first.

    With `min_decode_gbps`, each candidate's decode speed is measured on `device` and
    reported; fit_codec drops the slow ones. A GPU target needs `decode`, a function
    (codec, ct, out=None) -> tensor such as ibp_graph.gpu.decode (codecs decode on the CPU
    only); the default device is the current CUDA device when `decode` is given and CUDA
    is available, else the CPU. The sample is small, so a GPU's launch overhead
    understates its speed.
    """
    check_rows_tensor(tensor)
    check_sample_rows(sample_rows)
    if tensor.device.type != "cpu":
        raise ValueError(f"tensor is on {tensor.device}; fitting runs on CPU tensors")
    unknown = [c for c in candidates if c not in CODEC_CLASSES]
    if unknown or not candidates:
        raise ValueError(f"candidates={candidates!r} is not accepted; use names among "
                         f"{tuple(CODEC_CLASSES)}")
    sample = _sample(tensor, sample_rows, seed)
    n = sample.shape[0]
    if n >= 2:
        gen = torch.Generator().manual_seed(seed + 1)
        perm = torch.randperm(n, generator=gen)
        fit_rows = sample.index_select(0, perm[: n // 2].sort().values)
        eval_rows = sample.index_select(0, perm[n // 2:].sort().values)
    else:
        fit_rows = eval_rows = sample
    target = None
    if min_decode_gbps is not None:
        target = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device())
            if decode is not None and torch.cuda.is_available() else torch.device("cpu"))
    out = []
    for name in candidates:
        codec = CODEC_CLASSES[name].fit(fit_rows)
        ct = codec.encode(eval_rows)
        rate = _decode_rate(codec, ct, target, decode) if target is not None and ct.n_rows else None
        out.append(Candidate(name, ct.fraction, rate, codec))
    out.sort(key=lambda c: (c.fraction, candidates.index(c.name)))
    return out


def fit_codec(tensor: torch.Tensor, kind: str = "auto", *,
              device: Union[str, torch.device, None] = None,
              min_decode_gbps: Optional[float] = None, sample_rows: Optional[int] = None,
              seed: int = 0, decode: Optional[Decoder] = None) -> Codec:
    """The codec that sends `tensor`'s rows in the fewest bytes (identity when nothing gains).

    kind="auto" tries IBP and EBP (rank_codecs: fitted on half a row sample, measured on
    the other half, offsets included) and keeps the smallest that saves at least MIN_GAIN of
    the raw bytes and, if `min_decode_gbps` is given, decodes at least that fast on
    `device` (with `decode` for a GPU, as for rank_codecs); the winner is refitted on the
    whole sample. Tensors under MIN_BYTES, random bits and anything no codec shrinks get
    an IdentityCodec. kind="ibp", "ebp" or
    "identity" fits that codec only.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not accepted; use one of {KINDS}")
    if min_decode_gbps is not None and not (isinstance(min_decode_gbps, (int, float))
                                            and min_decode_gbps > 0):
        raise ValueError(f"min_decode_gbps={min_decode_gbps!r} is not accepted; use None or a "
                         "number > 0 (GB/s)")
    check_rows_tensor(tensor)
    check_sample_rows(sample_rows)
    if kind != "auto":
        return CODEC_CLASSES[kind].fit(_sample(tensor, sample_rows, seed))
    raw = tensor.numel() * tensor.element_size()
    if raw < MIN_BYTES or tensor.shape[0] < 2:
        return IdentityCodec.fit(tensor)
    for cand in rank_codecs(tensor, device=device, min_decode_gbps=min_decode_gbps,
                            sample_rows=sample_rows, seed=seed, decode=decode):
        if cand.fraction > 1.0 - MIN_GAIN:
            break
        if min_decode_gbps is not None and (cand.decode_gbps or 0.0) < min_decode_gbps:
            continue
        return CODEC_CLASSES[cand.name].fit(_sample(tensor, sample_rows, seed))
    return IdentityCodec.fit(tensor)


def check_kind(kind, argname: str = "kind") -> str:
    """`kind` when it is one of KINDS; else a ValueError naming `argname`, the value and KINDS."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"{argname}={kind!r} is not accepted; use one of {KINDS}")
    return kind


def fit_named(tensor: torch.Tensor, kind: str = "auto", *, argname: str = "kind") -> Codec:
    """The codec named `kind` for `tensor`: fit_codec's choice for "auto", else that codec's own fit.

    "ibp", "ebp" and "identity" are fitted as IBPCodec.fit / EBPCodec.fit /
    IdentityCodec.fit do by default (their own row sample). An unknown name raises a
    ValueError naming `argname` (the caller's argument), the value and the accepted names.
    """
    check_kind(kind, argname)
    if kind == "auto":
        return fit_codec(tensor, kind="auto")
    return CODEC_CLASSES[kind].fit(tensor)
