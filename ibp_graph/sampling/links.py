"""The seeds of link sampling: PyG's ``edge_sample`` (``LinkNeighborLoader``) without the neighbour sampling.

Given one batch of seed edges ``(src, dst)`` (with optional labels and times) and a negative-sampling
mode, :func:`link_seeds` draws the negatives, lays out the seed nodes the neighbour sampler starts from
(``HeteroNeighborSampler`` / ``NeighborSampler``: their ``node`` lists the seeds first, in seed order,
so a seed's position is its local id) and builds the batch's link fields in that local numbering,
exactly as ``torch_geometric.sampler.neighbor_sampler.edge_sample`` (PyG 2.8) does:

* Negatives (:class:`NegativeSampling`): ``"binary"`` appends ``ceil(num_pos * amount)`` random
  (source, destination) pairs to the positives; ``"triplet"`` draws ``amount`` (an int) negative
  destinations per positive. A node of an endpoint is drawn uniformly, or with replacement in
  proportion to that endpoint's weight (``src_weight`` / ``dst_weight``: PyG's ``torch.multinomial``;
  a zero weight is never drawn). With node times (node-level temporal sampling) negative ``j`` must
  exist at the time of positive ``j % num_pos``: it is redrawn up to 5 times and then set to the
  node of least time, as PyG's ``neg_sample`` does (including its quirk: a redrawn node whose time
  equals the seed's counts as too late).
* Seeds: non-disjoint, ``unique(cat(src, dst))`` (one node type) or ``unique(src)``, ``unique(dst)``
  (two node types), sorted, and the link fields index them through the inverse map; disjoint, every
  endpoint is its own seed (``cat(src, dst)`` or the two lists), and example ``i``'s subgraphs are
  those whose disjoint ``batch`` is ``i`` modulo ``num_pos`` (PyG: ``out.batch % num_pos``).
* Times (temporal sampling is disjoint): each seed has the ``edge_label_time`` of its positive, a
  negative that of positive ``j % num_pos``.
* Link fields, those PyG's ``LinkLoader`` puts on a batch: without negatives or binary,
  ``edge_label_index`` (``[2, num_pos + num_neg]``, positives then negatives), ``edge_label``
  (binary: the given labels, else ones as float, then zeros of their dtype for the negatives; the
  shift of user labels by one is done once for the whole label set, :func:`prepare_edge_label`) and
  ``edge_label_time``; triplet, ``src_index`` and ``dst_pos_index`` (``[num_pos]``) and
  ``dst_neg_index`` (``[num_pos, amount]``, ``[num_pos]`` for an amount of 1), with the time as
  ``edge_label_time`` (PyG's ``seed_time`` of a triplet batch).

Randomness is the counter-based hash of ``sampling.kernels`` keyed by the batch's sampling seed (the
``seed`` the neighbour sampler gets, one per batch from ``pipeline.requests``) and the endpoint,
with the hop number -1: a stream no hop of the neighbour sampler uses. Negative ``j`` of an endpoint is
one fixed function of (seed, endpoint, j), so a batch is the same whichever worker makes it, in any
order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple, Union

import numba
import numpy as np
import torch

from ..jit_cache import install as _install_kernel_cache
from .graph import check_int
from .hetero import EdgeType, check_seeds, check_time, check_weights
from .kernels import _GOLDEN, _TINY_SCALE, _TINY_SUM, _draw, _draw_unit, _mix64, hop_key, readonly

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

__all__ = ["LinkSeeds", "NEGATIVE_MODES", "NegativeSampling", "NodeTimes", "link_seeds", "prepare_edge_label",
           "sample_negatives"]

#: PyG's negative-sampling modes.
NEGATIVE_MODES = ("binary", "triplet")
#: the endpoints negatives are drawn for, and their stream in the random key.
_ENDPOINTS = {"src": 0, "dst": 1}
#: the hop number of the negatives' stream (the neighbour sampler's hops are 0, 1, ...).
_NEGATIVE_HOP = -1
#: redraws of a negative that is later than its seed (PyG's neg_sample), before the earliest node is taken.
_TEMPORAL_REDRAWS = 5

Tensor = torch.Tensor
ArrayLike = Union[torch.Tensor, np.ndarray]


# ----------------------------------------------------------------------------------
# Negative sampling configuration.

def _check_weight(name: str, weight: Optional[ArrayLike]) -> Optional[np.ndarray]:
    """A node weight vector as float64: 1-d, finite, >= 0 and not all zero (what torch.multinomial accepts)."""
    if weight is None:
        return None
    if not isinstance(weight, (torch.Tensor, np.ndarray)):
        raise TypeError(f"{name} must be a 1-d torch.Tensor or numpy.ndarray of node weights, got "
                        f"{type(weight).__name__}")
    w = check_weights(name, weight, None, "one weight per node, ")
    if w.size and not (w > 0).any():
        raise ValueError(f"{name} is all zeros; accepted: weights with at least one positive entry")
    return readonly(w)


@dataclass(frozen=True, eq=False)
class NegativeSampling:
    """How a link batch's negatives are drawn: PyG's ``NegativeSampling`` (mode, amount, per-endpoint weights)."""

    #: "binary" (random pairs) or "triplet" (random destinations per positive)
    mode: str
    #: negatives per positive: ``ceil(num_pos * amount)`` pairs (binary), ``amount`` destinations (triplet, an int)
    amount: Union[int, float] = 1
    #: weights over the source nodes (binary only), or None: uniform
    src_weight: Optional[np.ndarray] = None
    #: weights over the destination nodes, or None: uniform
    dst_weight: Optional[np.ndarray] = None
    _cumulative: Dict[str, np.ndarray] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        mode = getattr(self.mode, "value", self.mode)  # PyG's NegativeSamplingMode enum
        if mode not in NEGATIVE_MODES:
            raise ValueError(f"NegativeSampling mode={self.mode!r} is not accepted; use one of {NEGATIVE_MODES}")
        amount = self.amount
        if isinstance(amount, bool) or not isinstance(amount, (int, float, np.integer, np.floating)) \
                or not math.isfinite(amount):
            raise TypeError(f"NegativeSampling amount={amount!r} is not accepted; use a finite int or float > 0")
        if amount <= 0:
            raise ValueError(f"NegativeSampling amount={amount!r} is not accepted; use a number > 0")
        if mode == "triplet":
            if amount != math.ceil(amount):
                raise ValueError(f"NegativeSampling amount={amount!r} with mode 'triplet' is not accepted; use "
                                 "an integer (negative destinations per positive)")
            amount = math.ceil(amount)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "amount", amount.item() if isinstance(amount, np.generic) else amount)
        for endpoint in _ENDPOINTS:
            name = f"{endpoint}_weight"
            w = _check_weight(f"NegativeSampling {name}", getattr(self, name))
            object.__setattr__(self, name, w)
            if w is not None:
                with np.errstate(over="ignore"):  # in order: its last entry is the total the draws scale by
                    cumulative = np.cumsum(w)
                if cumulative.size and cumulative[-1] == np.inf:  # u * inf: every draw would take one node
                    raise ValueError(f"NegativeSampling {name} sums to inf in float64 (the largest weight: "
                                     f"{float(w.max())!r}); accepted: weights whose sum is finite in float64 (at "
                                     f"most {float(np.finfo(np.float64).max)!r}), e.g. all of them divided by the "
                                     "same factor (draws follow their ratios only)")
                if cumulative.size and cumulative[-1] < _TINY_SUM:  # u * total would be a subnormal rounded to
                    cumulative = cumulative * _TINY_SCALE  # a few values; a power of two keeps the ratios exactly
                self._cumulative[endpoint] = readonly(cumulative)

    @classmethod
    def cast(cls, value: Any) -> Optional["NegativeSampling"]:
        """None, one of ours, a mode name (or PyG's ``NegativeSamplingMode``), a dict or tuple of the arguments, or
        any record with ``mode`` and ``amount`` (PyG's ``NegativeSampling``) as a :class:`NegativeSampling` (None
        stays None)."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str) or isinstance(getattr(value, "value", None), str):  # PyG's NegativeSamplingMode too
            return cls(value)
        if isinstance(value, dict):
            return cls(**value)
        if isinstance(value, tuple):
            return cls(*value)
        if hasattr(value, "mode") and hasattr(value, "amount"):
            return cls(value.mode, value.amount, getattr(value, "src_weight", None),
                       getattr(value, "dst_weight", None))
        raise TypeError(f"neg_sampling={value!r} is not accepted; use None, 'binary', 'triplet', a dict of "
                        "NegativeSampling's arguments or a NegativeSampling")

    @property
    def is_binary(self) -> bool:
        """Whether negatives are random (source, destination) pairs."""
        return self.mode == "binary"

    @property
    def is_triplet(self) -> bool:
        """Whether negatives are random destinations, ``amount`` per positive."""
        return self.mode == "triplet"

    def num_negatives(self, num_pos: int) -> int:
        """How many negatives a batch of `num_pos` positives gets (PyG: ``ceil(num_pos * amount)``)."""
        return math.ceil(num_pos * self.amount)


def prepare_edge_label(edge_label: Optional[ArrayLike], neg_sampling: Any) -> Optional[Tensor]:
    """The labels of all seed edges as PyG's LinkLoader keeps them, once for the whole set: with binary negatives
    and a smallest label of 0 every label is shifted by one (0 is the negatives' label); triplet refuses labels."""
    neg = NegativeSampling.cast(neg_sampling)
    if edge_label is None:
        return None
    label = torch.as_tensor(edge_label)
    if neg is not None and neg.is_triplet:
        raise ValueError("edge_label is given with 'triplet' negative sampling; accepted: edge_label=None "
                         "(as PyG: triplet batches carry src_index, dst_pos_index and dst_neg_index, no labels)")
    if neg is not None and neg.is_binary and label.numel() and label.min() == 0:
        label = label + 1
    return label


# ----------------------------------------------------------------------------------
# Draws.

@numba.njit(cache=True, nogil=True)
def _ints_at(key, counters, bound):
    """For each counter c: an integer uniform in [0, bound), a fixed function of (key, c)."""
    out = np.empty(counters.shape[0], dtype=np.int64)
    for i in range(counters.shape[0]):
        _, r = _draw(_mix64(key + np.uint64(counters[i]) * _GOLDEN), bound)
        out[i] = r
    return out


@numba.njit(cache=True, nogil=True)
def _units_at(key, counters):
    """For each counter c: a float uniform in (0, 1), a fixed function of (key, c)."""
    out = np.empty(counters.shape[0], dtype=np.float64)
    for i in range(counters.shape[0]):
        _, u = _draw_unit(_mix64(key + np.uint64(counters[i]) * _GOLDEN))
        out[i] = u
    return out


def _nodes_at(key: np.uint64, counters: np.ndarray, num_nodes: int, cumulative: Optional[np.ndarray]) -> np.ndarray:
    """The node drawn at each counter: uniform over `num_nodes`, or by inverse transform on the cumulative
    weights (a zero-weight node owns an empty interval, so it is never drawn)."""
    counters = readonly(np.ascontiguousarray(counters, dtype=np.int64))
    if cumulative is None:
        return _ints_at(key, counters, np.int64(num_nodes))
    total = cumulative[-1]
    nodes = np.searchsorted(cumulative, _units_at(key, counters) * total, side="right")
    # u * total rounds up to total for u next to 1: the last node of positive weight
    last = int(np.searchsorted(cumulative, total, side="left"))
    return np.minimum(nodes, last).astype(np.int64, copy=False)


def sample_negatives(neg: NegativeSampling, endpoint: str, count: int, num_nodes: int, *, seed: int,
                     seed_time: Optional[np.ndarray] = None, node_time: Optional[np.ndarray] = None) -> np.ndarray:
    """`count` negative `endpoint` ("src" or "dst") nodes among `num_nodes`, as PyG's ``neg_sample`` draws them,
    from the stream of (`seed`, `endpoint`).

    With `node_time` (one time per node) negative ``j`` must not be later than ``seed_time[j % len(seed_time)]``
    (its positive's time): a later one is redrawn (a redraw must be strictly earlier, as in PyG) up to 5 times,
    then replaced by the node of least time.
    """
    if endpoint not in _ENDPOINTS:
        raise ValueError(f"endpoint={endpoint!r} is not accepted; use one of {tuple(_ENDPOINTS)}")
    weight = neg.src_weight if endpoint == "src" else neg.dst_weight
    if weight is not None and weight.shape[0] != num_nodes:
        raise ValueError(f"NegativeSampling {endpoint}_weight has {weight.shape[0]} entries; accepted: one per "
                         f"{endpoint} node ({num_nodes})")
    if num_nodes <= 0 and count > 0:
        raise ValueError(f"cannot draw {count} negative {endpoint} nodes among {num_nodes} nodes; accepted: a "
                         "node set with at least one node")
    if count == 0:
        return np.empty(0, dtype=np.int64)
    key = hop_key(int(seed), _NEGATIVE_HOP, _ENDPOINTS[endpoint])
    cumulative = neg._cumulative.get(endpoint)
    slots = np.arange(count, dtype=np.int64)
    out = _nodes_at(key, slots, num_nodes, cumulative)
    if node_time is None:
        return out
    if seed_time is None or seed_time.shape[0] == 0:
        raise ValueError("node_time is given without seed times; accepted: the positives' edge_label_time")
    limit = seed_time[slots % seed_time.shape[0]]
    late = np.flatnonzero(node_time[out] > limit)
    for redraw in range(1, _TEMPORAL_REDRAWS + 1):
        if late.size == 0:
            break
        again = _nodes_at(key, redraw * count + late, num_nodes, cumulative)
        out[late] = again
        late = late[node_time[again] >= limit[late]]  # PyG's rule for redraws: '>=', not '>'
    if late.size:
        out[late] = int(np.argmin(node_time))
    return out


# ----------------------------------------------------------------------------------
# Seeds and link fields.

@dataclass(frozen=True, eq=False)
class NodeTimes:
    """One endpoint's node times, checked once (``check_time``: int64 or float64, no NaN, one per node), for the
    callers of :func:`link_seeds` that make many batches: it takes them as they are instead of checking the
    whole array at every batch."""

    #: the times, read-only
    array: np.ndarray

    @classmethod
    def check(cls, name: str, value: Union["NodeTimes", ArrayLike], count: int) -> "NodeTimes":
        """`value` (times, or NodeTimes) checked as `name`: one time per node of `count`."""
        if isinstance(value, cls):
            if value.array.shape != (count,):
                raise ValueError(f"{name} has shape {value.array.shape}; accepted: one time per node, "
                                 f"shape ({count},)")
            return value
        return cls(readonly(check_time(name, value, count)))


@dataclass(frozen=True, eq=False)
class LinkSeeds:
    """One link batch before neighbour sampling: the sampler's seeds and the batch's link fields (PyG's layout).

    ``seeds`` (``seed_time``): the nodes (and their times) the neighbour sampler starts from, a tensor for a
    homogeneous graph and a dict by node type otherwise (PyG's ``seed`` / ``seed_dict``); the sampled nodes
    start with them in this order, so the index fields below are local ids. The link fields are those of
    PyG's batch: ``edge_label_index``, ``edge_label``, ``edge_label_time`` (without negatives or binary),
    ``src_index``, ``dst_pos_index``, ``dst_neg_index`` (triplet; the time ``edge_label_time`` is the triplet
    batch's ``seed_time``); the others are None. ``src_neg`` / ``dst_neg``: the negatives drawn (global ids).
    """

    seeds: Union[Tensor, Dict[str, Tensor]]
    seed_time: Union[None, Tensor, Dict[str, Tensor]]
    num_pos: int
    num_neg: int
    src_neg: Optional[Tensor]
    dst_neg: Optional[Tensor]
    edge_label_index: Optional[Tensor] = None
    edge_label: Optional[Tensor] = None
    edge_label_time: Optional[Tensor] = None
    src_index: Optional[Tensor] = None
    dst_pos_index: Optional[Tensor] = None
    dst_neg_index: Optional[Tensor] = None


def _as_tensor(name: str, value: Optional[ArrayLike]) -> Optional[Tensor]:
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}")


def _endpoint_ids(name: str, ids: ArrayLike, num_nodes: int, node_type: Optional[str]) -> np.ndarray:
    try:
        return check_seeds(ids, num_nodes, node_type or "")
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None


def _check_edge_type(edge_type: Any) -> Optional[EdgeType]:
    if edge_type is None:
        return None
    if not (isinstance(edge_type, tuple) and len(edge_type) == 3 and all(isinstance(t, str) for t in edge_type)):
        raise ValueError(f"edge_type={edge_type!r} is not accepted; use None (homogeneous) or a "
                         "(src, rel, dst) tuple of strings")
    return edge_type


def _seed_set(ids: np.ndarray, disjoint: bool) -> Tuple[Tensor, Tensor]:
    """The seeds of endpoints `ids` and each endpoint's local id: disjoint, every endpoint is its own seed;
    otherwise the seeds are the sorted distinct ids (PyG's ``unique(..., return_inverse=True)``)."""
    if disjoint:
        return torch.from_numpy(ids), torch.arange(ids.shape[0])
    uniq, inverse = np.unique(ids, return_inverse=True)
    return torch.from_numpy(uniq), torch.from_numpy(inverse.reshape(-1).astype(np.int64, copy=False))


def link_seeds(src: ArrayLike, dst: ArrayLike, *, num_src_nodes: int, num_dst_nodes: int, seed: int,
               neg_sampling: Any = None, edge_label: Optional[ArrayLike] = None,
               edge_label_time: Optional[ArrayLike] = None, disjoint: bool = False,
               edge_type: Optional[EdgeType] = None, src_node_time: Union[None, ArrayLike, NodeTimes] = None,
               dst_node_time: Union[None, ArrayLike, NodeTimes] = None) -> LinkSeeds:
    """The negatives, neighbour-sampler seeds and link fields of one batch of seed edges (PyG's ``edge_sample``).

    `src`, `dst`: the positives' endpoints (global ids below `num_src_nodes` / `num_dst_nodes`). `seed`: the
    batch's sampling seed. `neg_sampling`: anything :meth:`NegativeSampling.cast` takes. `edge_label`: one
    label per positive (already through :func:`prepare_edge_label`). `edge_label_time`: one time per positive
    (temporal sampling; needs ``disjoint=True``, as PyG). `edge_type`: ``(src, rel, dst)`` of a heterogeneous
    graph, None for a homogeneous one. `src_node_time` / `dst_node_time`: node times of node-level temporal
    sampling (negatives then exist at their positive's time), as arrays or :class:`NodeTimes` (checked once).
    """
    seed = check_int("seed", seed, minimum=None)
    if not isinstance(disjoint, bool):
        raise TypeError(f"disjoint must be a bool, got {disjoint!r}")
    edge_type = _check_edge_type(edge_type)
    num_src_nodes = check_int("num_src_nodes", num_src_nodes, minimum=0)
    num_dst_nodes = check_int("num_dst_nodes", num_dst_nodes, minimum=0)
    one_type = edge_type is None or edge_type[0] == edge_type[-1]
    if one_type and num_src_nodes != num_dst_nodes:
        raise ValueError(f"num_src_nodes={num_src_nodes} and num_dst_nodes={num_dst_nodes} differ, but source and "
                         f"destination are one node type ({'homogeneous' if edge_type is None else edge_type[0]!r}); "
                         "accepted: equal counts")
    src_type, dst_type = (None, None) if edge_type is None else (edge_type[0], edge_type[-1])
    src_np = _endpoint_ids("src", src, num_src_nodes, src_type)
    dst_np = _endpoint_ids("dst", dst, num_dst_nodes, dst_type)
    num_pos = src_np.shape[0]
    if dst_np.shape[0] != num_pos:
        raise ValueError(f"src has {num_pos} ids and dst {dst_np.shape[0]}; accepted: one destination per source")
    if num_pos == 0:
        raise ValueError("src and dst are empty; accepted: a batch of at least one seed edge")
    neg = NegativeSampling.cast(neg_sampling)

    label = _as_tensor("edge_label", edge_label)
    if label is not None:
        if neg is not None and neg.is_triplet:
            raise ValueError("edge_label is given with 'triplet' negative sampling; accepted: edge_label=None "
                             "(as PyG)")
        if label.dim() == 0 or label.shape[0] != num_pos:
            raise ValueError(f"edge_label has shape {tuple(label.shape)}; accepted: one label per seed edge, "
                             f"shape ({num_pos}, ...)")
    time = _as_tensor("edge_label_time", edge_label_time)
    time_np = None
    if time is not None:
        if not disjoint:
            raise ValueError("edge_label_time is given with disjoint=False; accepted: disjoint=True (temporal "
                             "sampling is disjoint, as in PyG)")
        time_np = check_time("edge_label_time", time, num_pos)
    node_time = {}
    for endpoint, value, count in (("src", src_node_time, num_src_nodes), ("dst", dst_node_time, num_dst_nodes)):
        if value is not None:
            node_time[endpoint] = NodeTimes.check(f"{endpoint}_node_time", value, count).array
    if node_time and neg is not None and time_np is None:
        raise ValueError("src_node_time/dst_node_time are given without edge_label_time; accepted: "
                         "edge_label_time (negatives must exist at their positive's time)")

    # per endpoint: its negatives, its ids (positives, then the negatives drawn for it) and their times (each
    # its positive's: negative j has positive j % num_pos's)
    num_neg = 0 if neg is None else neg.num_negatives(num_pos)
    ends = {}
    for endpoint, ids, count in (("src", src_np, num_src_nodes), ("dst", dst_np, num_dst_nodes)):
        drawn = None
        if neg is not None and (neg.is_binary or endpoint == "dst"):  # triplet: negative destinations only
            drawn = sample_negatives(neg, endpoint, num_neg, count, seed=seed, seed_time=time_np,
                                     node_time=node_time.get(endpoint))
        ids = ids if drawn is None else np.concatenate([ids, drawn])
        ends[endpoint] = (drawn, ids, None if time is None else time[torch.arange(ids.shape[0]) % num_pos])
    (src_neg, src_all, src_time), (dst_neg, dst_all, dst_time) = ends["src"], ends["dst"]

    # seeds, and each endpoint's local id
    if one_type:
        seeds, local = _seed_set(np.concatenate([src_all, dst_all]), disjoint)
        src_local, dst_local = local[:src_all.shape[0]], local[src_all.shape[0]:]
        seed_time = None if time is None else torch.cat([src_time, dst_time])
        if edge_type is not None:
            seeds = {src_type: seeds}
            seed_time = None if seed_time is None else {src_type: seed_time}
    else:
        (src_seeds, src_local), (dst_seeds, dst_local) = _seed_set(src_all, disjoint), _seed_set(dst_all, disjoint)
        seeds = {src_type: src_seeds, dst_type: dst_seeds}
        seed_time = None if time is None else {src_type: src_time, dst_type: dst_time}

    common = dict(seeds=seeds, seed_time=seed_time, num_pos=num_pos, num_neg=num_neg,
                  src_neg=None if src_neg is None else torch.from_numpy(src_neg),
                  dst_neg=None if dst_neg is None else torch.from_numpy(dst_neg), edge_label_time=src_time)
    if neg is None or neg.is_binary:
        if neg is not None:
            label = torch.ones(num_pos) if label is None else label
            label = torch.cat([label, label.new_zeros((num_neg,) + tuple(label.shape[1:]))])
        return LinkSeeds(**common, edge_label_index=torch.stack([src_local, dst_local]), edge_label=label)
    # triplet: negative j of the destinations belongs to positive j // amount (non-disjoint, PyG's view) or
    # j % num_pos (disjoint, PyG's transposed view)
    neg_local = dst_local[num_pos:]
    if disjoint:
        neg_local = neg_local.view(-1, num_pos).t()
    return LinkSeeds(**common, src_index=src_local, dst_pos_index=dst_local[:num_pos],
                     dst_neg_index=neg_local.reshape(num_pos, -1).squeeze(-1))
