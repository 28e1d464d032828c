"""Structure checks of index arrays: the first bad position is found across blocks, for int32 and int64."""
import numpy as np
import pytest
import torch

from ibp_graph import index_checks as checks


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_first_bad_step_finds_the_first_decrease_or_overlong_step(dtype):
    a = np.arange(0, 3 * 40_000, 3, dtype=dtype)  # several blocks of the scan
    assert checks.first_bad_step(a) == -1 and checks.first_bad_step(a, 3) == -1
    assert checks.first_bad_step(a, 2) == 0
    b = a.copy()
    b[31_000] = b[30_999] - 1
    assert checks.first_bad_step(b) == 30_999
    b = a.copy()
    b[25_000] += 1  # a step of 4, then one of 2
    assert checks.first_bad_step(b, 3) == 24_999 and checks.first_bad_step(b) == -1
    b.setflags(write=False)  # memory maps arrive read-only
    assert checks.first_bad_step(b, 3) == 24_999
    assert checks.first_bad_step(a[:1]) == -1 and checks.first_bad_step(a[:0]) == -1


def test_first_outside_names_the_first_entry_out_of_range():
    a = np.zeros(10_000_000, dtype=np.int32)
    assert checks.first_outside(a, 0, 1) == -1
    a[9_500_000] = 7
    a[9_600_000] = -1
    assert checks.first_outside(a, 0, 7) == 9_500_000 and checks.first_outside(a, 0, 8) == 9_600_000


def test_check_node_table_wants_one_row_per_node():
    checks.check_node_table("x", torch.zeros(5, 3), 5)
    with pytest.raises(ValueError, match=r"node attribute 'x' has 4 rows; the graph has 5 nodes"):
        checks.check_node_table("x", torch.zeros(4, 3), 5)
    with pytest.raises(ValueError, match=r"node attribute 'y' has shape \(\)"):
        checks.check_node_table("y", torch.tensor(1.0), 5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_first_repeat_names_the_first_id_seen_before(dtype):
    a = np.random.default_rng(0).permutation(100_000).astype(dtype)
    assert checks.first_repeat(a, 100_000) == -1 and checks.first_repeat(a[:1], 1) == -1
    b = a.copy()
    b[70_000] = b[123]
    b[90_000] = b[5]
    b.setflags(write=False)
    assert checks.first_repeat(b, 100_000) == 70_000
    assert checks.first_repeat(np.array([63, 64, 0, 64], dtype=dtype), 65) == 3  # ids on both sides of a word
