"""Which codec each group of a batch gets: fitted once in the main process, shared with workers."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from ..codec import IBPCodec, IdentityCodec
from ..codec.auto import KINDS, CodecSpec, fit_named
from ..codec.base import DEFAULT_SAMPLE_ROWS, Codec, random_rows
from .grouping import SCALAR_BLOCK, GroupKey, group_key, store_key

#: codec names build_codecs (and every loader's `codec=`) accepts; "auto" is the default.
CODEC_NAMES = KINDS


def value_range_codec(dtype: torch.dtype, max_value: int) -> IBPCodec:
    """IBP for non-negative integers below `max_value`: the high zero bits are invariant.

    Values outside [0, max_value) are still exact: they become exceptions (all 64 bits).
    """
    bits = max(1, int(max_value - 1).bit_length()) if max_value > 1 else 1
    W = 64 if torch.empty((), dtype=dtype).element_size() == 8 else 32
    item_bits = 8 * torch.empty((), dtype=dtype).element_size()
    per_word = W // item_bits
    keep = (1 << min(bits, item_bits)) - 1
    word_free = sum(keep << (item_bits * k) for k in range(per_word))
    n_words = SCALAR_BLOCK * item_bits // W
    mask = np.full(n_words, (~word_free) & (2**W - 1), dtype=np.uint64)
    return IBPCodec(dtype=dtype, row_shape=(SCALAR_BLOCK,), word_bits=W, mask=mask,
                    bitval=np.zeros(n_words, dtype=np.uint64), threshold=None)


class BytesIdentityCodec(IdentityCodec):
    """Identity over the bytes of a group whose dtype no codec has (GroupKey.as_bytes): uint8
    rows, bit for bit; `str()` says why it is identity (the loader's `codecs` and `stats`)."""

    def __init__(self, *, carried: torch.dtype, row_nbytes: int, requested: str):
        super().__init__(dtype=torch.uint8, row_shape=(row_nbytes,))
        self.carried = carried
        self.requested = requested

    def __str__(self) -> str:
        what = str(self.carried).removeprefix("torch.")
        if self.requested == "identity":
            return f"identity (the bytes of {what})"
        return f"identity (fallback: {self.requested} has no {what})"

    def __repr__(self) -> str:
        return f"BytesIdentityCodec({self})"


def describe(codec: Codec) -> str:
    """A codec as `stats` names it: its kind, or why a group is sent as identity bytes."""
    return str(codec) if isinstance(codec, BytesIdentityCodec) else codec.name


def _sample_rows(tables: list[torch.Tensor], limit: int, seed: int = 0) -> torch.Tensor:
    """Random rows from each table (at most `limit` in all), concatenated."""
    per = max(1, limit // len(tables))
    return torch.cat([random_rows(t, per, seed + k) for k, t in enumerate(tables)]).contiguous()


def build_codecs(node_attrs: Mapping[str, torch.Tensor], edge_attrs: Mapping[str, torch.Tensor],
                 *, num_nodes: int, num_edges: int, codec: CodecSpec = "auto") -> dict[GroupKey, Codec]:
    """One codec per group (GroupKey) of the batches a loader will produce.

    `codec` is "auto" (each group gets fit_codec's choice on a sample of its tables: IBP,
    EBP, or identity when nothing gains), "ibp" or "ebp" (that codec, fitted on the
    sample), "identity" (no compression), or a fitted codec object, used for the row group
    whose dtype and row shape it matches (other groups then get "auto"). The int64 group
    (node and edge ids) always gets an IBP codec built from the id range, unless `codec`
    is "identity". Attributes given as EncodedTables keep the codec they were encoded with.
    A group of a dtype no codec has gets a BytesIdentityCodec, whatever `codec` asks for.
    """
    if isinstance(codec, str) and codec not in CODEC_NAMES:
        raise ValueError(f"codec={codec!r} is not accepted; use one of {CODEC_NAMES} or a codec object")
    if not isinstance(codec, str) and not all(hasattr(codec, a) for a in ("encode", "decode", "fingerprint")):
        raise TypeError(f"codec must be one of {CODEC_NAMES} or a codec object "
                        f"(encode/decode/fingerprint), got {type(codec).__name__}")
    from ..data.store import EncodedTable

    tables: dict[GroupKey, list[torch.Tensor]] = {}
    codecs: dict[GroupKey, Codec] = {}
    for name, t in list(node_attrs.items()) + list(edge_attrs.items()):
        if isinstance(t, EncodedTable):
            codecs[store_key(name, t.dtype, tuple(t.shape[1:]))] = t.codec  # encoded once, with its own codec
            continue
        tables.setdefault(group_key(name, t), []).append(t)
    # the index group always exists: n_id, e_id, input_id and edge_index are int64
    int64_key = group_key("n_id", torch.zeros(0, dtype=torch.int64))
    tables.setdefault(int64_key, [])

    kind = codec if isinstance(codec, str) else "auto"  # for groups a codec object does not match
    used_custom = False
    for key, members in tables.items():
        dtype, row_shape = key.torch_dtype, key.codec_row_shape
        if key.as_bytes:
            requested = codec if isinstance(codec, str) else type(codec).__name__
            codecs[key] = BytesIdentityCodec(carried=dtype, row_nbytes=row_shape[0], requested=requested)
        elif codec == "identity":
            codecs[key] = IdentityCodec(dtype=dtype, row_shape=row_shape)
        elif not isinstance(codec, str) and not key.scalar and codec.dtype == dtype \
                and tuple(codec.row_shape) == row_shape:
            codecs[key] = codec
            used_custom = True
        elif key == int64_key:
            # ids are below max(num_nodes, num_edges); labels and other int64 attributes
            # are usually far smaller; anything else is stored exactly as an exception
            top = max(num_nodes, num_edges, *[int(t.max()) + 1 for t in members if t.numel()])
            codecs[key] = value_range_codec(torch.int64, top)
        elif key.scalar:
            flat = torch.cat([t.reshape(-1)[:DEFAULT_SAMPLE_ROWS * SCALAR_BLOCK] for t in members])
            n = flat.numel() // SCALAR_BLOCK
            sample = flat[: n * SCALAR_BLOCK].reshape(n, SCALAR_BLOCK) if n else \
                torch.zeros(1, SCALAR_BLOCK, dtype=dtype)
            codecs[key] = fit_named(sample.contiguous(), kind)
        else:
            codecs[key] = fit_named(_sample_rows(members, DEFAULT_SAMPLE_ROWS), kind)
    if not isinstance(codec, str) and not used_custom:
        raise ValueError(f"codec {codec!r} matches no group of this data (dtype {codec.dtype}, rows "
                         f"{tuple(codec.row_shape)}); groups: {sorted(map(str, tables))}")
    return codecs


__all__ = ["build_codecs", "value_range_codec", "describe", "BytesIdentityCodec", "CODEC_NAMES", "CodecSpec"]
