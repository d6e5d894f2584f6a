"""Kernel failures on cuda surface as DataflowError naming the op (issue 10, bad input):
- a launch the driver refuses (a block of 2048 threads) fails the submit itself, naming the
  kernel, and the handle stays usable;
- a kernel that faults (an illegal address) is reported by the next sync of its stream, naming
  the ops submitted since the last sync; the context is then lost, so every later call on the
  handle says so and close still works.
Needs a GPU: the fault loses the CUDA context of the whole process, so it runs in a child
process. Without a GPU it skips with the reason; the host-side logic (the stream's op log,
which errors lose the context) is tests/c/test_cuda_fault.c."""
import json
import os
import subprocess
import sys

import pytest

from conftest import backend_unavailable

KERNEL = r'''
extern "C" __global__ void oob_write(float *x, int block)
{
	volatile float *far = x + ((size_t)1 << 40); /* 4 TiB past a live allocation: unmapped */
	if (threadIdx.x == 0 && block > 0)
		far[0] = 1.0f;
}
'''

LAUNCH = r'''
#include "dataflow/handle.h"
Dataflow_Status oob_write_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c)
{
	(void)h, (void)state;
	c->grid[0] = c->grid[1] = c->grid[2] = 1;
	c->block[0] = (unsigned)*(const int *)op->op_args[1];
	c->block[1] = c->block[2] = 1;
	c->shared_mem_bytes = 0;
	return DATAFLOW_OK;
}
'''

CHILD = r'''
import json, sys
import numpy as np
import dataflow as df
from dataflow.custom_ops import CustomOp, _cstr_array, compile_c, skeleton

kernel_path, launch_source = sys.argv[1], sys.argv[2]
out = {}
h = df.Handle("cuda", streams=2, device_memory="64MiB")
skel = skeleton("oob_write", ["fp32", "int32"])
names = [_cstr_array([s]) for s in ("oob_write", "oob_write_launch", None)]
h._call("register_native_code", kernel_path.encode(), compile_c(launch_source).encode(), 1, skel,
        names[0][0], names[1][0], names[2][0], 0)
oob = CustomOp(h, skel)
x = h.from_numpy(np.zeros(4, np.float32))
try:
    oob(x, 2048)
except df.DataflowError as e:
    out["refused_launch"] = str(e)
h.sync()
out["after_refused"] = (x.numpy() + 1).tolist()  # the handle still works
y = h.from_numpy(np.ones(4, np.float32))
df.ops.add(h, y, y, out=y)
oob(x, 1)
for what, call in (("sync", h.sync), ("sync_again", h.sync), ("alloc", lambda: h.empty((4,), "fp32"))):
    try:
        call()
        out[what] = None
    except df.DataflowError as e:
        out[what] = f"{type(e).__name__}: {e}"
h.close()
out["closed"] = True
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    reason = backend_unavailable("cuda")
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("fault")
    (d / "oob.cu").write_text(KERNEL)
    r = subprocess.run([sys.executable, "-c", CHILD, str(d / "oob.cu"), LAUNCH], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, CUDA_LAUNCH_BLOCKING="0"))
    assert r.returncode == 0, f"child failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_refused_launch_fails_the_submit_naming_the_kernel_and_the_handle_stays_usable(outcome):
    assert "cuLaunchKernel(oob_write)" in outcome["refused_launch"]
    assert "CUDA_ERROR_INVALID_VALUE" in outcome["refused_launch"]
    assert outcome["after_refused"] == [1.0] * 4


def test_fault_surfaces_at_the_next_sync_naming_the_ops(outcome):
    msg = outcome["sync"]
    assert msg and "CUDA_ERROR_ILLEGAL_ADDRESS" in msg, msg
    assert "one of the 2 ops submitted since the last sync ('add', 'oob_write')" in msg, msg
    assert "context is lost: close the handle" in msg and "CUDA_LAUNCH_BLOCKING=1" in msg, msg


def test_after_a_fault_every_call_says_the_handle_is_unusable_and_close_works(outcome):
    for what in ("sync_again", "alloc"):
        assert outcome[what] and "is unusable since a device fault lost its context" in outcome[what], outcome[what]
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in outcome[what]
    assert outcome["closed"]
