"""The batch as it crosses the pipeline: encoded in a worker, decoded in the main process.

Both forms are framework-neutral: named tensors in groups, and ``meta``, an opaque
pass-through that the front-end fills in (PyG's per-hop counts, DGL's graphs and
slots) and reads back; the pipeline never looks inside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch

from ..layout import CompressedTensor
from .grouping import GroupKey, GroupLayout


@dataclass
class EncodedBatch:
    """Compressed groups, how to split them into named tensors, the front-end's `meta`, stage times."""

    groups: dict[GroupKey, CompressedTensor]
    layouts: dict[GroupKey, GroupLayout]
    meta: Any = None
    seconds: dict[str, float] = field(default_factory=dict)
    #: host bytes the worker wrote into new buffers for this batch (LoaderStats.copied_bytes).
    copied_bytes: int = 0

    def pin_memory(self) -> "EncodedBatch":
        """Pinned copy of every group (called by the DataLoader's pin-memory thread)."""
        return replace(self, groups={k: ct.pin_memory() for k, ct in self.groups.items()})


class DecodedBatch(dict):
    """Named, decoded tensors of one batch, with the `meta` its EncodedBatch carried."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], meta: Any = None):
        super().__init__(tensors)
        self.meta = meta
