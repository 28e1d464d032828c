"""A store's payload verified on first use: each checksummed chunk is checked the first time a row in it is read.

`EncodedTable.load` checks some of the payload's chunks when it opens a store
(verify="sample": a few; "full": all). A `ChunkGuard`, made from the payload's entry
in checksums.json, checks the rest as they are needed: before rows are gathered, the
chunks covering their bytes that are not yet verified are hashed (xxh3-64 over the
payload in memory or its memory map, no copy) and compared with the recorded digests.
A chunk whose digest differs raises ChecksumError naming the file, the chunk, its byte
range and a row that needed it, and serves no row. Verified chunks are marked in a
bitmap in shared memory, so the DataLoader workers (forked or spawned) and the main
process verify each chunk once between them (two verifying one chunk at the same time
is harmless). Once every chunk is verified, the check is a flag test.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import torch
import xxhash
from numba import njit

from ..layout.tensor import CompressedTensor
from .checksums import ALGORITHM, ChecksumError, Damage
from ..jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

__all__ = ["ChunkGuard"]

#: chunks named in full by an error; the count of the others follows.
_NAMED = 5


@njit(cache=True, nogil=True)
def _unverified_chunks(offsets, stride, rows, chunk_bytes, verified, want, need, first):
    """need[:k]: the chunks covering the bytes of rows `rows` (offsets[r]..offsets[r + 1], or
    r * stride.. with `stride` > 0) whose `verified` entry is 0, each once, in the order rows
    need them; first[:k]: a row needing each. `want`: zeros, one per chunk (scratch). Returns k."""
    k = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        if stride > 0:
            s = r * stride
            e = s + stride
        else:
            s = np.int64(offsets[r])
            e = np.int64(offsets[r + 1])
        if e <= s:
            continue
        for c in range(s // chunk_bytes, (e - 1) // chunk_bytes + 1):
            if verified[c] == 0 and want[c] == 0:
                want[c] = 1
                need[k] = c
                first[k] = r
                k += 1
    return k


class ChunkGuard:
    """The recorded digests of a store's payload.bin and which of its chunks are verified (shared memory)."""

    def __init__(self, path: Path, digests: np.ndarray, chunk_bytes: int, payload_bytes: int):
        n = -(-payload_bytes // chunk_bytes)
        if digests.shape != (n,):
            raise ChecksumError(f"{path}: {digests.shape[0]} checksums recorded for {payload_bytes} bytes in chunks "
                                f"of {chunk_bytes}; expected {n}: re-run the step that wrote the store")
        self.path = Path(path)
        self.digests = digests
        self.chunk_bytes = chunk_bytes
        #: 1 for each verified chunk; shared by every process the guard is handed to (fork or spawn).
        self.verified = torch.zeros(n, dtype=torch.uint8).share_memory_()
        self._done = n == 0

    @classmethod
    def from_manifest(cls, path: Path, manifest: dict, payload_bytes: int) -> "ChunkGuard":
        """The guard of file `path` from its folder's checksums (read_manifest's result)."""
        entry = manifest["files"][path.name]
        try:
            digests = np.array(entry[ALGORITHM], dtype=np.uint64)
        except (OverflowError, TypeError, ValueError) as e:
            raise ChecksumError(f"{path.parent / 'checksums.json'}: the checksums of {path.name} are not "
                                f"64-bit integers ({e}): re-run the step that wrote the store") from None
        return cls(path, digests, manifest["chunk_bytes"], payload_bytes)

    @property
    def done(self) -> bool:
        """Whether every chunk is verified (as far as this process has seen)."""
        return self._done

    def mark(self, chunks: Iterable[int]) -> None:
        """Mark `chunks` verified (checked elsewhere, e.g. when the store was opened)."""
        idx = torch.as_tensor(np.asarray(list(chunks), dtype=np.int64))
        self.verified[idx] = 1
        self._done = bool(self.verified.all())

    def forget(self, chunks: Optional[Iterable[int]] = None) -> None:
        """Mark `chunks` (default: all) unverified again, so their next read verifies them (benchmarks)."""
        if chunks is None:
            self.verified.zero_()
        else:
            self.verified[torch.as_tensor(np.asarray(list(chunks), dtype=np.int64))] = 0
        self._done = bool(self.verified.all())

    def check(self, ct: CompressedTensor, rows: np.ndarray) -> None:
        """Verify the chunks of `ct`'s payload that rows `rows` (int64, in range) need and that are not
        verified yet; ChecksumError naming the damaged ones and a row needing each."""
        if self._done:
            return
        bits = self.verified.numpy()
        n = bits.shape[0]
        stride = 0 if ct.offsets is not None else ct.row_nbytes
        offsets = ct.offsets.numpy() if ct.offsets is not None else np.zeros(1, np.int64)
        want = np.zeros(n, np.uint8)
        need = np.empty(n, np.int64)
        first = np.empty(n, np.int64)
        k = _unverified_chunks(offsets, stride, rows, self.chunk_bytes, bits, want, need, first)
        self._verify(ct.payload.numpy(), need[:k], first[:k])

    def check_all(self, ct: CompressedTensor) -> None:
        """Verify every chunk of `ct`'s payload not verified yet (e.g. before the table is saved)."""
        if self._done:
            return
        todo = np.flatnonzero(self.verified.numpy() == 0)
        self._verify(ct.payload.numpy(), todo, None)

    def _verify(self, payload: np.ndarray, chunks: np.ndarray, rows) -> None:
        bits = self.verified.numpy()
        cb = self.chunk_bytes
        bad = []
        for i, c in enumerate(chunks.tolist()):
            if xxhash.xxh3_64_intdigest(payload[c * cb:(c + 1) * cb]) == int(self.digests[c]):
                bits[c] = 1
            else:
                bad.append(i)
        self._done = bool(bits.all())
        if bad:
            what = Damage(self.path.name, chunks=[int(chunks[i]) for i in bad]).describe(self.path.parent, cb)
            needed = "" if rows is None else "; needed by row " + ", ".join(
                f"{int(rows[i])} (chunk {int(chunks[i])})" for i in bad[:_NAMED])
            raise ChecksumError(f"{what}{needed}. No row was served from a damaged chunk; re-run the step that "
                                "wrote the store (ibp-graph prepare) or restore it from a copy")
