"""The batch as it crosses the pipeline: encoded in a worker, decoded in the main process.

Both forms are framework-neutral: named tensors in groups, and ``meta``, an opaque
pass-through that the front-end fills in (PyG's per-hop counts, DGL's graphs and
slots) and reads back; the pipeline never looks inside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

import torch

from ..layout import CompressedTensor
from .grouping import GroupKey, GroupLayout
from .transport import Slot, is_shared


@dataclass
class EncodedBatch:
    """Compressed groups, how to split them into named tensors, the front-end's `meta`, stage times."""

    groups: dict[GroupKey, CompressedTensor]
    layouts: dict[GroupKey, GroupLayout]
    meta: Any = None
    seconds: dict[str, float] = field(default_factory=dict)
    #: host bytes written into new buffers for this batch, in the worker and when pinning
    #: (LoaderStats.copied_bytes).
    copied_bytes: int = 0
    #: the ring slot (pipeline.transport) the groups were written into; None outside a ring.
    slot: Optional[Slot] = None
    #: rows the main process serves after decoding (pipeline.sources.Served records).
    served: tuple = ()

    def _tensors(self):
        return [t for ct in self.groups.values() for t in (ct.payload, ct.offsets) if t is not None]

    def __getstate__(self) -> dict:
        # pickled = handed from a worker to the main process: torch copies every tensor not in
        # shared memory into a new segment on the way; those bytes count as copied
        state = dict(self.__dict__)
        state["copied_bytes"] = self.copied_bytes + sum(
            t.numel() * t.element_size() for t in self._tensors() if not is_shared(t))
        return state

    def pin_memory(self) -> "EncodedBatch":
        """Every group in page-locked memory (called by the DataLoader's pin-memory thread): a
        group already there (a registered ring slot) stays; the bytes copied are counted."""
        copied = sum(t.numel() * t.element_size() for t in self._tensors() if not t.is_pinned())
        return replace(self, groups={k: ct.pin_memory() for k, ct in self.groups.items()},
                       copied_bytes=self.copied_bytes + copied)


class DecodedBatch(dict):
    """Named, decoded tensors of one batch, with the `meta` its EncodedBatch carried."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], meta: Any = None):
        super().__init__(tensors)
        self.meta = meta
