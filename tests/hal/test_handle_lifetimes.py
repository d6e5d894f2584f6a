"""Lifetimes across handles (issue 8 item 5, the cases without Python callback exceptions):
an event of a closed handle, a peer closed under a link, closing a handle from its own
worker, raw submit_op of a default op with NULL or freed tensors. tests/c/test_lifetimes.c
checks the same from C under ASan + UBSan."""
import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi, lib, opslib
from dataflow.errors import check


def test_waiting_on_an_event_of_a_closed_handle():
    with df.Handle("host", streams=2, device_memory="1MiB") as h1:
        h2 = df.Handle("host", streams=2, device_memory="1MiB")
        ev = h2.record(1)
        h1.wait(0, ev)
        h2.close()
        with pytest.raises(df.BadArgumentError, match="recorded on handle .* which has been destroyed"):
            h1.wait(0, ev)
        h1.sync()


def test_transfer_after_the_peer_closed():
    with df.Handle("host", streams=1, device_memory="1MiB") as h1:
        h2 = df.Handle("host", streams=1, device_memory="1MiB")
        h1.enable_peer_access(h2)
        src = h2.from_numpy(np.arange(64, dtype=np.float32))
        dst = h1.empty(64, "fp32")
        h1.peer_transfer(dst, src)
        h2.close()                                  # waits for h1's queued copy
        np.testing.assert_array_equal(dst.numpy(), np.arange(64, dtype=np.float32))
        with pytest.raises(df.BadArgumentError, match="peer transfer source: .*nor of a peer handle"):
            h1.peer_transfer(dst, src)


def test_close_from_the_handles_own_worker_is_refused():
    with df.Handle("host", streams=2, device_memory="1MiB") as h:
        seen = []

        def close_self():
            try:
                h.close()
            except df.DataflowError as e:
                seen.append(str(e))
        h.submit_host_op(close_self, stream=1)
        h.sync()
        assert len(seen) == 1 and "from work queued on this handle" in seen[0]
        assert h.from_numpy(np.ones(3, np.float32)).numpy().sum() == 3   # still open


def test_raw_submit_of_a_default_op_with_null_or_freed_tensors():
    with df.Handle("host", streams=1, device_memory="1MiB") as h:
        x = h.from_numpy(np.ones(16, np.float32))
        freed = h.empty(16, "fp32")
        freed_ptr = freed.cdata
        freed.free()
        skeleton = ffi.new("Op_Skeleton *")
        check(opslib.dataflow_add_skeleton(skeleton, df.dtypes.enum("fp32")))

        def submit(a, out):
            op = ffi.new("Op *")
            op.skeleton = skeleton[0]
            cells = [ffi.new("int64_t *", 16), ffi.new("float *", 1.0), ffi.new("void **", a),
                     ffi.new("float *", 1.0), ffi.new("void **", x.cdata), ffi.new("void **", out)]
            for i, c in enumerate(cells):
                op.op_args[i] = c
            check(lib.dataflow_submit_op(h._ptr(), op, 0))

        submit(x.cdata, x.cdata)
        with pytest.raises(df.BadArgumentError, match=r"^add: a is NULL$"):
            submit(ffi.NULL, x.cdata)
        with pytest.raises(df.BadArgumentError, match=r"^add: out is NULL$"):
            submit(x.cdata, ffi.NULL)
        with pytest.raises(df.BadArgumentError, match=r"^add: a \(16 fp32 elements = n\): pointer 0x[0-9a-f]+ is not "
                                                      r"inside a live allocation \(freed\?\)"):
            submit(freed_ptr, x.cdata)
        h.sync()
        np.testing.assert_array_equal(x.numpy(), np.full(16, 2, np.float32))


LAUNCH_DESTROYS = r"""
#include "dataflow/host_kernel.h"
void nothing(void **args, int part, int num_parts) { (void)args; (void)part; (void)num_parts; }
/* runs inside submit_op: destroying the handle from here would wait for this very call */
Dataflow_Status destroy_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c) {
    (void)op; (void)state; (void)c;
    return dataflow_handle_destroy(h);
}
"""


def test_destroy_from_a_launch_function_is_refused():
    with df.Handle("host", streams=1, device_memory="1MiB") as h:
        op = h.register_native_op("destroyer", ["fp32"], source=LAUNCH_DESTROYS, symbol="nothing",
                                  launch="destroy_launch")
        with pytest.raises(df.BadArgumentError, match="called from inside a call on this handle"):
            op(None)
        h.sync()


def test_every_binding_is_resolved_at_import():
    # cffi resolves a name under a lock that a garbage collection may find held (a finalizer
    # closing an executor in the middle of cffi's own parsing): nothing may be resolved later.
    from dataflow._ffi import commlib, modelslib, ringlib
    for library, names in ((lib, ["dataflow_handle_destroy", "dataflow_last_error"]),
                           (modelslib, ["dataflow_llama_destroy"]),
                           (ringlib, ["dataflow_ring_executor_destroy", "dataflow_ring_executor_wait_losses"]),
                           (commlib, ["dataflow_comm_destroy"])):
        for name in names:
            assert name in vars(library), name
