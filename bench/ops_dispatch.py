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

--wrappers [--against REV,...] measures instead the Python wrappers alone: the per-call time of
df.ops.add, scale, rms_norm, adamw_step and matmul on tiny arrays (1000 calls, then one sync;
most of it is the wrapper's checks and the submit's queueing), for this tree's dataflow.ops and
for python/dataflow/ops.py (with its op_wrapper.py, where it has one) at each git revision REV,
in the same process and taking turns, with torch.add(out=) as the peer of add: the calling
thread's CPU time per call (the wrapper and the submit) and the wall time (with the worker's). The revisions' modules run on this tree's libraries and other modules, so REV must share
their catalogue and Array:

    DATAFLOW_LIB_DIR=$PWD/build-dev python bench/ops_dispatch.py --wrappers --against 05f9d75,pyops22
"""
import json
import os
import statistics
import subprocess
import sys
import time
import types

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


def _ops_at(rev):
    """python/dataflow/ops.py at git revision rev as a module of the dataflow package, importing
    that revision's op_wrapper.py where it has one (in place of this tree's, while it loads)."""
    def source(path):
        shown = subprocess.run(["git", "show", f"{rev}:python/dataflow/{path}"], capture_output=True, text=True,
                               cwd=os.path.dirname(os.path.abspath(__file__)))
        return shown.stdout if shown.returncode == 0 else None

    def load(name, text):
        module = types.ModuleType(f"dataflow.{name}")
        module.__package__ = "dataflow"
        exec(compile(text, f"{rev}:python/dataflow/{name}.py", "exec"), module.__dict__)  # noqa: S102
        return module
    ops_text = source("ops.py")
    if ops_text is None:
        sys.exit(f"ops_dispatch: no python/dataflow/ops.py at {rev!r}")
    wrapper_text, current = source("op_wrapper.py"), sys.modules.get("dataflow.op_wrapper")
    try:
        if wrapper_text is not None:
            sys.modules["dataflow.op_wrapper"] = load("op_wrapper", wrapper_text)
        return load("ops", ops_text)
    finally:
        sys.modules["dataflow.op_wrapper"] = current


def _wrapper_calls(h, ops):
    """op name -> a call of ops' public function on tiny fp32 arrays, outputs given."""
    import numpy as np

    def array(*shape):
        return h.from_numpy(np.ones(shape, np.float32))
    a, b, c = array(1), array(1), array(1)
    x, w, y, rstd = array(1, 8), array(8), array(1, 8), array(1)
    p, g, m, v = array(8), array(8), array(8), array(8)
    ma, mb, mc = array(2, 2), array(2, 2), array(2, 2)
    return {"add": lambda: ops.add(h, a, b, out=c),
            "scale": lambda: ops.scale(h, a, 2.0, out=c),
            "rms_norm": lambda: ops.rms_norm(h, x, w, out=y, rstd=rstd),
            "adamw_step": lambda: ops.adamw_step(h, p, g, m, v, 1),
            "matmul": lambda: ops.matmul(h, ma, mb, out=mc)}


def _taking_turns(fns, rounds, iters):
    """(wall, calling thread's CPU) seconds per call of each fn (iters calls and a sync), in
    `rounds` rounds of one run each. The CPU time leaves out the worker threads and the waiting,
    so it is the wrapper's cost, and less noisy on a loaded machine than the wall time."""
    wall, cpu = [[] for _ in fns], [[] for _ in fns]
    for _ in range(rounds):
        for fn, w, c in zip(fns, wall, cpu):
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            c.append((time.thread_time() - c0) / iters)
            w.append((time.perf_counter() - t0) / iters)
    return [statistics.median(t) for t in wall], [statistics.median(t) for t in cpu]


def wrappers(revs, iters=2000, rounds=7):
    """Median us per call of each op's wrapper: this tree's and each revision's, taking turns."""
    import torch
    torch.set_num_threads(1)
    sides = {"this tree": df.ops, **{rev: _ops_at(rev) for rev in revs}}
    load = [os.getloadavg()[0]]
    rows = []
    with harness.open_handle(df, "host", 1) as h:
        calls = {side: _wrapper_calls(h, ops) for side, ops in sides.items()}
        ta, tb, tc = torch.ones(1), torch.ones(1), torch.empty(1)
        peer = {"add": lambda: torch.add(ta, tb, out=tc)}
        for op in calls["this tree"]:
            names, fns = list(sides), [calls[side][op] for side in sides]
            if op in peer:
                names.append("torch")
                fns.append(peer[op])

            def loop(call):
                def run():
                    for _ in range(iters):
                        call()
                    h.sync()
                return run
            for fn in fns:  # warm-up
                fn()
            wall, cpu = _taking_turns([loop(fn) for fn in fns], rounds, iters)
            row = dict(op=op, wall_us=dict(zip(names, (round(t * 1e6, 2) for t in wall))),
                       cpu_us=dict(zip(names, (round(t * 1e6, 2) for t in cpu))))
            rows.append(row)
            print(f"{op:11s} cpu " + "  ".join(f"{n} {t:.2f}" for n, t in row["cpu_us"].items()) +
                  "   wall " + "  ".join(f"{n} {t:.2f}" for n, t in row["wall_us"].items()) + " (us/call)",
                  file=sys.stderr)
    load.append(os.getloadavg()[0])
    print(json.dumps(dict(bench="ops_dispatch --wrappers", iters=iters, rounds=rounds, loadavg_1min_start_end=load,
                          peer="torch.add(a, b, out=c) on one element (add only)", rows=rows), indent=1))


if __name__ == "__main__":
    if "--wrappers" in sys.argv:
        against = sys.argv[sys.argv.index("--against") + 1].split(",") if "--against" in sys.argv else []
        wrappers(against)
    else:
        harness.main({"dispatch": cases})
