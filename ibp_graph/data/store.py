"""Pre-encoded feature store: a table compressed once, kept in host memory or memory-mapped files.

Workers gather compressed rows from it (`index_select`) instead of gathering raw rows and
encoding them per batch; on disk it also takes less space than the raw table.

Folder layout (`save` / `load`): ``payload.bin`` (the rows, docs/format.md),
``offsets.npy`` (absent for the identity codec, whose rows have a fixed stride),
``codec.bin`` (the codec state as a checksummed blob), ``meta.json`` (shape, dtype and
the codec's name and fingerprint), ``checksums.json`` (per-chunk checksums of the four,
``ibp_graph.data.checksums``; written last). Every file is written atomically; nothing
read back is trusted before its structure (and, by default, a sample of its checksums)
is checked. A store opened with checksums is verified as it is read: each payload chunk the
first time a row in it is gathered (``ibp_graph.data.guard``), so no unverified row is
ever decoded.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import warnings
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import torch

from ..codec import IdentityCodec, codec_from_state_dict
from ..codec.auto import CodecSpec, fit_named
from ..codec.base import Codec
from ..layout.dtypes import dtype_from_name, dtype_name, itemsize
from ..layout.errors import CodecError, CorruptPayloadError
from ..layout.format import FORMAT_VERSION, state_from_bytes, state_to_bytes
from ..layout.rows import PAYLOAD_TAIL, check_row_index
from ..layout.tensor import CompressedTensor
from . import checksums
from ..index_checks import first_bad_step
from .checksums import UnverifiedDataWarning, check_mode, write_manifest
from .guard import ChunkGuard
from ..files import OutputFolderError, atomic_write, read_json, save_npy, work_dir, write_bytes, write_text

PathLike = Union[str, os.PathLike]
#: rows encoded per step by `EncodedTable.encode` (bounded memory for huge tables).
CHUNK_ROWS = 262_144


class EncodedTable:
    """A whole feature table, encoded once; `index_select` gathers compressed rows.

    `guard` (set by `load`) verifies each payload chunk against its checksums the first
    time a row in it is read; a table encoded in memory has none and needs none.
    """

    def __init__(self, codec: Codec, compressed: CompressedTensor, guard: Optional[ChunkGuard] = None):
        codec.check(compressed, "compressed")
        self.codec = codec
        self.compressed = compressed
        self.guard = guard

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
    def index_select(self, rows: torch.Tensor,
                     empty: Optional[Callable[..., torch.Tensor]] = None) -> CompressedTensor:
        """Compressed rows `rows`, in that order, without decoding (payload written into
        ``empty(shape, dtype)`` when given: CompressedTensor.index_select); their chunks verified
        first (ChecksumError if one is damaged)."""
        if self.guard is not None and not self.guard.done:
            rows = self.verify_rows(rows)
        return self.compressed.index_select(rows, empty)

    def verify_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Verify the payload chunks rows `rows` need that are not verified yet (ChecksumError naming a
        damaged one and a row needing it); `rows` as checked int64 on the CPU. For readers that gather
        rows themselves (the zero-copy fetch)."""
        idx = torch.from_numpy(check_row_index(rows, self.n_rows, "rows"))
        if self.guard is not None:
            self.guard.check(self.compressed, idx.numpy())
        return idx

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
        if directory is not None:
            _check_store_dir(Path(directory))
        if isinstance(codec, str) or codec is None:
            codec = fit_named(table, codec, argname="codec")
        fixed = codec.name == IdentityCodec.name  # fixed-stride rows, no offsets
        n = table.shape[0]
        lengths = np.zeros(n, dtype=np.int64)
        bar = _progress(n, "encoding rows", progress)
        with contextlib.ExitStack() as staged:  # the store's files take their names only once all are complete
            work = None if directory is None else staged.enter_context(_staged(Path(directory)))
            with contextlib.ExitStack() as stack:
                path = None if work is None else stack.enter_context(atomic_write(work / "payload.bin"))
                sink = stack.enter_context(_PayloadSink(path))
                stack.callback(bar.close)
                for lo in range(0, n, chunk_rows):
                    hi = min(n, lo + chunk_rows)
                    ct = codec.encode(table[lo:hi].contiguous())
                    lengths[lo:hi] = ct.row_lengths().numpy()
                    sink.write(ct.payload.numpy()[: int(lengths[lo:hi].sum())])
                    bar.update(hi - lo)
                payload = sink.finish()
            if payload is None:  # the file keeps its inode when moved into `directory`: the map stays valid
                payload = torch.from_numpy(np.memmap(work / "payload.bin", dtype=np.uint8, mode="c"))
            offsets = None
            if not fixed:
                total = int(lengths.sum())
                offsets = np.zeros(n + 1, dtype=np.int32 if total < 2**31 else np.int64)
                np.cumsum(lengths, out=offsets[1:])
                offsets = torch.from_numpy(offsets)
            compressed = CompressedTensor(payload=payload, offsets=offsets,
                                          shape=tuple(table.shape), dtype=table.dtype,
                                          codec=codec.name, fingerprint=codec.fingerprint)
            out = cls(codec, compressed)
            if work is not None:
                out._write_sidecars(work)
        return out

    # ---- files -----------------------------------------------------------------
    def save(self, directory: PathLike) -> Path:
        """Write the table into `directory` (created if needed), with checksums.

        The files are written in a work folder beside `directory` and then renamed into it, checksums.json
        last: a store saved over another is the old one until the new one is complete (an interruption
        before leaves the old one, loadable), and saving onto the folder the table was loaded from works
        (its memory maps stay valid). A folder that holds files of a store's names but no store is
        refused (OutputFolderError), nothing written.
        """
        d = Path(directory)
        _check_store_dir(d)
        if self.guard is not None:  # new checksums over an unverified chunk would bless its damage
            self.guard.check_all(self.compressed)
        with _staged(d) as work:
            with atomic_write(work / "payload.bin") as tmp:
                self.compressed.payload.numpy().tofile(tmp)
            self._write_sidecars(work)
        return d

    def _write_sidecars(self, d: Path) -> None:
        if self.compressed.offsets is not None:
            save_npy(d / "offsets.npy", self.compressed.offsets.numpy())
        write_bytes(d / "codec.bin", state_to_bytes(self.codec.state_dict()))
        meta = {"format_version": FORMAT_VERSION, "shape": list(self.shape),
                "dtype": dtype_name(self.dtype), "codec": self.codec.name,
                "fingerprint": self.codec.fingerprint, "payload_bytes": self.compressed.payload.numel()}
        write_text(d / "meta.json", json.dumps(meta, indent=2))
        write_manifest(d, store_files(d))

    @classmethod
    def load(cls, directory: PathLike, *, mmap: bool = True, verify: str = "sample") -> "EncodedTable":
        """Open a saved table, checking its structure and (`verify`) its checksums; memory-mapped by default.

        `verify` "sample" (default) checks the small files and the offsets whole and a few
        random payload chunks (seconds at papers100M size) at open, and every other payload
        chunk the first time a row in it is read (``guard``); "full" every chunk at open;
        "none" only the structure, and rows are then served unverified (the caller opted
        out). A damaged file raises CorruptPayloadError naming it and what is wrong; no row
        is ever served from a chunk found damaged. A checksums.json that lists no files or
        lacks one of the store's raises ChecksumError; a store written before checksums
        existed opens with an UnverifiedDataWarning (and unverified rows). Memory maps are
        copy-on-write: a write into the tensors changes this process's copy, never the file.
        """
        check_mode(verify)
        d = Path(directory)
        if not d.is_dir():
            raise FileNotFoundError(f"{d} is not an encoded table: {'a file' if d.exists() else 'no such folder'}")
        missing = [f for f in FILES if not (d / f).is_file()]
        if missing:
            raise FileNotFoundError(f"{d} is not an encoded table: missing {', '.join(missing)} "
                                    "(write one with EncodedTable.encode(..., directory=) or save())")
        meta = _read_meta(d / "meta.json")
        if meta["codec"] != IdentityCodec.name and not (d / "offsets.npy").is_file():
            raise FileNotFoundError(f"{d} is not an encoded table: missing offsets.npy "
                                    f"(the {meta['codec']} codec stores one offset per row)")
        checked: dict = {}
        manifest = None if verify == "none" else checksums.verify(d, verify, whole=("offsets.npy",),
                                                                  required=store_files(d), checked=checked)
        if verify != "none" and manifest is None:
            warnings.warn(f"{d} has no {checksums.MANIFEST} (written before stores carried checksums): its "
                          f"payload is not verified; record them with `ibp-graph verify --write {d}` or "
                          "re-run the prepare step", UnverifiedDataWarning, stacklevel=2)
        codec = _read_codec(d / "codec.bin", meta)
        shape, dtype = tuple(meta["shape"]), dtype_from_name(meta["dtype"])
        size = (d / "payload.bin").stat().st_size
        if size != meta["payload_bytes"]:
            raise CorruptPayloadError(f"{d}/payload.bin has {size} bytes; meta.json says "
                                      f"{meta['payload_bytes']}: the file is truncated or replaced")
        offsets = None
        row_nbytes = math.prod(shape[1:]) * itemsize(dtype)
        if codec.name == IdentityCodec.name:  # fixed stride: the rows, then any tail padding
            raw = shape[0] * row_nbytes
            if not raw <= size < raw + PAYLOAD_TAIL + 8:
                raise CorruptPayloadError(
                    f"{d}/payload.bin has {size} bytes; meta.json's shape {list(shape)} {meta['dtype']} needs "
                    f"{raw} bytes of rows plus at most {PAYLOAD_TAIL + 7} of padding: the shape in "
                    "meta.json or the file is wrong")
        else:
            offsets = _read_offsets(d / "offsets.npy", shape[0], row_nbytes, size, mmap)
        payload = np.memmap(d / "payload.bin", dtype=np.uint8, mode="c") if mmap and size \
            else np.fromfile(d / "payload.bin", dtype=np.uint8)  # an empty file cannot be mapped (a zero-width shard)
        compressed = CompressedTensor(payload=torch.from_numpy(payload),
                                      offsets=None if offsets is None else torch.from_numpy(offsets),
                                      shape=shape, dtype=dtype, codec=meta["codec"],
                                      fingerprint=int(meta["fingerprint"]))
        guard = None
        if manifest is not None:
            guard = ChunkGuard.from_manifest(d / "payload.bin", manifest, size)
            guard.mark(checked.get("payload.bin", ()))
        try:
            return cls(codec, compressed, guard)
        except (CodecError, TypeError) as e:
            raise CorruptPayloadError(f"{d}: meta.json does not match codec.bin: {e}") from None


#: the files every store has (offsets.npy too, except for the identity codec).
FILES = ("payload.bin", "codec.bin", "meta.json")


def _check_store_dir(d: Path) -> None:
    """OutputFolderError unless the folder `d` a store is written into is absent, holds no file of a store's names,
    or holds a store (its meta.json a store's): writing would replace, or delete, a user's files of those names.
    A file `d`, and a mount point, are refused here too, before any encoding (the store's files move into `d` only at
    the end, from a work folder beside it)."""
    if d.exists() and not d.is_dir():
        raise OutputFolderError(f"directory={str(d)!r} is not accepted: it is a file; nothing was written: pass an "
                                "absent or empty folder, or one holding a store")
    if os.path.ismount(os.path.realpath(d)):  # the work folder beside it would lie on another file system
        raise OutputFolderError(f"directory={str(d)!r} is not accepted: it is a mount point, and a store is written "
                                "in a work folder beside its folder and moved in at the end (a move cannot cross file "
                                "systems); nothing was written: pass a folder inside it")
    taken = [f for f in (*FILES, "offsets.npy", checksums.MANIFEST) if (d / f).exists() or (d / f).is_symlink()]
    if not taken:
        return
    try:
        _read_meta(d / "meta.json")
        return
    except CorruptPayloadError:
        pass
    raise OutputFolderError(f"directory={str(d)!r} is not accepted: it holds {', '.join(taken)} but no encoded "
                            "table (its meta.json is not a store's), and writing a store there would replace those "
                            "files; nothing was written: pass an absent or empty folder, or one holding a store")


@contextlib.contextmanager
def _staged(d: Path):
    """A work folder beside `d` (files.work_dir: removed however the block ends) for a store's files, moved into
    `d` when the block succeeds, checksums.json last (a stale offsets.npy of an earlier variable-stride store
    removed before it): a store saved over another stays the old one while the new one is written (its payload:
    minutes at papers100M size), and only the few renames at the end could leave a mix, which its checksums
    refuse."""
    # beside the folder the files land in: through a symlink, on its file system (os.replace cannot cross one);
    # for ".", a folder with a name of its own
    d = Path(os.path.realpath(d))
    d.parent.mkdir(parents=True, exist_ok=True)
    with work_dir(d) as work:
        yield work
        d.mkdir(exist_ok=True)
        names = sorted(os.listdir(work), key=lambda name: name == checksums.MANIFEST)
        for name in names:
            if name == checksums.MANIFEST and "offsets.npy" not in names:
                (d / "offsets.npy").unlink(missing_ok=True)
            os.replace(work / name, d / name)


def store_files(directory: PathLike) -> tuple[str, ...]:
    """The data files of the store in `directory` its checksums.json must list: FILES, and offsets.npy when present."""
    return FILES + tuple(f for f in ("offsets.npy",) if (Path(directory) / f).is_file())
_META_KEYS = {"format_version": int, "shape": list, "dtype": str, "codec": str, "fingerprint": int,
              "payload_bytes": int}


def _read_meta(path: Path) -> dict:
    meta = read_json(path, CorruptPayloadError, f" with keys {', '.join(_META_KEYS)}: re-run the prepare step")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CorruptPayloadError(f"{path} has format_version={meta.get('format_version')!r}; "
                                  f"this ibp-graph reads {FORMAT_VERSION}: re-run the prepare step")
    for key, kind in _META_KEYS.items():
        if key not in meta:
            raise CorruptPayloadError(f"{path} lacks the key {key!r}; expected keys {', '.join(_META_KEYS)}")
        value = meta[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CorruptPayloadError(f"{path}: {key}={value!r} is not accepted; expected {kind.__name__}")
    shape = meta["shape"]
    if not shape or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in shape):
        raise CorruptPayloadError(f"{path}: shape={shape!r} is not accepted; expected a list of ints >= 0")
    if meta["payload_bytes"] < 0:
        raise CorruptPayloadError(f"{path}: payload_bytes={meta['payload_bytes']} is not accepted; expected >= 0")
    try:
        dtype_from_name(meta["dtype"])
    except (TypeError, ValueError) as e:
        raise CorruptPayloadError(f"{path}: {e}") from None
    return meta


def _read_codec(path: Path, meta: dict) -> Codec:
    try:
        codec = codec_from_state_dict(state_from_bytes(path.read_bytes()))
    except (CodecError, KeyError, TypeError, ValueError) as e:
        raise CorruptPayloadError(f"{path} is not a codec state ({e}); re-run the prepare step") from None
    if codec.fingerprint != meta["fingerprint"] or codec.name != meta["codec"]:
        raise CorruptPayloadError(f"{path} does not match meta.json (codec {codec.name!r} fingerprint "
                                  f"{codec.fingerprint:#x}; meta.json says {meta['codec']!r} {meta['fingerprint']:#x})")
    return codec


def _read_offsets(path: Path, n_rows: int, row_nbytes: int, payload_bytes: int, mmap: bool) -> np.ndarray:
    """offsets.npy, checked in one pass: int32/int64, n_rows + 1 entries from 0, steps within [0, row_nbytes],
    ending inside the payload."""
    try:
        offsets = np.load(path, mmap_mode="c" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise CorruptPayloadError(f"{path} is not a readable .npy array ({e}): the file is truncated "
                                  "or damaged") from None
    if offsets.dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or offsets.ndim != 1:
        raise CorruptPayloadError(f"{path} holds {offsets.dtype} {offsets.shape}; expected a 1-d int32 or int64 array")
    if offsets.shape[0] != n_rows + 1:
        raise CorruptPayloadError(f"{path} has {offsets.shape[0]} entries for {n_rows} rows; expected {n_rows + 1}")
    if int(offsets[0]) != 0:
        raise CorruptPayloadError(f"{path}: offsets[0] is {int(offsets[0])}; expected 0")
    bad = first_bad_step(offsets, row_nbytes)
    if bad >= 0:
        raise CorruptPayloadError(f"{path}: row {bad} runs from offset {int(offsets[bad])} to {int(offsets[bad + 1])}; "
                                  f"offsets must not decrease and a row holds at most {row_nbytes} bytes")
    end = int(offsets[-1]) + PAYLOAD_TAIL
    if end > payload_bytes:
        raise CorruptPayloadError(f"{path}: the rows end at byte {int(offsets[-1])} (+{PAYLOAD_TAIL} of padding), "
                                  f"beyond payload.bin's {payload_bytes} bytes")
    return offsets


class _PayloadSink:
    """Collects payload chunks in memory, or appends them to a file; adds the tail padding."""

    def __init__(self, path: Optional[Path]):
        self.parts: list[np.ndarray] = []
        self.size = 0
        self.file = None if path is None else open(path, "wb")

    def __enter__(self) -> "_PayloadSink":
        return self

    def __exit__(self, *exc) -> None:
        if self.file is not None:
            self.file.close()

    def write(self, chunk: np.ndarray) -> None:
        self.size += chunk.nbytes
        if self.file is not None:
            self.file.write(memoryview(np.ascontiguousarray(chunk)))
        else:
            self.parts.append(chunk.copy())

    def finish(self) -> Optional[torch.Tensor]:
        """The whole payload (in memory), or None once the file is complete."""
        padded = (self.size + PAYLOAD_TAIL + 7) // 8 * 8
        tail = np.zeros(padded - self.size, dtype=np.uint8)
        if self.file is not None:
            self.file.write(tail.tobytes())
            self.file.close()
            return None
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


__all__ = ["EncodedTable", "CHUNK_ROWS", "FILES", "store_files"]
