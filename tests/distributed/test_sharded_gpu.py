"""Sharded tables served to a GPU (2 gloo ranks on one device): rows decoded by the GPU decoders, the
remote-row cache in device memory; batches bit-identical to the single-host loader's on the same GPU."""
import pytest

from .test_sharded import check_sharded_run, run_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]


# three runs of two processes each (the GPU check's test step has ~200 s for every gpu test): IBP with the
# cache in device memory and 2 workers, EBP, a heterogeneous graph with a cache per type
@pytest.mark.parametrize("case", ["pyg_homo_cuda", "pyg_homo_ebp_cuda", "pyg_hetero_cache_cuda"])
def test_sharded_batches_on_the_gpu_are_the_single_host_batches(case, tmp_path):
    check_sharded_run(run_ranks(case, tmp_path), identity=False, cached=case != "pyg_homo_ebp_cuda")
