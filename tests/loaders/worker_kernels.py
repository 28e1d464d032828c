"""What a worker compiles: imported by the scripts tests/loaders/test_worker_kernels.py and
test_dgl_options.py run in fresh interpreters."""
from typing import Callable


def compiled_as_a_worker(run: Callable[[], None]) -> list[str]:
    """The numba kernels compiled, or loaded from numba's cache, while `run()` runs with a worker's (serial)
    kernels, by name (sorted, once each)."""
    from numba.core import dispatcher

    from ibp_graph import threads

    calls = []
    compile_for_args = dispatcher.Dispatcher._compile_for_args

    def spy(self, *args, **kwargs):
        calls.append(self.py_func.__qualname__)
        return compile_for_args(self, *args, **kwargs)

    dispatcher.Dispatcher._compile_for_args = spy
    threads.in_worker = lambda: True
    try:
        run()
    finally:
        dispatcher.Dispatcher._compile_for_args = compile_for_args
    return sorted(set(calls))
