"""Per-chunk checksums of the files of a folder (xxh3-64 per MiB), written beside them and checked on load.

``checksums.json`` lists, for each file, its size and one xxh3-64 digest per
``chunk_bytes`` chunk. `verify` checks a folder "full" (every chunk: what
``ibp-graph verify`` does), "sample" (small files whole, a few random chunks plus the
first and last of each large file: seconds even at papers100M size) or "none".
A checksum list must list every data file of its folder (`read_manifest`'s
`required`): an empty one, or one lacking a file, is a ChecksumError like a damaged one.
Checksums guard against damage (bit rot, truncation, a file edited or replaced), not
against someone who rewrites the checksums too.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional, Sequence, Union

import numpy as np
import xxhash

from ..layout.errors import CorruptPayloadError
from ..files import listing, read_json, write_text

__all__ = ["MANIFEST", "ALGORITHM", "CHUNK_BYTES", "VERIFY_MODES", "SAMPLE_CHUNKS", "ChecksumError",
           "UnverifiedDataWarning", "Damage", "check_mode", "write_manifest", "read_manifest", "find_damage", "verify"]

PathLike = Union[str, os.PathLike]
MANIFEST = "checksums.json"
_FORMAT = "ibp_graph.checksums"
ALGORITHM = "xxh3_64"
#: bytes per checksum: a damaged chunk condemns at most this much of a file.
CHUNK_BYTES = 1 << 20
#: random chunks read per large file by verify="sample" (besides its first and last).
SAMPLE_CHUNKS = 16
VERIFY_MODES = ("full", "sample", "none")


class ChecksumError(CorruptPayloadError):
    """A file's bytes differ from the checksums recorded when it was written."""


class UnverifiedDataWarning(UserWarning):
    """A folder without checksums (written by an older ibp-graph) was opened unverified."""


@dataclass
class Damage:
    """What is wrong with one file: a size change, unreadable, or the chunks whose checksum differs."""

    name: str
    size: Optional[int] = None       # the size found, when it differs from the recorded one
    expected_size: Optional[int] = None
    chunks: list[int] = field(default_factory=list)
    missing: bool = False

    def describe(self, directory: Path, chunk_bytes: int) -> str:
        """One line naming the file and what differs."""
        path = directory / self.name
        if self.missing:
            return f"{path} is missing ({MANIFEST} lists it)"
        if self.size is not None:
            return (f"{path} has {self.size} bytes; {MANIFEST} recorded {self.expected_size}: "
                    "the file is truncated or replaced")
        ranges = listing([f"{c} (bytes {c * chunk_bytes}..{(c + 1) * chunk_bytes - 1})" for c in self.chunks])
        return f"{path}: checksum differs in chunk(s) {ranges} of {chunk_bytes} bytes"


def check_mode(verify: object, argname: str = "verify") -> str:
    """`verify` if it is one of VERIFY_MODES, else a ValueError naming the accepted ones."""
    if verify not in VERIFY_MODES:
        raise ValueError(f"{argname}={verify!r} is not accepted; choose from {', '.join(map(repr, VERIFY_MODES))}")
    return verify


def _digests(path: Path, chunk_bytes: int) -> list[int]:
    out = []
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            out.append(xxhash.xxh3_64_intdigest(view[:n]))
    return out


def write_manifest(directory: PathLike, names: Sequence[str], *, chunk_bytes: int = CHUNK_BYTES) -> Path:
    """Checksum the files `names` (relative to `directory`) and write checksums.json (atomically)."""
    d = Path(directory)
    files = {}
    for name in names:
        path = d / name
        files[name] = {"size": path.stat().st_size, ALGORITHM: _digests(path, chunk_bytes)}
    manifest = {"format": _FORMAT, "version": 1, "algorithm": ALGORITHM, "chunk_bytes": chunk_bytes,
                "files": files}
    return write_text(d / MANIFEST, json.dumps(manifest, separators=(",", ":")) + "\n")


def _count(value) -> bool:
    """Whether `value` is a JSON integer (not a bool, which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _inside(name: str) -> bool:
    """Whether a manifest's file name is a path below its folder (relative, no '..', not empty)."""
    parts = PurePosixPath(name).parts
    return bool(parts) and not PurePosixPath(name).is_absolute() and "\\" not in name and ".." not in parts


def read_manifest(directory: PathLike, required: Sequence[str] = ()) -> Optional[dict]:
    """The folder's checksums.json (None when it has none); a ChecksumError naming it if it is damaged,
    lists no files, or lacks an entry for a file of `required` (the folder's data files)."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    m = read_json(path, ChecksumError, "; re-run the step that wrote the folder")
    ok = (m.get("format") == _FORMAT and m.get("algorithm") == ALGORITHM
          and _count(m.get("chunk_bytes")) and m["chunk_bytes"] > 0 and isinstance(m.get("files"), dict)
          and all(isinstance(v, dict) and _count(v.get("size")) and v["size"] >= 0
                  and isinstance(v.get(ALGORITHM), list) for v in m["files"].values()))
    if not ok:
        raise ChecksumError(f"{path} is not a checksum list of this ibp-graph (format {_FORMAT!r}, "
                            f"algorithm {ALGORITHM!r}); re-run the step that wrote the folder")
    outside = [name for name in m["files"] if not _inside(name)]
    if outside:  # its names are read below the folder only
        raise ChecksumError(f"{path} names {listing(outside)}, outside its folder (accepted: relative paths "
                            "without '..'); re-run the step that wrote the folder")
    unlisted = [name for name in required if name not in m["files"]]
    if not m["files"] or unlisted:
        what = "lists no files" if not m["files"] else f"has no entry for {', '.join(unlisted)}"
        expected = f" ({', '.join(required)})" if required else ""
        raise ChecksumError(f"{path} {what}: every data file of the folder{expected} must be listed, or it "
                            "would be read unverified; re-run the step that wrote the folder")
    return m


def _chunks_to_check(n_chunks: int, mode: str, rng: np.random.Generator) -> np.ndarray:
    if mode == "full" or n_chunks <= SAMPLE_CHUNKS + 2:
        return np.arange(n_chunks)
    picks = rng.choice(np.arange(1, n_chunks - 1), size=SAMPLE_CHUNKS, replace=False)
    return np.sort(np.concatenate([[0, n_chunks - 1], picks]))


def find_damage(directory: PathLike, manifest: dict, mode: str = "full", *, names: Optional[Sequence[str]] = None,
                whole: Sequence[str] = (), seed: Optional[int] = None,
                checked: Optional[dict] = None) -> list[Damage]:
    """Check the files of `manifest` (or only `names`) in `mode`; return what is damaged (empty: all good).

    Files named in `whole` are checked whole even in "sample" mode (small ones are anyway).
    `checked`, when given, receives for each file read the indices of the chunks compared.
    """
    check_mode(mode)
    d = Path(directory)
    if mode == "none":
        return []
    chunk_bytes = manifest["chunk_bytes"]
    rng = np.random.default_rng(seed)
    out = []
    for name, entry in manifest["files"].items():
        if names is not None and name not in names:
            continue
        path = d / name
        if not path.is_file():
            out.append(Damage(name, missing=True))
            continue
        size = path.stat().st_size
        if size != entry["size"]:
            out.append(Damage(name, size=size, expected_size=entry["size"]))
            continue
        recorded = entry[ALGORITHM]
        if len(recorded) != -(-size // chunk_bytes):
            out.append(Damage(name, size=size, expected_size=len(recorded) * chunk_bytes))
            continue
        which = _chunks_to_check(len(recorded), "full" if name in whole else mode, rng)
        bad = []
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            for c in which.tolist():
                if xxhash.xxh3_64_intdigest(os.pread(fd, chunk_bytes, c * chunk_bytes)) != recorded[c]:
                    bad.append(c)
        if checked is not None:
            checked[name] = which
        if bad:
            out.append(Damage(name, chunks=bad))
    return out


def verify(directory: PathLike, mode: str = "sample", *, names: Optional[Sequence[str]] = None,
           whole: Sequence[str] = (), required: Sequence[str] = (), checked: Optional[dict] = None) -> Optional[dict]:
    """Raise ChecksumError naming every damaged file and chunk, or a manifest lacking a file of `required`;
    return the manifest (None if the folder has none). `checked`: as find_damage's."""
    check_mode(mode)
    if mode == "none":
        return None
    manifest = read_manifest(directory, required)
    if manifest is None:
        return None
    damage = find_damage(directory, manifest, mode, names=names, whole=whole, checked=checked)
    if damage:
        d = Path(directory)
        lines = "\n  ".join(x.describe(d, manifest["chunk_bytes"]) for x in damage)
        raise ChecksumError(f"{d} is damaged ({len(damage)} file(s)):\n  {lines}\n"
                            "Nothing was read from it; re-run the step that wrote it (ibp-graph prepare) "
                            "or restore it from a copy")
    return manifest
