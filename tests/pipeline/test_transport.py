"""Worker -> main transport: outputs in shared memory, slot reuse rules, no aliasing, bytes counted."""
import gc
import os
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing  # noqa: F401  (registers torch's reducers with ForkingPickler)
from torch.utils.data import DataLoader

from ibp_graph.pipeline.batch import EncodedBatch
from ibp_graph.pipeline.codec_setup import build_codecs
from ibp_graph.pipeline.decode import DecodeStage
from ibp_graph.pipeline.grouping import SCALAR_BLOCK
from ibp_graph.pipeline.requests import BatchRequest, BatchRequests
from ibp_graph.pipeline.transport import (ALIGN, GROWTH, PID, TICKET, OutputBuffers, SlotKeeper, SlotRing,
                                          is_shared, register_pinned, shared_empty)
from ibp_graph.pipeline.plans import NeighborPlanner
from ibp_graph.pipeline.producer import BatchPlan, BatchProducer, encode_tensors, produce
from ibp_graph.sampling.graph import CSCGraph
from ibp_graph.sampling.neighbor import NeighborSampler


def _handed_over(obj):
    """obj as the main process receives it from a worker (torch's reducers, in this process)."""
    return ForkingPickler.loads(ForkingPickler.dumps(obj))


def test_shared_empty_is_handed_over_without_a_copy():
    t = shared_empty((4, 3), torch.float32)
    assert t.shape == (4, 3) and t.dtype == torch.float32 and t.is_contiguous() and is_shared(t)
    ptr = t.untyped_storage().data_ptr()
    ForkingPickler.dumps(t)
    assert t.untyped_storage().data_ptr() == ptr  # sent as a handle
    private = torch.zeros(4, 3)
    ptr = private.untyped_storage().data_ptr()
    ForkingPickler.dumps(private)
    assert private.untyped_storage().data_ptr() != ptr  # torch copied it into a new segment


def test_ring_slots_are_claimed_released_and_reused():
    ring = SlotRing(slots=2, max_workers=3)
    slot_a, seg_a = ring.claim(1, 1000)
    slot_b, seg_b = ring.claim(1, 1000)
    assert (slot_a.index, slot_b.index) == (0, 1) and seg_a.nbytes() >= 1000 and seg_a.is_shared()
    assert ring.claim(1, 10) is None  # both held: the worker falls back to fresh segments
    assert ring.free(0) == [0, 1]  # other workers' slots are their own
    slot_b.release()
    again, seg = ring.claim(1, 500)
    assert again.index == 1 and again.seq == slot_b.seq + 1 and seg.data_ptr() == seg_b.data_ptr()
    again.release()
    ring.note(5000)  # a batch of 5000 bytes was written: the slot grows before it is reused
    grown, seg = ring.claim(1, 100)
    assert seg.data_ptr() != seg_b.data_ptr() and seg.nbytes() >= 5000 * GROWTH
    assert ring.claim(3, 10) is None  # a worker id beyond the ring
    with pytest.raises(ValueError, match="slots=0 is not accepted; use an int >= 1"):
        SlotRing(slots=0)
    with pytest.raises(ValueError, match="lanes=0 is not accepted; use an int >= 1"):
        SlotRing(lanes=0)


def test_output_buffers_carve_a_slot_then_fall_back_and_count_copies():
    main = OutputBuffers(SlotRing(slots=1, max_workers=1))
    t = torch.arange(5)
    assert not main.shared and main.place(t) is t and not is_shared(main.empty((3,), torch.int64))
    ring = SlotRing(slots=1, max_workers=1)
    buf = OutputBuffers(ring, worker=0)
    buf.reserve(256)
    a = buf.empty((3,), torch.int64)
    b = buf.empty((2, 4), torch.float32)
    seg = buf.slot.storage
    assert a.untyped_storage().data_ptr() == seg.data_ptr() == b.untyped_storage().data_ptr()
    assert b.data_ptr() - a.data_ptr() == ALIGN  # aligned carving
    big = buf.empty((1000,), torch.float64)  # does not fit: a fresh shared segment
    assert is_shared(big) and big.untyped_storage().data_ptr() != seg.data_ptr()
    placed = buf.place(torch.arange(4))
    assert is_shared(placed) and torch.equal(placed, torch.arange(4)) and buf.copied == 32
    assert buf.place(placed) is placed and buf.copied == 32  # already shared: no copy
    assert buf.done() is buf.slot and ring._largest >= 8000  # the next batch's slot will hold this one


def _worker_batch(ring, x):
    """An EncodedBatch made as a worker makes it (identity groups written into a slot)."""
    codecs = build_codecs({"x": x}, {}, num_nodes=x.shape[0], num_edges=0, codec="identity")
    buf = OutputBuffers(ring, worker=0)
    buf.reserve(x.nbytes + 4096)
    rows = buf.empty(x.shape, x.dtype)
    rows.copy_(x)
    plan = BatchPlan()
    plan.put("x", rows)
    plan.put("n_id", torch.arange(x.shape[0]))
    return produce(plan, codecs, buf), codecs


def _in_another_process(ring: SlotRing) -> None:
    """Drop the worker's own reference to its slot segments: a real worker holds them in its process."""
    ring._segments.clear()


def test_cpu_keeper_releases_a_slot_only_when_no_tensor_of_its_batch_lives():
    ring = SlotRing(slots=1, max_workers=1)
    x = torch.randn(50, 8)
    sent, codecs = _worker_batch(ring, x)
    _in_another_process(ring)
    assert sent.copied_bytes == SCALAR_BLOCK * 8  # n_id's group (one padded row); x's payload is x
    received = _handed_over(sent)
    assert received.copied_bytes == sent.copied_bytes  # nothing left for torch to copy
    del sent
    stage = DecodeStage(codecs, torch.device("cpu"))
    (decoded,) = list(stage(iter([received])))
    del received
    assert torch.equal(decoded["x"], x) and stage.slots.held == 1
    assert ring.claim(0, 10) is None  # the user holds the batch: its slot is not reused
    stage.slots.collect()
    assert stage.slots.held == 1
    del decoded
    gc.collect()
    assert stage.slots.collect() == 1 and ring.free(0) == [0]
    assert len(stage.slots._mapped) == 1  # kept mapped while its batch lived
    stage.slots.unmap_idle()
    assert len(stage.slots._mapped) == 0


def test_cpu_keeper_keeps_a_slot_whose_storage_object_the_user_holds():
    """`batch.x.untyped_storage()` kept past the batch (torch returns the one Python object of the
    storage, the keeper's own, so it shows in no use count): the slot is not reused until it goes."""
    ring = SlotRing(slots=1, max_workers=1)
    x = torch.randn(50, 8)
    sent, codecs = _worker_batch(ring, x)
    _in_another_process(ring)
    received = _handed_over(sent)
    del sent
    stage = DecodeStage(codecs, torch.device("cpu"))
    (decoded,) = list(stage(iter([received])))
    del received
    storage = decoded["x"].untyped_storage()
    del decoded
    gc.collect()
    assert stage.slots.collect() == 0 and ring.claim(0, 10) is None  # it was released: bytes overwritten
    del storage
    gc.collect()
    assert stage.slots.collect() == 1 and ring.free(0) == [0]


def test_a_kept_untyped_storage_is_never_overwritten_by_later_batches():
    from tests.loaders.test_pyg import make_graph
    from ibp_graph.loaders.pyg import CompressedNeighborLoader

    data = make_graph(num_nodes=2000, num_edges=12000, dim=8)
    loader = CompressedNeighborLoader(data, [4, 2], batch_size=64, num_workers=2, codec="identity")
    it = iter(loader)
    first = next(it)
    storage, x = first.x.untyped_storage(), first.x.clone()
    view_bytes = (storage.data_ptr(), first.x.data_ptr())
    del first
    for _ in range(2):
        for _ in it:
            pass
        it = iter(loader)
    del it
    gc.collect()
    kept = torch.empty(0, dtype=x.dtype).set_(storage, (view_bytes[1] - view_bytes[0]) // x.element_size(),
                                              x.shape)
    assert torch.equal(kept, x)


_FILE_SYSTEM_EPOCHS = """
import gc, glob, os, sys, torch
torch.multiprocessing.set_sharing_strategy("file_system")
from ibp_graph.loaders.pyg import CompressedNeighborLoader
from tests.loaders.test_pyg import make_graph
def shm():
    return sum(os.path.getsize(p) for p in glob.glob("/dev/shm/torch_*") if os.path.isfile(p))
data = make_graph(num_nodes=20000, num_edges=150000, dim=32)
start = shm()
loader = CompressedNeighborLoader(data, [8, 4], batch_size=512, num_workers=2, shuffle=True, codec="identity")
sizes = []
for epoch in range(4):
    for batch in loader:
        pass
    del batch
    gc.collect()
    sizes.append(shm() - start)
del loader
gc.collect()
print(*sizes, shm() - start)
"""


def test_file_system_sharing_strategy_leaves_nothing_in_dev_shm():
    """Under torch's "file_system" sharing strategy (clusters with fd limits) each epoch's workers
    left their ring slots in /dev/shm (~25 MB an epoch here) until the main process ended."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", _FILE_SYSTEM_EPOCHS], cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *epochs, after = map(int, proc.stdout.split())
    assert epochs[-1] - epochs[0] < 4 << 20, epochs  # nothing accumulates over epochs
    assert after < 1 << 20, after  # and nothing stays once the loader is gone


def test_keeper_releasing_after_the_copy_registers_each_segment_once():
    ring = SlotRing(slots=1, max_workers=1)
    registered, undone = [], []

    def register(storage):
        registered.append(storage.data_ptr())
        return lambda: undone.append(storage.data_ptr())

    keeper = SlotKeeper(register=register, release_on_copy=True)
    x = torch.randn(20, 4)
    for k in range(3):
        batch = _handed_over(_worker_batch(ring, x + k)[0])
        keeper.adopt(batch)
        assert ring.claim(0, 10) is None  # held until its copy is done
        keeper.release(batch)
        assert ring.free(0) == [0] and keeper.held == 0
    assert len(registered) == 1 and undone == []  # one slot, page-locked once
    ring.note(10 ** 5)  # the worker grows the slot: the old segment is unregistered
    batch = _handed_over(_worker_batch(ring, x)[0])
    keeper.adopt(batch)
    assert len(registered) == 2 and undone == registered[:1]
    del keeper
    gc.collect()
    assert undone == registered  # the keeper's end unregisters what it registered


def test_a_slot_that_cannot_be_page_locked_warns_and_the_batch_still_flows():
    def refuse(storage):
        raise RuntimeError("cudaHostRegister failed with CUDA error 2")

    keeper = SlotKeeper(register=refuse, release_on_copy=True)
    batch = _handed_over(_worker_batch(SlotRing(slots=1, max_workers=1), torch.randn(5, 4))[0])
    with pytest.warns(UserWarning, match="page-locking a .*-byte batch slot failed .*CUDA error 2"):
        keeper.adopt(batch)
    assert keeper.register is None and keeper.held == 1
    keeper.release(batch)
    assert keeper.held == 0


def test_a_worker_batch_not_in_shared_memory_counts_its_hand_over():
    x = torch.randn(10, 4)
    codecs = build_codecs({"x": x}, {}, num_nodes=10, num_edges=0, codec="identity")
    batch = encode_tensors({"x": x}, codecs)
    assert batch.copied_bytes == 0 and _handed_over(batch).copied_bytes == x.nbytes  # torch's copy into shm


def _producer(codec, n=300):
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, 3000), generator=g)
    sampler = NeighborSampler(CSCGraph.from_edge_index(edge_index, n), [5, 3])
    x = torch.randn(n, 16, generator=g)
    y = torch.randint(0, 5, (n,), generator=g)
    codecs = build_codecs({"x": x, "y": y}, {}, num_nodes=n, num_edges=3000, codec=codec)
    return BatchProducer(NeighborPlanner(sampler, torch.arange(n), {"x": x, "y": y}, {}), codecs), codecs, x


def _epoch(codec, num_workers, hold):
    producer, codecs, x = _producer(codec)
    requests = BatchRequests(300, 32, shuffle=True, drop_last=False, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(producer, batch_size=None, sampler=requests, collate_fn=lambda b: b,
                        num_workers=num_workers)
    stage = DecodeStage(codecs, torch.device("cpu"))
    out = []
    for batch in stage(iter(loader)):
        assert torch.equal(batch["x"], x[batch["n_id"]])
        out.append(batch if hold else {k: v.clone() for k, v in batch.items()})
    del batch
    return out, stage, producer.ring


@pytest.mark.parametrize("codec", ["identity", "ibp"])
def test_worker_batches_equal_main_process_batches_held_or_not(codec):
    expected, base, _ = _epoch(codec, 0, hold=False)
    for hold in (True, False):
        got, stage, ring = _epoch(codec, 2, hold)
        assert len(got) == len(expected) == 10
        for a, b in zip(expected, got):  # held batches were never overwritten by later ones
            assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
        # identity: no hand-over copy, the bytes copied without workers; ibp: its encoder wrote
        # private memory, copied once into the slot (what torch's hand-over would have copied)
        placed = 0 if codec == "identity" else stage.stats.total_sent_bytes
        assert stage.stats.copied_bytes == base.stats.copied_bytes + placed
        claims = ring.counters[:2, :, 0]
        assert int(claims.sum()) > 0 and int(ring.counters[2:].abs().sum()) == 0  # two workers' slots
        if not hold:  # released slots were written again
            assert int(claims.max()) > 1


def test_producer_in_a_worker_writes_its_batch_into_a_slot():
    producer, codecs, x = _producer("identity")
    buffers = OutputBuffers(producer.ring, worker=0)
    batch = _produced(producer, BatchRequest(index=torch.arange(10), seed=3), buffers)
    x_rows = next(ct for k, ct in batch.groups.items() if k.kind == "rows").payload  # identity: the gathered rows
    assert buffers.slot is not None and is_shared(x_rows)
    assert x_rows.untyped_storage().data_ptr() == buffers.slot.storage.data_ptr()


def _produced(producer, req, buffers):
    """The producer's batch of `req`, written into `buffers` (as a worker writes it)."""
    plan, meta = producer.planner.plan(req, producer.planner.sample(req))
    return produce(plan, producer.codecs, buffers, meta=meta)


@pytest.mark.parametrize("codec", ["ibp", "identity"])
def test_stored_rows_are_gathered_straight_into_the_slot(codec):
    """A pre-encoded table's compressed rows are written into the batch's slot by the gather
    itself (before: gathered into private memory, then copied into the slot)."""
    from ibp_graph.data.store import EncodedTable

    n = 300
    g = torch.Generator().manual_seed(0)
    sampler = NeighborSampler(CSCGraph.from_edge_index(torch.randint(0, n, (2, 3000), generator=g), n), [5, 3])
    x = torch.randn(n, 16, generator=g)
    store = EncodedTable.encode(x, codec, progress=False)
    codecs = build_codecs({"x": store}, {}, num_nodes=n, num_edges=3000, codec="identity")
    producer = BatchProducer(NeighborPlanner(sampler, torch.arange(n), {"x": store}, {}), codecs)
    batch = producer[BatchRequest(index=torch.arange(10), seed=3)]  # in the main process: plain memory
    ring = SlotRing(slots=1, max_workers=1)
    buffers = OutputBuffers(ring, worker=0)
    in_slot = _produced(producer, BatchRequest(index=torch.arange(10), seed=3), buffers)
    key = next(k for k in batch.groups if k.kind == "store")
    ct = in_slot.groups[key]
    assert ct.payload.untyped_storage().data_ptr() == buffers.slot.storage.data_ptr()
    assert buffers.copied == (0 if ct.offsets is None else ct.offsets.nbytes)  # the payload is never copied
    assert torch.equal(ct.payload, batch.groups[key].payload)


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
@pytest.mark.parametrize("num_seeds", [1, 10, 200])
def test_the_first_slot_holds_the_whole_batch_of_stored_rows(codec, num_seeds):
    """BatchPlan.nbytes counts a store's gathered offsets too: the first batch a worker writes fits its slot
    (before: the offsets went to a fresh segment, and the slot grew only for the next batch)."""
    from ibp_graph.data.store import EncodedTable

    n = 300
    g = torch.Generator().manual_seed(1)
    sampler = NeighborSampler(CSCGraph.from_edge_index(torch.randint(0, n, (2, 3000), generator=g), n), [5, 3])
    x = torch.randn(n, 7, generator=g)  # random bits: rows at their widest
    store = EncodedTable.encode(x, codec, progress=False)
    codecs = build_codecs({"x": store}, {}, num_nodes=n, num_edges=3000, codec="identity")
    producer = BatchProducer(NeighborPlanner(sampler, torch.arange(n), {"x": store}, {}), codecs)
    buffers = OutputBuffers(SlotRing(slots=1, max_workers=1), worker=0)
    req = BatchRequest(index=torch.arange(num_seeds), seed=3)
    plan, meta = producer.planner.plan(req, producer.planner.sample(req))
    batch = produce(plan, producer.codecs, buffers, meta=meta)
    slot = buffers.slot.storage
    inside = [t for ct in batch.groups.values() for t in (ct.payload, ct.offsets) if t is not None]
    assert inside and all(t.untyped_storage().data_ptr() == slot.data_ptr() for t in inside)
    assert buffers._wanted <= plan.nbytes()  # what the slot was claimed for


@pytest.mark.gpu
def test_cuda_slots_are_page_locked_so_pinning_copies_nothing():
    ring = SlotRing(slots=1, max_workers=1)
    keeper = SlotKeeper(register=register_pinned, release_on_copy=True)
    x = torch.randn(64, 8)
    first = _handed_over(_worker_batch(ring, x)[0])
    keeper.adopt(first)  # the slot's segment is page-locked once, here
    keeper.release(first)
    batch = _handed_over(_worker_batch(ring, x + 1)[0])
    pinned = batch.pin_memory()  # what the DataLoader's pin-memory thread does
    assert pinned.copied_bytes == batch.copied_bytes  # nothing copied
    for key, ct in pinned.groups.items():
        assert ct.payload.is_pinned() and ct.payload.data_ptr() == batch.groups[key].payload.data_ptr()
    del keeper  # unregisters; the stage's own keeper page-locks the slot again
    gc.collect()
    codecs = build_codecs({"x": x}, {}, num_nodes=64, num_edges=0, codec="identity")
    stage = DecodeStage(codecs, torch.device("cuda"))
    (decoded,) = list(stage(iter([pinned])))
    assert torch.equal(decoded["x"].cpu(), x + 1)


@pytest.mark.gpu
def test_cuda_epoch_closed_with_batches_in_flight_releases_their_slots():
    ring = SlotRing(slots=4, max_workers=1)
    x = torch.randn(64, 8)
    made = [_worker_batch(ring, x + i) for i in range(4)]
    batches = [_handed_over(b) for b, _ in made]
    stage = DecodeStage(made[0][1], torch.device("cuda"), prefetch=2)
    it = stage(iter(batches))
    assert torch.equal(next(it)["x"].cpu(), x)  # three adopted: one finished, two queued
    assert ring.free(0) == [0] and stage.slots.held == 2
    it.close()  # the loop broke: the queued copies are waited for, their slots released
    assert ring.free(0) == [0, 1, 2] and stage.slots.held == 0  # the 4th never arrived


def _arrives(ring, nbytes=64):
    """A slot claimed by worker 0 and its batch as the main process receives it."""
    slot, _ = ring.claim(0, nbytes)
    return _handed_over(EncodedBatch({}, {}, slot=slot)), slot


def test_slots_of_batches_that_never_arrive_are_reclaimed_by_the_next_one():
    ring = SlotRing(slots=4, max_workers=1)
    keeper = SlotKeeper(release_on_copy=True)
    first, _ = _arrives(ring)
    _, lost_a = _arrives(ring)  # dropped by the DataLoader: never adopted
    _, lost_b = _arrives(ring)
    last, _ = _arrives(ring)
    assert [s.ticket for s in (first.slot, lost_a, lost_b, last.slot)] == [1, 2, 3, 4]
    assert ring.free(0) == []
    keeper.adopt(first)
    assert keeper.reclaimed == 0 and ring.free(0) == []  # nothing claimed before it
    keeper.adopt(last)  # tickets 2 and 3 never arrived: their batches are gone
    assert keeper.reclaimed == 2 and ring.free(0) == [lost_a.index, lost_b.index]
    assert keeper.held == 2  # the arrived ones stay held until their copies are done
    again, _ = _arrives(ring)  # a reclaimed slot is written again, under a new ticket
    assert again.slot.index == lost_a.index and again.slot.ticket == 5
    keeper.release(first)
    keeper.adopt(again)  # `last` is held, `first` released: nothing more to reclaim
    assert keeper.reclaimed == 2 and ring.free(0) == [first.slot.index, lost_b.index]


def test_a_slot_claimed_after_the_batch_is_never_reclaimed_by_it():
    ring = SlotRing(slots=3, max_workers=1)
    keeper = SlotKeeper(release_on_copy=True)
    early, _ = _arrives(ring)
    _, later = _arrives(ring)  # claimed after `early`: its batch is still on its way
    keeper.adopt(early)
    assert keeper.reclaimed == 0 and ring.free(0) == [2] and later.index == 1


def test_release_all_frees_the_held_slots():
    ring = SlotRing(slots=2, max_workers=1)
    keeper = SlotKeeper(release_on_copy=True)
    for _ in range(2):
        keeper.adopt(_arrives(ring)[0])
    assert keeper.held == 2 and ring.free(0) == []
    keeper.release_all()
    assert keeper.held == 0 and ring.free(0) == [0, 1]


def test_a_slot_of_another_live_process_is_left_alone_one_of_an_exited_process_is_reclaimed():
    import subprocess
    import sys

    ring = SlotRing(slots=3, max_workers=1)
    keeper = SlotKeeper(release_on_copy=True)
    _, other = _arrives(ring)
    ring.counters[0, other.index, PID] = os.getppid()  # another live process with worker id 0
    later, _ = _arrives(ring)
    keeper.adopt(later)
    assert keeper.reclaimed == 0 and ring.free(0) == [2]  # its batch may still be on its way
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    ring.counters[0, other.index, PID] = int(gone.stdout)  # that process has exited (and was reaped)
    ring.counters[0, other.index, TICKET] = later.slot.ticket + 10  # whatever its ticket
    last, _ = _arrives(ring)
    keeper.adopt(last)
    assert keeper.reclaimed == 1 and ring.free(0) == [other.index]


def test_two_live_iterators_of_one_loader_never_overwrite_each_others_batches():
    # without persistent workers each iterator has its own worker processes, with the same
    # worker ids: one iterator's batches must never reclaim the other's queued slots
    producer, codecs, x = _producer("identity")
    requests = BatchRequests(300, 16, shuffle=True, drop_last=False, generator=torch.Generator().manual_seed(4))
    loader = DataLoader(producer, batch_size=None, sampler=requests, collate_fn=lambda b: b, num_workers=2)
    stage = DecodeStage(codecs, torch.device("cpu"))
    first = stage(producer.ring.start(lambda: iter(loader)))
    n = 0
    for _ in range(3):
        batch = next(first)
        assert torch.equal(batch["x"], x[batch["n_id"]])
        n += 1
    for batch in stage(producer.ring.start(lambda: iter(loader))):  # a whole epoch of a second iterator meanwhile
        assert torch.equal(batch["x"], x[batch["n_id"]])
    assert producer.ring.lane == 1  # its workers claimed on counters of their own
    for batch in first:  # the first one's queued batches are intact
        assert torch.equal(batch["x"], x[batch["n_id"]])
        n += 1
    assert n == 19
    claims = producer.ring.lanes[:2, :2, :, 0]
    assert bool((claims.sum(dim=(1, 2)) > 0).all()) and int(producer.ring.lanes[2:].abs().sum()) == 0


class _Iterator:  # stands for a DataLoader iterator (its workers inherit the ring)
    pass


def test_two_processes_of_one_worker_id_claiming_at_once_each_keep_their_slot(monkeypatch):
    # two live iterators' workers have the same worker ids; on one row of counters both could read
    # a slot free and claim it together, and releasing one batch's slot freed the other's while its
    # user still held it. Each iterator's workers claim on a lane of their own.
    import copy

    ring = SlotRing(slots=3, max_workers=1)
    a = ring.start(_Iterator)
    first = copy.copy(ring)  # as the first iterator's worker holds the ring: its own segments
    b = ring.start(_Iterator)
    second = copy.copy(ring)
    assert (first.lane, second.lane) == (0, 1) and first.lanes.data_ptr() == second.lanes.data_ptr()
    new_shared = torch.UntypedStorage._new_shared
    got = []

    def meanwhile(nbytes, *args, **kwargs):  # the other process claims while this one makes its segment
        monkeypatch.setattr(torch.UntypedStorage, "_new_shared", new_shared)
        got.append(second.claim(0, 100)[0])
        return new_shared(nbytes, *args, **kwargs)

    monkeypatch.setattr(torch.UntypedStorage, "_new_shared", meanwhile)
    mine = first.claim(0, 100)[0]
    theirs = got[0]
    assert (mine.lane, theirs.lane) == (0, 1) and mine.index == theirs.index == 0
    keeper = SlotKeeper(release_on_copy=True)
    held = [_handed_over(EncodedBatch({}, {}, slot=s)) for s in (mine, theirs)]
    for batch in held:
        keeper.adopt(batch)
    keeper.release(held[1])  # the second batch is done: only its slot is free again
    assert first.free(0) == [1, 2] and second.free(0) == [0, 1, 2] and keeper.held == 1
    assert a is not None and b is not None


def test_a_lane_is_free_again_once_its_iterator_is_gone_and_more_iterators_use_fresh_segments():
    ring = SlotRing(slots=2, max_workers=1, lanes=2)
    first, second = ring.start(_Iterator), ring.start(_Iterator)
    assert ring.lane == 1
    third = ring.start(_Iterator)  # every lane held: its workers claim nothing
    assert ring.lane is None and ring.claim(0, 10) is None
    buffers = OutputBuffers(ring, worker=0)
    buffers.reserve(64)
    assert buffers.slot is None and is_shared(buffers.empty((4,), torch.float32))  # a fresh segment
    del first
    gc.collect()
    ring.start(_Iterator)
    assert ring.lane == 0 and ring.claim(0, 10)[0].lane == 0
    assert second is not None and third is not None


@pytest.mark.parametrize("keep", [False, True])
def test_abandoned_epochs_with_persistent_workers_still_give_intact_batches(keep):
    # batches the DataLoader drops when an epoch is abandoned never arrive: their slots are
    # reclaimed when the worker's next batch does, and every batch is whole and correct
    producer, codecs, x = _producer("identity")
    requests = BatchRequests(300, 16, shuffle=True, drop_last=False, generator=torch.Generator().manual_seed(2))
    loader = DataLoader(producer, batch_size=None, sampler=requests, collate_fn=lambda b: b,
                        num_workers=2, persistent_workers=True)
    stage = DecodeStage(codecs, torch.device("cpu"))
    kept = []
    for epoch in range(4):
        for i, batch in enumerate(stage(iter(loader))):
            assert torch.equal(batch["x"], x[batch["n_id"]]), (epoch, i)
            if keep:
                kept.append((batch, x[batch["n_id"]]))
            if epoch < 3 and i == 1:
                break
    assert all(torch.equal(b["x"], want) for b, want in kept)  # none overwritten later
    assert stage.slots.reclaimed > 0
    if not keep:  # every batch is gone: the whole ring is free again, none lost to dropped batches
        del batch
        gc.collect()
        stage.slots.collect()
        assert [producer.ring.free(w) for w in range(2)] == [list(range(producer.ring.slots))] * 2
