"""What a codec is (the Codec protocol), the checks every codec makes, and the row sample fitting reads."""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

import numpy as np
import torch

from ..layout.errors import CodecMismatchError, CorruptPayloadError
from ..layout.format import state_from_bytes, state_to_bytes
from ..layout.tensor import CompressedTensor, Device

#: rows a codec's fit reads at most when sample_rows is not given (a random sample).
DEFAULT_SAMPLE_ROWS = 65536


def random_rows(tensor: torch.Tensor, limit: int, seed: int = 0) -> torch.Tensor:
    """At most `limit` distinct rows of `tensor`, chosen at random with `seed`, in row order.

    O(limit) time and memory whatever the table size (numpy draws distinct indices without
    permuting all rows: a full permutation of ogbn-papers100M's 111 M rows would take
    seconds and 0.9 GB just to pick a sample). The whole tensor when it has no more rows.
    """
    n = tensor.shape[0]
    if n <= limit:
        return tensor
    pick = np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))
    return tensor.index_select(0, torch.from_numpy(pick))


def check_cpu_device(device: Device, argname: str = "device") -> None:
    """Refuse any decode target but the CPU: codecs decode on the CPU, ibp_graph.gpu on a GPU."""
    try:
        d = None if device is None else torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{argname}={device!r} is not a device; accepted: None or 'cpu'") from None
    if d is not None and d.type != "cpu":
        raise ValueError(f"{argname}={device!r} is not accepted: a codec decodes on the CPU "
                         "(accepted: None or 'cpu'). Decode on a GPU with "
                         "ibp_graph.gpu.decode(codec, ct) (or ibp_graph.decode).")


def check_compressed(ct: CompressedTensor, *, codec: str, fingerprint: int,
                     argname: str = "ct") -> None:
    """Raise CodecMismatchError unless `ct` was made by this codec with this state."""
    if not isinstance(ct, CompressedTensor):
        raise TypeError(f"{argname} must be a CompressedTensor, got {type(ct).__name__}")
    if ct.codec != codec or ct.fingerprint != fingerprint:
        raise CodecMismatchError(
            f"{argname} was encoded by codec {ct.codec!r} with state fingerprint "
            f"{ct.fingerprint:#x}; this is codec {codec!r} with fingerprint {fingerprint:#x}. "
            "Decode it with the codec that encoded it (its state_dict travels with the data)."
        )


def check_payload(ct: CompressedTensor, argname: str = "ct") -> None:
    """Refuse a payload the kernels cannot address as it is: anything but a contiguous 1-d uint8 tensor
    (they read it by address, so a strided view would be decoded from other bytes)."""
    p = ct.payload
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{argname}.payload must be a torch.Tensor, got {type(p).__name__}")
    if p.dtype != torch.uint8 or p.dim() != 1 or not p.is_contiguous():
        raise ValueError(f"{argname}.payload has dtype={p.dtype} shape={tuple(p.shape)}, "
                         f"contiguous={p.is_contiguous()}; accepted: a contiguous 1-d uint8 tensor")


def check_row_compressed(codec: "Codec", ct: CompressedTensor, argname: str = "ct") -> None:
    """The check of a row codec with offsets (IBP, EBP): same codec and state, rows, payload, offset count."""
    check_compressed(ct, codec=codec.name, fingerprint=codec.fingerprint, argname=argname)
    check_payload(ct, argname)
    if ct.dtype != codec.dtype or ct.row_shape != codec.row_shape:
        raise CodecMismatchError(f"{argname} holds rows of {ct.dtype} {ct.row_shape}; this "
                                 f"codec decodes {codec.dtype} {codec.row_shape}")
    if ct.offsets is None or ct.offsets.numel() != ct.n_rows + 1:
        raise CorruptPayloadError(f"{argname}.offsets must have n_rows + 1 = {ct.n_rows + 1} "
                                  f"entries, has {None if ct.offsets is None else ct.offsets.numel()}")


class StateBlob:
    """What every codec builds on its state_dict / from_state_dict: a checksummed blob and reloading in place."""

    def load_state_dict(self, state: dict) -> None:
        """Replace this codec's state with `state` (as made by state_dict())."""
        other = type(self).from_state_dict(state)
        self.__dict__.clear()
        self.__dict__.update(other.__dict__)

    def to_bytes(self) -> bytes:
        """The state as a checksummed, versioned blob."""
        return state_to_bytes(self.state_dict())

    @classmethod
    def from_bytes(cls, blob: bytes):
        """Rebuild a codec from to_bytes(); CorruptPayloadError naming what is wrong for a damaged blob."""
        return cls.from_state_dict(state_from_bytes(blob))


@runtime_checkable
class Codec(Protocol):
    """A row codec: fitted state that encodes row tensors to CompressedTensors and back on the CPU.

    Besides these, each codec exposes what a GPU decoder reads: ``row_nbytes``,
    ``word_bits`` and ``tables`` (one frozen record per codec kind; None for identity).
    """

    name: str
    fingerprint: int
    dtype: torch.dtype
    row_shape: tuple[int, ...]

    def encode(self, tensor: torch.Tensor) -> CompressedTensor:
        """Compress a tensor whose first dimension indexes rows."""
        ...

    def decode(self, ct: CompressedTensor, *, device: Device = None, out: Optional[torch.Tensor] = None,
               out_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Rebuild the exact tensor (same bits) on the CPU (device None or "cpu"), into `out` if given;
        with `out_rows`, row i into row out_rows[i] of `out` (distinct rows)."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to rebuild the codec, with a format version."""
        ...

    def to_bytes(self) -> bytes:
        """state_dict() as a checksummed blob; the codec's class rebuilds it with from_bytes."""
        ...

    @property
    def state_nbytes(self) -> int:
        """Bytes of codec state a decoder keeps (sent once, not per batch)."""
        ...
