"""matmul on each backend, D = alpha * op(A) @ op(B) + beta * C, against a float64 numpy oracle.

Inputs are rounded to their dtype first, so the oracle sees exactly what the kernel sees and
the comparison measures only fp32 accumulation and the final rounding (tolerances.py).
Both host engines run: "auto" (oneDNN when built in; fp16 still falls back) and "fallback"
(DATAFLOW_HOST_MATMUL, read when the handle registers its ops), then cuda (cuBLASLt) and vulkan
where such a device is. The fallback's AVX2 and scalar microkernels run in subprocesses, because
the vector path is chosen once per process.
"""
import os
import subprocess
import sys

import pytest

import dataflow as df
from conftest import open_handle
from matmul_oracle import check, run_case

PAIRS = [("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "bf16"), ("fp16", "fp32"), ("fp16", "fp16")]
TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]
# (M, N, K): odd sizes, degenerate vectors, and (33, 2100, 129) for several column chunks.
SHAPES = [(1, 1, 1), (7, 33, 129), (129, 7, 33), (33, 129, 7), (1, 1000, 33), (1000, 1, 129), (129, 1000, 1),
          (7, 129, 1000), (1000, 129, 1000), (33, 2100, 129)]


@pytest.fixture(scope="module", params=["auto", "fallback", "cuda", "vulkan"])
def mh(request):
    """A host handle whose matmul runs on the given engine, or a cuda (cuBLASLt) or vulkan handle
    (skipped with the reason where no such device is usable)."""
    if request.param in ("cuda", "vulkan"):
        with open_handle(request.param, streams=2, device_memory="1GiB") as handle:
            yield handle
        return
    old = os.environ.get("DATAFLOW_HOST_MATMUL")
    os.environ["DATAFLOW_HOST_MATMUL"] = request.param
    try:
        handle = df.Handle("host", streams=2, device_memory="1GiB")
    finally:
        if old is None:
            del os.environ["DATAFLOW_HOST_MATMUL"]
        else:
            os.environ["DATAFLOW_HOST_MATMUL"] = old
    yield handle
    handle.close()


@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES, ids=["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("in_dtype,out_dtype", PAIRS, ids=[f"{i}-{o}" for i, o in PAIRS])
def test_matmul_shapes(mh, in_dtype, out_dtype, trans_a, trans_b, m, n, k):
    out, want = run_case(mh, in_dtype, out_dtype, m, n, k, trans_a, trans_b)
    check(out, want, out_dtype, k)


ALPHA_BETA = [(0.5, 0.0, "none"), (1.5, 0.75, "separate"), (-1.0, -0.5, "inplace"), (2.0, 1.0, "inplace")]


@pytest.mark.parametrize("alpha,beta,c_mode", ALPHA_BETA, ids=[f"a{a}-b{b}-{c}" for a, b, c in ALPHA_BETA])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True)], ids=["nn", "tt"])
@pytest.mark.parametrize("m,n,k", [(33, 129, 7), (129, 33, 1000)], ids=lambda s: str(s))
@pytest.mark.parametrize("in_dtype,out_dtype", PAIRS, ids=[f"{i}-{o}" for i, o in PAIRS])
def test_matmul_alpha_beta(mh, in_dtype, out_dtype, m, n, k, trans_a, trans_b, alpha, beta, c_mode):
    out, want = run_case(mh, in_dtype, out_dtype, m, n, k, trans_a, trans_b, alpha, beta, c_mode)
    check(out, want, out_dtype, k)


@pytest.mark.parametrize("in_dtype,out_dtype", [("bf16", "fp32"), ("fp16", "fp16")], ids=["bf16-fp32", "fp16-fp16"])
def test_matmul_concurrent_streams(mh, in_dtype, out_dtype):
    """Both streams run the same shapes at once: they share the primitive cache (and race to
    fill it) but each has its own oneDNN stream and scratchpad."""
    cases = [run_case(mh, in_dtype, out_dtype, m, n, k, stream=i % 2)
             for i, (m, n, k) in enumerate([(129, 1000, 129)] * 4 + [(1000, 33, 129)] * 4)]
    for out, want in cases:
        check(out, want, out_dtype, 129)


def test_matmul_bad_engine_name(monkeypatch):
    monkeypatch.setenv("DATAFLOW_HOST_MATMUL", "gpu")
    with pytest.raises(df.DataflowError, match="DATAFLOW_HOST_MATMUL"):
        df.Handle("host", streams=1, device_memory="16MiB")


@pytest.mark.slow
@pytest.mark.parametrize("level", ["avx2", "scalar"])
def test_matmul_fallback_microkernel_paths(level):
    """Reruns this file's fallback tests with the vector path capped at `level`."""
    env = dict(os.environ, DATAFLOW_SIMD=level)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
                        "-k", "fallback and not microkernel_paths"], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
