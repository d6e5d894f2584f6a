"""Bad input gets a clear error naming the argument and expected vs got, and loses nothing."""
import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi, opslib
from dataflow.custom_ops import CustomOp, skeleton
from dataflow.errors import check

from conftest import handle_fixture

h = handle_fixture("h", scope="function", streams=4, device_memory="256MiB")


@pytest.fixture
def kept(h):
    """An array whose contents every test checks afterwards: errors must not disturb it."""
    values = np.arange(257, dtype=np.float32)
    a = h.from_numpy(values)
    yield a
    np.testing.assert_array_equal(a.numpy(), values)
    assert h.memory_in_use() >= a.nbytes


def test_unknown_op_names_fingerprint_and_variants(h, kept):
    op = CustomOp(h, skeleton("matmul", ["fp32"]))
    with pytest.raises(df.UnknownOpError) as e:
        op(kept)
    msg = str(e.value)
    assert "no op registered with fingerprint" in msg and "matmul(fp32)" in msg
    assert "matmul(bf16, bf16, fp32, fp32" in msg  # the registered variants are listed


def test_wrong_arg_count(h, kept):
    op = h.register_external_op("two_args", ["fp32", "int64_scalar"], lambda p, n: None)
    with pytest.raises(df.BadArgumentError, match="expected 2 arguments .*got 1"):
        op(kept)


def test_wrong_dtype(h, kept):
    ints = h.from_numpy(np.arange(4, dtype=np.int32).reshape(2, 2))
    with pytest.raises(df.BadArgumentError, match=r"matmul: a/b dtype must be one of \{fp32, fp16, bf16\}, got int32"):
        df.ops.matmul(h, ints, ints)
    bf = h.from_numpy(np.ones(257, dtype=np.float32), dtype="bf16")
    with pytest.raises(df.BadArgumentError, match=r"add: b must be fp32 \(like a\), got bf16"):
        df.ops.add(h, kept, bf)
    op = h.register_external_op("takes_bf16", ["bf16"], lambda p: None)
    with pytest.raises(df.BadArgumentError, match="expected a bf16 array, got fp32"):
        op(kept)
    with pytest.raises(df.BadArgumentError, match="unknown datatype 'fp33'"):
        h.empty(3, "fp33")


@pytest.mark.parametrize("stream", [-1, 4, 1000])
def test_invalid_stream_id(h, kept, stream):
    with pytest.raises(df.BadArgumentError, match=rf"stream id must be in \[0, 4\) for this handle, got {stream}"):
        df.ops.add(h, kept, kept, stream=stream)
    with pytest.raises(df.BadArgumentError, match="stream id"):
        h.record(stream)
    with pytest.raises(df.BadArgumentError, match="stream id"):
        h.sync(stream)


def test_foreign_pointer(h, kept):
    host = np.zeros(16, dtype=np.float32)
    foreign = int(ffi.cast("uintptr_t", ffi.from_buffer(host)))
    op = h.register_external_op("reads", ["fp32"], lambda p: None)
    with pytest.raises(df.BadArgumentError, match="argument 0 .*not device memory of this handle"):
        op(foreign)
    with pytest.raises(df.BadArgumentError, match="foreign pointer"):
        h.free(foreign)
    with pytest.raises(df.BadArgumentError, match="not device memory"):
        check(opslib.dataflow_submit_add(h._h, 0, df.dtypes.enum("fp32"), 16, 1.0, ffi.cast("void *", foreign),
                                         1.0, kept.cdata, kept.cdata))


def test_freed_pointer_and_double_free(h, kept):
    a = h.empty(64, "fp32")
    ptr = a.ptr
    h.free(ptr)
    op = h.register_external_op("reads", ["fp32"], lambda p: None)
    with pytest.raises(df.BadArgumentError, match=r"not inside a live allocation \(freed\?\)"):
        op(ptr)
    with pytest.raises(df.BadArgumentError, match=r"not a live allocation \(already freed\?\)"):
        h.free(ptr)
    with pytest.raises(df.BadArgumentError, match="points inside an allocation"):
        h.free(kept.ptr + 256)


def test_buffer_too_small_for_shape(h, kept):
    # 257 floats, but the op is told 100 x 100: caught before any kernel reads past the end
    with pytest.raises(df.BadArgumentError, match=r"matmul: A .*runs .* bytes past the end of its allocation"):
        check(opslib.dataflow_submit_matmul(h._h, 0, df.dtypes.enum("fp32"), df.dtypes.enum("fp32"), kept.cdata,
                                            kept.cdata, ffi.NULL, kept.cdata, 100, 100, 100, 0, 0, 1.0, 0.0))


@pytest.mark.parametrize("size", [0, -5])
def test_zero_and_negative_sizes(h, kept, size):
    with pytest.raises(df.BadArgumentError, match="must be a positive integer|must be > 0"):
        h.alloc(size)
    with pytest.raises(df.BadArgumentError):
        h.empty((size, 3))
    with pytest.raises(df.BadArgumentError, match="n must be > 0"):
        check(opslib.dataflow_submit_add(h._h, 0, df.dtypes.enum("fp32"), size, 1.0, kept.cdata, 1.0, kept.cdata,
                                         kept.cdata))


def test_overflowing_sizes(h, kept):
    with pytest.raises(df.BadArgumentError, match="overflows"):
        check(opslib.dataflow_submit_matmul(h._h, 0, df.dtypes.enum("fp32"), df.dtypes.enum("fp32"), kept.cdata,
                                            kept.cdata, ffi.NULL, kept.cdata, 2**40, 2**40, 2**40, 0, 0, 1.0, 0.0))
    with pytest.raises(df.OutOfMemoryError, match="capacity"):
        h.alloc(2**64 - 1)
    with pytest.raises(df.OutOfMemoryError):
        h.empty((2**31, 2**31), "fp32")


def test_allocation_past_capacity(h, kept):
    with pytest.raises(df.OutOfMemoryError, match=r"cannot allocate \d+ bytes"):
        h.alloc(h.memory_capacity() - kept.nbytes + 1)


def test_matmul_shape_mismatch(h, kept):
    a = h.from_numpy(np.ones((3, 4), dtype=np.float32))
    with pytest.raises(df.BadArgumentError, match="inner dimensions differ: op\\(a\\) is 3x4, op\\(b\\) is 3x4"):
        df.ops.matmul(h, a, a)
    with pytest.raises(df.BadArgumentError, match="beta != 0 needs c"):
        df.ops.matmul(h, a, a, transpose_b=True, beta=1.0)


def test_bad_handle_arguments():
    # a name that is no backend lists the ones this build has, not a missing .so
    with pytest.raises(df.LoadError, match=r'backend "gpu": no such backend in this build; available: (\w+, )*host\b'):
        df.Handle("gpu")
    with pytest.raises(df.BadArgumentError, match="device index"):
        df.Handle("host:x")
    with pytest.raises(df.BadArgumentError, match="streams must be an integer in 1..64, got 0"):
        df.Handle("host", streams=0)
    with pytest.raises(df.BadArgumentError, match=r"streams must be an integer in 1..64, got 65"):
        df.Handle("host", streams=65)
    with pytest.raises(df.BadArgumentError, match="device index must be 0"):
        df.Handle("host:1")
    with pytest.raises(df.BadArgumentError, match="device_memory"):
        df.Handle("host", device_memory="lots")


@pytest.mark.parametrize("size", [2**64, 2**70, "100000000TB"])
def test_device_memory_past_64_bits_is_rejected(size):
    with pytest.raises(df.BadArgumentError, match=r"device_memory: .* does not fit in 64 bits"):
        df.Handle("host", device_memory=size)


@pytest.mark.parametrize("threads", [0, -1, 2.0, True, "2"])
def test_thread_count_of_wrong_type_is_rejected_before_any_thread_starts(threads):
    with pytest.raises(df.BadArgumentError, match=r"Handle: threads must be a positive integer, got"):
        df.Handle("host", threads=threads)


@pytest.mark.parametrize("streams", [0, -2, 65, 1.5, None])
def test_stream_count_out_of_bounds_is_rejected(streams):
    with pytest.raises(df.BadArgumentError, match=r"Handle: streams must be an integer in 1..64, got"):
        df.Handle("host", streams=streams)


def test_bad_registrations(h, kept):
    if h.backend != "host":
        pytest.skip("native ops from C source are host kernels; cuda's are .cu files (tests/hal/test_cuda_fault.py)")
    with pytest.raises(df.CompileError, match="error"):
        h.register_native_op("broken", ["fp32"], source="void k(void **a, int p, int n) { syntax error }",
                             symbol="k")
    src = "void k(void **a, int p, int n) { (void)a; (void)p; (void)n; }"
    with pytest.raises(df.LoadError, match="kernel symbol 'missing' not found"):
        h.register_native_op("k", ["fp32"], source=src, symbol="missing")
    with pytest.raises(df.LoadError, match="launch symbol 'nolaunch' not found"):
        h.register_native_op("k", ["fp32"], source=src, symbol="k", launch="nolaunch")
    with pytest.raises(df.LoadError, match="cannot load /nonexistent.so"):
        h.register_native_op("k", ["fp32"], library="/nonexistent.so", symbol="k")
    with pytest.raises(df.BadArgumentError, match="nickname 'bad name' has character ' '"):
        h.register_external_op("bad name", ["fp32"], lambda p: None)
    with pytest.raises(df.BadArgumentError, match="num_args must be 0..32, got 33"):
        h.register_external_op("many", ["fp32"] * 33, lambda *p: None)
    # a failed registration registered nothing: the name is still free
    h.register_native_op("k", ["fp32"], source=src, symbol="k")


def test_closed_handle():
    h = df.Handle("host", streams=1, device_memory="1MiB")
    a = h.empty(4, "fp32")
    h.close()
    with pytest.raises(df.BadArgumentError, match="handle is closed"):
        df.ops.add(h, a, a)
    a.free()  # no crash: the memory went with the handle


def test_extent_checked_to_the_byte(h, kept):
    """Allocations are rounded up to 256 bytes, but extents are checked against what was asked."""
    small = h.empty(2, "fp32")  # 8 bytes
    with pytest.raises(df.BadArgumentError, match="runs 8 bytes past the end of its allocation"):
        check(opslib.dataflow_submit_add(h._h, 0, df.dtypes.enum("fp32"), 4, 1.0, small.cdata, 1.0, kept.cdata,
                                         kept.cdata))
