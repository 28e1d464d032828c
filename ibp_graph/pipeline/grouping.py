"""Group a batch's tensors so that each group is encoded as one tensor, and split them back.

Row tensors (2-d and up: node features) are grouped by dtype and trailing shape and
concatenated along rows. One-dimensional tensors (labels, node and edge ids) and
``edge_index`` are flattened into one element stream per dtype and cut into rows of
``SCALAR_BLOCK`` elements, so a row codec sees rows long enough to pay for its header.
Rows of a pre-encoded table (an attribute served from a store) form a group of their own.
A group is named by a :class:`GroupKey`; ``str(key)`` is its readable name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import torch

from ..layout.dtypes import dtype_from_name, dtype_name

#: elements per row of a scalar group (64 x int64 = 512 bytes, like a feature row).
SCALAR_BLOCK = 64

#: group kinds: a flattened element stream, rows of a feature table, rows of a pre-encoded table.
SCALARS, ROWS, STORE = "scalars", "rows", "store"
KINDS = (SCALARS, ROWS, STORE)


@dataclass(frozen=True)
class GroupKey:
    """Which group a tensor belongs to: dtype, row shape, kind (and the attribute, for a store)."""

    dtype: str
    row_shape: tuple[int, ...]
    kind: str
    name: Optional[str] = None  # the attribute a STORE group serves; None otherwise

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not accepted; use one of {KINDS}")
        if (self.kind == STORE) != (self.name is not None):
            raise ValueError(f"name={self.name!r} with kind={self.kind!r}: a name is given for "
                             f"{STORE!r} groups only, and always")
        if self.kind == SCALARS and self.row_shape != ():
            raise ValueError(f"row_shape={self.row_shape!r} with kind={SCALARS!r}: scalar groups have ()")

    @property
    def scalar(self) -> bool:
        """Whether the group is a flattened element stream."""
        return self.kind == SCALARS

    @property
    def codec_row_shape(self) -> tuple[int, ...]:
        """Trailing shape of the rows the group's codec encodes."""
        return (SCALAR_BLOCK,) if self.scalar else tuple(self.row_shape)

    @property
    def torch_dtype(self) -> torch.dtype:
        """The group's torch dtype."""
        return dtype_from_name(self.dtype)

    def __str__(self) -> str:
        """A readable, stable name ("float32[128]", "int64[*]", "x@store")."""
        if self.kind == STORE:
            return f"{self.name}@store"
        if self.scalar:
            return f"{self.dtype}[*]"
        return f"{self.dtype}[{','.join(map(str, self.row_shape))}]"


@dataclass(frozen=True)
class Member:
    """One named tensor inside a group: where its elements sit and its shape."""

    name: str
    shape: tuple[int, ...]
    start: int  # first row (row groups) or first element (scalar groups)


@dataclass(frozen=True)
class GroupLayout:
    """How to split a decoded group back into named tensors."""

    key: GroupKey
    members: tuple[Member, ...]

    def split(self, decoded: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views of a decoded group tensor (no copies)."""
        out = {}
        if self.key.scalar:
            flat = decoded.reshape(-1)
            for m in self.members:
                n = math.prod(m.shape)
                out[m.name] = flat[m.start:m.start + n].view(m.shape)
        else:
            for m in self.members:
                out[m.name] = decoded[m.start:m.start + m.shape[0]]
        return out


def group_key(name: str, tensor: torch.Tensor) -> GroupKey:
    """The key of the group a named tensor belongs to (``edge_index`` joins the scalars)."""
    if tensor.dim() <= 1 or name == "edge_index":
        return GroupKey(dtype_name(tensor.dtype), (), SCALARS)
    return GroupKey(dtype_name(tensor.dtype), tuple(tensor.shape[1:]), ROWS)


def store_key(name: str, dtype: torch.dtype, row_shape: tuple[int, ...]) -> GroupKey:
    """The key of attribute `name` served from a pre-encoded table of `dtype` rows of `row_shape`."""
    return GroupKey(dtype_name(dtype), tuple(row_shape), STORE, name)


def store_layout(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> GroupLayout:
    """The layout of a store group: one member, `name`, all rows."""
    return GroupLayout(store_key(name, dtype, tuple(shape[1:])), (Member(name, tuple(shape), 0),))


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def group_tensors(tensors: Mapping[str, torch.Tensor], empty: Callable[..., torch.Tensor] = _empty
                  ) -> dict[GroupKey, tuple[GroupLayout, torch.Tensor]]:
    """Concatenate the named tensors into one contiguous tensor per group, with its layout.

    A group of one contiguous row tensor is that tensor; any other group is written once into
    ``empty(shape, dtype)`` (e.g. shared memory: pipeline.transport.OutputBuffers.empty),
    padding zeroed.
    """
    buckets: dict[GroupKey, list[tuple[str, torch.Tensor]]] = {}
    for name, t in tensors.items():
        buckets.setdefault(group_key(name, t), []).append((name, t))
    out = {}
    for key, items in buckets.items():
        members, pos = [], 0
        for name, t in items:
            members.append(Member(name, tuple(t.shape), pos))
            pos += t.numel() if key.scalar else t.shape[0]
        first = items[0][1]
        if not key.scalar and len(items) == 1 and first.is_contiguous():
            data = first
        else:
            shape = (-(-pos // SCALAR_BLOCK), SCALAR_BLOCK) if key.scalar else (pos,) + tuple(first.shape[1:])
            data = empty(shape, first.dtype)
            flat = data.view(-1) if key.scalar else data
            for m, (_, t) in zip(members, items):
                n = t.numel() if key.scalar else t.shape[0]
                flat[m.start:m.start + n].copy_(t.reshape(-1) if key.scalar else t)
            if key.scalar:
                flat[pos:].zero_()
        out[key] = (GroupLayout(key, tuple(members)), data)
    return out
