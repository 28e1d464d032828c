"""Pooled or per-type codecs for the row groups of a heterogeneous graph.

Rows of several node (or edge) types with the same dtype and row shape form one group
and share one codec (``codec_setup.build_codecs``), which pays when the types' rows look
alike. When they do not (one type's features are small integers, another's dense floats),
a codec fitted on the pooled rows keeps only the bits invariant in *every* type and
loses what each type alone would save. :func:`split_row_groups` measures that:

For a row group with tables of two or more attributes, a row sample of each table is
cut into a fit half and an evaluation half. A codec fitted on the pooled fit halves and
one fitted on each table's fit half alone (same `kind`) each encode every table's
evaluation half; their fractions (bytes sent / raw, offsets included) are weighted by
the tables' row counts. The group is split when the per-table codecs send at least
``SPLIT_GAIN`` fewer bytes than the pooled one: each table becomes a TYPED group with a
codec of its own, fitted as build_codecs fits a group (on up to DEFAULT_SAMPLE_ROWS of its
rows). Otherwise the group stays pooled. Tables too small for fit_codec to compress
(``codec.auto.MIN_BYTES``) measure as identity, so they stay pooled.
"""
from __future__ import annotations

from typing import Mapping

import torch

from ..codec.auto import fit_named
from ..codec.base import DEFAULT_SAMPLE_ROWS, Codec, random_rows
from ..data.store import EncodedTable
from .grouping import GroupKey, group_key, typed_key

#: per-table codecs must send this fraction fewer bytes than the pooled codec to be used.
SPLIT_GAIN = 0.02
#: rows sampled per table for the comparison (half fit, half measured).
SPLIT_SAMPLE_ROWS = 8192


def _halves(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = rows.shape[0]
    if n < 2:
        return rows, rows
    return rows[0::2].contiguous(), rows[1::2].contiguous()


def _fraction(codec: Codec, rows: torch.Tensor) -> float:
    return codec.encode(rows).fraction if rows.shape[0] else 1.0


def split_row_groups(tables: Mapping[str, torch.Tensor], codecs: Mapping[GroupKey, Codec], *,
                     kind: str, seed: int = 0) -> tuple[dict[GroupKey, Codec], dict[str, GroupKey],
                                                        dict[str, dict]]:
    """Decide, per row group of `tables` (flat names -> tables), pooled or per-table codecs.

    `codecs` is ``build_codecs``'s result for the same tables, `kind` the codec name they
    were fitted with ("auto", "ibp" or "ebp"). Returns the codecs with every split group's
    pooled codec replaced by its tables' TYPED codecs, the TYPED key of each split table's
    name, and the measurements (per group: pooled and per-table weighted fractions, and
    the choice) for the loader to report.
    """
    members: dict[GroupKey, list[str]] = {}
    for name, t in tables.items():
        if isinstance(t, EncodedTable) or t.dim() < 2:
            continue  # stores have their own codec; scalars form element streams
        members.setdefault(group_key(name, t), []).append(name)
    out = dict(codecs)
    typed: dict[str, GroupKey] = {}
    report: dict[str, dict] = {}
    for key, names in members.items():
        if len(names) < 2 or key not in codecs:
            continue
        samples = {n: random_rows(tables[n], SPLIT_SAMPLE_ROWS, seed + i) for i, n in enumerate(names)}
        halves = {n: _halves(s) for n, s in samples.items()}
        weight = {n: float(tables[n].shape[0]) for n in names}
        total = sum(weight.values()) or 1.0
        pooled = fit_named(torch.cat([halves[n][0] for n in names]).contiguous(), kind)
        pooled_frac = sum(weight[n] * _fraction(pooled, halves[n][1]) for n in names) / total
        own = {n: fit_named(halves[n][0], kind) for n in names}
        own_frac = sum(weight[n] * _fraction(own[n], halves[n][1]) for n in names) / total
        split = own_frac < pooled_frac * (1.0 - SPLIT_GAIN)
        report[str(key)] = {"pooled_fraction": pooled_frac, "per_type_fraction": own_frac,
                            "split": split, "members": list(names)}
        if not split:
            continue
        del out[key]
        for i, n in enumerate(names):
            k = typed_key(n, key.torch_dtype, key.row_shape)
            out[k] = fit_named(random_rows(tables[n], DEFAULT_SAMPLE_ROWS, seed + i).contiguous(), kind)
            typed[n] = k
    return out, typed, report


__all__ = ["split_row_groups", "SPLIT_GAIN", "SPLIT_SAMPLE_ROWS"]
