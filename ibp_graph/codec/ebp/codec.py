"""EBPCodec: Entropy Bit Packing, per-column prefix codes for the high bits of each element.

Each element (a W-bit word: the dtype's bits) is split into a high part, coded with a
short prefix code from a per-column dictionary (an escape code stores a rare high part
verbatim), and low bits stored verbatim at static positions. Rows that are mostly one
value per column (TF-IDF, bags of words) can instead list only their other elements
(sparse mode). Random access per row, like IBP; the row format is in docs/format.md.
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Optional, Sequence

import numpy as np
import torch

from ...layout.dtypes import dtype_from_name, dtype_name, itemsize
from ...layout.errors import CorruptPayloadError
from ...layout.format import FORMAT_VERSION, check_state_header, state_row_shape
from ..rows import RowCodec
from .decode import decode_rows
from .encode import encode_rows
from .fit import UINT_DTYPES, fit_ebp
from .state import validate_state
from .tables import EBPTables


class EBPCodec(RowCodec):
    """Entropy Bit Packing for rows of one dtype and trailing shape (docs/format.md, EBP)."""

    name = "ebp"

    def __init__(self, *, dtype: torch.dtype, row_shape: Sequence[int], col_tid, col_tids,
                 col_default, t_hw, t_size, t_esc, t_dict, t_len, sparse: bool, sparse_low_bits: int):
        dtype_name(dtype)
        self.dtype = dtype
        self.row_shape = tuple(int(s) for s in row_shape)
        self.itemsize = itemsize(dtype)
        self.word_bits = 8 * self.itemsize
        self.n_cols = math.prod(self.row_shape)
        self.row_nbytes = self.n_cols * self.itemsize
        arrays = validate_state(self.word_bits, self.n_cols, col_tid, col_tids, col_default,
                                 t_hw, t_size, t_esc, t_dict, t_len, sparse, sparse_low_bits)
        self._tables = EBPTables.build(W=self.word_bits, d=self.n_cols, row_nbytes=self.row_nbytes,
                                 sparse=bool(sparse), LS=int(sparse_low_bits), **arrays)

    # ---- fitted state ------------------------------------------------------
    @property
    def tables(self) -> EBPTables:
        """The decode tables (one frozen record, see tables.EBPTables) the CPU kernels and a GPU decoder read."""
        return self._tables

    @property
    def sparse(self) -> bool:
        """Whether rows may use the sparse mode (one mode bit per row)."""
        return self._tables.sparse

    @property
    def n_tables(self) -> int:
        """Distinct code tables (columns with equal tables share one)."""
        return self._tables.n_tables

    @property
    def state_nbytes(self) -> int:
        """Bytes of state a decoder keeps: per column 3 ids and a default, per table its dictionary and lengths."""
        t = self._tables
        return int(self.n_cols * (4 + 4 + self.itemsize)
                   + int(t.t_size.sum()) * (self.itemsize + 1) + 4 * t.n_tables)

    @property
    def fingerprint(self) -> int:
        """63-bit hash of the state; CompressedTensors carry it to catch codec mix-ups."""
        try:
            return self._fingerprint
        except AttributeError:
            t = self._tables
            h = hashlib.blake2b(digest_size=8)
            h.update(json.dumps([self.name, dtype_name(self.dtype), list(self.row_shape),
                                 t.sparse, t.LS]).encode())
            for a in (t.col_tid, t.col_tids, t.col_default, t.t_hw, t.t_size, t.t_esc, t.t_dict,
                      t.t_len):
                h.update(np.ascontiguousarray(a).tobytes())
            self._fingerprint = int.from_bytes(h.digest(), "little") & (2**63 - 1)
            return self._fingerprint

    def __repr__(self) -> str:
        t = self._tables
        return (f"EBPCodec(dtype={self.dtype}, row_shape={self.row_shape}, tables={t.n_tables}, "
                f"low_bits={t.low_total}/{self.word_bits * self.n_cols}, sparse={t.sparse})")

    # ---- fit -----------------------------------------------------------------
    @classmethod
    def fit(cls, tensor: torch.Tensor, *, sparse: Optional[bool] = None,
            sample_rows: Optional[int] = None, seed: int = 0) -> "EBPCodec":
        """Learn per-column splits, dictionaries and codes on (a random sample of) the rows.

        For every column the number of verbatim low bits is chosen to minimise the coded
        size on the sample. ``sparse=None`` enables the sparse mode when it makes the
        sample smaller; True/False force it. At most `sample_rows` rows are read (default:
        up to fit.DEFAULT_SAMPLE_ELEMENTS elements, at most
        codec.base.DEFAULT_SAMPLE_ROWS rows, chosen with `seed`).
        """
        return fit_ebp(cls, tensor, sparse=sparse, sample_rows=sample_rows, seed=seed)

    def _words(self, rows: np.ndarray) -> np.ndarray:
        return rows.view(UINT_DTYPES[self.itemsize]).reshape(rows.shape[0], self.n_cols)

    # ---- RowCodec hooks -------------------------------------------------------------
    def _encode_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return encode_rows(self._words(rows), rows, self._tables)

    def _decode_rows(self, payload: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                     dest: np.ndarray) -> np.ndarray:
        return decode_rows(payload, offsets, self._words(rows), rows, self._tables, dest)

    # ---- state ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to rebuild this codec (tensors and plain values)."""
        t = self._tables

        def ten(a, dt):
            return torch.from_numpy(np.ascontiguousarray(a).astype(dt))

        return {
            "format_version": FORMAT_VERSION,
            "codec": self.name,
            "dtype": dtype_name(self.dtype),
            "row_shape": list(self.row_shape),
            "sparse": t.sparse,
            "sparse_low_bits": t.LS,
            "col_tid": ten(t.col_tid, np.int32),
            "col_tids": ten(t.col_tids, np.int32),
            "col_default": torch.from_numpy(t.col_default.view(np.int64).copy()),
            "t_hw": ten(t.t_hw, np.int16),
            "t_size": ten(t.t_size, np.int16),
            "t_esc": ten(t.t_esc, np.uint8),
            "t_dict": torch.from_numpy(t.t_dict.view(np.int64).copy()),
            "t_len": ten(t.t_len, np.uint8),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "EBPCodec":
        """Rebuild a codec from state_dict(); refuse other codecs, versions and malformed tables."""
        check_state_header(state, cls.name)
        try:
            def arr(k):
                v = state[k]
                return v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

            return cls(dtype=dtype_from_name(state["dtype"]), row_shape=state_row_shape(state),
                       sparse=bool(state["sparse"]), sparse_low_bits=int(state["sparse_low_bits"]),
                       col_tid=arr("col_tid"), col_tids=arr("col_tids"),
                       col_default=arr("col_default").view(np.uint64), t_hw=arr("t_hw"),
                       t_size=arr("t_size"), t_esc=arr("t_esc"),
                       t_dict=arr("t_dict").view(np.uint64).reshape(-1, 256),
                       t_len=arr("t_len").reshape(-1, 256))
        except KeyError as e:
            raise CorruptPayloadError(f"state_dict lacks the key {e.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as e:
            if isinstance(e, CorruptPayloadError):
                raise
            raise CorruptPayloadError(f"EBP state_dict is malformed: {e}") from None
