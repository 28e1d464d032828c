"""Sharded tables served to a GPU (2 gloo ranks on one device): rows decoded by the GPU decoders, the
remote-row cache in device memory (and in host memory); batches bit-identical to the single-host loader's on
the same GPU."""
import pytest

from .test_sharded import check_sharded_run, run_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]


# three runs of two processes each (the GPU check's test step has ~200 s for every gpu test): IBP with both
# cache tiers and 2 workers, EBP, a heterogeneous graph with a device-memory cache per type
@pytest.mark.parametrize("case", ["pyg_homo_cuda", "pyg_homo_ebp_cuda", "pyg_hetero_cache_cuda"])
def test_sharded_batches_on_the_gpu_are_the_single_host_batches(case, tmp_path):
    ranks = run_ranks(case, tmp_path)
    check_sharded_run(ranks, identity=False, cached=case != "pyg_homo_ebp_cuda")
    for res in ranks:  # the device tier served hits; with a host tier too (pyg_homo_cuda), not all of them
        sh = res["stats"]["shard"]
        assert (sh["device_hits"] > 0) == (case != "pyg_homo_ebp_cuda")
        assert (0 < sh["device_hits"] < sh["remote_hits"]) == (case == "pyg_homo_cuda")
