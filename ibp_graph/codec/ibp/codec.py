"""IBPCodec: Invariant Bit Packing fitted on a row group, encoding and decoding on the CPU."""
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
from .fit import WORD_BITS, fit_ibp
from .tables import IBPTables


class IBPCodec(RowCodec):
    """Invariant Bit Packing for rows of one dtype and trailing shape (docs/format.md)."""

    name = "ibp"

    def __init__(self, *, dtype: torch.dtype, row_shape: Sequence[int], word_bits: int,
                 mask: np.ndarray, bitval: np.ndarray, threshold: Optional[float] = None):
        dtype_name(dtype)
        if word_bits not in WORD_BITS:
            raise ValueError(f"word_bits={word_bits!r} is not accepted; use one of {WORD_BITS}")
        self.dtype = dtype
        self.row_shape = tuple(int(s) for s in row_shape)
        self.row_nbytes = math.prod(self.row_shape) * itemsize(dtype)
        self.word_bits = int(word_bits)
        n_words = -(-self.row_nbytes // (word_bits // 8))
        # copies: the tables must not change when the caller's arrays (a state_dict's tensors) do
        mask = np.array(mask, dtype=np.uint64).reshape(-1)
        bitval = np.array(bitval, dtype=np.uint64).reshape(-1)
        if mask.shape != (n_words,) or bitval.shape != (n_words,):
            raise ValueError(f"mask and bitval need {n_words} entries for rows of {self.row_nbytes} "
                             f"bytes in {word_bits}-bit words; got {mask.shape[0]} and {bitval.shape[0]}")
        if word_bits == 32 and ((mask >> np.uint64(32)).any() or (bitval >> np.uint64(32)).any()):
            raise ValueError("mask/bitval have bits above bit 31 with word_bits=32")
        if (bitval & ~mask).any():
            raise ValueError("bitval has bits set outside mask")
        self.threshold = threshold
        self._tables = IBPTables.build(word_bits, self.row_nbytes, mask, bitval)

    # ---- fitted state ------------------------------------------------------
    @property
    def tables(self) -> IBPTables:
        """The decode tables (one frozen record: mask, bitval, free bits, header, kernel units)."""
        return self._tables

    @property
    def n_words(self) -> int:
        """W-bit words per row (the last one zero-padded)."""
        return self._tables.n_words

    @property
    def mask(self) -> np.ndarray:
        """Invariant bits of each word column (uint64)."""
        return self._tables.mask

    @property
    def bitval(self) -> np.ndarray:
        """The usual value of the invariant bits of each column (uint64)."""
        return self._tables.bitval

    @property
    def free_bits(self) -> np.ndarray:
        """Bits stored for a participating word of each column."""
        return self._tables.free_bits

    @property
    def header_bits(self) -> int:
        """Participation-bit header of a row, rounded up to the word."""
        return self._tables.header_bits

    @property
    def state_nbytes(self) -> int:
        """Bytes of state a decoder keeps: mask and bitval, one word each per column."""
        return 2 * self.n_words * self.word_bits // 8

    @property
    def fingerprint(self) -> int:
        """63-bit hash of the state; CompressedTensors carry it to catch codec mix-ups."""
        try:
            return self._fingerprint
        except AttributeError:
            h = hashlib.blake2b(digest_size=8)
            h.update(json.dumps([dtype_name(self.dtype), list(self.row_shape),
                                 self.word_bits]).encode())
            h.update(self.mask.tobytes())
            h.update(self.bitval.tobytes())
            self._fingerprint = int.from_bytes(h.digest(), "little") & (2**63 - 1)
            return self._fingerprint

    def __repr__(self) -> str:
        return (f"IBPCodec(dtype={self.dtype}, row_shape={self.row_shape}, "
                f"word_bits={self.word_bits}, threshold={self.threshold}, "
                f"invariant_bits={int(self.word_bits * self.n_words - self.free_bits.sum())}"
                f"/{self.word_bits * self.n_words})")

    # ---- fit -----------------------------------------------------------------
    @classmethod
    def fit(cls, tensor: torch.Tensor, *, word_bits: Optional[int] = None,
            threshold: Optional[float] = None, sample_rows: Optional[int] = None,
            seed: int = 0) -> "IBPCodec":
        """Learn mask and bitval on (a random sample of) the rows of `tensor`.

        Sweeps the threshold over fit.THRESHOLDS and the word width over fit.WORD_BITS when
        they are not given, keeping the combination with the fewest encoded bytes on the
        sample. At most `sample_rows` rows are read (default codec.base.DEFAULT_SAMPLE_ROWS,
        chosen with `seed`), so fitting a memory-mapped 57 GB table touches only those rows.
        """
        return fit_ibp(cls, tensor, word_bits=word_bits, threshold=threshold,
                       sample_rows=sample_rows, seed=seed)

    # ---- RowCodec hooks -------------------------------------------------------------
    def _encode_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return encode_rows(rows, self._tables)

    def _decode_rows(self, payload: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                     dest: np.ndarray) -> np.ndarray:
        return decode_rows(payload, offsets, rows, self._tables, dest)

    # ---- state ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to rebuild this codec (tensors and plain values)."""
        return {
            "format_version": FORMAT_VERSION,
            "codec": self.name,
            "dtype": dtype_name(self.dtype),
            "row_shape": list(self.row_shape),
            "word_bits": self.word_bits,
            "threshold": self.threshold,
            "mask": torch.from_numpy(self.mask.view(np.int64).copy()),
            "bitval": torch.from_numpy(self.bitval.view(np.int64).copy()),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "IBPCodec":
        """Rebuild a codec from state_dict(); refuse other codecs and format versions."""
        check_state_header(state, cls.name)

        def words(key: str) -> np.ndarray:
            v = state[key]
            a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            if a.dtype not in (np.dtype(np.int64), np.dtype(np.uint64)):
                raise CorruptPayloadError(f"state_dict has {key} of dtype {a.dtype} shape {a.shape}; accepted: "
                                          "an int64 tensor (one 64-bit word per column)")
            return a.view(np.uint64)

        try:
            word_bits = state["word_bits"]
            if isinstance(word_bits, bool) or not isinstance(word_bits, (int, np.integer)) \
                    or word_bits not in WORD_BITS:
                raise CorruptPayloadError(f"state_dict has word_bits={word_bits!r}; accepted: one of {WORD_BITS}")
            return cls(dtype=dtype_from_name(state["dtype"]), row_shape=state_row_shape(state),
                       word_bits=int(word_bits), mask=words("mask"), bitval=words("bitval"),
                       threshold=state.get("threshold"))
        except KeyError as e:
            raise CorruptPayloadError(f"state_dict lacks the key {e.args[0]!r}") from None
        except ValueError as e:  # the tables' own checks (entries per column, bits outside the mask)
            if isinstance(e, CorruptPayloadError):
                raise
            raise CorruptPayloadError(f"IBP state_dict is malformed (mask, bitval): {e}") from None
