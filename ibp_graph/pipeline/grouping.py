"""Group a batch's tensors by (dtype, row shape) so that each group is encoded as one tensor.

Row tensors (2-d and up: node features) are grouped by dtype and trailing shape and
concatenated along rows. One-dimensional tensors (labels, node and edge ids) and
``edge_index`` are flattened into one element stream per dtype and cut into rows of
``SCALAR_BLOCK`` elements, so a row codec sees rows long enough to pay for its header.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch

from ..layout.dtypes import dtype_from_name, dtype_name

#: elements per row of a scalar group (64 x int64 = 512 bytes, like a feature row).
SCALAR_BLOCK = 64


@dataclass(frozen=True)
class Member:
    """One named tensor inside a group: where its elements sit and its shape."""

    name: str
    shape: tuple[int, ...]
    start: int  # first row (row groups) or first element (scalar groups)


@dataclass(frozen=True)
class GroupLayout:
    """How to split a decoded group back into named tensors."""

    key: str
    dtype: str
    row_shape: tuple[int, ...]
    scalar: bool
    members: tuple[Member, ...]

    def split(self, decoded: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views of a decoded group tensor (no copies)."""
        out = {}
        if self.scalar:
            flat = decoded.reshape(-1)
            for m in self.members:
                n = math.prod(m.shape)
                out[m.name] = flat[m.start:m.start + n].view(m.shape)
        else:
            for m in self.members:
                out[m.name] = decoded[m.start:m.start + m.shape[0]]
        return out


def group_key(name: str, tensor: torch.Tensor) -> tuple[str, tuple[int, ...], bool]:
    """(dtype name, row shape, scalar?) of the group a named tensor belongs to."""
    scalar = tensor.dim() <= 1 or name == "edge_index"
    return dtype_name(tensor.dtype), (() if scalar else tuple(tensor.shape[1:])), scalar


def key_string(dtype: str, row_shape: tuple[int, ...], scalar: bool) -> str:
    """A readable, stable name of a group ("float32[128]", "int64[*]")."""
    return f"{dtype}[*]" if scalar else f"{dtype}[{','.join(map(str, row_shape))}]"


def group_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[GroupLayout, torch.Tensor]]:
    """Concatenate the named tensors into one contiguous tensor per group, with its layout."""
    buckets: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    for name, t in tensors.items():
        buckets.setdefault(group_key(name, t), []).append((name, t))
    out = {}
    for (dtype, row_shape, scalar), items in buckets.items():
        members, parts, pos = [], [], 0
        for name, t in items:
            members.append(Member(name, tuple(t.shape), pos))
            if scalar:
                parts.append(t.reshape(-1))
                pos += t.numel()
            else:
                parts.append(t)
                pos += t.shape[0]
        if scalar:
            flat = torch.cat(parts) if len(parts) > 1 else parts[0].contiguous()
            rows = -(-flat.numel() // SCALAR_BLOCK)
            data = torch.zeros(rows * SCALAR_BLOCK, dtype=flat.dtype)
            data[: flat.numel()] = flat
            data = data.view(rows, SCALAR_BLOCK)
        else:
            data = torch.cat(parts) if len(parts) > 1 else parts[0].contiguous()
        key = key_string(dtype, row_shape, scalar)
        out[key] = (GroupLayout(key, dtype, row_shape, scalar, tuple(members)), data)
    return out


def group_row_shape(layout: GroupLayout) -> tuple[int, ...]:
    """Trailing shape of the rows the group's codec encodes."""
    return (SCALAR_BLOCK,) if layout.scalar else layout.row_shape


def group_dtype(layout: GroupLayout) -> torch.dtype:
    """The torch dtype of a group."""
    return dtype_from_name(layout.dtype)
