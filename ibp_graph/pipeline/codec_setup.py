"""Which codec each group of a batch gets: fitted once in the main process, shared with workers.

:func:`build_codecs` gives every group one codec. Several types' rows of one dtype and row shape
share a group, whose pooled codec keeps only the bits invariant in *every* type; :func:`split_row_groups`
measures the loss: each table's sample is halved (fit, evaluation); a pooled codec and per-table ones
(same `kind`) fitted on the fit halves encode the evaluation halves, fractions weighted by row
counts. Per-table codecs sending ``SPLIT_GAIN`` fewer bytes split the group into TYPED groups, each
fitted as build_codecs fits a group; tables too small to compress (``codec.auto.MIN_BYTES``) stay pooled.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from ..codec import IBPCodec, IdentityCodec
from ..codec.auto import KINDS, CodecSpec, fit_named
from ..codec.base import DEFAULT_SAMPLE_ROWS, Codec, random_rows
from ..data.store import EncodedTable
from .grouping import ROWS, SCALAR_BLOCK, SCALARS, GroupKey, group_key, store_key, typed_key

#: codec names build_codecs (and every loader's `codec=`) accepts; "auto" is the default.
CODEC_NAMES = KINDS
#: per-table codecs must send this fraction fewer bytes than the pooled codec to be used.
SPLIT_GAIN = 0.02
#: rows sampled per table for the comparison (half fit, half measured).
SPLIT_SAMPLE_ROWS = 8192


def value_range_codec(dtype: torch.dtype, max_value: int) -> IBPCodec:
    """IBP for non-negative integers below `max_value` (the high zero bits are invariant); values
    outside [0, max_value) are still exact, as exceptions."""
    bits = max(1, int(max_value - 1).bit_length()) if max_value > 1 else 1
    item_bits = 8 * torch.empty((), dtype=dtype).element_size()
    W = 64 if item_bits == 64 else 32
    keep = (1 << min(bits, item_bits)) - 1
    word_free = sum(keep << (item_bits * k) for k in range(W // item_bits))
    n_words = SCALAR_BLOCK * item_bits // W
    mask = np.full(n_words, (~word_free) & (2**W - 1), dtype=np.uint64)
    return IBPCodec(dtype=dtype, row_shape=(SCALAR_BLOCK,), word_bits=W, mask=mask,
                    bitval=np.zeros(n_words, dtype=np.uint64), threshold=None)


class BytesIdentityCodec(IdentityCodec):
    """Identity over the bytes (uint8 rows) of a group whose dtype no codec has (GroupKey.as_bytes);
    `str()` says why it is identity (the loader's `codecs` and `stats`)."""

    def __init__(self, *, carried: torch.dtype, row_nbytes: int, requested: str):
        super().__init__(dtype=torch.uint8, row_shape=(row_nbytes,))
        self.carried, self.requested = carried, requested

    def __str__(self) -> str:
        what = str(self.carried).removeprefix("torch.")
        if self.requested == "identity":
            return f"identity (the bytes of {what})"
        return f"identity (fallback: {self.requested} has no {what})"

    def __repr__(self) -> str:
        return f"BytesIdentityCodec({self})"


class UnseenGroupCodec(IdentityCodec):
    """Identity for a group the set-up did not see (e.g. ids a `transform_sampler_output` gave another
    dtype): its rows are sent as they are, exact; `str()` says so (the loader's `stats`)."""

    def __str__(self) -> str:
        return "identity (a group the set-up did not see)"

    def __repr__(self) -> str:
        return f"UnseenGroupCodec(dtype={self.dtype}, row_shape={self.row_shape})"


def codec_for(codecs: Mapping[GroupKey, Codec], key: GroupKey) -> Codec:
    """Group `key`'s codec in `codecs`, else, for a group of raw rows or elements, an UnseenGroupCodec (the
    same in every process: the encoding worker and the decoding stage agree without telling each other);
    a store's or a typed group's codec is always set up, so KeyError, naming the groups that have one."""
    codec = codecs.get(key)
    if codec is not None:
        return codec
    if key.kind in (SCALARS, ROWS):
        return UnseenGroupCodec(dtype=key.codec_dtype, row_shape=key.codec_row_shape)
    raise KeyError(f"no codec for group {str(key)!r}; codecs exist for {sorted(map(str, codecs))}")


def describe(codec: Codec) -> str:
    """A codec as `stats` names it: its kind, or why a group is sent as identity bytes."""
    return str(codec) if isinstance(codec, (BytesIdentityCodec, UnseenGroupCodec)) else codec.name


def _fit(tables: list[torch.Tensor], kind: str, seed: int = 0, limit: int = DEFAULT_SAMPLE_ROWS) -> Codec:
    """A `kind` codec fitted on random rows of the tables (at most `limit` in all)."""
    per = max(1, limit // len(tables))
    return fit_named(torch.cat([random_rows(t, per, seed + k) for k, t in enumerate(tables)]).contiguous(), kind)


def build_codecs(node_attrs: Mapping[str, torch.Tensor], edge_attrs: Mapping[str, torch.Tensor],
                 *, num_nodes: int, num_edges: int, codec: CodecSpec = "auto") -> dict[GroupKey, Codec]:
    """One codec per group of the batches a loader will produce.

    `codec` is "auto" (fit_codec's choice on a sample of each group's tables: IBP, EBP, or identity
    when nothing gains), "ibp" or "ebp" (that codec, fitted on the sample), "identity", or a fitted
    codec object, used for the row group whose dtype and row shape it matches (others get "auto").
    The int64 group (node and edge ids) gets an IBP codec built from the id range, unless "identity";
    EncodedTables keep their own codec; a group of a dtype no codec has gets a BytesIdentityCodec.
    """
    if isinstance(codec, str) and codec not in CODEC_NAMES:
        raise ValueError(f"codec={codec!r} is not accepted; use one of {CODEC_NAMES} or a codec object")
    if not isinstance(codec, str) and not all(hasattr(codec, a) for a in ("encode", "decode", "fingerprint")):
        raise TypeError(f"codec must be one of {CODEC_NAMES} or a codec object "
                        f"(encode/decode/fingerprint), got {type(codec).__name__}")
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
            codecs[key] = _fit(members, kind)
    if not isinstance(codec, str) and not used_custom:
        raise ValueError(f"codec {codec!r} matches no group of this data (dtype {codec.dtype}, rows "
                         f"{tuple(codec.row_shape)}); groups: {sorted(map(str, tables))}")
    return codecs


def _fraction(codec: Codec, rows: torch.Tensor) -> float:
    return codec.encode(rows).fraction if rows.shape[0] else 1.0


def split_row_groups(tables: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec], *,
                     kind: str, seed: int = 0) -> tuple[dict[GroupKey, Codec], dict[str, GroupKey],
                                                        dict[str, dict]]:
    """Pooled or per-table codecs for each row group of `tables` (flat names -> tables); `codecs`:
    build_codecs' result for them, `kind`: the codec name it fitted ("auto", "ibp" or "ebp").

    Returns the codecs with every split group's codec replaced by its tables' TYPED ones, the TYPED
    key of each split table's name, and per group the measurements (pooled and per-table weighted
    fractions, the choice) for the loader to report.
    """
    members: dict[GroupKey, list[str]] = {}
    for name, t in tables.items():
        if isinstance(t, EncodedTable) or t.dim() < 2:
            continue  # stores have their own codec; scalars form element streams
        members.setdefault(group_key(name, t), []).append(name)
    out, typed, report = dict(codecs), {}, {}
    for key, names in members.items():
        if len(names) < 2 or key not in codecs:
            continue
        samples = {n: random_rows(tables[n], SPLIT_SAMPLE_ROWS, seed + i) for i, n in enumerate(names)}
        halves = {n: (s, s) if s.shape[0] < 2 else (s[0::2].contiguous(), s[1::2].contiguous())
                  for n, s in samples.items()}
        weight = {n: float(tables[n].shape[0]) for n in names}
        total = sum(weight.values()) or 1.0
        pooled = fit_named(torch.cat([halves[n][0] for n in names]).contiguous(), kind)
        pooled_frac = sum(weight[n] * _fraction(pooled, halves[n][1]) for n in names) / total
        own_frac = sum(weight[n] * _fraction(fit_named(halves[n][0], kind), halves[n][1]) for n in names) / total
        split = own_frac < pooled_frac * (1.0 - SPLIT_GAIN)
        report[str(key)] = {"pooled_fraction": pooled_frac, "per_type_fraction": own_frac,
                            "split": split, "members": list(names)}
        if split:
            del out[key]
            for i, n in enumerate(names):
                typed[n] = k = typed_key(n, key.torch_dtype, key.row_shape)
                out[k] = _fit([tables[n]], kind, seed + i)
    return out, typed, report


__all__ = ["build_codecs", "split_row_groups", "value_range_codec", "describe", "codec_for", "BytesIdentityCodec",
           "UnseenGroupCodec", "CODEC_NAMES",
           "CodecSpec", "SPLIT_GAIN", "SPLIT_SAMPLE_ROWS"]
