"""Every host kernel gives the same bits with 1 and 2 compute threads and at every SIMD level
(DATAFLOW_SIMD=avx512 / avx2 / scalar). Each op test module's _run_all(handle, **shape) runs its
ops; thread counts are compared in this process, SIMD levels in one child process per level."""

import pytest

from determinism import assert_simd_levels_agree, assert_thread_counts_agree, load_test_module

pytestmark = pytest.mark.slow  # runs in subprocesses per SIMD level and thread count

# module -> the shape of its SIMD comparison (odd sizes, so vector tails run)
SIMD_SHAPES = {
    "test_cross_entropy": {"tokens": 9, "vocab": 32003},
    "test_elementwise_ops": {"n": 100_003},
    "test_optimizer": {"n": 20_011},
    "test_optimizer_state": {"n": 20_011},
    "test_qmatmul": {"m": 67, "n": 37, "k": 201},
    "test_rms_norm": {"rows": 130, "hidden": 257},
    "test_rope_embedding": {},
    "test_swiglu": {"rows": 13, "ffn": 1001},
}


@pytest.mark.parametrize("module", sorted(SIMD_SHAPES))
def test_threads_bitwise_identical(module):
    assert_thread_counts_agree(load_test_module(module)._run_all)


@pytest.mark.parametrize("module", sorted(SIMD_SHAPES))
def test_simd_levels_agree(module):
    assert_simd_levels_agree(module, **SIMD_SHAPES[module])
