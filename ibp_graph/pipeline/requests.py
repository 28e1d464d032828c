"""What to produce: the BatchRequests of an epoch (input positions and a sampling seed per batch)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch


@dataclass(frozen=True)
class BatchRequest:
    """One batch to produce: positions into the loader's input nodes and the sampling seed."""

    index: torch.Tensor
    seed: int


def batch_seeds(base_seed: int, n_batches: int) -> np.ndarray:
    """Independent 63-bit sampling seeds for the batches of one epoch (splitmix64 of base+k)."""
    z = (np.uint64(base_seed) + np.arange(1, n_batches + 1, dtype=np.uint64)
         * np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(1)).astype(np.int64)


def distributed_place(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
    """(rank, world size): the ones given, else (0, 1), whatever torch.distributed says: as PyG's
    NeighborLoader, nothing is split unless asked (DDP scripts giving each rank its own seeds would
    otherwise have them split again)."""
    if rank is None and world_size is None:
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError(f"rank={rank!r}, world_size={world_size!r}: give both or neither "
                         "(neither: this process takes every seed; pass torch.distributed.get_rank() and "
                         "get_world_size() to split the seeds over ranks)")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} is not accepted; use an int >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank!r} is not accepted; use an int in [0, world_size={world_size})")
    return rank, world_size


def check_batch_size(batch_size) -> int:
    """A loader's `batch_size`: an int >= 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not accepted; use an int >= 1")
    return batch_size


def _requests(batches: list, base: int):
    """BatchRequests of the index tensors `batches`, their seeds from `base`."""
    for index, seed in zip(batches, batch_seeds(base, len(batches))):
        yield BatchRequest(index=index, seed=int(seed))


class BatchRequests(torch.utils.data.Sampler):
    """Yields the BatchRequests of an epoch: shuffled (or not) input positions cut into batches.

    The order and the epoch's base sampling seed come from `generator` (else torch's global RNG),
    drawn in the main process when iteration starts: `torch.manual_seed` makes a run reproducible.
    With ``world_size > 1`` each rank takes every world_size-th position of the epoch's order (an
    equal share; the remainder is dropped) and samples with its own seeds; every rank draws the same
    order: from `generator` (seeded alike on every rank), else from the epoch (`set_epoch`), like
    torch's DistributedSampler. `rank` and `world_size`: see distributed_place.
    """

    def __init__(self, num_inputs: int, batch_size: int, *, shuffle: bool, drop_last: bool,
                 generator: Optional[torch.Generator] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None):
        check_batch_size(batch_size)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.rank, self.world_size = distributed_place(rank, world_size)
        self.num_inputs, self.batch_size, self.shuffle, self.drop_last = num_inputs, batch_size, shuffle, drop_last
        self.generator, self.epoch = generator, 0

    def set_epoch(self, epoch: int) -> None:
        """Distributed runs without a generator: reshuffle identically on every rank for this epoch."""
        self.epoch = epoch

    def _per_rank(self) -> int:
        return self.num_inputs // self.world_size if self.world_size > 1 else self.num_inputs

    def __len__(self) -> int:
        n = self._per_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        g = self.generator
        if self.world_size > 1 and g is None:
            g = torch.Generator().manual_seed(1_000_003 * self.epoch + 17)
        order = torch.randperm(self.num_inputs, generator=g) if self.shuffle else torch.arange(self.num_inputs)
        base = int(torch.randint(0, 2**62, (1,), generator=g))
        if self.world_size > 1:
            order = order[self.rank:self._per_rank() * self.world_size:self.world_size]
            base += self.rank
        yield from _requests([order[k * self.batch_size:(k + 1) * self.batch_size] for k in range(len(self))], base)


class DrawnRequests(torch.utils.data.Sampler):
    """BatchRequests whose input positions come from a user's torch Sampler (cut by torch's BatchSampler)
    or batch sampler, as PyG's NodeLoader uses `sampler=` / `batch_sampler=`; one sampling seed per
    batch, from `generator` or torch's global RNG, drawn when iteration starts."""

    def __init__(self, num_inputs: int, *, sampler=None, batch_sampler=None, batch_size: int = 1,
                 drop_last: bool = False, generator: Optional[torch.Generator] = None):
        if (sampler is None) == (batch_sampler is None):
            raise ValueError("give exactly one of sampler= and batch_sampler=")
        check_batch_size(batch_size)
        for name, s in (("sampler", sampler), ("batch_sampler", batch_sampler)):
            if s is not None and not hasattr(s, "__iter__"):
                raise TypeError(f"{name} must be an iterable torch Sampler, got {type(s).__name__}")
        self.num_inputs, self.sampler, self.generator = num_inputs, sampler, generator
        self.batch_sampler = batch_sampler if batch_sampler is not None else \
            torch.utils.data.BatchSampler(sampler, batch_size, bool(drop_last))

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        base = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        batches = [torch.as_tensor(b, dtype=torch.int64).reshape(-1) for b in self.batch_sampler]
        for index in batches:
            bad = index[(index < 0) | (index >= self.num_inputs)]
            if bad.numel():
                raise IndexError(f"the sampler drew input position {int(bad[0])}; accepted: positions in "
                                 f"[0, {self.num_inputs}) of the loader's input nodes")
        yield from _requests(batches, base)
