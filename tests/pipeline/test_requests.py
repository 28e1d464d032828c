"""requests: batching, shuffling, drop_last, and the distributed split honouring `generator`."""
import pytest
import torch

from ibp_graph.pipeline.requests import BatchRequests, batch_seeds, distributed_place


def _order(reqs) -> torch.Tensor:
    return torch.cat([q.index for q in reqs])


@pytest.mark.parametrize("n,bs,drop_last,expect", [(10, 3, False, [3, 3, 3, 1]), (10, 3, True, [3, 3, 3]),
                                                   (9, 3, True, [3, 3, 3]), (2, 5, False, [2]),
                                                   (2, 5, True, [])])
def test_batching_and_drop_last(n, bs, drop_last, expect):
    r = BatchRequests(n, bs, shuffle=False, drop_last=drop_last, rank=0, world_size=1)
    reqs = list(r)
    assert [q.index.numel() for q in reqs] == expect and len(r) == len(expect)
    if reqs:
        assert torch.equal(_order(reqs), torch.arange(sum(expect)))  # in order without shuffle
    assert len({q.seed for q in reqs}) == len(reqs)  # a seed per batch


def test_shuffle_follows_the_generator_or_torchs_global_rng():
    def run(**kw):
        return _order(BatchRequests(100, 7, shuffle=True, drop_last=False, **kw))

    a = run(generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.sort().values, torch.arange(100)) and not torch.equal(a, torch.arange(100))
    assert torch.equal(a, run(generator=torch.Generator().manual_seed(1)))
    assert not torch.equal(a, run(generator=torch.Generator().manual_seed(2)))
    torch.manual_seed(5)
    b = run()
    torch.manual_seed(5)
    assert torch.equal(b, run())


def test_distributed_split_honours_the_generator():
    def ranks(seed, world=3, n=102):
        return [_order(BatchRequests(n, 5, shuffle=True, drop_last=False, rank=r, world_size=world,
                                     generator=torch.Generator().manual_seed(seed))) for r in range(world)]

    a = ranks(1)
    assert [t.numel() for t in a] == [34, 34, 34]
    assert torch.equal(torch.cat(a).sort().values, torch.arange(102))  # disjoint and covering
    assert all(torch.equal(x, y) for x, y in zip(a, ranks(1)))  # same generator seed: same order
    assert not any(torch.equal(x, y) for x, y in zip(a, ranks(2)))  # another seed: another order
    # uneven: every rank an equal share, the remainder dropped
    uneven = ranks(1, world=3, n=103)
    joined = torch.cat(uneven)
    assert [t.numel() for t in uneven] == [34, 34, 34] and joined.unique().numel() == 102
    # each rank samples with its own seeds
    seeds = [[q.seed for q in BatchRequests(102, 5, shuffle=True, drop_last=False, rank=r, world_size=3,
                                            generator=torch.Generator().manual_seed(1))] for r in range(3)]
    assert seeds[0] != seeds[1] != seeds[2]


def test_distributed_without_generator_is_seeded_by_the_epoch():
    def ranks(epoch):
        out = []
        for r in range(2):
            req = BatchRequests(50, 10, shuffle=True, drop_last=False, rank=r, world_size=2)
            req.set_epoch(epoch)
            out.append(_order(req))
        return out

    torch.manual_seed(0)
    a = ranks(1)
    torch.manual_seed(99)  # the global RNG does not matter: every rank must agree without it
    assert all(torch.equal(x, y) for x, y in zip(a, ranks(1)))
    assert not torch.equal(a[0], ranks(2)[0])
    assert torch.equal(torch.cat(a).sort().values, torch.arange(50))


def test_rank_and_world_size_are_checked_and_default_to_a_single_process(monkeypatch):
    assert distributed_place(None, None) == (0, 1)  # torch.distributed is not initialised here
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a, **k: 4)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a, **k: 3)
    assert distributed_place(None, None) == (0, 1)  # as PyG: no split unless asked
    assert distributed_place(2, 4) == (2, 4)
    with pytest.raises(ValueError, match="rank=4 is not accepted; use an int in \\[0, world_size=4\\)"):
        distributed_place(4, 4)
    with pytest.raises(ValueError, match="world_size=0 is not accepted"):
        distributed_place(0, 0)
    with pytest.raises(ValueError, match="give both or neither"):
        distributed_place(1, None)
    with pytest.raises(ValueError, match="batch_size=0 is not accepted"):
        BatchRequests(10, 0, shuffle=False, drop_last=False)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        BatchRequests(10, 2, shuffle=True, drop_last=False, generator=3)


def test_batch_seeds_are_distinct_and_deterministic():
    s = batch_seeds(123, 1000)
    assert len(set(s.tolist())) == 1000 and (s >= 0).all()
    assert (batch_seeds(123, 1000) == s).all() and not (batch_seeds(124, 1000) == s).any()
