"""Which rank of a process group holds which rows of a feature table: :class:`ShardLayout`.

A table of `num_rows` rows is split over `world_size` ranks. Each rank's shard holds its rows in
ascending global id; a global id maps to (owner rank, row of the owner's shard). Two kinds:

- ``contiguous`` (default): rank r holds rows ``bounds[r]:bounds[r+1]`` (equal ranges, the first
  ``num_rows % world_size`` ranks one more row);
- an assignment (``from_assignment``): any node -> rank map, e.g. from a partitioner (METIS through
  pymetis, DGL's partition book); its shards keep each rank's nodes in ascending id.

``describe()`` is what ranks compare before they exchange rows (the same layout on every rank).
"""
from __future__ import annotations

import hashlib
from typing import Optional, Sequence

import numpy as np
import torch

from ..layout.rows import check_row_index
from .store import EncodedTable


class ShardLayout:
    """Owner rank and shard row of every global row id of a table of `num_rows` rows."""

    def __init__(self, num_rows: int, world_size: int, *, owner: Optional[np.ndarray] = None):
        if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(f"world_size={world_size!r} is not accepted; use an int >= 1")
        if isinstance(num_rows, bool) or not isinstance(num_rows, (int, np.integer)) or num_rows < 0:
            raise ValueError(f"num_rows={num_rows!r} is not accepted; use an int >= 0")
        self.num_rows, self.world_size = int(num_rows), int(world_size)
        self._owner = self._local = None
        if owner is None:
            self.kind = "contiguous"
            per, extra = divmod(self.num_rows, self.world_size)
            sizes = np.full(self.world_size, per, np.int64)
            sizes[:extra] += 1
            self.bounds = np.zeros(self.world_size + 1, np.int64)
            np.cumsum(sizes, out=self.bounds[1:])
            self.counts = sizes
            return
        owner = np.asarray(owner)
        if owner.ndim != 1 or owner.shape[0] != self.num_rows or owner.dtype.kind not in "iu":
            raise ValueError(f"owner has shape {owner.shape} and dtype {owner.dtype}; accepted: a 1-d integer "
                             f"array of num_rows={self.num_rows} ranks")
        if owner.size and (int(owner.min()) < 0 or int(owner.max()) >= self.world_size):
            bad = int(np.flatnonzero((owner < 0) | (owner >= self.world_size))[0])
            raise ValueError(f"owner[{bad}]={int(owner[bad])} is not a rank of world_size={self.world_size}; "
                             f"accepted: ranks in [0, {self.world_size})")
        self.kind = "assignment"
        self._owner = owner.astype(np.int32 if self.world_size < 2**31 else np.int64)
        self.counts = np.bincount(self._owner, minlength=self.world_size).astype(np.int64)
        # a node's shard row: its place among its owner's nodes, in ascending id
        order = np.argsort(self._owner, kind="stable")
        starts = np.zeros(self.world_size + 1, np.int64)
        np.cumsum(self.counts, out=starts[1:])
        local = np.empty(self.num_rows, np.int64)
        local[order] = np.arange(self.num_rows, dtype=np.int64) - np.repeat(starts[:-1], self.counts)
        self._local = local
        self.bounds = None

    @classmethod
    def contiguous(cls, num_rows: int, world_size: int) -> "ShardLayout":
        """Equal contiguous row ranges, in rank order."""
        return cls(num_rows, world_size)

    @classmethod
    def from_assignment(cls, owner: Sequence[int], world_size: Optional[int] = None) -> "ShardLayout":
        """A node -> rank map (`world_size`: default, the largest rank + 1)."""
        owner = np.asarray(owner)
        ws = int(owner.max()) + 1 if world_size is None and owner.size else world_size
        return cls(owner.shape[0] if owner.ndim == 1 else -1, 1 if ws is None else ws, owner=owner)

    def locate(self, ids: np.ndarray, argname: str = "ids") -> tuple[np.ndarray, np.ndarray]:
        """(owner rank, shard row) of global row ids `ids` (IndexError naming `argname` for one out of range)."""
        ids = check_row_index(ids, self.num_rows, argname)
        if self.bounds is not None:
            owner = np.searchsorted(self.bounds, ids, side="right") - 1
            return owner, ids - self.bounds[owner]
        return self._owner[ids].astype(np.int64), self._local[ids]

    def rows_of(self, rank: int) -> np.ndarray:
        """The global ids rank `rank`'s shard holds, in shard-row order (ascending)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank={rank!r} is not accepted; use an int in [0, world_size={self.world_size})")
        if self.bounds is not None:
            return np.arange(self.bounds[rank], self.bounds[rank + 1], dtype=np.int64)
        return np.flatnonzero(self._owner == rank).astype(np.int64)

    def owner_array(self) -> np.ndarray:
        """The owner of every row (an assignment's own array; made for contiguous ranges)."""
        if self._owner is not None:
            return self._owner
        return np.repeat(np.arange(self.world_size, dtype=np.int32), self.counts)

    def digest(self) -> str:
        """SHA-256 over the layout's kind and contents (equal layouts, equal digests)."""
        h = hashlib.sha256(f"{self.kind}:{self.num_rows}:{self.world_size}:".encode())
        h.update(np.ascontiguousarray(self.bounds if self.bounds is not None else self._owner).tobytes())
        return h.hexdigest()

    def describe(self) -> dict:
        """What ranks compare before exchanging rows, and a manifest records."""
        return {"kind": self.kind, "num_rows": self.num_rows, "world_size": self.world_size,
                "counts": [int(c) for c in self.counts], "digest": self.digest()}

    def __eq__(self, other) -> bool:
        return isinstance(other, ShardLayout) and self.describe() == other.describe()

    def __repr__(self) -> str:
        return f"ShardLayout({self.kind}, num_rows={self.num_rows}, world_size={self.world_size})"



def shard_of(store: EncodedTable, layout: ShardLayout, rank: int) -> EncodedTable:
    """Rank `rank`'s shard of a pre-encoded `store` (an EncodedTable): its rows' compressed bytes as they
    are (one codec for every shard, nothing re-encoded)."""
    if not isinstance(store, EncodedTable):
        raise TypeError(f"store must be an EncodedTable (ibp_graph.data.store), got {type(store).__name__}")
    if store.n_rows != layout.num_rows:
        raise ValueError(f"the store has {store.n_rows} rows; the layout splits {layout.num_rows}")
    return EncodedTable(store.codec, store.index_select(torch.from_numpy(layout.rows_of(rank))))


__all__ = ["ShardLayout", "shard_of"]
