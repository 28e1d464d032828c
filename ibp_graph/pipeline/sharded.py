"""Feature tables sharded over the ranks of a process group: rows fetched compressed from their owners.

Each rank holds one shard of a table: an EncodedTable of the rows a ShardLayout (ibp_graph.data.shards)
gives it, encoded with the one codec every shard shares. A :class:`ShardedSource` is a served source
(pipeline.sources): the workers send a batch's node ids, and the main process, per batch:

1. splits the ids by owner (ShardLayout.locate); rows of its own shard and of its remote-row cache are
   read here, compressed;
2. ``all_to_all_single``: how many rows it asks of each rank, then the shard rows asked;
3. every owner gathers the rows asked of it from its shard, still compressed (no encode at serve time);
4. ``all_to_all_single``: to each rank a status word, then each row's stored length (not for fixed-stride
   identity rows); the lengths received are checked (as anything received), and every rank says to every
   other whether it found them sound (one more status word each; none for identity rows); then the bytes;
5. the received rows, this rank's and the cache's are
   decoded bit for bit into sampled order: on the CPU each part by the codec's decoder on all cores,
   every row written straight to its batch position (into a pooled buffer: layout.buffers.BufferPool);
   on a GPU the parts joined into one CompressedTensor, copied once, decoded, then placed.

The collectives run on a gloo group of their own (``ShardExchange``), made at the first batch, so that
DDP's gradient collectives on the default group and the exchange never interleave. Every rank must
fetch once per batch and take the same number of batches (the loaders' equal seed splits do:
pipeline.requests); a rank whose epoch ends marks it, so that a rank with a batch more raises at once. A
rank that dies or stops iterating makes the others raise ShardExchangeError (at
once for a closed connection, after `timeout` seconds for a silent one). A rank that fails to serve the rows
asked of it (ids outside its shard, a shard it cannot read) says so in its status word: every rank then
completes the batch's collectives (the bytes are not sent) and raises, the failing rank with its own message,
the others naming it and its message; so does a rank that finds the row lengths it received corrupt (its
status word after the lengths: no rank sends the bytes, so no rank trains on that batch). At the end of a run
every rank closes its sources (`close`, after its last exchange): the group each made is destroyed once every
rank has said so (a message that also pairs with a peer's batch or end-of-epoch mark: a rank still in its
epoch is an error on both, not a wait); a run that fails closes them locally (`close(collective=False)`: no
message, nothing waited for, nothing raised), and its peers' next exchange fails at once on the closed
connections.

Two byte budgets keep the hottest remote rows (by `hotness`: a node's appearances in the graph's
neighbour lists, by default) compressed, fetched once at the first batch (RemoteCache): ``cache_bytes``
in host memory (decoded with the fetched rows: on a GPU they cross PCIe, but not the network) and, when
the loader serves a GPU, ``device_cache_bytes`` in device memory, the hottest of all (decoded there by
``gpu.fetch``: they cross no link at all).
"""
from __future__ import annotations

import contextlib
import datetime
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch

from ..data.shards import ShardLayout, check_cut_by, check_rank, layout_name, shard_layout, shard_rank
from ..data.store import EncodedTable
from ..layout.rows import check_row_index, offsets_from_lengths, padded_size
from ..layout.buffers import BufferPool, empty_host
from ..layout.tensor import CompressedTensor
from ..threads import CollectiveTensors
from .cache import decode_rows
from .sources import COMPRESSED, FeatureSource, assemble
from .stats import Tally

#: seconds a collective of the exchange waits for a silent rank before ShardExchangeError (a training run's
#: loader.shard_exchange_timeout).
DEFAULT_TIMEOUT = 300.0
#: the longest `timeout` accepted (about 116 days): gloo takes it in int64 milliseconds, and a wait of more
#: than that is no timeout at all.
MAX_TIMEOUT = 1e7
#: buffers a ShardedSource's pool remembers: per batch in flight (the decode stage's prefetch of 2, and the
#: one being decoded) its received, own and host-tier rows, plus the decoded batch held and the one made.
BUFFERS_KEPT = 12
#: the marks a rank sends in place of a batch's row counts (which are >= 0), one int64 to each rank: its epoch
#: is over (ShardExchange.end), it leaves the exchange (ShardExchange.close).
END_MARK, CLOSE_MARK = -1, -2


#: how a rank gets its own shard (the usual mistake: LOCAL_RANK, which starts at 0 again on every host).
_OWN_SHARD = ("every rank must serve its own shard: load_shard(directory, rank) or shard_of(store, layout, rank) "
              "with the global rank (torch.distributed.get_rank(), torchrun's RANK), not LOCAL_RANK, which is the "
              "same on every host")


class ShardExchangeError(RuntimeError):
    """The row exchange with the other ranks failed: a rank died, stopped iterating, or sent bad data."""


def check_timeout(timeout: Any, argname: str = "timeout") -> float:
    """`timeout` (seconds a collective waits for a silent rank) as a float; ValueError naming `argname` unless a
    number in (0, MAX_TIMEOUT]."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)) or \
            not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"{argname}={timeout!r} is not accepted; use seconds in (0, {MAX_TIMEOUT:g}]")
    return float(timeout)


class ShardExchange:
    """The collectives of a row exchange, on a gloo group of their own (`group`: one given, or made from
    the default group at `start`, which every rank must call in the same order; a group made there is
    destroyed by `close`)."""

    def __init__(self, group: Any = None, *, timeout: float = DEFAULT_TIMEOUT):
        self.group, self.timeout = group, check_timeout(timeout)
        self.rank = self.world_size = None
        self.closed, self._made = False, False
        # a collective of this exchange raised (a peer died or was silent, or a batch failed on some rank): the
        # ranks' sequences of collectives may differ from here on, so close() makes no collective any more
        self.broken = False
        # every collective's tensors stay referenced here for a while: freed by gloo's thread, they would make
        # it a Python thread state, which a DataLoader worker forked meanwhile could deadlock on (threads)
        self._held = CollectiveTensors()

    @contextlib.contextmanager
    def _marking(self):
        """Marks the exchange broken when the block raises (see `broken`)."""
        try:
            yield
        except BaseException:
            self.broken = True
            raise

    def start(self) -> None:
        """Join the group (made now if none was given); once."""
        self._open()
        if self.rank is not None:
            return
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("a ShardedSource needs torch.distributed initialized on every rank "
                               "(torch.distributed.init_process_group; torchrun sets its environment)")
        if self.group is None:
            self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.timeout))
            self._made = True
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)

    def _open(self) -> Any:
        """The group; RuntimeError once the exchange is closed (a group of None would be the default one)."""
        if self.closed:
            raise RuntimeError(f"the feature row exchange of rank {self.rank} is closed (close() destroyed its "
                               "process group); a closed exchange exchanges nothing: make a new one")
        return self.group

    def close(self, collective: bool = True) -> None:
        """Leave the exchange. A group this exchange made is destroyed (its gloo threads and sockets go).

        `collective` (a run that ended well): every rank that started the exchange calls close after its last
        exchange, once no thread of it has one in flight; the group is destroyed once every rank has sent its
        close mark (so that no rank destroys it while a peer still has a collective on it in flight). A peer that
        sends a batch's row counts or an end-of-epoch mark instead is an error on both (ShardExchangeError; the
        group is destroyed all the same). An exchange that is `broken` (a collective of it raised) closes locally.

        ``collective=False`` (a run that failed, on whichever ranks): the group is destroyed here and now, without
        a message (after a failure the ranks' collectives need not pair, and a close mark could wait for a peer
        until `timeout`); never raises. A peer's next collective on the group then fails on the closed connections.
        A collective still in flight on another thread of this rank ends as it would have (its peers' or
        `timeout`): the group's threads and sockets go once nothing holds it any more (that collective, the
        traceback of an error one raised).

        Idempotent; a closed exchange refuses to start or exchange."""
        if self.closed:
            return
        self.closed = True
        if not self._made or self.rank is None:  # a group given is the caller's to destroy
            return
        import torch.distributed as dist

        group, self.group, self._made = self.group, None, False
        try:
            if collective and not self.broken:
                self._close_marks(dist, group)
        finally:
            try:
                dist.destroy_process_group(group)
            except (RuntimeError, ValueError):  # already gone: the default group was destroyed first (all groups go)
                pass
            # the group's last reference, unless a collective in flight on another thread or the traceback of an error
            # one raised holds it: dropped, the group joins its threads (their last collectives' tensors still held
            # here: a gloo thread that freed one would wait for the GIL this thread holds while joining it)
            last = sys.getrefcount(group) <= 2  # `group` and getrefcount's argument
            del group
            if last:  # gloo's threads are gone: nothing of theirs holds these tensors
                self._held = CollectiveTensors()

    def _close_marks(self, dist, group) -> None:
        """The close message: CLOSE_MARK to every rank; ShardExchangeError unless every rank sent one."""
        ws = self.world_size
        got, mark = torch.empty(ws, dtype=torch.int64), torch.full((ws,), CLOSE_MARK, dtype=torch.int64)
        self._held.hold(got, mark)  # until the group's threads are joined (close)
        try:
            dist.all_to_all_single(got, mark, group=group)
        except (RuntimeError, ValueError) as e:
            self.broken = True
            raise self._fail("close", e) from e
        other = got != CLOSE_MARK
        if bool(other.any()):
            r = int(torch.nonzero(other)[0])
            doing = "ended its epoch" if int(got[r]) == END_MARK else "has a batch left"
            raise ShardExchangeError(f"rank {self.rank}: this rank closed the exchange (the end of its run) while "
                                     f"rank {r} {doing}; every rank must take the same number of batches and close "
                                     "its sources after its last one")

    def __getstate__(self) -> dict:  # workers never exchange
        return {**self.__dict__, "group": None, "rank": None, "world_size": None, "_held": CollectiveTensors(),
                "_made": False}

    def _fail(self, what: str, e: BaseException) -> ShardExchangeError:
        return ShardExchangeError(
            f"rank {self.rank} of {self.world_size}: the feature row exchange ({what}) failed: another rank "
            f"died, stopped iterating (every rank must take the same number of batches) or was silent for "
            f"timeout={self.timeout:g} s (a training run's loader.shard_exchange_timeout): {e}")

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits: Optional[list] = None,
                   in_splits: Optional[list] = None, what: str = "rows") -> torch.Tensor:
        """``all_to_all_single`` on the group; ShardExchangeError naming this rank for any failure."""
        import torch.distributed as dist

        group = self._open()
        try:
            dist.all_to_all_single(out, inp, out_splits, in_splits, group=group)
        except (RuntimeError, ValueError) as e:
            self.broken = True
            self._held.hold(out, inp)  # a failed collective's too: freed here, not by a gloo thread
            raise self._fail(what, e) from e
        self._held.hold(out, inp)
        return out

    def all_gather(self, obj: Any, what: str) -> list:
        """Every rank's `obj`, pickled (as all_gather_object, with tensors this exchange holds: see
        threads.CollectiveTensors). The peers are the ranks of one job, trusted as torch's own is."""
        import torch.distributed as dist

        group = self._open()
        mine = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size = torch.tensor([mine.numel()], dtype=torch.int64)
        sizes = [torch.empty(1, dtype=torch.int64) for _ in range(self.world_size)]
        held = [size, *sizes]
        try:
            dist.all_gather(sizes, size, group=group)
            padded = torch.zeros(max(int(s) for s in sizes), dtype=torch.uint8)
            padded[:mine.numel()] = mine
            got = [torch.empty_like(padded) for _ in range(self.world_size)]
            held += [padded, *got]
            dist.all_gather(got, padded, group=group)
        except (RuntimeError, ValueError) as e:
            self.broken = True
            self._held.hold(*held)  # a failed collective's too: freed here, not by a gloo thread
            raise self._fail(what, e) from e
        self._held.hold(*held)
        return [pickle.loads(t[:int(n)].numpy().tobytes()) for t, n in zip(got, sizes)]

    def end(self, name: str) -> None:
        """Mark the end of this rank's epoch: it pairs with the other ranks' marks, and with the batch of
        a rank that has one left (both then raise ShardExchangeError, at once, instead of waiting)."""
        with self._marking():
            mark = torch.full((self.world_size,), END_MARK, dtype=torch.int64)
            got = self.all_to_all(torch.empty(self.world_size, dtype=torch.int64), mark, what=f"{name}: end of epoch")
            if bool((got >= 0).any()):
                more = int(torch.nonzero(got >= 0)[0])
                raise ShardExchangeError(f"rank {self.rank}: this rank ended its epoch while rank {more} has a batch "
                                         "left; every rank must take the same number of batches (equal seed splits: "
                                         "the loaders' rank= and world_size=)")
            if bool((got == CLOSE_MARK).any()):
                closed = int(torch.nonzero(got == CLOSE_MARK)[0])
                raise ShardExchangeError(f"rank {self.rank}: rank {closed} closed the exchange (the end of its run) "
                                         "while this rank ended an epoch; every rank must take the same number of "
                                         "batches and close its sources after its last one")

    def rows(self, shard: EncodedTable, asked: np.ndarray, counts: np.ndarray, name: str,
             empty: Callable[..., torch.Tensor] = empty_host) -> "Received":
        """Shard rows `asked` of their owners (`counts[r]` of them asked of rank r, in rank order), compressed;
        meanwhile serves what the other ranks ask of `shard`. Collective. The rows served and received are
        written into ``empty(shape, dtype)`` (e.g. BufferPool.empty)."""
        with self._marking():
            return self._rows(shard, asked, counts, name, empty)

    def _rows(self, shard: EncodedTable, asked: np.ndarray, counts: np.ndarray, name: str,
              empty: Callable[..., torch.Tensor]) -> "Received":
        ws = self.world_size
        send_counts = torch.from_numpy(np.ascontiguousarray(counts, dtype=np.int64))
        recv_counts = self.all_to_all(torch.empty(ws, dtype=torch.int64), send_counts, what=f"{name}: row counts")
        if bool((recv_counts < 0).any()):  # a rank's end-of-epoch (`end`) or close mark met this rank's batch
            r = int(torch.nonzero(recv_counts < 0)[0])
            did = ("closed the exchange (the end of its run)" if int(recv_counts[r]) == CLOSE_MARK
                   else "ended its epoch")
            raise ShardExchangeError(f"rank {self.rank}: rank {r} {did} while this rank has a batch "
                                     f"left; every rank must take the same number of batches (equal seed "
                                     f"splits: the loaders' rank= and world_size=)")
        asks, wants = send_counts.tolist(), recv_counts.tolist()
        theirs = self.all_to_all(torch.empty(sum(wants), dtype=torch.int64),
                                 torch.from_numpy(np.ascontiguousarray(asked, dtype=np.int64)), wants, asks,
                                 what=f"{name}: row ids")
        fixed = shard.compressed.offsets is None  # fixed stride: every row row_nbytes long, no lengths sent
        try:  # a failure serving them is sent in-band with the row lengths, so that every rank completes the batch
            served, failure = self._serve(shard, theirs, wants, name, empty), None
            mine = None if fixed else served.row_lengths().numpy().astype(np.int32, copy=False)
        except Exception as e:  # noqa: BLE001 - whatever it is, the other ranks must not wait for this rank
            served, failure, mine = None, e, None if fixed else np.zeros(sum(wants), np.int32)
        lengths = self._lengths(mine, failure, asks, wants, name)
        row_nbytes = served.row_nbytes
        n_in = int(send_counts.sum())
        if fixed:
            out_lengths = np.asarray(wants, np.int64) * row_nbytes
            in_lengths = np.asarray(asks, np.int64) * row_nbytes
        else:  # nothing received is trusted: every rank says whether its lengths are sound before any byte is sent
            self._receipt(_corrupt_lengths(lengths.numpy(), asks, row_nbytes, name), name)
            out_lengths = _segment_sums(mine, wants)
            in_lengths = _segment_sums(lengths.numpy(), asks)
        total_in, total_out = int(in_lengths.sum()), int(out_lengths.sum())
        payload = empty((padded_size(total_in),), torch.uint8)
        payload[total_in:] = 0
        self.all_to_all(payload[:total_in], served.payload[:total_out], in_lengths.tolist(), out_lengths.tolist(),
                        what=f"{name}: row bytes")
        offsets = None
        if lengths is not None:  # checked (`_receipt`): each within [0, row_nbytes], the payload sized by their sum
            offsets = torch.from_numpy(offsets_from_lengths(lengths.numpy())[0])
        ct = CompressedTensor(payload=payload, offsets=offsets, shape=(n_in,) + served.row_shape,
                              dtype=served.dtype, codec=served.codec, fingerprint=served.fingerprint)
        wire = total_in + (0 if lengths is None else 4 * n_in)
        return Received(ct, wire_bytes=wire, request_bytes=8 * n_in)

    def _serve(self, shard: EncodedTable, theirs: torch.Tensor, wants: list, name: str,
               empty: Callable[..., torch.Tensor]) -> CompressedTensor:
        """The rows of `shard` the other ranks asked for (`theirs`, `wants[r]` of them by rank r), compressed;
        each id checked against the shard before a byte is read."""
        try:
            check_row_index(theirs, shard.n_rows, "rows")
        except IndexError as e:
            ends = np.cumsum(wants)
            by = int(np.searchsorted(ends, int(np.flatnonzero((theirs < 0) | (theirs >= shard.n_rows))[0]),
                                     side="right"))
            raise ShardExchangeError(f"rank {by} asked for rows of {name!r} outside rank {self.rank}'s shard of "
                                     f"{shard.n_rows} rows ({e}): the ranks' shard layouts differ") from None
        return shard.index_select(theirs, empty)

    def _lengths(self, mine: Optional[np.ndarray], failure: Optional[BaseException], asks: list, wants: list,
                 name: str) -> Optional[torch.Tensor]:
        """The row lengths message (collective): to each rank a status word (1: this rank failed to serve its
        rows, `failure`), then the length of each row served to it (`mine`, in rank order; None: rows of fixed
        stride, no lengths). Returns the lengths of the rows this rank asked for (None: fixed stride). Where any
        rank failed, every rank has completed the same collectives and raises ShardExchangeError: the failing
        rank with its own message, the others naming it and its message (gathered then)."""
        fixed = mine is None
        heads_out = np.cumsum([0] + [0 if fixed else w for w in wants[:-1]])
        sent = np.insert(np.zeros(0, np.int32) if fixed else mine, heads_out, np.int32(failure is not None))
        sizes_in = [1 + (0 if fixed else a) for a in asks]
        got = self.all_to_all(torch.empty(sum(sizes_in), dtype=torch.int32), torch.from_numpy(sent), sizes_in,
                              [1 + (0 if fixed else w) for w in wants], what=f"{name}: row lengths").numpy()
        heads_in = np.cumsum([0] + sizes_in[:-1])
        if got[heads_in].any():  # every rank sees every rank's status word: all take this branch, or none
            text = None if failure is None else str(failure) if isinstance(failure, ShardExchangeError) else \
                f"serving rows of {name!r} failed: {type(failure).__name__}: {failure}"
            self._raise_together(text, None if text is None else f"failed: {text}", failure, name)
        return None if fixed else torch.from_numpy(np.delete(got, heads_in))

    def _receipt(self, corrupt: Optional[str], name: str) -> None:
        """The receipt message (collective): to each rank a status word, 1 where this rank found the row lengths it
        received corrupt (`corrupt`: what it found). Where any rank did, every rank raises ShardExchangeError
        before a byte of the batch is sent (no rank goes on to train on it): the finding rank with what it found,
        the others naming it and what it found."""
        ws = self.world_size
        word = torch.full((ws,), int(corrupt is not None), dtype=torch.int32)
        got = self.all_to_all(torch.empty(ws, dtype=torch.int32), word, what=f"{name}: receipt")
        if bool(got.any()):  # every rank sees every rank's word: all take this branch, or none
            found = None if corrupt is None else f"found the {corrupt}"
            self._raise_together(found, found, None, name)

    def _raise_together(self, own: Optional[str], told: Optional[str], cause: Optional[BaseException],
                        name: str) -> None:
        """Raise ShardExchangeError on every rank, once some rank failed (collective: every rank calls this): the
        failing ranks with their own message (`own`), the others with each failing rank's `told` (gathered)."""
        texts = self.all_gather(told, f"{name}: failures")
        if own is not None:
            raise ShardExchangeError(f"rank {self.rank}: {own}") from cause
        raise ShardExchangeError(f"rank {self.rank}: " + "; ".join(
            f"rank {r} {t}" for r, t in enumerate(texts) if t is not None))


@dataclass(frozen=True)
class Received:
    """Rows fetched from their owners: compressed (`rows`), and the bytes of the exchange."""

    rows: CompressedTensor
    wire_bytes: int  # row bytes and lengths received
    request_bytes: int  # ids sent


def _corrupt_lengths(lengths: np.ndarray, asks: Sequence[int], row_nbytes: int, name: str) -> Optional[str]:
    """What is wrong with the row `lengths` received (`asks[r]` of them from rank r, in rank order), None where
    each lies in [0, row_nbytes] (then the offsets made of them are sound, and the payload sized by their sum)."""
    bad = (lengths < 0) | (lengths > row_nbytes)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    ends = np.cumsum(np.asarray(asks, np.int64))
    by = int(np.searchsorted(ends, i, side="right"))
    return (f"row lengths received for {name!r} from rank {by} corrupt: its row {i - int(ends[by] - asks[by])} of "
            f"{int(asks[by])} has the length {int(lengths[i])} ({int(bad.sum())} of {lengths.size} bad); lengths "
            f"must lie in [0, row_nbytes={row_nbytes}]")


def _segment_sums(values: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """Sums of consecutive segments of `values`, `counts[r]` entries each."""
    ends = np.cumsum(np.asarray(counts, np.int64))
    total = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return total[ends] - total[np.concatenate([[0], ends[:-1]])]


def concat_rows(parts: Sequence[CompressedTensor]) -> CompressedTensor:
    """The rows of `parts` (one codec, dtype and row shape) as one CompressedTensor, in order."""
    first = parts[0]
    n = sum(p.n_rows for p in parts)
    shape = (n,) + first.row_shape
    if first.offsets is None:
        payload = torch.cat([p.payload[: p.n_rows * p.row_nbytes] for p in parts])
        return CompressedTensor(payload, None, shape, first.dtype, first.codec, first.fingerprint)
    lengths = np.concatenate([p.row_lengths().numpy() for p in parts])
    offsets, padded = offsets_from_lengths(lengths)
    payload = torch.empty(padded, dtype=torch.uint8)
    at = 0
    for p in parts:
        used = int(p.offsets[-1])
        payload[at:at + used] = p.payload[:used]
        at += used
    payload[at:] = 0
    return CompressedTensor(payload, torch.from_numpy(offsets), shape, first.dtype, first.codec, first.fingerprint)


@dataclass(frozen=True)
class Fetched:
    """A batch's rows of a sharded table, compressed, in `parts`: the other ranks', this rank's and the host
    cache tier's, each ``(rows, positions)`` with the batch position of each row; the positions of the
    device cache tier's hits and their rows there; the counts for the loader's stats (Tally's shard fields)."""

    parts: tuple
    hit_positions: np.ndarray
    hit_slots: np.ndarray
    counts: dict

    @property
    def positions(self) -> np.ndarray:
        """The batch positions of the parts' rows, in the parts' order."""
        return np.concatenate([at for _, at in self.parts])

    def joined(self) -> CompressedTensor:
        """The parts' rows as one CompressedTensor (a copy), in the order of `positions`."""
        return concat_rows([rows for rows, _ in self.parts])


class RemoteCache:
    """Hot rows of other ranks' shards, compressed, in two tiers: `device` (where a GPU decodes; empty on
    the CPU) and `host` (host memory). ``slots[id]`` (host array): -1 for a row in neither, ``s <
    len(device_ids)`` for row s of the device tier, else row ``s - len(device_ids)`` of the host tier."""

    def __init__(self, num_rows: int, device_ids: np.ndarray, device_rows: Optional[CompressedTensor],
                 host_ids: np.ndarray, host_rows: Optional[CompressedTensor]):
        n = device_ids.shape[0] + host_ids.shape[0]
        self.slots = np.full(num_rows, -1, np.int32 if n < 2**31 else np.int64)
        self.slots[device_ids] = np.arange(device_ids.shape[0])
        self.slots[host_ids] = np.arange(device_ids.shape[0], n)
        self.device_ids, self.device_rows = device_ids, device_rows
        self.host_ids, self.host_rows = host_ids, host_rows
        # each cached row's stored bytes, in slot order, on the host (what a hit serves, counted without the device)
        self.lengths = np.concatenate([np.zeros(0, np.int64)] + [
            t.row_lengths().cpu().numpy().astype(np.int64) for t in (device_rows, host_rows) if t is not None])

    @property
    def tier_nbytes(self) -> dict:
        """Bytes of each tier's cached rows (payload and offsets)."""
        return {tier: 0 if t is None else t.nbytes for tier, t in (("device", self.device_rows), ("host", self.host_rows))}

    @property
    def nbytes(self) -> int:
        """Bytes of the cached rows of both tiers."""
        return sum(self.tier_nbytes.values())

    def __len__(self) -> int:
        return int(self.device_ids.shape[0] + self.host_ids.shape[0])

    def to(self, device: torch.device) -> "RemoteCache":
        """The device tier's rows (payload and offsets) moved to `device`; in place."""
        if self.device_rows is not None and self.device_rows.device != torch.device(device):
            self.device_rows = self.device_rows.to(device)
        return self


def split_tiers(cost: np.ndarray, device_bytes: int, host_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of rows listed hottest first (each `cost` bytes) for the two cache tiers: the device tier
    the longest prefix that fits `device_bytes`, the host tier the longest prefix of the rest that fits
    `host_bytes`."""
    n_dev = int(np.searchsorted(np.cumsum(cost), device_bytes, side="right"))
    n_host = int(np.searchsorted(np.cumsum(cost[n_dev:]), host_bytes, side="right"))
    return np.arange(n_dev), np.arange(n_dev, n_dev + n_host)


class ShardedSource(FeatureSource):
    """One rank's shard of a feature table (`shard`: an EncodedTable of the rows `layout` gives `rank`);
    the other rows fetched compressed from their owners per batch (module docstring). `cache_bytes` and
    `device_cache_bytes`: budgets of hot remote rows kept compressed in host memory and, for a loader
    that serves a GPU, in device memory (RemoteCache); `hotness`: a score per node (array, or a function
    returning one; default: set by the loader from the graph's in-degrees). `rank`: this rank in the
    exchange's group (default: torch.distributed's rank, read at the first batch). A shard that records
    whose rows it holds (data.shards.shard_rank: `shard_of`, `load_shard`) must be this rank's: another
    rank's is refused here when `rank` is given, else at the first batch on every rank (the set-up's
    all-gather, which also names ranks holding the same shard). One that records the layout it was cut by
    (data.shards.shard_layout) must have been cut by `layout`: another layout, even of the same per-rank
    counts, is refused here and, for any rank's shard, at the set-up on every rank. `timeout`: seconds a
    collective of the exchange waits for a silent rank before ShardExchangeError (default DEFAULT_TIMEOUT; in
    (0, MAX_TIMEOUT]); `exchange`: the ShardExchange to use (default: one made with `timeout`, on a gloo group
    of its own made at the first batch), whose own timeout then holds.

    ``close()`` ends its service at the end of a run; used as a context manager (``with ShardedSource(...) as
    x:``) it is closed on leaving the block: collectively when the block ends well, locally when it raises
    (``close(collective=False)``)."""

    delivers = COMPRESSED
    served = True
    collective = True  # every rank fetches once per batch (pipeline.sources.Serving.fill)

    def __init__(self, shard: EncodedTable, layout: ShardLayout, *, rank: Optional[int] = None,
                 exchange: Optional[ShardExchange] = None, cache_bytes: int = 0, device_cache_bytes: int = 0,
                 hotness: Union[None, np.ndarray, Callable[[], np.ndarray]] = None,
                 timeout: Optional[float] = None):
        if not isinstance(shard, EncodedTable):
            raise TypeError(f"shard must be an EncodedTable (ibp_graph.data.store), got {type(shard).__name__}")
        if not isinstance(layout, ShardLayout):
            raise TypeError(f"layout must be a ShardLayout (ibp_graph.data.shards), got {type(layout).__name__}")
        for argname, v in (("cache_bytes", cache_bytes), ("device_cache_bytes", device_cache_bytes)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{argname}={v!r} is not accepted; use an int number of bytes >= 0")
        if timeout is not None:
            timeout = check_timeout(timeout)
            if exchange is not None and timeout != exchange.timeout:
                raise ValueError(f"timeout={timeout:g} is not accepted with exchange= (its timeout is "
                                 f"{exchange.timeout:g} s); give the timeout to ShardExchange(timeout=), or leave "
                                 "exchange=None")
        check_cut_by(shard, layout)
        if rank is not None:
            self._check_rank(shard, layout, rank)
        self.shard, self.layout, self.rank = shard, layout, rank
        self.exchange = exchange if exchange is not None else ShardExchange(
            timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
        self.cache_bytes, self.device_cache_bytes, self.hotness = int(cache_bytes), int(device_cache_bytes), hotness
        self.cache: Optional[RemoteCache] = None
        self._device: Optional[torch.device] = None
        self.closed = False
        # a batch's buffers (rows served, received, gathered here, decoded): the pages of earlier ones
        self._buffers = BufferPool(keep=BUFFERS_KEPT)

    @staticmethod
    def _check_rank(shard: EncodedTable, layout: ShardLayout, rank: int) -> None:
        rank = check_rank(rank, layout.world_size)
        if shard.n_rows != layout.counts[rank]:
            raise ValueError(f"the shard has {shard.n_rows} rows; the layout gives rank {rank} "
                             f"{int(layout.counts[rank])} of {layout.num_rows}: a shard of another rank or layout")
        held = shard_rank(shard)
        if held is not None and held != rank:
            raise ValueError(f"rank={rank} was given a shard of rank {held}'s rows; {_OWN_SHARD}")

    def _check_ranks(self, held: list, rows: list, cut: list) -> None:
        """ValueError on every rank (what the set-up's all-gather gave each: `held`, the rank whose shard
        each holds, None for a shard that records none; `rows`, its row count; `cut`, the description of the
        layout its shard was cut by, None for one that records none) unless each holds its own, cut by the
        layout every rank was given."""
        mine = self.layout.describe()
        other = [f"rank {r}'s shard was cut by {layout_name(c)}" for r, c in enumerate(cut)
                 if c is not None and c["digest"] != mine["digest"]]
        if other:
            raise ValueError(f"rank {self.rank}: {'; '.join(other)}; the ranks were given {layout_name(mine)}, "
                             "which would read other rows as those shards' rows: give every rank the layout its "
                             "shard was cut by (load_shard returns it with the shard)")
        wrong = [f"rank {r} holds rank {h}'s shard" for r, h in enumerate(held) if h is not None and h != r]
        if wrong:
            same = [f"ranks {[r for r, g in enumerate(held) if g == h]} hold the same shard, rank {h}'s"
                    for h in sorted({h for h in held if h is not None}) if held.count(h) > 1]
            raise ValueError(f"rank {self.rank}: {'; '.join(same + wrong)}; {_OWN_SHARD}")
        counts = self.layout.counts
        bad = [r for r, n in enumerate(rows) if n != counts[r]]
        if bad:
            raise ValueError(f"rank {self.rank}: rank {bad[0]}'s shard has {rows[bad[0]]} rows; the layout gives "
                             f"rank {bad[0]} {int(counts[bad[0]])} of {self.layout.num_rows}: a shard of another "
                             "rank or layout")

    shape = property(lambda self: (self.layout.num_rows,) + tuple(self.shard.shape[1:]))
    dtype = property(lambda self: self.shard.dtype)
    codec = property(lambda self: self.shard.codec)
    table = store = property(lambda self: self.shard)
    max_row_nbytes = property(lambda self: self.shard.compressed.row_nbytes)
    #: both cache tiers' budgets: a source with one needs `hotness`.
    cache_budget = property(lambda self: self.cache_bytes + self.device_cache_bytes)

    def __getstate__(self) -> dict:  # a worker only sends ids: no cache, no device
        return {**self.__dict__, "cache": None, "_device": None}

    def read(self, ids, into=None):
        raise TypeError("a ShardedSource is served by the main process (its rows come from other ranks); "
                        "the workers send node ids only")

    # ---- set-up (collective, at the first batch) -------------------------------------------------------
    def describe(self) -> dict:
        """What every rank's source must agree on."""
        return {"row_shape": list(self.shard.shape[1:]), "dtype": str(self.dtype), "codec": self.codec.name,
                "fingerprint": self.codec.fingerprint, "layout": self.layout.describe()}

    def prepare(self, device: torch.device) -> None:
        self._check_open()
        device = torch.device(device)
        if self._device is not None:  # prepared (the set-up is collective: once); the cache follows the device
            self.cache.to(device)
            self._device = device
            return
        if self.device_cache_bytes and device.type != "cuda":
            raise ValueError(f"device_cache_bytes={self.device_cache_bytes} is not accepted for a loader that decodes "
                             f"on {device}: the device tier lives in GPU memory; use cache_bytes (host memory) or "
                             "device_cache_bytes=0")
        ex = self.exchange
        ex.start()
        if ex.world_size != self.layout.world_size:
            raise ValueError(f"the layout has world_size={self.layout.world_size}; the process group has "
                             f"{ex.world_size} ranks")
        mine = self.describe()
        # the ranks given and whose rows each rank's shard holds are checked after the all-gather, so that every
        # rank raises (a rank raising alone would leave the others waiting for it until `timeout`)
        gathered = ex.all_gather((mine, shard_rank(self.shard), self.shard.n_rows, self.rank,
                                  shard_layout(self.shard)), "set-up")
        given = [f"rank={g} was given to rank {r} of the exchange's group" for r, (*_, g, _) in enumerate(gathered)
                 if g is not None and g != r]
        if given:
            raise ValueError(f"rank {ex.rank}: {'; '.join(given)}; leave rank=None (torch.distributed's rank) or "
                             "give each process its own")
        self.rank = ex.rank
        for r, (theirs, *_) in enumerate(gathered):
            diff = sorted(k for k in mine if theirs[k] != mine[k])
            if diff:
                raise ValueError(f"rank {r}'s sharded table differs from rank {self.rank}'s in {diff}: "
                                 f"{ {k: theirs[k] for k in diff} } vs { {k: mine[k] for k in diff} }; every rank "
                                 "needs shards of one layout, encoded with one codec (ibp-graph prepare --shards)")
        self._check_ranks([h for _, h, _, _, _ in gathered], [n for _, _, n, _, _ in gathered],
                          [c for *_, c in gathered])
        self.cache = self._fill_cache().to(device)
        self._device = device

    def _fill_cache(self) -> RemoteCache:
        """The hottest remote rows that fit the two budgets, fetched once (every rank takes part)."""
        layout, want = self.layout, np.zeros(0, np.int64)
        if self.cache_budget:
            if self.hotness is None:
                raise ValueError("cache_bytes or device_cache_bytes > 0 needs hotness (a score per node); the "
                                 "loaders set the graph's in-degrees")
            hot = np.asarray(self.hotness() if callable(self.hotness) else self.hotness)
            if hot.shape != (layout.num_rows,):
                raise ValueError(f"hotness has shape {hot.shape}; accepted: one score per row ({layout.num_rows},)")
            owner = layout.owner_array()
            order = np.lexsort((np.arange(layout.num_rows), -hot.astype(np.float64)))  # hottest first, then id
            order = order[owner[order] != self.rank]
            est = max(1.0, self.shard.compressed.row_nbytes * max(self.shard.fraction, 1e-3))
            want = np.sort(order[: int(self.cache_budget / est * 1.25) + 1])
        fetched = self._rows(want, None, "the remote-row cache")
        got, ids = fetched.joined(), want[fetched.positions]  # the fetched rows and their ids, in their order
        # the hottest rows by their real sizes (hottest first, then lower id): the device tier, then the host's
        by_heat = np.lexsort((ids, -hot[ids].astype(np.float64))) if ids.size else np.zeros(0, np.int64)
        cost = got.row_lengths().numpy()[by_heat] + (4 if got.offsets is not None else 0)
        tiers = [np.sort(by_heat[t]) for t in split_tiers(cost, self.device_cache_bytes, self.cache_bytes)]
        rows = [got.index_select(torch.from_numpy(t)) if t.size else None for t in tiers]
        return RemoteCache(layout.num_rows, ids[tiers[0]], rows[0], ids[tiers[1]], rows[1])

    # ---- per batch ----------------------------------------------------------------------------------------
    def _rows(self, ids: np.ndarray, cache: Optional[RemoteCache], name: str) -> "Fetched":
        """Rows `ids`: this rank's, the host cache tier's and the other ranks' compressed (in the order of
        `positions`), the device tier's hits by position and slot, and the counts of the batch."""
        owner, local = self.layout.locate(ids, name)
        slot = (np.full(ids.shape[0], -1, np.int64) if cache is None or not len(cache)
                else cache.slots[ids].astype(np.int64))
        n_dev = 0 if cache is None else int(cache.device_ids.shape[0])
        mine = owner == self.rank
        remote = np.flatnonzero(~mine & (slot < 0))
        remote = remote[np.argsort(owner[remote], kind="stable")]
        counts = np.bincount(owner[remote], minlength=self.layout.world_size)
        empty = self._buffers.empty
        got = self.exchange.rows(self.shard, local[remote], counts, name, empty)
        mine_pos, host_pos = np.flatnonzero(mine), np.flatnonzero(slot >= n_dev)
        dev_pos = np.flatnonzero((slot >= 0) & (slot < n_dev))
        parts = [(got.rows, remote), (self.shard.index_select(torch.from_numpy(local[mine_pos]), empty), mine_pos)]
        if host_pos.size:
            parts.append((cache.host_rows.index_select(torch.from_numpy(slot[host_pos] - n_dev), empty), host_pos))
        hits = slot[slot >= 0]
        counts = dict(local_rows=int(mine_pos.size), remote_rows=int(remote.size), remote_hits=int(hits.size),
                      remote_hit_bytes=int(cache.lengths[hits].sum()) if hits.size else 0,
                      device_hits=int(dev_pos.size),
                      device_hit_bytes=int(cache.lengths[slot[dev_pos]].sum()) if dev_pos.size else 0,
                      wire_bytes=got.wire_bytes, request_bytes=got.request_bytes,
                      remote_raw_bytes=int(remote.size) * got.rows.row_nbytes)
        return Fetched(tuple(parts), dev_pos, slot[dev_pos], counts)

    def fetch_compressed(self, ids: torch.Tensor, name: str = "rows") -> "Fetched":
        """Rows `ids`, still compressed: this rank's, the cache's and the other ranks' (collective)."""
        self._check_open(name)
        if self._device is None:
            raise RuntimeError("ShardedSource.fetch before prepare(device): the loader's Serving prepares it")
        ids = check_row_index(ids, self.layout.num_rows, name)
        return self._rows(ids, self.cache, name)

    def decode(self, fetched: "Fetched", tally: Tally, checks=None) -> torch.Tensor:
        """Fetched rows decoded on the serving device, in the ids' order, counted into `tally` (not
        collective), the device tier's hits from device memory. On the CPU each part (the other ranks',
        this rank's, the host tier's) is decoded straight into its batch positions (``out_rows``: the
        compressed rows are not copied into one tensor first, nor the decoded ones moved after); on a
        GPU the parts are joined (one copy to the device), decoded, then placed (``assemble``)."""
        for k, v in fetched.counts.items():
            setattr(tally, k, getattr(tally, k) + v)
        hit_pos = torch.from_numpy(fetched.hit_positions)
        slots = torch.from_numpy(fetched.hit_slots).to(self._device)
        n = sum(at.shape[0] for _, at in fetched.parts) + hit_pos.shape[0]
        if self._device.type == "cuda":
            from .. import gpu

            pos = torch.from_numpy(fetched.positions)
            decoded = gpu.decode(self.codec, fetched.joined().to(self._device), checks=checks)
            hits = decode_rows(self.codec, self.cache.device_rows, slots, checks) if n > pos.shape[0] else decoded[:0]
            return assemble(n, pos, decoded, hit_pos, hits)
        out = self._buffers.empty((n,) + tuple(self.shard.shape[1:]), self.dtype)  # every row written
        for rows, at in fetched.parts:
            if at.size:
                self.codec.decode(rows, out=out, out_rows=torch.from_numpy(at))
        if hit_pos.numel():  # a device tier that a later prepare moved to the CPU
            self.codec.decode(self.cache.device_rows.index_select(slots), out=out, out_rows=hit_pos)
        return out

    def fetch(self, ids: torch.Tensor, sent: Optional[torch.Tensor], tally: Tally, checks=None,
              name: str = "rows") -> torch.Tensor:
        return self.decode(self.fetch_compressed(ids, name), tally, checks)

    def end_epoch(self) -> None:
        """The loader's epoch is over (every batch fetched): tell the other ranks (ShardExchange.end)."""
        self._check_open()
        if self._device is not None:
            self.exchange.end("the sharded table")
        self._buffers.clear()  # between epochs no idle buffer stays mapped

    def close(self, collective: bool = True) -> None:
        """End the source's service: its exchange is closed, destroying the gloo group it made
        (ShardExchange.close), and its cache and buffers are dropped. `collective` (at the end of a run that ended
        well): every rank, in one order of its sources, once its loaders' epochs are over and no exchange is in
        flight; ``collective=False`` (a run that failed): here and now, waiting for no rank and raising nothing.
        Idempotent; a closed source refuses to serve (RuntimeError naming it): a new run makes new sources."""
        if not self.closed:
            self.closed = True
            try:
                self.exchange.close(collective)
            finally:
                self.cache, self._device = None, None
                self._buffers.clear()

    def __enter__(self) -> "ShardedSource":
        return self

    def __exit__(self, kind, error, tb) -> None:
        self.close(collective=kind is None)

    def _check_open(self, name: Optional[str] = None) -> None:
        if self.closed:
            rows = "" if name is None else f" for {name!r}"
            raise RuntimeError(f"{self!r} is closed (close(), which a training run calls at its end, destroyed "
                               f"its process group): it serves no rows{rows}; make a new ShardedSource for another run")

    def __repr__(self) -> str:
        return (f"ShardedSource(rank={self.rank}, {self.layout!r}, shard={self.shard!r}, "
                f"cache_bytes={self.cache_bytes}, device_cache_bytes={self.device_cache_bytes})")


__all__ = ["ShardedSource", "Fetched", "ShardExchange", "ShardExchangeError", "RemoteCache", "split_tiers", "concat_rows",
           "DEFAULT_TIMEOUT", "MAX_TIMEOUT", "check_timeout"]
