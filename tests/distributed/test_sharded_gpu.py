"""Sharded tables served to a GPU (2 gloo ranks on one device): rows decoded by the GPU decoders, the
remote-row cache in device memory; batches bit-identical to the single-host loader's on the same GPU."""
import pytest

from .test_sharded import check_sharded_run, run_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]


@pytest.mark.parametrize("case", ["pyg_homo_cuda", "pyg_homo_ebp_cuda", "pyg_homo_identity_cuda",
                                  "pyg_hetero_cache_cuda"])
def test_sharded_batches_on_the_gpu_are_the_single_host_batches(case, tmp_path):
    check_sharded_run(run_ranks(case, tmp_path), identity="identity" in case,
                      cached="cache" in case or case == "pyg_homo_cuda")
