"""Fixtures shared by test modules."""
import pytest
import torch


@pytest.fixture
def need_gpu():
    """For modules of `gpu`-marked tests (`pytest.mark.usefixtures("need_gpu")`): selecting them
    without a CUDA device fails instead of skipping."""
    if not torch.cuda.is_available():
        pytest.fail("these tests were selected (-m gpu) but torch sees no CUDA device")
