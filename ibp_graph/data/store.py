"""Pre-encoded feature store: a table compressed once, kept in host memory or memory-mapped files.

Workers gather compressed rows from it (`index_select`) instead of gathering raw rows and
encoding them per batch; on disk it also takes less space than the raw table.

Folder layout (`save` / `load`): ``payload.bin`` (the rows, docs/format.md),
``offsets.npy`` (absent for the identity codec, whose rows have a fixed stride),
``codec.bin`` (the codec state as a checksummed blob), ``meta.json`` (shape, dtype and
the codec's name and fingerprint).
"""
from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..codec import IdentityCodec, codec_from_state_dict
from ..codec.auto import CodecSpec, fit_named
from ..codec.base import Codec
from ..layout.dtypes import dtype_from_name, dtype_name, itemsize
from ..layout.errors import CorruptPayloadError
from ..layout.format import FORMAT_VERSION, state_from_bytes, state_to_bytes
from ..layout.rows import PAYLOAD_TAIL
from ..layout.tensor import CompressedTensor

PathLike = Union[str, os.PathLike]
#: rows encoded per step by `EncodedTable.encode` (bounded memory for huge tables).
CHUNK_ROWS = 262_144


class EncodedTable:
    """A whole feature table, encoded once; `index_select` gathers compressed rows."""

    def __init__(self, codec: Codec, compressed: CompressedTensor):
        codec.check(compressed, "compressed")
        self.codec = codec
        self.compressed = compressed

    # ---- sizes -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the decoded table."""
        return self.compressed.shape

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the decoded table."""
        return self.compressed.dtype

    @property
    def n_rows(self) -> int:
        """Rows in the table."""
        return self.compressed.n_rows

    @property
    def nbytes(self) -> int:
        """Bytes the encoded table takes (payload and offsets)."""
        return self.compressed.nbytes

    @property
    def fraction(self) -> float:
        """Encoded size / raw size."""
        return self.compressed.fraction

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        return (f"EncodedTable(shape={self.shape}, dtype={self.dtype}, codec={self.codec.name}, "
                f"fraction={self.fraction:.4f})")

    # ---- use -------------------------------------------------------------------
    def index_select(self, rows: torch.Tensor) -> CompressedTensor:
        """Compressed rows `rows`, in that order, without decoding."""
        return self.compressed.index_select(rows)

    def decode_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Decoded rows `rows` (on the CPU)."""
        return self.codec.decode(self.index_select(rows))

    # ---- build -----------------------------------------------------------------
    @classmethod
    def encode(cls, table: torch.Tensor, codec: CodecSpec = "auto", *,
               chunk_rows: int = CHUNK_ROWS, directory: Optional[PathLike] = None,
               progress: bool = True) -> "EncodedTable":
        """Encode `table` chunk by chunk with `codec`: a fitted codec, or a name fitted on a sample.

        `codec` "auto" (default) is fit_codec's choice (IBP, EBP, or identity when neither
        saves bytes); "ibp", "ebp" and "identity" fit that codec. With `directory`,
        payload chunks stream to ``directory/payload.bin`` and the result is memory-mapped
        from there, so neither the raw nor the encoded table has to fit in memory (the
        table itself may be memory-mapped).
        """
        if not isinstance(chunk_rows, int) or chunk_rows < 1:
            raise ValueError(f"chunk_rows={chunk_rows!r} is not accepted; use an int >= 1")
        if isinstance(codec, str) or codec is None:
            codec = fit_named(table, codec, argname="codec")
        fixed = codec.name == IdentityCodec.name  # fixed-stride rows, no offsets
        n = table.shape[0]
        lengths = np.zeros(n, dtype=np.int64)
        sink = _PayloadSink(directory)
        bar = _progress(n, "encoding rows", progress)
        try:
            for lo in range(0, n, chunk_rows):
                hi = min(n, lo + chunk_rows)
                ct = codec.encode(table[lo:hi].contiguous())
                lengths[lo:hi] = ct.row_lengths().numpy()
                sink.write(ct.payload.numpy()[: int(lengths[lo:hi].sum())])
                bar.update(hi - lo)
        finally:
            bar.close()
        offsets = None
        if not fixed:
            total = int(lengths.sum())
            offsets = np.zeros(n + 1, dtype=np.int32 if total < 2**31 else np.int64)
            np.cumsum(lengths, out=offsets[1:])
            offsets = torch.from_numpy(offsets)
        payload = sink.finish()
        compressed = CompressedTensor(payload=payload, offsets=offsets,
                                      shape=tuple(table.shape), dtype=table.dtype,
                                      codec=codec.name, fingerprint=codec.fingerprint)
        out = cls(codec, compressed)
        if directory is not None:
            out._write_sidecars(Path(directory))
        return out

    # ---- files -----------------------------------------------------------------
    def save(self, directory: PathLike) -> Path:
        """Write the table into `directory` (created if needed)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.compressed.payload.numpy().tofile(d / "payload.bin")
        self._write_sidecars(d)
        return d

    def _write_sidecars(self, d: Path) -> None:
        if self.compressed.offsets is not None:
            np.save(d / "offsets.npy", self.compressed.offsets.numpy())
        else:  # fixed stride: a stale offsets file from an earlier table must not linger
            (d / "offsets.npy").unlink(missing_ok=True)
        (d / "codec.bin").write_bytes(state_to_bytes(self.codec.state_dict()))
        meta = {"format_version": FORMAT_VERSION, "shape": list(self.shape),
                "dtype": dtype_name(self.dtype), "codec": self.codec.name,
                "fingerprint": self.codec.fingerprint, "payload_bytes": self.compressed.payload.numel()}
        (d / "meta.json").write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, directory: PathLike, *, mmap: bool = True) -> "EncodedTable":
        """Open a saved table; memory-mapped (shared between processes, read-only) by default."""
        d = Path(directory)
        missing = [f for f in ("meta.json", "codec.bin", "payload.bin") if not (d / f).exists()]
        if missing:
            raise FileNotFoundError(f"{d} is not an encoded table: missing {', '.join(missing)} "
                                    "(write one with EncodedTable.encode(..., directory=) or save())")
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise CorruptPayloadError(f"{d}/meta.json has format_version={meta.get('format_version')!r}; "
                                      f"this ibp-graph reads {FORMAT_VERSION}: re-run the prepare step")
        codec = codec_from_state_dict(state_from_bytes((d / "codec.bin").read_bytes()))
        if codec.fingerprint != meta["fingerprint"] or codec.name != meta["codec"]:
            raise CorruptPayloadError(f"{d}/codec.bin does not match meta.json (codec name or fingerprint)")
        shape = tuple(meta["shape"])
        dtype = dtype_from_name(meta["dtype"])
        offsets = None
        if codec.name == IdentityCodec.name:  # fixed stride: the rows end at raw_nbytes
            end = math.prod(shape) * itemsize(dtype)
        else:
            if not (d / "offsets.npy").exists():
                raise FileNotFoundError(f"{d} is not an encoded table: missing offsets.npy "
                                        f"(the {codec.name} codec stores one offset per row)")
            offsets = np.load(d / "offsets.npy", mmap_mode="r" if mmap else None)
            if offsets.shape[0] != shape[0] + 1:
                raise CorruptPayloadError(f"{d}/offsets.npy has {offsets.shape[0]} entries for {shape[0]} rows")
            end = int(offsets[-1]) + PAYLOAD_TAIL
        size = (d / "payload.bin").stat().st_size
        if size != meta["payload_bytes"] or size < end:
            raise CorruptPayloadError(f"{d}/payload.bin has {size} bytes; meta.json says "
                                      f"{meta['payload_bytes']}: the file is truncated or replaced")
        payload = np.memmap(d / "payload.bin", dtype=np.uint8, mode="r") if mmap \
            else np.fromfile(d / "payload.bin", dtype=np.uint8)
        compressed = CompressedTensor(payload=_readonly_tensor(payload),
                                      offsets=None if offsets is None else _readonly_tensor(offsets),
                                      shape=shape, dtype=dtype, codec=meta["codec"],
                                      fingerprint=int(meta["fingerprint"]))
        return cls(codec, compressed)


def _readonly_tensor(arr: np.ndarray) -> torch.Tensor:
    """A tensor over a (possibly read-only, memory-mapped) array, without copying it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-writable.*")
        return torch.from_numpy(arr)


class _PayloadSink:
    """Collects payload chunks in memory, or appends them to a file; adds the tail padding."""

    def __init__(self, directory: Optional[PathLike]):
        self.parts: list[np.ndarray] = []
        self.size = 0
        self.file = None
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            self.path = Path(directory) / "payload.bin"
            self.file = open(self.path, "wb")

    def write(self, chunk: np.ndarray) -> None:
        self.size += chunk.nbytes
        if self.file is not None:
            self.file.write(memoryview(np.ascontiguousarray(chunk)))
        else:
            self.parts.append(chunk.copy())

    def finish(self) -> torch.Tensor:
        padded = (self.size + PAYLOAD_TAIL + 7) // 8 * 8
        tail = np.zeros(padded - self.size, dtype=np.uint8)
        if self.file is not None:
            self.file.write(tail.tobytes())
            self.file.close()
            return _readonly_tensor(np.memmap(self.path, dtype=np.uint8, mode="r"))
        return torch.from_numpy(np.concatenate(self.parts + [tail]))


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total < 2 * CHUNK_ROWS:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="rows", unit_scale=True)


__all__ = ["EncodedTable", "CHUNK_ROWS"]
