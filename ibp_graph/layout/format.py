"""Serialized container of ibp-graph blobs: magic, version, kind, JSON meta, sections, CRC32.

Compressed tensors (CompressedTensor.to_bytes) and codec states (state_to_bytes) are both
stored in it; docs/format.md, "Serialized form", describes the bytes.
"""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import torch

from .errors import CorruptPayloadError

#: bumped whenever docs/format.md changes.
FORMAT_VERSION = 1
MAGIC = b"IBPG"
KIND_TENSOR = 1
KIND_STATE = 2
_HEAD = struct.Struct("<4sHHI")  # magic, version, kind, meta length
_CRC = struct.Struct("<I")


def pack_blob(kind: int, meta: dict, sections: list[np.ndarray]) -> bytes:
    """A checksummed blob of `kind` holding JSON `meta` and the raw bytes of `sections`."""
    meta = dict(meta, sections=[[a.dtype.str, int(a.nbytes)] for a in sections])
    mb = json.dumps(meta, sort_keys=True).encode()
    parts = [_HEAD.pack(MAGIC, FORMAT_VERSION, kind, len(mb)), mb]
    parts += [np.ascontiguousarray(a).tobytes() for a in sections]
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def unpack_blob(blob: bytes, kind: int, what: str) -> tuple[dict, list[np.ndarray]]:
    """(meta, sections) of a pack_blob blob of `kind`; CorruptPayloadError naming `what` on any damage."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TypeError(f"blob must be bytes, got {type(blob).__name__}")
    blob = memoryview(blob)
    if len(blob) < _HEAD.size + _CRC.size:
        raise CorruptPayloadError(f"{what} blob is truncated: {len(blob)} bytes, a header alone "
                                  f"takes {_HEAD.size + _CRC.size}")
    magic, version, got_kind, meta_len = _HEAD.unpack_from(blob, 0)
    if magic != MAGIC:
        raise CorruptPayloadError(f"{what} blob starts with {bytes(magic)!r}, expected {MAGIC!r}: "
                                  "not an ibp-graph blob")
    if version != FORMAT_VERSION:
        raise CorruptPayloadError(f"{what} blob has format version {version}; this ibp-graph reads "
                                  f"version {FORMAT_VERSION}. Re-encode with this version.")
    if got_kind != kind:
        raise CorruptPayloadError(f"blob holds kind {got_kind}, expected {kind} ({what})")
    (crc,) = _CRC.unpack_from(blob, len(blob) - _CRC.size)
    if zlib.crc32(blob[:-_CRC.size]) != crc:
        raise CorruptPayloadError(f"{what} blob fails its CRC32 checksum ({len(blob)} bytes): it "
                                  "is corrupted or truncated")
    pos = _HEAD.size
    try:
        meta = json.loads(bytes(blob[pos:pos + meta_len]))
        pos += meta_len
        sections = []
        for dt, nb in meta["sections"]:
            if pos + nb > len(blob) - _CRC.size:
                raise CorruptPayloadError(f"{what} blob is truncated inside a section")
            sections.append(np.frombuffer(blob[pos:pos + nb], dtype=np.dtype(dt)).copy())
            pos += nb
    except (ValueError, KeyError, TypeError) as e:
        if isinstance(e, CorruptPayloadError):
            raise
        raise CorruptPayloadError(f"{what} blob metadata is unreadable: {e}") from None
    if pos != len(blob) - _CRC.size:
        raise CorruptPayloadError(f"{what} blob has {len(blob) - _CRC.size - pos} stray bytes")
    return meta, sections


def check_state_header(state: dict, codec: str) -> None:
    """Refuse a state_dict of another codec or another format version, naming both."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict made by state_dict(), got {type(state).__name__}")
    version = state.get("format_version")
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version != FORMAT_VERSION:
        raise CorruptPayloadError(f"state_dict has format_version={version!r}; this ibp-graph "
                                  f"reads {FORMAT_VERSION}")
    if state.get("codec") != codec:
        raise CorruptPayloadError(f"state_dict is for codec {state.get('codec')!r}, not {codec!r}")


def state_row_shape(state: dict) -> tuple[int, ...]:
    """state["row_shape"] as a tuple, or CorruptPayloadError naming it unless it is a list of integers >= 0
    (KeyError when it is missing: the caller names the key)."""
    row_shape = state["row_shape"]
    if not isinstance(row_shape, (list, tuple)) or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0 for s in row_shape):
        raise CorruptPayloadError(f"state_dict has row_shape={row_shape!r}; accepted: a list of integers >= 0")
    return tuple(int(s) for s in row_shape)


def state_to_bytes(state: dict) -> bytes:
    """Serialize a codec state_dict (tensor values become sections)."""
    meta, sections = {}, []
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            meta[k] = {"section": len(sections)}
            sections.append(v.detach().cpu().numpy())
        else:
            meta[k] = {"value": v}
    return pack_blob(KIND_STATE, {"state": meta}, sections)


def state_from_bytes(blob: bytes) -> dict:
    """Parse state_to_bytes output back into a state_dict."""
    meta, sections = unpack_blob(blob, KIND_STATE, "codec state")
    try:
        return {k: (torch.from_numpy(sections[v["section"]]) if "section" in v else v["value"])
                for k, v in meta["state"].items()}
    except (KeyError, IndexError, TypeError) as e:
        raise CorruptPayloadError(f"codec state blob is malformed: {e}") from None
