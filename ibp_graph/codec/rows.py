"""RowCodec: what IBP and EBP share around their CPU kernels (input checks, errors, state blobs).

A subclass supplies its name, dtype, row_shape, row_nbytes and fingerprint, and two
hooks: ``_encode_rows`` (CPU encoder) and ``_decode_rows`` (CPU decoder, returning the
indices of corrupt rows). Everything a caller can get wrong is checked here, the same way
for every codec.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..layout.dtypes import as_row_bytes, check_rows_tensor
from ..layout.errors import CorruptPayloadError
from ..layout.rows import empty_rows
from ..layout.tensor import CompressedTensor, Device, check_decode_out, check_offsets
from .base import StateBlob, check_cpu_device, check_row_compressed


class RowCodec(StateBlob):
    """Base of the codecs whose rows are stored condensed, with per-row offsets."""

    name: str
    dtype: torch.dtype
    row_shape: tuple[int, ...]
    row_nbytes: int
    fingerprint: int

    # ---- hooks --------------------------------------------------------------------
    def _encode_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(payload, offsets) of a (n, row_nbytes) uint8 array, n >= 1."""
        raise NotImplementedError

    def _decode_rows(self, payload: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                     dest: np.ndarray) -> np.ndarray:
        """Decode into rows (an (N, row_nbytes) uint8 array), row i into rows[dest[i]] (rows[i] when `dest`
        is empty); the indices of corrupt rows (empty if none)."""
        raise NotImplementedError

    # ---- API ----------------------------------------------------------------------
    def _check_input(self, tensor: torch.Tensor, argname: str = "tensor") -> None:
        check_rows_tensor(tensor, argname)
        if tensor.dtype != self.dtype:
            raise TypeError(f"{argname} has dtype={tensor.dtype}; this codec was fitted on "
                            f"{self.dtype}. Nothing is converted silently: fit a codec for it.")
        if tuple(tensor.shape[1:]) != self.row_shape:
            raise ValueError(f"{argname} rows have shape {tuple(tensor.shape[1:])}; this codec "
                             f"was fitted on rows of shape {self.row_shape}")

    def encode(self, tensor: torch.Tensor) -> CompressedTensor:
        """Compress a CPU tensor of rows (first dimension) into a CompressedTensor."""
        self._check_input(tensor)
        if tensor.device.type != "cpu":
            raise ValueError(f"tensor is on {tensor.device}; encode runs on CPU tensors "
                             "(encoding belongs in the CPU workers)")
        rows = as_row_bytes(tensor)
        if rows.shape[0] == 0 or self.row_nbytes == 0:
            payload, offsets = empty_rows(rows.shape[0])
        else:
            payload, offsets = self._encode_rows(rows)
        return CompressedTensor(payload=torch.from_numpy(payload),
                                offsets=torch.from_numpy(offsets), shape=tuple(tensor.shape),
                                dtype=self.dtype, codec=self.name, fingerprint=self.fingerprint)

    def check(self, ct: CompressedTensor, argname: str = "ct") -> None:
        """Raise unless `ct` was encoded by this codec and its offsets are consistent."""
        check_row_compressed(self, ct, argname)

    def decode(self, ct: CompressedTensor, *, device: Device = None, out: Optional[torch.Tensor] = None,
               out_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Rebuild the exact tensor from `ct` on the CPU (`device`: None or "cpu"; a `ct` in GPU
        memory is copied back only when device="cpu" is given), into `out` if given; with `out_rows`, row
        i of `ct` goes to row out_rows[i] of `out` (distinct rows; the others are left as they are: a
        scatter without a second pass). On a GPU: ibp_graph.gpu.decode."""
        check_cpu_device(device)
        self.check(ct)
        if ct.device.type != "cpu":
            if device is None:
                raise ValueError(f"ct is on {ct.device}; a codec decodes on the CPU. Decode it "
                                 "there with ibp_graph.gpu.decode(codec, ct), or pass "
                                 "device='cpu' to copy it back first")
            ct = ct.to("cpu")
        out, dest = check_decode_out(out, out_rows, ct.shape, self.dtype, torch.device("cpu"))
        if ct.n_rows and self.row_nbytes:
            check_offsets(ct)
            bad = self._decode_rows(ct.payload.numpy(), ct.offsets.numpy(), as_row_bytes(out), dest)
            if bad.size:
                r = int(bad[0])
                o = ct.offsets[r:r + 2].tolist()
                raise CorruptPayloadError(
                    f"ct row {r} is corrupt (offsets {o[0]}..{o[1]}, {o[1] - o[0]} bytes): its "
                    f"bit stream does not match the {self.name.upper()} row format "
                    f"({bad.size} corrupt rows)")
        return out

    # ---- state ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_state_dict(cls, state: dict) -> "RowCodec":
        raise NotImplementedError
