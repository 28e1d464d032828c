"""Feature tables sharded over 2 gloo ranks (pipeline.sharded): PyG batches bit-identical to the single-host
loader's for the same seeds; a dead rank, a mismatched shard, bad ids and corrupt bytes are clear errors."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.benchmarks.ranks import free_port
from ibp_graph.data.shards import ShardLayout, shard_layout, shard_of
from ibp_graph.data.store import EncodedTable
from ibp_graph.pipeline.sharded import Received, ShardedSource, ShardExchange, concat_rows, split_tiers
from ibp_graph.pipeline.stats import LoaderStats, Tally

RANKS = Path(__file__).with_name("ranks.py")


#: seconds the ranks wait in an exchange before giving up (ranks.py's ShardedSource(timeout=60))
EXCHANGE_TIMEOUT = 60


def run_ranks(case: str, tmp_path, world: int = 2, timeout: float = 180) -> list[dict]:
    """Run tests/distributed/ranks.py CASE on `world` processes; each rank's result file."""
    port, env = str(free_port()), dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(RANKS), case, str(r), str(world), port, str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for r in range(world)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            p.kill()
    out = []
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        out.append(json.loads(path.read_text()) if path.exists() else {"log": logs[r][-3000:]})
    return out


def seconds_to_error(ranks: list[dict]) -> float:
    """Seconds from the first rank's loaders being built (start-up, imports and the codec's kernels, which take
    long on a loaded machine, left out: ranks.py's built()) to the last rank's error."""
    return max(r["error"]["at"] for r in ranks) - min(r["built_at"] for r in ranks)


@pytest.mark.parametrize("case", ["pyg_homo", "pyg_homo_identity", "pyg_homo_cache", "pyg_homo_workers",
                                  "pyg_homo_abandon",
                                  "pyg_hetero", "pyg_hetero_cache", "pyg_link"])
def test_sharded_batches_are_the_single_host_batches(case, tmp_path):
    check_sharded_run(run_ranks(case, tmp_path), identity="identity" in case, cached="cache" in case)


def check_sharded_run(ranks: list[dict], *, identity: bool, cached: bool) -> None:
    """Every rank's batches equal the single-host loader's; its shard counts add up and say what travelled."""
    for r, res in enumerate(ranks):
        assert "error" not in res and "log" not in res, res
        assert len(res["ours"]) == len(res["ref"]) > 0
        for i, (ours, ref) in enumerate(zip(res["ours"], res["ref"])):
            assert ours == ref, (r, i, sorted(k for k in ours if ours[k] != ref.get(k)))
        sh = res["stats"]["shard"]
        assert sh["remote_rows"] > 0 and sh["local_rows"] > 0
        # every node row of every batch came from exactly one place
        assert sh["local_rows"] + sh["remote_rows"] + sh["remote_hits"] == res["x_rows"]
        if identity:  # raw rows travel: the bytes received are the raw bytes
            assert sh["wire_bytes"] == sh["remote_raw_bytes"]
        else:  # compressed rows travel (with a 4-byte length each)
            assert sh["wire_bytes"] < 0.8 * sh["remote_raw_bytes"]
        if cached:
            assert sh["remote_hits"] > 0 and 0 < res["stats"]["shard"]["remote_hit_rate"] < 1
            # the cache's compressed rows: under raw size, at least a row length each
            assert 0 < sh["remote_hit_bytes"] < sh["remote_hits"] * res["row_nbytes"]
        else:
            assert sh["remote_hits"] == 0 and sh["remote_hit_bytes"] == 0
    assert len(ranks[0]["ours"]) == len(ranks[1]["ours"])  # equal seed splits: the collectives pair up


def test_a_dead_rank_is_an_error_on_the_others_not_a_hang(tmp_path):
    ranks = run_ranks("dies", tmp_path, timeout=120)
    err = ranks[0].get("error")
    assert err is not None and err["type"] == "ShardExchangeError", ranks[0]
    assert "rank 0 of 2" in err["message"] and "another rank died" in err["message"]


def test_a_rank_with_a_batch_more_is_an_error_at_once_on_both(tmp_path):
    ranks = run_ranks("uneven", tmp_path)
    assert all("error" in r for r in ranks), ranks
    assert seconds_to_error(ranks) < EXCHANGE_TIMEOUT / 2  # at once, not at the exchange's timeout
    e0, e1 = ranks[0].get("error"), ranks[1].get("error")
    assert e0 is not None and "this rank ended its epoch while rank 1 has a batch left" in e0["message"], ranks[0]
    assert e1 is not None and "rank 0 ended its epoch while this rank has a batch left" in e1["message"], ranks[1]


def test_shards_of_another_codec_are_refused_at_the_first_batch(tmp_path):
    for res in run_ranks("mismatch", tmp_path):
        err = res.get("error")
        assert err is not None and err["type"] == "ValueError", res
        assert "differs" in err["message"] and "codec" in err["message"]


@pytest.mark.parametrize("case, wrong", [
    ("all_rank_0", ["ranks [0, 1] hold the same shard, rank 0's", "rank 1 holds rank 0's shard"]),
    ("swapped", ["rank 0 holds rank 1's shard", "rank 1 holds rank 0's shard"])])
def test_a_rank_serving_another_ranks_shard_is_refused_on_every_rank(case, wrong, tmp_path):
    """Shards of equal row counts, opened by the wrong ranks (load_shard(d, LOCAL_RANK) on two hosts; swapped
    ranks): every rank raises at the set-up, naming whose shard each holds and the likely cause, instead of
    serving other rows (or one rank raising alone and the other waiting for it)."""
    for r, res in enumerate(run_ranks(case, tmp_path, timeout=120)):
        err = res.get("error")
        assert err is not None and err["type"] == "ValueError", res
        assert err["message"].startswith(f"rank {r}: ") and "not LOCAL_RANK" in err["message"], err
        assert all(w in err["message"] for w in wrong), err


def test_rows_asked_outside_a_shard_are_refused_naming_the_asking_rank(tmp_path):
    """Rank 0 refuses the ids rank 1 asked for, and says so in-band: both raise at that batch, rank 1 naming rank 0."""
    ranks = run_ranks("bad_ids", tmp_path)
    refused = "rank 1 asked for rows of 'x' outside rank 0's shard of 300 rows"
    for r, res in enumerate(ranks):
        err = res.get("error")
        assert err is not None and err["type"] == "ShardExchangeError", res
        assert err["message"].startswith(f"rank {r}: " + ("" if r == 0 else "rank 0 failed: ") + refused), err


def test_a_rank_failing_to_serve_its_rows_is_an_error_on_every_rank_at_once(tmp_path):
    """Rank 1's shard cannot be read: it sends the failure in-band with the row lengths, every rank completes the
    batch's collectives (no rank is aborted by gloo for a message of another size) and raises, naming rank 1 and
    why, well before the exchange's timeout (60 s)."""
    ranks = run_ranks("serve_fails", tmp_path)
    assert all("error" in r for r in ranks), ranks
    assert seconds_to_error(ranks) < EXCHANGE_TIMEOUT / 2  # at once, not at the exchange's timeout
    why = "serving rows of 'x' failed: OSError: injected: the shard's file could not be read"
    for r, res in enumerate(ranks):
        err = res.get("error")
        assert err is not None and err["type"] == "ShardExchangeError", res
        assert err["message"] == f"rank {r}: " + ("rank 1 failed: " if r == 0 else "") + why, err


def test_repeated_runs_in_one_process_keep_no_process_group_and_a_closed_source_says_so(tmp_path):
    """Each run's ShardedSource is closed at its end, destroying its gloo group (3 threads and their sockets each):
    5 runs in one process end with the threads of the first. A closed source's loader raises, naming it."""
    for res in run_ranks("repeated_runs", tmp_path):
        assert "error" not in res and "log" not in res, res
        assert res["threads"][-1] <= res["threads"][0], res["threads"]  # one group left per run: +3 each
        closed = res["closed"]
        assert closed["type"] == "RuntimeError", closed
        assert re.match(r"ShardedSource\(rank=\d, ShardLayout\(contiguous, num_rows=600, world_size=2\).* is closed "
                        r"\(close\(\), which a training run calls at its end, destroyed its process group\): it "
                        r"serves no rows for 'x'; make a new ShardedSource", closed["message"]), closed


@pytest.mark.parametrize("case, length", [("corrupt", r"\d+"), ("corrupt_received", "-3")])
def test_corrupt_row_lengths_a_rank_received_are_an_error_on_every_rank_at_that_batch(case, length, tmp_path):
    """Rank 0 finds the row lengths it received from rank 1 corrupt ("corrupt": rank 1 sent a row longer than a row;
    "corrupt_received": one damaged on the way, which sized bytes that could not pair): it says so in its receipt
    word, before any byte is sent, and both ranks raise at that batch (in-band: not at the exchange's timeout),
    naming rank 0 and what it found. Before, rank 0 raised alone (or gloo aborted it) and rank 1 waited."""
    ranks = run_ranks(case, tmp_path, timeout=120)
    found = (rf"found the row lengths received for 'x' from rank 1 corrupt: its row 0 of \d+ has the length "
             rf"{length} \(1 of \d+ bad\); lengths must lie in \[0, row_nbytes=\d+\]$")
    for r, res in enumerate(ranks):
        err = res.get("error")
        assert err is not None and err["type"] == "ShardExchangeError", res
        assert re.match(f"rank {r}: " + ("" if r == 0 else "rank 0 ") + found, err["message"]), err


def test_a_close_after_a_failed_exchange_is_local_and_raises_nothing(tmp_path):
    """Rank 1 died: rank 0's exchange failed, and its close (as a run that raised closes its sources) sends no
    close message (that would fail, or wait for a peer that may never come): it destroys the group at once, its
    gloo threads gone, and raises nothing that could hide the run's own error."""
    ranks = run_ranks("dies_then_close", tmp_path, timeout=120)
    assert ranks[0]["error"]["type"] == "ShardExchangeError", ranks[0]
    close = ranks[0]["close"]
    assert close["raised"] is None and close["broken"] and close["closed"], close
    assert close["seconds"] < 5 and close["threads"][1] < close["threads"][0], close


def test_a_rank_that_closes_locally_makes_the_others_fail_at_once(tmp_path):
    """close(collective=False), as a run that raised on one rank closes its sources: it waits for no peer, and the
    peers' next exchange fails at once (the closed connections), while that rank is still alive."""
    ranks = run_ranks("leaves", tmp_path, timeout=120)
    assert ranks[1]["error"]["message"] == "rank 1 left" and ranks[1]["close_seconds"] < 5, ranks[1]
    err = ranks[0].get("error")
    assert err is not None and err["type"] == "ShardExchangeError" and "another rank died" in err["message"], ranks[0]
    assert err["at"] - ranks[1]["closed_at"] < 9, err["at"] - ranks[1]["closed_at"]  # rank 1 lived 12 s more


def test_a_rank_closing_while_another_has_a_batch_is_an_error_on_both_at_once(tmp_path):
    """close's message pairs with another rank's batch (a barrier there waited for the timeout on both ranks)."""
    ranks = run_ranks("close_vs_batch", tmp_path)
    assert all("error" in r for r in ranks), ranks
    assert seconds_to_error(ranks) < EXCHANGE_TIMEOUT / 2  # at once, not at the exchange's timeout
    e0, e1 = ranks[0].get("error"), ranks[1].get("error")
    assert e0 is not None and e0["message"].startswith(
        "rank 0: this rank closed the exchange (the end of its run) while rank 1 has a batch left"), ranks[0]
    assert e1 is not None and e1["message"].startswith(
        "rank 1: rank 0 closed the exchange (the end of its run) while this rank has a batch left"), ranks[1]


# ---- in one process --------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
def test_concat_rows_keeps_every_row_bit_for_bit(codec):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 10, generator=g)
    x[::4, 2] = -0.0
    store = EncodedTable.encode(x, codec, progress=False)
    parts = [store.index_select(torch.tensor(ix, dtype=torch.int64)) for ix in ([5, 1, 299], [], [0, 0, 7])]
    rows = store.codec.decode(concat_rows(parts))
    want = x[torch.tensor([5, 1, 299, 0, 0, 7])]
    assert torch.equal(rows.view(torch.int32), want.view(torch.int32))


def test_sharded_source_arguments_are_checked():
    x = torch.randn(10, 4)
    store = EncodedTable.encode(x, "auto", progress=False)
    layout = ShardLayout.contiguous(10, 2)
    shard = shard_of(store, layout, 0)
    with pytest.raises(TypeError, match="shard must be an EncodedTable"):
        ShardedSource(x, layout)
    with pytest.raises(TypeError, match="layout must be a ShardLayout"):
        ShardedSource(shard, 2)
    with pytest.raises(ValueError, match="cache_bytes=-1 is not accepted"):
        ShardedSource(shard, layout, cache_bytes=-1)
    with pytest.raises(ValueError, match="device_cache_bytes=1.5 is not accepted"):
        ShardedSource(shard, layout, device_cache_bytes=1.5)
    with pytest.raises(ValueError, match="device_cache_bytes=100 is not accepted for a loader that decodes on cpu"):
        ShardedSource(shard, layout, device_cache_bytes=100).prepare("cpu")  # before any collective
    third = shard_of(store, ShardLayout.contiguous(10, 3), 0)
    with pytest.raises(ValueError, match="the layout gives rank 1 5 of 10: a shard of another rank"):
        ShardedSource(EncodedTable(third.codec, third.compressed), layout, rank=1)  # no layout recorded: its rows
    with pytest.raises(ValueError, match=r"it was cut by the contiguous layout of 10 rows over 3 ranks"):
        ShardedSource(third, layout, rank=1)
    with pytest.raises(ValueError, match="timeout=0 is not accepted"):
        ShardExchange(timeout=0)
    for timeout in (float("inf"), 1e30):  # refused here, not as an OverflowError when the group is made
        with pytest.raises(ValueError, match=re.escape(f"timeout={timeout!r} is not accepted; use seconds in (0, 1e+07]")):
            ShardedSource(shard, layout, timeout=timeout)
    source = ShardedSource(shard, layout, rank=0)
    assert source.shape == (10, 4) and source.served and source.collective
    with pytest.raises(TypeError, match="served by the main process"):
        source.read(torch.tensor([1]))
    with pytest.raises(RuntimeError, match="before prepare"):
        source.fetch(torch.tensor([1]), None, Tally())
    if not torch.distributed.is_initialized():
        with pytest.raises(RuntimeError, match="needs torch.distributed initialized"):
            source.prepare("cpu")


class GatherExchange:
    """The set-up's all-gather of a world whose rank r holds rank held[r]'s shard (of this rank's rows count), cut
    by the layout cut[r] describes (default: this rank's shard's), and was given rank=given[r] (None: read from the
    group; this rank's own is what it sends)."""

    def __init__(self, rank, held, given=None, cut=None):
        self.rank, self.world_size, self.held = rank, len(held), held
        self.given, self.cut = given or [None] * len(held), cut

    def start(self):
        pass

    def all_gather(self, obj, what):
        mine, _, rows, own, cut = obj
        cuts = self.cut or [cut] * self.world_size
        return [(mine, h, rows, own if r == self.rank else g, cuts[r])
                for r, (h, g) in enumerate(zip(self.held, self.given))]


def test_a_shard_of_another_rank_is_refused_at_construction_or_set_up():
    """A shard records whose rows it holds (shard_of, load_shard): another rank's, of the same row count, is
    refused when the rank is given, and at the set-up when it is read from the group, naming the ranks; a
    shard made otherwise records none and is taken as before."""
    store = EncodedTable.encode(torch.randn(10, 4), "ibp", progress=False)
    layout = ShardLayout.contiguous(10, 2)  # 5 rows each: the row count cannot tell the shards apart
    shard0 = shard_of(store, layout, 0)
    with pytest.raises(ValueError, match=r"rank=1 was given a shard of rank 0's rows; .*not LOCAL_RANK"):
        ShardedSource(shard0, layout, rank=1)
    ShardedSource(shard0, layout, rank=0)
    ShardedSource(EncodedTable(shard0.codec, shard0.compressed), layout, rank=1)  # no recorded rank: as before
    with pytest.raises(ValueError, match=r"rank 1: ranks \[0, 1\] hold the same shard, rank 0's; rank 1 holds "
                                         r"rank 0's shard; every rank must serve its own shard: .*not LOCAL_RANK"):
        ShardedSource(shard0, layout, exchange=GatherExchange(1, [0, 0])).prepare("cpu")
    with pytest.raises(ValueError, match=r"rank 0: rank 0 holds rank 1's shard; rank 1 holds rank 0's shard"):
        ShardedSource(shard_of(store, layout, 1), layout, exchange=GatherExchange(0, [1, 0])).prepare("cpu")



def test_a_shard_cut_by_another_layout_of_the_same_counts_is_refused_at_construction_or_set_up():
    """A shard records the layout it was cut by (shard_of, load_shard): read by another layout of the same per-rank
    counts (contiguous ranges and an assignment, two assignments) it would serve other rows as its own; refused
    when the source is made, naming both layouts, and at the set-up on every rank for any rank's shard. A shard
    made otherwise records none and is taken as before."""
    x = torch.arange(40, dtype=torch.float32).reshape(10, 4)  # row i names node i
    store = EncodedTable.encode(x, "identity", progress=False)
    ranges = ShardLayout.contiguous(10, 2)
    evens = ShardLayout.from_assignment(np.arange(10) % 2, 2)  # 5 rows each, as the ranges
    halves = ShardLayout.from_assignment(np.array([0, 1] * 2 + [1, 0] * 3), 2)
    assert ranges.counts.tolist() == evens.counts.tolist() == halves.counts.tolist() == [5, 5]
    for cut_by, read_by in ((ranges, evens), (evens, ranges), (evens, halves)):
        shard = shard_of(store, cut_by, 0)
        assert shard_layout(shard) == cut_by.describe()
        name = lambda lay: (rf"the {lay.kind} layout of 10 rows over 2 ranks \(digest "  # noqa: E731
                            rf"{lay.digest()[:16]}\)")
        with pytest.raises(ValueError, match=rf"^layout=ShardLayout\({read_by.kind}, num_rows=10, world_size=2\) is "
                                             rf"not accepted for this shard: it was cut by {name(cut_by)}, and layout "
                                             rf"is {name(read_by)}, .*accepted: the layout it was cut by"):
            ShardedSource(shard, read_by, rank=0)
        with pytest.raises(ValueError, match=rf"layout=.* it was cut by {name(cut_by)}"):
            ShardedSource(shard, read_by)  # with no rank given too
        ShardedSource(shard, cut_by, rank=0)
        ShardedSource(EncodedTable(shard.codec, shard.compressed), read_by, rank=0)  # none recorded: as before
        # rank 1's shard was cut by another layout: refused on this rank too, whose own shard is right
        mine = shard_of(store, read_by, 0)
        ex = GatherExchange(0, [0, 1], cut=[read_by.describe(), cut_by.describe()])
        with pytest.raises(ValueError, match=rf"^rank 0: rank 1's shard was cut by {name(cut_by)}; the ranks were "
                                             rf"given {name(read_by)}, which would read other rows"):
            ShardedSource(mine, read_by, exchange=ex).prepare("cpu")
    # what the refusal prevents: rank 0's rows by the even split, read from the ranges' shard, are other rows
    ids = np.array([0, 2, 4])
    rows = lambda shard, lay: store.codec.decode(shard.index_select(torch.from_numpy(lay.locate(ids)[1])))  # noqa: E731
    assert torch.equal(rows(shard_of(store, evens, 0), evens), x[ids])
    assert not torch.equal(rows(shard_of(store, ranges, 0), evens), x[ids])


def test_a_rank_given_that_is_not_the_process_rank_is_refused_on_every_rank():
    """rank= names this process's rank in the exchange's group; another is refused after the set-up's
    all-gather, on the rank given it and on the others (which would otherwise wait for it until the timeout)."""
    store = EncodedTable.encode(torch.randn(10, 4), "ibp", progress=False)
    layout = ShardLayout.contiguous(10, 2)
    shard0 = shard_of(store, layout, 0)
    with pytest.raises(ValueError, match=r"rank 1: rank=0 was given to rank 1 of the exchange's group; leave "
                                         r"rank=None"):
        ShardedSource(shard0, layout, rank=0, exchange=GatherExchange(1, [0, 0])).prepare("cpu")
    with pytest.raises(ValueError, match=r"rank 0: rank=0 was given to rank 1 of the exchange's group"):
        ShardedSource(shard0, layout, exchange=GatherExchange(0, [0, 0], given=[None, 0])).prepare("cpu")

def test_shard_counts_reach_the_stats():
    stats = LoaderStats()
    tally = Tally(local_rows=3, remote_rows=5, remote_hits=2, remote_hit_bytes=30, device_hits=1, device_hit_bytes=10,
                  wire_bytes=100, request_bytes=40, remote_raw_bytes=160)
    stats.add_tiers(**tally.counts())
    assert stats.local_fraction == 0.3 and stats.remote_hit_rate == 2 / 7
    assert stats.device_hit_rate == 1 / 7 and stats.host_hit_rate == 1 / 7
    shard = stats.as_dict()["shard"]
    assert shard["wire_bytes"] == 100 and shard["device_hit_bytes"] == 10 and shard["host_hit_rate"] == 1 / 7
    assert "sharded rows: local fraction 0.3000" in stats.table()
    assert "host tier 0.1429, 0.00 MB; device tier 0.1429" in stats.table()
    with pytest.raises(ValueError, match="add_tiers got remote=1"):
        stats.add_tiers(0, 0, 0, 0, remote=1)


def test_layout_locate_round_trips_for_ranges_and_assignments():
    rng = np.random.default_rng(0)
    for layout in (ShardLayout.contiguous(103, 4), ShardLayout.from_assignment(rng.integers(0, 3, 103), 3)):
        ids = rng.integers(0, 103, 500)
        owner, local = layout.locate(ids)
        for r in range(layout.world_size):
            rows = layout.rows_of(r)
            assert rows.shape[0] == layout.counts[r]
            assert np.array_equal(rows[local[owner == r]], ids[owner == r])
    with pytest.raises(IndexError, match="ids contains 103"):
        ShardLayout.contiguous(103, 2).locate(np.array([103]))


def test_cache_tiers_take_the_hottest_prefixes_that_fit():
    cost = np.array([5, 5, 3, 7, 1, 1])
    dev, host = split_tiers(cost, 10, 11)
    assert dev.tolist() == [0, 1] and host.tolist() == [2, 3, 4]  # 5+5 <= 10; 3+7+1 <= 11 < 3+7+1+1
    dev, host = split_tiers(cost, 0, 4)
    assert dev.tolist() == [] and host.tolist() == []  # the hottest row (5 bytes) does not fit: nothing after it
    dev, host = split_tiers(cost, 100, 100)
    assert dev.tolist() == list(range(6)) and host.tolist() == []


class InProcessExchange:
    """The other ranks of ShardExchange served in this process from their shards (a unit test's world)."""

    def __init__(self, shards, rank):
        self.shards, self.rank, self.world_size = shards, rank, len(shards)
        self.asked = 0

    def start(self):
        pass

    def all_gather(self, obj, what):
        return [obj] * self.world_size

    def rows(self, shard, asked, counts, name, empty=None):
        ends = np.cumsum(counts)
        parts = [self.shards[r].index_select(torch.from_numpy(asked[e - c:e])) for r, (c, e) in enumerate(zip(counts, ends))]
        self.asked += int(asked.size)
        rows = concat_rows(parts)
        return Received(rows, wire_bytes=int(rows.row_lengths().sum()), request_bytes=8 * int(asked.size))


@pytest.mark.parametrize("codec", ["ibp", "identity"])
def test_two_cache_tiers_serve_the_hottest_rows_bit_exactly(codec):
    """Both tiers filled from the other ranks' rows (the device tier the hottest), and a batch of rows from
    this shard, both tiers and the other ranks decodes to the table's bits in the ids' order (the device
    tier decoded where it lives: on the CPU here, as the GPU test does on a GPU)."""
    x = torch.randn(900, 12, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16).float()
    x[::7, 3], x[1::5, 0], x[2::9, 5] = float("nan"), -0.0, float("-inf")
    x.view(torch.int32)[2::11, 1] = 0x7fc00123  # a NaN with a payload
    x.view(torch.int32)[3::13, 2] = 1  # a subnormal
    store = EncodedTable.encode(x, codec, progress=False)
    layout = ShardLayout.from_assignment(np.random.default_rng(1).integers(0, 3, 900), 3)
    shards = [shard_of(store, layout, r) for r in range(3)]
    hot = np.random.default_rng(2).permutation(900).astype(np.float64)
    row = store.compressed.row_nbytes
    source = ShardedSource(shards[0], layout, rank=0, exchange=InProcessExchange(shards, 0), cache_bytes=60 * row,
                           device_cache_bytes=30 * row, hotness=hot)
    source._device, source.rank = torch.device("cpu"), 0  # prepare() refuses a device tier off a GPU
    cache = source.cache = source._fill_cache()
    for ids, budget in ((cache.device_ids, 30 * row), (cache.host_ids, 60 * row)):
        assert ids.size and (layout.locate(ids)[0] != 0).all()
        assert int(cache.lengths[cache.slots[ids]].sum()) <= budget
    assert hot[cache.device_ids].min() > hot[cache.host_ids].max()  # the device tier holds the hottest
    remote = np.flatnonzero(layout.owner_array() != 0)
    assert hot[cache.host_ids].min() >= np.sort(hot[remote])[::-1][len(cache) - 1]  # and then the next hottest

    ids = torch.from_numpy(np.random.default_rng(3).integers(0, 900, 700))
    before = source.exchange.asked
    tally = Tally()
    rows = source.decode(source.fetch_compressed(ids), tally)
    assert torch.equal(rows.view(torch.int32), x[ids].view(torch.int32))  # NaN payloads, -0.0 kept
    slot = cache.slots[ids.numpy()]
    owner = layout.locate(ids.numpy())[0]
    assert tally.local_rows == int((owner == 0).sum()) and tally.remote_hits == int((slot >= 0).sum())
    assert tally.device_hits == int(((slot >= 0) & (slot < cache.device_ids.size)).sum()) > 0
    assert tally.remote_hits > tally.device_hits and tally.remote_rows == source.exchange.asked - before > 0
    assert tally.device_hit_bytes == int(cache.lengths[slot[(slot >= 0) & (slot < cache.device_ids.size)]].sum())
    assert tally.remote_hit_bytes == int(cache.lengths[slot[slot >= 0]].sum())
    tiers = cache.tier_nbytes
    assert 0 < tiers["device"] < tiers["host"] and cache.nbytes == tiers["device"] + tiers["host"]


def test_decoded_batches_a_user_holds_are_never_written_again():
    """The CPU decodes fetched rows into pooled buffers (layout.buffers.BufferPool): a batch still held keeps
    its bits while later batches are decoded; a dropped batch's buffer is reused."""
    x = torch.randn(12000, 128, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).float()
    store = EncodedTable.encode(x, "ibp", progress=False)
    layout = ShardLayout(12000, 2)
    shards = [shard_of(store, layout, r) for r in range(2)]
    source = ShardedSource(shards[0], layout, rank=0, exchange=InProcessExchange(shards, 0))
    source._device = torch.device("cpu")
    rng = np.random.default_rng(5)
    batches = [torch.from_numpy(rng.integers(0, 12000, 9000 + 11 * k)) for k in range(6)]  # > 4 MiB decoded
    held = {}
    for k, ids in enumerate(batches):
        rows = source.decode(source.fetch_compressed(ids), Tally())
        assert torch.equal(rows.view(torch.int32), x[ids].view(torch.int32)), k
        if k % 2 == 0:
            held[k] = rows
        del rows
    for k, rows in held.items():
        assert torch.equal(rows.view(torch.int32), x[batches[k]].view(torch.int32)), k
    assert len({r.untyped_storage().data_ptr() for r in held.values()}) == len(held)
    assert source._buffers.reused >= 2  # the odd batches' buffers went back to the pool


HELD_SCRIPT = """
import gc, weakref, torch, torch.distributed as dist
from ibp_graph.pipeline.sharded import ShardExchange
from ibp_graph.threads import HELD_COLLECTIVES
from ibp_graph.train.loop import Dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
ex, d = ShardExchange(timeout=30), Dist(rank=0, world_size=2)
ex.start()
def alive_until_later_collectives(collective):
    inp, out = torch.arange(3), torch.empty(3, dtype=torch.int64)
    refs = [weakref.ref(inp), weakref.ref(out)]
    collective(out, inp)
    del inp, out
    gc.collect()
    kept = all(r() is not None for r in refs)
    for _ in range(HELD_COLLECTIVES):
        ex.all_to_all(torch.empty(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
        d.sum([1.0])
    gc.collect()
    return kept and all(r() is None for r in refs)
assert alive_until_later_collectives(lambda out, inp: ex.all_to_all(out, inp))
assert alive_until_later_collectives(lambda out, inp: d.held.hold(out, inp))
assert ex.all_gather({"a": [1, 2.5, None], "b": "x" * 1000}, "test") == [{"a": [1, 2.5, None], "b": "x" * 1000}]
assert d.sum([1.5, 2.0]) == [1.5, 2.0] and d.max(7.0) == 7.0  # a group of one: the given values
print("ok")
"""


def test_collective_tensors_are_dropped_by_python_not_by_gloos_thread():
    """Each collective's tensors stay referenced from Python until HELD_COLLECTIVES later ones completed
    (threads.CollectiveTensors): freed by gloo's worker thread, they made it a Python thread state under
    CPython's thread-list lock, on which a DataLoader worker forked at that moment deadlocked (3.11.7)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", HELD_SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


class ClosingExchange:
    """An exchange that records how it was closed."""

    timeout = 300.0

    def __init__(self):
        self.closes = []

    def close(self, collective=True):
        self.closes.append(collective)


def test_the_timeout_is_checked_by_name_and_a_source_closes_as_its_block_ends():
    """ShardedSource(timeout=) / ShardExchange(timeout=): seconds in (0, MAX_TIMEOUT], refused by name otherwise, and
    with an exchange of another timeout; a source used as a context manager is closed collectively when its block
    ends well, locally when it raises (and raises the block's error)."""
    store = EncodedTable.encode(torch.randn(10, 4), "ibp", progress=False)
    layout = ShardLayout.contiguous(10, 2)
    shard = shard_of(store, layout, 0)
    assert ShardedSource(shard, layout).exchange.timeout == 300.0
    assert ShardedSource(shard, layout, timeout=2).exchange.timeout == 2.0
    for bad in (0, -1.0, float("nan"), float("inf"), 1e8, True, "60", [60]):
        with pytest.raises(ValueError, match=r"^timeout=.* is not accepted; use seconds in \(0, 1e\+07\]$"):
            ShardedSource(shard, layout, timeout=bad)
        with pytest.raises(ValueError, match=r"^timeout=.* is not accepted; use seconds in \(0, 1e\+07\]$"):
            ShardExchange(timeout=bad)
    with pytest.raises(ValueError, match=r"^timeout=5 is not accepted with exchange= \(its timeout is 300 s\); give "
                                         r"the timeout to ShardExchange\(timeout=\), or leave exchange=None$"):
        ShardedSource(shard, layout, exchange=ClosingExchange(), timeout=5)
    assert ShardedSource(shard, layout, exchange=ClosingExchange(), timeout=300).exchange.timeout == 300

    ex = ClosingExchange()
    with ShardedSource(shard, layout, exchange=ex) as x:
        pass
    assert ex.closes == [True] and x.closed
    ex = ClosingExchange()
    with pytest.raises(ArithmeticError, match="a bad batch"):
        with ShardedSource(shard, layout, exchange=ex) as x:
            raise ArithmeticError("a bad batch")
    assert ex.closes == [False] and x.closed
    x.close()  # idempotent
    assert ex.closes == [False]
    with pytest.raises(RuntimeError, match=r"is closed .* it serves no rows for 'x'"):
        x.fetch_compressed(torch.arange(3), "x")
