"""The batch as it crosses the pipeline, encoded in a worker and decoded in the main process: named
tensors in groups, and ``meta``, the front-end's opaque pass-through (PyG's per-hop counts, DGL's graphs).
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
    copied_bytes: int = 0  #: host bytes written into new buffers for it, in the worker and when pinning
    slot: Optional[Slot] = None  #: the ring slot (pipeline.transport) it was written into
    served: tuple = ()  #: rows the main process serves after decoding (pipeline.sources.Served)

    def _tensors(self):
        return [t for ct in self.groups.values() for t in (ct.payload, ct.offsets) if t is not None]

    def __getstate__(self) -> dict:
        # pickled = handed over: torch copies every tensor not in shared memory; those bytes count
        state = dict(self.__dict__)
        state["copied_bytes"] = self.copied_bytes + sum(
            t.numel() * t.element_size() for t in self._tensors() if not is_shared(t))
        return state

    def pin_memory(self) -> "EncodedBatch":
        """Every group in page-locked memory (the pin-memory thread), counting the bytes copied (a
        registered ring slot's are none)."""
        copied = sum(t.numel() * t.element_size() for t in self._tensors() if not t.is_pinned())
        return replace(self, groups={k: ct.pin_memory() for k, ct in self.groups.items()},
                       copied_bytes=self.copied_bytes + copied)


class DecodedBatch(dict):
    """Named, decoded tensors of one batch, with the `meta` its EncodedBatch carried."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], meta: Any = None):
        super().__init__(tensors)
        self.meta = meta
