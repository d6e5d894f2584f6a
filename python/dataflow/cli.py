"""The `dataflow` command. `dataflow demo` runs a matmul and a custom native op on the host
backend and prints timings next to numpy's."""
import argparse
import json
import sys
import time

import numpy as np

from . import dtypes, ops
from .handle import Handle

SCALE_SOURCE = r"""
#include "dataflow/host_kernel.h"
/* y[i] = alpha * x[i] + 1 over this part's slice */
void scale_shift(void **args, int part, int num_parts) {
    int64_t n = DATAFLOW_ARG(args, 0, int64_t), begin, end;
    float alpha = DATAFLOW_ARG(args, 1, float);
    const float *x = DATAFLOW_ARG(args, 2, const float *);
    float *y = DATAFLOW_ARG(args, 3, float *);
    dataflow_part_range(n, part, num_parts, 1024, &begin, &end);
    for (int64_t i = begin; i < end; i++) y[i] = alpha * x[i] + 1.0f;
}
Dataflow_Status scale_shift_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c) {
    (void)h; (void)state;
    c->num_parts = dataflow_elementwise_parts(*(int64_t *)op->op_args[0], 1 << 16);
    return DATAFLOW_OK;
}
"""


def _best_time(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def demo(args):
    h = Handle("host", streams=2, threads=args.threads)
    n = args.size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    results = {"size": n}
    for dtype in ("fp32", "bf16"):
        a = h.from_numpy(x, dtype=dtype)
        out = h.empty((n, n), "fp32")

        def run():
            ops.matmul(h, a, a, out=out, transpose_b=True)
            h.sync()
        t = _best_time(run, args.repeats)
        results[f"matmul_{dtype}_gflops"] = round(2 * n**3 / t / 1e9, 1)
    t_np = _best_time(lambda: x @ x.T, args.repeats)
    results["numpy_fp32_gflops"] = round(2 * n**3 / t_np / 1e9, 1)
    xb = dtypes.decode(dtypes.encode(x, "bf16"), "bf16").astype(np.float64)  # the inputs the bf16 run saw
    ref = xb @ xb.T
    results["matmul_bf16_max_rel_err"] = float(np.max(np.abs(out.numpy() - ref)) / np.max(np.abs(ref)))

    op = h.register_native_op("scale_shift", ["int64_scalar", "fp32_scalar", "fp32", "fp32"],
                              source=SCALE_SOURCE, symbol="scale_shift", launch="scale_shift_launch")
    xs = h.from_numpy(x)
    ys = h.empty(x.shape, "fp32")
    op(x.size, 2.0, xs, ys)
    ok = bool(np.allclose(ys.numpy(), 2 * x + 1))
    results["custom_op_fingerprint"] = op.fingerprint
    results["custom_op_correct"] = ok
    print(json.dumps(results, indent=2))
    print(f"demo: matmul {n}^3 fp32 {results['matmul_fp32_gflops']} GFLOP/s, bf16 {results['matmul_bf16_gflops']} "
          f"GFLOP/s (numpy fp32 {results['numpy_fp32_gflops']}); custom C op {'ok' if ok else 'WRONG'}")
    h.close()
    return 0 if ok else 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dataflow")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="matmul + a custom native op on the host backend, with timings")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(run=demo)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
