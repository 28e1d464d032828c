"""Pre-encoded feature store: a table compressed once, kept in host memory or memory-mapped files.

Workers gather compressed rows from it (`index_select`) instead of gathering raw rows and
encoding them per batch; on disk it also takes less space than the raw table.

Folder layout (`save` / `load`): ``payload.bin`` (the rows, docs/format.md),
``offsets.npy``, ``codec.bin`` (the codec state as a checksummed blob), ``meta.json``.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..codec import IBPCodec, codec_from_state_dict
from ..codec.base import (
    PAYLOAD_TAIL,
    Codec,
    CompressedTensor,
    CorruptPayloadError,
    dtype_from_name,
    dtype_name,
)
from ..codec.format import FORMAT_VERSION, state_from_bytes, state_to_bytes

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
    def encode(cls, table: torch.Tensor, codec: Optional[Codec] = None, *,
               chunk_rows: int = CHUNK_ROWS, directory: Optional[PathLike] = None,
               progress: bool = True) -> "EncodedTable":
        """Encode `table` chunk by chunk (fitting an IBPCodec on a sample when `codec` is None).

        With `directory`, payload chunks stream to ``directory/payload.bin`` and the result
        is memory-mapped from there, so neither the raw nor the encoded table has to fit
        in memory (the table itself may be memory-mapped).
        """
        if not isinstance(chunk_rows, int) or chunk_rows < 1:
            raise ValueError(f"chunk_rows={chunk_rows!r} is not accepted; use an int >= 1")
        codec = codec if codec is not None else IBPCodec.fit(table)
        n = table.shape[0]
        lengths = np.zeros(n, dtype=np.int64)
        sink = _PayloadSink(directory)
        bar = _progress(n, "encoding rows", progress)
        try:
            for lo in range(0, n, chunk_rows):
                hi = min(n, lo + chunk_rows)
                ct = codec.encode(table[lo:hi].contiguous())
                o = ct.offsets.numpy().astype(np.int64)
                lengths[lo:hi] = np.diff(o)
                sink.write(ct.payload.numpy()[: o[-1]])
                bar.update(hi - lo)
        finally:
            bar.close()
        total = int(lengths.sum())
        offsets = np.zeros(n + 1, dtype=np.int32 if total < 2**31 else np.int64)
        np.cumsum(lengths, out=offsets[1:])
        payload = sink.finish()
        compressed = CompressedTensor(payload=payload, offsets=torch.from_numpy(offsets),
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
        np.save(d / "offsets.npy", self.compressed.offsets.numpy())
        (d / "codec.bin").write_bytes(state_to_bytes(self.codec.state_dict()))
        meta = {"format_version": FORMAT_VERSION, "shape": list(self.shape),
                "dtype": dtype_name(self.dtype), "codec": self.codec.name,
                "fingerprint": self.codec.fingerprint, "payload_bytes": self.compressed.payload.numel()}
        (d / "meta.json").write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, directory: PathLike, *, mmap: bool = True) -> "EncodedTable":
        """Open a saved table; memory-mapped (shared between processes, read-only) by default."""
        d = Path(directory)
        missing = [f for f in ("meta.json", "codec.bin", "offsets.npy", "payload.bin") if not (d / f).exists()]
        if missing:
            raise FileNotFoundError(f"{d} is not an encoded table: missing {', '.join(missing)} "
                                    "(write one with EncodedTable.encode(..., directory=) or save())")
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise CorruptPayloadError(f"{d}/meta.json has format_version={meta.get('format_version')!r}; "
                                      f"this ibp-graph reads {FORMAT_VERSION}: re-run the prepare step")
        codec = codec_from_state_dict(state_from_bytes((d / "codec.bin").read_bytes()))
        if codec.fingerprint != meta["fingerprint"]:
            raise CorruptPayloadError(f"{d}/codec.bin does not match meta.json (fingerprint)")
        offsets = np.load(d / "offsets.npy", mmap_mode="r" if mmap else None)
        size = (d / "payload.bin").stat().st_size
        if size != meta["payload_bytes"] or size < int(offsets[-1]) + PAYLOAD_TAIL:
            raise CorruptPayloadError(f"{d}/payload.bin has {size} bytes; meta.json says "
                                      f"{meta['payload_bytes']}: the file is truncated or replaced")
        payload = np.memmap(d / "payload.bin", dtype=np.uint8, mode="r") if mmap \
            else np.fromfile(d / "payload.bin", dtype=np.uint8)
        shape = tuple(meta["shape"])
        if offsets.shape[0] != shape[0] + 1:
            raise CorruptPayloadError(f"{d}/offsets.npy has {offsets.shape[0]} entries for {shape[0]} rows")
        compressed = CompressedTensor(payload=_readonly_tensor(payload), offsets=_readonly_tensor(offsets),
                                      shape=shape, dtype=dtype_from_name(meta["dtype"]),
                                      codec=meta["codec"], fingerprint=int(meta["fingerprint"]))
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
