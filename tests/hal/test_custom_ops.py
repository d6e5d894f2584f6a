"""User ops through both paths: native (C source or prebuilt .so) and external (Python
callable or .so), submitted with submit_op and found by fingerprint."""
import gc
import weakref

import numpy as np
import pytest

import dataflow as df
from dataflow.custom_ops import AXPY_DTYPES, AXPY_SOURCE, CustomOp, compile_c, skeleton


EXTERNAL_SOURCE = r"""
#include <stdlib.h>
#include "dataflow/handle.h"
/* An external op with library state: out[i] = x[i] * state->factor, counting calls. */
typedef struct { float factor; int calls; } Scale_State;
static void scale_destroy(void *p) { free(p); }
Dataflow_Status scale_init(Dataflow_Handle *h, const Op_Skeleton *s, Dataflow_Op_State *state) {
    (void)h; (void)s;
    Scale_State *st = malloc(sizeof *st);
    if (!st) return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "scale_init: no memory");
    st->factor = 3.0f; st->calls = 0;
    state->data = st; state->destroy = scale_destroy;
    return DATAFLOW_OK;
}
Dataflow_Status scale(Dataflow_Handle *h, int stream_id, const Op *op, void *state) {
    (void)h; (void)stream_id;
    Scale_State *st = state;
    int64_t n = *(int64_t *)op->op_args[0];
    const float *x = *(const float **)op->op_args[1];
    float *out = *(float **)op->op_args[2];
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * st->factor + (float)st->calls;
    st->calls++;
    return DATAFLOW_OK;
}
"""


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal(10007).astype(np.float32), rng.standard_normal(10007).astype(np.float32)


def test_native_op_from_c_source(h, data):
    x, y = data
    op = h.register_native_op("axpy", AXPY_DTYPES, source=AXPY_SOURCE, symbol="axpy", launch="axpy_launch")
    dx, dy = h.from_numpy(x), h.from_numpy(y)
    op(x.size, 0.5, dx, dy, stream=1)
    h.sync()
    np.testing.assert_allclose(dy.numpy(), y + 0.5 * x, rtol=1e-6)


def test_native_op_found_by_fingerprint(h, data):
    x, y = data
    registered = h.register_native_op("axpy", AXPY_DTYPES, source=AXPY_SOURCE, symbol="axpy", launch="axpy_launch")
    rebuilt = CustomOp(h, skeleton("axpy", AXPY_DTYPES))  # a fresh skeleton, not the registered object
    assert rebuilt.fingerprint == registered.fingerprint
    dx, dy = h.from_numpy(x), h.from_numpy(y)
    rebuilt(x.size, 2.0, dx, dy)
    h.sync()
    np.testing.assert_allclose(dy.numpy(), y + 2 * x, rtol=1e-6)


def test_native_op_from_prebuilt_library_and_launch_validation(h, data):
    x, y = data
    path = compile_c(AXPY_SOURCE)
    assert compile_c(AXPY_SOURCE) == path  # cached
    op = h.register_native_op("axpy", AXPY_DTYPES, library=path, symbol="axpy", launch="axpy_launch")
    dx, dy = h.from_numpy(x), h.from_numpy(y)
    with pytest.raises(df.BadArgumentError, match="axpy: n must be >= 0, got -1"):
        op(-1, 1.0, dx, dy)
    op(x.size, -1.0, dx, dy)
    h.sync()
    np.testing.assert_allclose(dy.numpy(), y - x, rtol=1e-6)


def test_external_op_python_callable_on_a_stream(h, data):
    x, _ = data
    calls = []

    def scaled_copy(n, alpha, src, dst):
        calls.append(n)
        h.host_view(dst, n, "fp32")[:] = alpha * h.host_view(src, n, "fp32")
    op = h.register_external_op("py_scale", ["int64_scalar", "fp32_scalar", "fp32", "fp32"], scaled_copy)
    dx, dout = h.from_numpy(x), h.empty(x.shape, "fp32")
    op(x.size, 4.0, dx, dout, stream=2)
    h.sync()
    assert calls == [x.size]
    np.testing.assert_array_equal(dout.numpy(), 4.0 * x)


def test_external_op_from_library_with_init_state(h, data):
    x, _ = data
    path = compile_c(EXTERNAL_SOURCE)
    op = h.register_external_op("lib_scale", ["int64_scalar", "fp32", "fp32"], library=path, symbol="scale",
                                init="scale_init")
    dx, dout = h.from_numpy(x), h.empty(x.shape, "fp32")
    op(x.size, dx, dout)
    op(x.size, dout, dout)  # second call sees calls == 1 in its state
    h.sync()
    np.testing.assert_allclose(dout.numpy(), (x * 3) * 3 + 1, rtol=1e-6)


def test_register_twice_needs_replace(h):
    h.register_external_op("twice", ["fp32"], lambda p: None)
    with pytest.raises(df.AlreadyRegisteredError, match="already registered"):
        h.register_external_op("twice", ["fp32"], lambda p: None)
    hits = []
    op = h.register_external_op("twice", ["fp32"], lambda p: hits.append(p), replace=True)
    a = h.empty(4, "fp32")
    op(a)
    h.sync()
    assert hits == [a.ptr]


def test_same_name_other_dtypes_is_another_op(h):
    f32 = h.register_external_op("variant", ["fp32"], lambda p: None)
    b16 = h.register_external_op("variant", ["bf16"], lambda p: None)
    assert f32.fingerprint != b16.fingerprint


def test_replaced_python_ops_are_released_once_no_queued_work_can_call_them():
    """Queued calls of a replaced Python op still run it (safely); the replaced callables are
    then released: many replacements do not accumulate callbacks."""
    # the throttled transfer holds stream 0 for ~25 ms: the old op's calls are still queued
    # when the replacement is registered
    with df.Handle("host", streams=2, device_memory="64MiB", transfer_bandwidth="40MB") as h:
        calls, refs = [], []

        def version(i):
            def fn(ptr):
                calls.append(i)
            refs.append(weakref.ref(fn))
            return fn
        x = h.empty(1, "fp32")
        n = 1 << 18
        h.inbound_transfer(h.empty(n, "fp32"), np.zeros(n, np.float32), stream=0)
        op = h.register_external_op("versioned", ["fp32"], version(0))
        for _ in range(3):
            op(x, stream=0)
        op = h.register_external_op("versioned", ["fp32"], version(1), replace=True)
        op(x, stream=0)
        h.sync()
        assert calls == [0, 0, 0, 1]
        for i in range(2, 300):
            op = h.register_external_op("versioned", ["fp32"], version(i), replace=True)
            op(x, stream=i % 2)
        h.sync()
        assert calls == [0, 0, 0] + list(range(1, 300))
        gc.collect()
        assert [i for i, r in enumerate(refs) if r() is not None] == [299]
    gc.collect()
    assert refs[299]() is None  # and the last one goes with the handle
