"""What the PyG and DGL front-ends share: start-up, codec set-up and warm-up, the decode stage,
worker-death naming and the host-memory checks of their inputs."""
from __future__ import annotations

import functools
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch

from ibp_graph.codec.base import Codec
from ibp_graph.data.store import EncodedTable
from ibp_graph.jit_cache import refresh as refresh_kernel_cache
from ibp_graph.pipeline.codec_setup import CodecSpec, build_codecs, describe
from ibp_graph.pipeline.decode import DecodeStage
from ibp_graph.pipeline.features import FeaturePlan
from ibp_graph.pipeline.grouping import GroupKey
from ibp_graph.pipeline.stats import LoaderStats
from ibp_graph.threads import use_forksafe_layer

#: seconds to wait for a worker's death to become visible after a broken connection to it.
DEATH_WAIT_S = 5.0


def start() -> None:
    """What every loader does first, each at most once per process: numba's fork-safe threading layer
    unless the user chose one (ibp_graph.threads: only before numba's first parallel kernel), and
    numba's kernel cache cleared of the package's kernels compiled from older sources
    (ibp_graph.jit_cache). The README lists these ("What a loader changes in the process")."""
    use_forksafe_layer()
    _refresh_kernel_cache_once()


@functools.cache
def _refresh_kernel_cache_once() -> None:
    refresh_kernel_cache()


class WeakLoaderMethod:
    """A loader's bound method held without a strong reference to the loader, for the DataLoader it
    builds on itself (``collate_fn=self.collate_fn`` would make the loader reference itself). A loader
    in a reference cycle is freed by the cyclic collector, which may close the multiprocessing queues
    of its persistent workers before the iterator's shutdown asks the workers to stop: each worker then
    waits out torch's join timeout (5 s each). Held weakly, the loader goes when its last user reference
    does, and its iterator shuts the workers down at once. Pickled (spawned workers) as the bound method."""

    def __init__(self, method: Callable):
        self._method = weakref.WeakMethod(method)
        self.__name__ = method.__name__

    def __call__(self, *args, **kwargs):
        method = self._method()
        if method is None:
            raise RuntimeError(f"{self.__name__} called after its loader was freed")
        return method(*args, **kwargs)

    def __reduce__(self):
        method = self._method()
        if method is None:
            raise RuntimeError(f"{self.__name__} cannot be pickled: its loader was freed")
        return getattr, (method.__self__, method.__name__)


def shut_down_with(loader: Any, iterator: Any) -> None:
    """Shut the persistent workers of torch's `iterator` down when `loader` is freed, however it is freed.
    Freed by the cyclic collector (a user's object and the loader in a cycle, or the first loader built
    while numba compiles: its typing exceptions' tracebacks hold the constructor's frame), the loader and
    the iterator would be collected together, and the workers' queues finalised before the iterator's
    shutdown asks the workers to stop: each would wait out torch's 5 s join. The finalizer holds the
    iterator, so it stays whole until the loader is gone and then shuts its workers down at once. Not run
    at interpreter exit (torch's own exit handling applies). Only for persistent workers: that iterator is
    made once (kept in `loader._iterator`); an epoch's own iterator is freed with its epoch."""
    if not (loader.persistent_workers and loader.num_workers > 0):
        return
    shutdown = getattr(iterator, "_shutdown_workers", None)  # torch's _MultiProcessingDataLoaderIter
    if shutdown is not None:
        weakref.finalize(loader, shutdown).atexit = False


#: a graph's (or edge type's) transposed sparse adjacency (``T.ToSparseTensor``), sampled as PyG samples
#: it; its values travel as an edge attribute of that name and each batch's adj_t is rebuilt from them.
ADJ_T = "adj_t"


def read_adj_t(value: Any, num_src: int, num_dst: int, name: str) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """(indptr, indices, values) of the graph that a transposed adjacency `value` holds, as PyG's
    ``to_csc`` reads ``adj_t``: row ``v`` of `value` lists the sources of ``v``'s in-edges, so
    its CSR is the graph's CSC; edge ids are positions in that order (``perm`` is None in PyG).

    `value` is a torch sparse tensor (CSR, CSC or COO layout; ``T.ToSparseTensor`` gives CSR when
    torch_sparse is absent) or a torch_sparse ``SparseTensor`` (its ``csr()``). Values are
    ones where the tensor has none."""
    shape = tuple(getattr(value, "sizes", lambda: None)() or getattr(value, "shape", ()))
    if shape[:2] != (num_dst, num_src):
        raise ValueError(f"{name} has shape {shape}; accepted: a transposed adjacency of shape "
                         f"({num_dst}, {num_src}) (destinations x sources)")
    if hasattr(value, "csr") and not isinstance(value, torch.Tensor):  # torch_sparse.SparseTensor
        indptr, indices, values = value.csr()
    elif isinstance(value, torch.Tensor) and value.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_coo):
        if value.dim() != 2:
            raise ValueError(f"{name} is a {value.dim()}-d sparse tensor; accepted: 2-d (no hybrid or batched "
                             "dimensions)")
        csr = value if value.layout == torch.sparse_csr else value.to_sparse_csr()
        indptr, indices, values = csr.crow_indices(), csr.col_indices(), csr.values()
    else:
        raise TypeError(f"{name} is a {type(value).__name__}"
                        f"{'' if not isinstance(value, torch.Tensor) else f' of layout {value.layout}'}; "
                        "accepted: a torch sparse tensor (CSR, CSC or COO) or a torch_sparse SparseTensor")
    indices = indices.detach().cpu()
    values = torch.ones(indices.numel()) if values is None else values.detach().cpu()
    return (indptr.detach().cpu().numpy().astype(np.int64, copy=False),
            indices.numpy().astype(np.int64, copy=False), values)


def to_adj_t(edge_index: torch.Tensor, values: torch.Tensor, num_src: int, num_dst: int) -> torch.Tensor:
    """A batch's ``adj_t`` (torch sparse CSR, destinations x sources) of its sampled edges
    ``edge_index`` (local ids, source row first) with their `values`; repeated edges are kept."""
    src, dst = edge_index[0], edge_index[1]
    order = torch.argsort(dst * max(num_src, 1) + src, stable=True)
    crow = torch.zeros(num_dst + 1, dtype=torch.int64, device=dst.device)
    crow[1:] = torch.cumsum(torch.bincount(dst, minlength=num_dst), 0)
    return torch.sparse_csr_tensor(crow, src[order], values[order], size=(num_dst, num_src))


def setup_codecs(node_attrs: Mapping[str, Any], edge_attrs: Mapping[str, Any], *, num_nodes: int,
                 num_edges: int, codec: CodecSpec, device: torch.device,
                 refine: Optional[Callable[[dict], tuple]] = None) -> Any:
    """One codec per group (pipeline.codec_setup.build_codecs), warmed up for `device`. `refine`, when
    given, maps the codecs to (codecs, ...) (e.g. per-type codecs: codec_setup.split_row_groups); its whole
    answer is returned, with the codecs it gives warmed up."""
    codecs = build_codecs(node_attrs, edge_attrs, num_nodes=num_nodes, num_edges=num_edges, codec=codec)
    out = (codecs,) if refine is None else refine(codecs)
    warm_up(out[0], device)
    for table in node_attrs.values():  # the compressed-row gather the workers run on stores
        if isinstance(table, EncodedTable) and table.compressed.n_rows:
            table.index_select(torch.zeros(1, dtype=torch.int64))
    return out[0] if refine is None else out


class Codecs:
    """A loader's `codecs` property, read from its `_codecs` (by group)."""

    _codecs: Mapping[GroupKey, Codec]

    @property
    def codecs(self) -> dict[str, Codec]:
        """The codec of each group of a batch, by the group's printed name (as in `stats`: "float32[128]",
        "int64[*]", "x@store")."""
        return {str(k): c for k, c in self._codecs.items()}


def warm_up(codecs: Mapping[GroupKey, Codec], device: torch.device) -> None:
    """Compile each codec's encoder here, and its CPU decoder when `device` is the CPU, so forked
    workers inherit the kernels instead of each compiling them; touches no random generator."""
    for c in codecs.values():
        ct = c.encode(torch.zeros((2,) + tuple(c.row_shape), dtype=c.dtype))
        if torch.device(device).type == "cpu":
            c.decode(ct)


def decode_stage(codecs: Mapping[GroupKey, Codec], device: torch.device, prefetch: int,
                 features: Optional[FeaturePlan] = None,
                 stats: Optional[LoaderStats] = None) -> tuple[DecodeStage, LoaderStats]:
    """The loader's decode stage and the stats it counts into (the loader's `.stats`: new, or `stats`
    going on with these codecs); with a feature plan (pipeline.features), the stage also reads the rows
    of its served sources."""
    stats = LoaderStats() if stats is None else stats
    stats.codecs = {str(k): describe(c) for k, c in codecs.items()}
    serving = None if features is None else features.serving
    if features is not None:
        stats.cache = {n: c.capacity.as_dict() for n, c in features.caches.items()}
    return DecodeStage(codecs, device, prefetch=prefetch, stats=stats, features=serving), stats


def worker_processes(iterator: Any) -> list:
    """The worker processes behind a DataLoader iterator (torch's, or DGL's wrapper of it)."""
    inner = getattr(iterator, "dataloader_it", iterator)
    return list(getattr(inner, "_workers", ()))


def _how(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def _dead(workers: Sequence, wait: float) -> list:
    """Workers that have exited, waiting up to `wait` seconds for one to."""
    deadline = time.monotonic() + wait
    while True:
        dead = [w for w in workers if w.exitcode is not None]
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.02)


def _may_be_a_death(e: BaseException) -> bool:
    """A DataLoader's report of a dead worker, or a broken connection to one (shared-memory fds)."""
    text = str(e)
    if isinstance(e, RuntimeError) and "DataLoader worker" in text and (
            "exited unexpectedly" in text or "killed by signal" in text):
        return True
    return isinstance(e, (ConnectionError, EOFError))


def _message(loader: str, stages: str, dead: Sequence, e: BaseException) -> str:
    how = "; ".join(f"pid {w.pid} {_how(w.exitcode)}" for w in dead) or "see below"
    return f"{loader}: a worker process died while {stages} a batch ({how}; {type(e).__name__}: {e})"


class _DeathWatch:
    """The workers of the loaders iterating now, and the SIGCHLD handler that names their deaths.

    The handler wraps the one in place when the first of these loaders starts iterating (torch's,
    which raises a RuntimeError for a dead worker and calls the handler installed before it, or the
    user's): it calls that one, and turns torch's RuntimeError into the message of the loader the
    dead worker served. When the last of them stops, the wrapped handler is put back, unless
    something replaced ours meanwhile (that one is kept). Signal handlers can only be set from the
    main thread; elsewhere nothing is installed (deaths are still named from the iterator).
    """

    def __init__(self):
        self.watched: dict[int, tuple[str, str, Any]] = {}  # worker pid -> (loader, stages, process)
        self.iterating = 0
        self.installed: Any = None  # our handler while it is set
        self.wrapped: Any = None    # the handler it wraps (put back at the end)

    def handler(self, previous):
        """A SIGCHLD handler that calls `previous` and names a watched worker's death."""
        def handler(signum, frame):
            try:
                if callable(previous):
                    previous(signum, frame)
            except RuntimeError as e:
                dead = [(loader, stages, w) for loader, stages, w in list(self.watched.values())
                        if w.exitcode is not None]
                if not dead:
                    raise
                loader, stages = dead[0][:2]
                raise RuntimeError(_message(loader, stages, [w for _, _, w in dead], e)) from e

        handler.wraps_torch = True
        return handler

    @staticmethod
    def _can_set() -> bool:
        return threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGCHLD")

    def start(self, procs: Sequence, loader: str, stages: str) -> None:
        """Watch these workers (a loader's iteration starts); the handler is set by the first one."""
        for w in procs:
            self.watched[w.pid] = (loader, stages, w)
        self.iterating += 1
        if self.installed is None and self._can_set():
            self.wrapped = signal.getsignal(signal.SIGCHLD)
            self.installed = self.handler(self.wrapped)
            signal.signal(signal.SIGCHLD, self.installed)

    def stop(self, procs: Sequence) -> None:
        """Stop watching these workers (a loader's iteration ended); the last one puts the handler back."""
        for w in procs:
            self.watched.pop(w.pid, None)
        self.iterating = max(0, self.iterating - 1)
        if self.iterating or self.installed is None or not self._can_set():
            return
        if signal.getsignal(signal.SIGCHLD) is self.installed:
            signal.signal(signal.SIGCHLD, self.wrapped if self.wrapped is not None else signal.SIG_DFL)
        self.installed = self.wrapped = None


#: the one watch of this process (SIGCHLD is per process).
_DEATHS = _DeathWatch()


def name_worker_deaths(batches: Iterator, loader: str, stages: str,
                       workers: Callable[[], Sequence] = lambda: ()) -> Iterator:
    """Re-raise a DataLoader worker's death as the loader's RuntimeError: which worker, which signal.

    A dead worker surfaces in torch as a RuntimeError (from the iterator, or from torch's
    SIGCHLD handler wherever the main thread happens to be) or, when it dies while the main
    process fetches a batch's shared memory from it, as a bare ConnectionResetError or
    EOFError. `workers` returns the processes to look at for the one that died. While the
    loader iterates, its workers are watched by a SIGCHLD handler wrapped around the one in place
    (torch's, or the user's), removed when the iteration ends (_DeathWatch).
    """
    # held here: a generator left open at interpreter exit is closed after this module's globals are None
    deaths, finalizing = _DEATHS, sys.is_finalizing
    watched: Optional[list] = None
    try:
        for batch in batches:
            if watched is None:  # the workers exist once the DataLoader iterator has started
                watched = list(workers())
                deaths.start(watched, loader, stages)
            yield batch
    except Exception as e:
        if not _may_be_a_death(e) or str(e).startswith(f"{loader}: a worker process died"):
            raise  # not a death, or already named (by the SIGCHLD handler)
        dead = _dead(list(workers()), DEATH_WAIT_S)
        if not dead and not isinstance(e, RuntimeError):
            raise  # a broken connection with every worker alive: not a death
        raise RuntimeError(_message(loader, stages, dead, e)) from e
    finally:
        if watched is not None and not finalizing():  # at exit the process's handlers go with it
            deaths.stop(watched)


def host_table(value: Any, argname: str, num_rows: Optional[int] = None, *,
               accepted: tuple = (torch.Tensor,), what: str = "a tensor") -> Any:
    """`value` checked as a table the loader reads rows from: a CPU tensor (or one of `accepted`)
    with `num_rows` rows when given."""
    if not isinstance(value, accepted):
        raise TypeError(f"{argname} must be {what}, got {type(value).__name__}")
    if isinstance(value, torch.Tensor) and value.device.type != "cpu":
        raise ValueError(f"{argname} is on {value.device}; the loader reads features from host memory")
    if isinstance(value, torch.Tensor) and value.layout != torch.strided:
        raise TypeError(f"{argname} is a {value.layout} tensor; the loader gathers and compresses dense rows "
                        f"(sparse rows such as bag-of-words compress well dense); accepted: a dense (strided) "
                        f"tensor, e.g. {argname}.to_dense(), a numpy array or np.memmap, or an EncodedTable")
    if num_rows is not None and value.shape[0] != num_rows:
        raise ValueError(f"{argname} has {value.shape[0]} rows; the graph has {num_rows} nodes")
    return value


def numpy_view(value: np.ndarray, argname: str) -> torch.Tensor:
    """A CPU tensor sharing `value`'s memory (an ndarray or np.memmap: rows are read per batch,
    never copied whole); TypeError naming `argname` for a dtype or layout torch cannot view."""
    try:
        with warnings.catch_warnings():  # read-only arrays (memmap mode="r"): the loader only reads rows
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{argname} is a numpy array of dtype {value.dtype} and strides {value.strides}, "
                        f"which torch cannot view without a copy ({e}); accepted: a numeric dtype "
                        "torch has, native byte order, non-negative strides") from e


#: attributes that are node-level by their name in PyG, whatever their row count
NODE_KEYS = ("x", "pos")


def loader_device(device) -> torch.device:
    """The device a loader's batches go to: `device` checked, or CUDA when available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not accepted; use 'cpu', 'cuda' or 'cuda:N'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch sees no CUDA device; use device='cpu'")
    return dev


def host_rows(value: Any, argname: str) -> torch.Tensor:
    """A node or edge table the workers gather rows from: a CPU tensor (contiguous), or a view of a
    numpy array or np.memmap (never copied whole: contiguous() of a strided view would)."""
    if isinstance(value, np.ndarray):
        return numpy_view(value, argname)
    return host_table(value, argname).contiguous()
