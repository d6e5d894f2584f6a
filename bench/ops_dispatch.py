"""Dispatch overhead: what submitting a tiny op costs, from Python and from C, vs torch eager.

The op is add on one fp32 element, so the time is all dispatch: argument checks, the op-table
lookup, queueing on the stream and the worker picking the task up. Two shapes of use:
- "x1000": 1000 submits, then one sync (a training step's many small launches);
- "x1": one submit and its sync (a round trip: queue, worker wake-up, completion).
Python calls df.ops.add; C runs the same loop over dataflow_submit_add in a small C function
compiled at run time against the installed headers (no Python between submits). The peer is
torch.add(a, b, out=c) on one-element CPU tensors, called from Python (torch's eager dispatch
includes its Python binding, as ours does in the Python rows).

    python bench/ops_dispatch.py [--quick]
"""
import harness
from harness import Case

df = harness.import_dataflow()

C_SOURCE = r"""
#include "dataflow/ops.h"
int bench_dispatch_add(Dataflow_Handle *h, void *a, void *b, void *c, int iters)
{
	for (int i = 0; i < iters; i++) {
		Dataflow_Status st = dataflow_submit_add(h, 0, DATAFLOW_FP32, 1, 1.0f, a, 1.0f, b, c);
		if (st != DATAFLOW_OK)
			return st;
	}
	return dataflow_sync_handle(h);
}
"""


def _c_loop():
    """bench_dispatch_add from C_SOURCE, compiled (and cached) like a user's native op."""
    from dataflow._ffi import ffi
    from dataflow.custom_ops import compile_c
    ffi.cdef("int bench_dispatch_add(Dataflow_Handle *h, void *a, void *b, void *c, int iters);", override=True)
    return ffi.dlopen(compile_c(C_SOURCE, ("-Wl,--no-as-needed", "-ldataflowops"))).bench_dispatch_add


def _case(h, language, iters):
    import numpy as np
    import torch
    from dataflow.errors import check
    a, b, c = (h.from_numpy(np.ones(1, np.float32)) for _ in range(3))
    ta, tb, tc = torch.ones(1), torch.ones(1), torch.empty(1)
    if language == "python":
        def run():
            for _ in range(iters):
                df.ops.add(h, a, b, out=c)
            h.sync()
    else:
        loop = _c_loop()

        def run():
            check(loop(h._ptr(), a.cdata, b.cdata, c.cdata, iters))

    def peer():
        for _ in range(iters):
            torch.add(ta, tb, out=tc)
    return Case(f"dispatch ({language})", "fwd", "fp32", f"1 elem x{iters}", run, peer,
                f"torch.add(a, b, out=c) x{iters}, Python")


def cases(h, args):
    for language in ("python", "c"):
        for iters in (1000, 1):
            yield _case(h, language, iters)


if __name__ == "__main__":
    harness.main({"dispatch": cases})
