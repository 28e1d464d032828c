"""Group a batch's tensors so that each group is encoded as one tensor, and split them back.

Row tensors (2-d and up) are grouped by dtype and trailing shape, concatenated along rows; 1-d
tensors and ``edge_index`` are flattened into one element stream per dtype, cut into rows of
``SCALAR_BLOCK`` elements (long enough to pay for a row codec's header); a pre-encoded table's rows
form a group of their own. A group of a dtype no codec has (outside ``layout.dtypes.SUPPORTED_DTYPES``:
complex, uint16/32/64, float8, ...) travels as uint8 rows of its bytes, viewed back when split: bit
for bit. A :class:`GroupKey` names a group; ``str(key)`` is its readable name.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from ..layout.dtypes import SUPPORTED_DTYPES, dtype_from_name, dtype_name, itemsize
from ..layout.rows import gather_fixed_rows

#: elements per row of a scalar group (64 x int64 = 512 bytes, like a feature row).
SCALAR_BLOCK = 64

#: group kinds: a flattened element stream, rows of a feature table, rows of a pre-encoded table,
#: rows of one named attribute with a codec of its own (codec_setup.split_row_groups).
SCALARS, ROWS, STORE, TYPED = "scalars", "rows", "store", "typed"
KINDS = (SCALARS, ROWS, STORE, TYPED)
#: kinds whose key names the one attribute the group holds.
NAMED_KINDS = (STORE, TYPED)


@dataclass(frozen=True)
class GroupKey:
    """Which group a tensor belongs to: dtype, row shape, kind (and the attribute, for NAMED_KINDS)."""

    dtype: str
    row_shape: tuple[int, ...]
    kind: str
    name: Optional[str] = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not accepted; use one of {KINDS}")
        if (self.kind in NAMED_KINDS) != (self.name is not None):
            raise ValueError(f"name={self.name!r} with kind={self.kind!r}: a name is given for "
                             f"{' and '.join(map(repr, NAMED_KINDS))} groups only, and always")
        if self.kind == SCALARS and self.row_shape != ():
            raise ValueError(f"row_shape={self.row_shape!r} with kind={SCALARS!r}: scalar groups have ()")

    @property
    def scalar(self) -> bool:
        """Whether the group is a flattened element stream."""
        return self.kind == SCALARS

    @property
    def as_bytes(self) -> bool:
        """Whether the group travels as the bytes of its rows (a dtype no codec has)."""
        return self.dtype not in SUPPORTED_DTYPES

    @property
    def codec_row_shape(self) -> tuple[int, ...]:
        """Trailing shape of the rows the group's codec encodes."""
        shape = (SCALAR_BLOCK,) if self.scalar else tuple(self.row_shape)
        return (math.prod(shape) * itemsize(self.torch_dtype),) if self.as_bytes else shape

    @property
    def codec_dtype(self) -> torch.dtype:
        """The dtype of the rows the group's codec encodes (uint8 for a group sent as bytes)."""
        return torch.uint8 if self.as_bytes else self.torch_dtype

    @property
    def torch_dtype(self) -> torch.dtype:
        """The group's torch dtype."""
        dtype = getattr(torch, self.dtype, None) if self.as_bytes else None
        return dtype if isinstance(dtype, torch.dtype) else dtype_from_name(self.dtype)  # raises, naming names

    def __str__(self) -> str:
        """A readable, stable name ("float32[128]", "int64[*]", "x@store", "float32[128]@paper.x")."""
        if self.kind == STORE:
            return f"{self.name}@store"
        rows = f"{self.dtype}[{'*' if self.scalar else ','.join(map(str, self.row_shape))}]"
        return f"{rows}@{self.name}" if self.kind == TYPED else rows


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
        if self.key.as_bytes:  # uint8 rows: the group's own dtype and row shape again
            decoded = decoded.view(self.key.torch_dtype)
            if not self.key.scalar:
                decoded = decoded.reshape((decoded.shape[0],) + tuple(self.key.row_shape))
        if self.key.scalar:
            flat = decoded.reshape(-1)
            return {m.name: flat[m.start:m.start + math.prod(m.shape)].view(m.shape) for m in self.members}
        return {m.name: decoded[m.start:m.start + m.shape[0]] for m in self.members}


#: an integer dtype of each element size, to gather rows of dtypes torch has no index_select for.
_SAME_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@functools.lru_cache(maxsize=None)
def _has_index_select(dtype: torch.dtype) -> bool:
    try:
        torch.zeros(1, dtype=torch.uint8).view(dtype).index_select(0, torch.zeros(1, dtype=torch.int64))
    except (NotImplementedError, RuntimeError):
        return False
    return True


def _byte_rows(t: torch.Tensor) -> Optional[np.ndarray]:
    """A CPU tensor's rows as a 2-d uint8 numpy view (no copy), or None (not contiguous, quantized, on a device)."""
    if t.device.type != "cpu" or t.dim() == 0 or not t.is_contiguous() or t.is_quantized:
        return None
    try:
        return t.detach().reshape(t.shape[0], -1).view(torch.uint8).numpy()
    except (RuntimeError, TypeError):
        return None


def gather_rows(table: torch.Tensor, index: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``table[index]`` along the rows, any dtype, bit for bit, into `out` when given (contiguous, of the
    result's shape and dtype); an index outside [0, len(table)) raises IndexError. A contiguous CPU
    table's rows are copied as bytes (layout.rows.gather_fixed_rows: 1.5x index_select on 512 B rows);
    otherwise index_select, through a same-width integer view for a dtype torch has none for."""
    src = _byte_rows(table)
    if src is not None and src.shape[1] and index.dtype == torch.int64 and index.dim() == 1 \
            and index.device.type == "cpu":
        if out is None:  # made as bytes: torch.empty cannot make every dtype (a quantized one crashes)
            rows = torch.empty((index.shape[0], src.shape[1]), dtype=torch.uint8)
            gather_fixed_rows(src, index.numpy(), rows.numpy())
            return rows.view(table.dtype).reshape((index.shape[0],) + tuple(table.shape[1:]))
        dst = _byte_rows(out)
        if dst is not None and dst.shape == (index.shape[0], src.shape[1]):
            gather_fixed_rows(src, index.numpy(), dst)
            return out
    if _has_index_select(table.dtype):
        return torch.index_select(table, 0, index) if out is None else torch.index_select(table, 0, index, out=out)
    size = table.element_size()
    if size in _SAME_WIDTH:
        view = _SAME_WIDTH[size]
        if out is None:
            return table.view(view).index_select(0, index).view(table.dtype)
        torch.index_select(table.view(view), 0, index, out=out.view(view))
        return out
    rows = table.reshape(table.shape[0], -1).view(torch.uint8)
    if out is None:
        return rows.index_select(0, index).view(table.dtype).reshape((-1,) + tuple(table.shape[1:]))
    torch.index_select(rows, 0, index, out=_bytes(out))
    return out


def group_dtype_name(dtype: torch.dtype) -> str:
    """A group's dtype name: the codecs' name (layout.dtypes) or, for a dtype they lack, torch's."""
    if dtype in SUPPORTED_DTYPES.values():
        return dtype_name(dtype)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype={dtype!r} is not accepted; use a torch.dtype")
    return str(dtype).removeprefix("torch.")


def group_key(name: str, tensor: torch.Tensor) -> GroupKey:
    """The key of the group a named tensor belongs to (``edge_index`` joins the scalars)."""
    if tensor.dim() <= 1 or name == "edge_index":
        return GroupKey(group_dtype_name(tensor.dtype), (), SCALARS)
    return GroupKey(group_dtype_name(tensor.dtype), tuple(tensor.shape[1:]), ROWS)


def store_key(name: str, dtype: torch.dtype, row_shape: tuple[int, ...]) -> GroupKey:
    """The key of attribute `name` served from a pre-encoded table (`dtype` rows of `row_shape`)."""
    return GroupKey(dtype_name(dtype), tuple(row_shape), STORE, name)


def typed_key(name: str, dtype: torch.dtype, row_shape: tuple[int, ...]) -> GroupKey:
    """The key of attribute `name`'s rows (`dtype`, `row_shape`) when they get a codec of their own."""
    return GroupKey(dtype_name(dtype), tuple(row_shape), TYPED, name)


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """t's bytes: uint8 rows (one per row of t) or a uint8 stream (1-d t); t contiguous in its rows."""
    return (t.reshape(t.shape[0], math.prod(t.shape[1:])) if t.dim() > 1 else t).view(torch.uint8)


def _concat_bytes(key: GroupKey, members: list, tensors: list, count: int, empty) -> torch.Tensor:
    """A group of a dtype no codec has as uint8 rows of the codec's row width (torch lacks copy_/zero_
    into some such dtypes, e.g. quantized); `count`: its elements (scalar groups) or rows."""
    width = key.codec_row_shape[0]
    per = itemsize(key.torch_dtype) if key.scalar else width  # bytes per element / per row
    total = count * per
    data = empty((-(-total // width), width), torch.uint8)
    flat = data.view(-1)
    for m, t in zip(members, tensors):
        src = _bytes(t.contiguous()).reshape(-1)
        flat[m.start * per:m.start * per + src.numel()].copy_(src)
    flat[total:].zero_()
    return data


def write_group(key: GroupKey, items: list, empty: Callable[..., torch.Tensor] = _empty
                ) -> tuple[GroupLayout, torch.Tensor]:
    """Group `key` of `items` ((name, shape, a tensor or a function writing the rows into the view it
    gets) each) written once into ``empty(shape, dtype)`` (e.g. OutputBuffers.empty), padding zeroed,
    and its layout; a group of a dtype no codec has takes tensors, written as their bytes."""
    members, pos = [], 0
    for name, shape, _ in items:
        members.append(Member(name, tuple(shape), pos))
        pos += math.prod(shape) if key.scalar else shape[0]
    layout = GroupLayout(key, tuple(members))
    if key.as_bytes:
        return layout, _concat_bytes(key, members, [t for _, _, t in items], pos, empty)
    data = empty((-(-pos // SCALAR_BLOCK), SCALAR_BLOCK) if key.scalar else (pos,) + tuple(key.row_shape),
                 key.torch_dtype)
    flat = data.view(-1) if key.scalar else data
    for m, (_, _, what) in zip(members, items):
        out = flat[m.start:m.start + (math.prod(m.shape) if key.scalar else m.shape[0])]
        if callable(what):
            what(out)
        else:
            out.copy_(what.reshape(-1) if key.scalar else what)
    if key.scalar:
        flat[pos:].zero_()
    return layout, data


def one_tensor_group(key: GroupKey, name: str, t: torch.Tensor) -> tuple[GroupLayout, torch.Tensor]:
    """The group of one contiguous row tensor: the tensor itself (its bytes, for a dtype no codec has)."""
    return GroupLayout(key, (Member(name, tuple(t.shape), 0),)), _bytes(t) if key.as_bytes else t

