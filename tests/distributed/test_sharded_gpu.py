"""Sharded tables served to a GPU (2 gloo ranks on one device): rows decoded by the GPU decoders, the
remote-row cache in device memory; batches bit-identical to the single-host loader's on the same GPU."""
import pytest

from .test_sharded import run_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]


@pytest.mark.parametrize("case", ["pyg_homo_cuda", "pyg_homo_ebp_cuda", "pyg_homo_identity_cuda",
                                  "pyg_hetero_cache_cuda"])
def test_sharded_batches_on_the_gpu_are_the_single_host_batches(case, tmp_path):
    ranks = run_ranks(case, tmp_path)
    for r, res in enumerate(ranks):
        assert "error" not in res and "log" not in res, res
        assert len(res["ours"]) == len(res["ref"]) > 0
        for i, (ours, ref) in enumerate(zip(res["ours"], res["ref"])):
            assert ours == ref, (r, i, sorted(k for k in ours if ours[k] != ref.get(k)))
        sh = res["stats"]["shard"]
        assert sh["remote_rows"] > 0 and sh["local_rows"] + sh["remote_rows"] + sh["remote_hits"] == res["x_rows"]
        assert (sh["remote_hits"] > 0) == ("cache" in case or case == "pyg_homo_cuda")
