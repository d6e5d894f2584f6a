"""The host matmul's decode path (backends/host/kernels/matmul_matvec.c): at most 4 rows of A
against B stored [N, K] (transpose_b), fp32 or bf16. Against test_matmul's float64 oracle, and
its two promises: a row's result does not depend on the other rows of A (a batch of sequences
decodes as each would alone), and every SIMD path gives the same bits (DATAFLOW_SIMD, chosen once
per process, so the lower paths run in subprocesses)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import dataflow as df

from matmul_oracle import check, rows_alone_and_together, run_case
from paths import HELPERS

PAIRS = [("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "bf16")]
# K: below one 16-lane step, exactly one, a tail after several; N: odd counts around the 4-row steps
SHAPES = [(m, n, k) for m in (1, 2, 3, 4, 5) for n, k in ((1, 1), (7, 15), (9, 16), (1001, 129), (33, 1000))]


@pytest.fixture(scope="module")
def h():
    with df.Handle("host", streams=1, threads=2) as handle:
        yield handle


@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("in_dtype,out_dtype", PAIRS, ids=[f"{i}-{o}" for i, o in PAIRS])
def test_matvec_matches_the_oracle(h, in_dtype, out_dtype, m, n, k):
    out, want = run_case(h, in_dtype, out_dtype, m, n, k, trans_b=True)
    check(out, want, out_dtype, k)


@pytest.mark.parametrize("alpha,beta,c_mode", [(0.5, 0.0, "none"), (1.5, 0.75, "separate"), (1.0, 1.0, "inplace")])
@pytest.mark.parametrize("in_dtype,out_dtype", PAIRS, ids=[f"{i}-{o}" for i, o in PAIRS])
def test_matvec_alpha_beta(h, in_dtype, out_dtype, alpha, beta, c_mode):
    out, want = run_case(h, in_dtype, out_dtype, 3, 129, 1000, trans_b=True, alpha=alpha, beta=beta, c_mode=c_mode)
    check(out, want, out_dtype, 1000)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_matvec_row_does_not_depend_on_the_other_rows(h, dtype):
    results = rows_alone_and_together(h, dtype, 517, 300)
    for m, together in enumerate(results, 1):
        np.testing.assert_array_equal(together, results[-1][:m])  # bit for bit


SAME_BITS = """
import sys, numpy as np, dataflow as df
sys.path.insert(0, sys.argv[1])
from matmul_oracle import rows_alone_and_together
with df.Handle("host", streams=1, threads=2) as h:
    sys.stdout.write(rows_alone_and_together(h, sys.argv[2], 517, 300)[-1].tobytes().hex())
"""


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_matvec_same_bits_on_every_simd_path(h, dtype):
    here = HELPERS
    want = rows_alone_and_together(h, dtype, 517, 300)[-1].tobytes().hex()
    for level in ("avx2", "scalar"):
        r = subprocess.run([sys.executable, "-c", SAME_BITS, here, dtype], capture_output=True, text=True,
                           env=dict(os.environ, DATAFLOW_SIMD=level), timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want, level
