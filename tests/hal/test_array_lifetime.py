"""Arrays that are freed, views of freed arrays, arrays of another or a closed handle: every
use is a clear BadArgumentError before anything is submitted, never a use of stale memory."""
import numpy as np
import pytest

import dataflow as df


@pytest.fixture
def recorded(h):
    """A Python external op over two fp32 tensors that records the pointers it is called with."""
    calls = []
    op = h.register_external_op("records", ["fp32", "fp32"], lambda a, b: calls.append((a, b)))
    return op, calls


def test_custom_op_rejects_a_freed_array_naming_the_argument(h, recorded):
    op, calls = recorded
    a, b = h.empty(4, "fp32"), h.empty(4, "fp32")
    b.free()
    with pytest.raises(df.BadArgumentError, match=r"op 'records' argument 1 \(fp32\): .*freed"):
        op(a, b)
    h.sync()
    assert calls == []  # nothing was submitted


def test_custom_op_rejects_a_view_of_a_freed_array_even_once_its_memory_is_reused(h, recorded):
    op, calls = recorded
    a = h.empty(64, "fp32")
    v = a.view((16,), offset_elements=0)
    a.free()
    h.sync()
    reuse = h.empty(64, "fp32")  # likely the same address: the pointer alone would pass the check
    with pytest.raises(df.BadArgumentError, match=r"argument 0 \(fp32\): .*view of a freed array"):
        op(v, reuse)
    h.sync()
    assert calls == []


def test_custom_op_rejects_arrays_of_a_closed_or_unlinked_handle(h, recorded):
    op, calls = recorded
    other = df.Handle("host", streams=1, device_memory="1MiB", register_default_ops=False)
    theirs = other.empty(4, "fp32")
    with pytest.raises(df.BadArgumentError, match=r"argument 1 \(fp32\): .*another handle.*enable_peer_access"):
        op(h.empty(4, "fp32"), theirs)
    h.enable_peer_access(other)  # a linked peer's array is fine
    op(h.empty(4, "fp32"), theirs)
    h.sync()
    assert len(calls) == 1
    other.close()
    with pytest.raises(df.BadArgumentError, match=r"argument 1 \(fp32\): .*handle is closed"):
        op(h.empty(4, "fp32"), theirs)
    h.sync()
    assert len(calls) == 1


def test_array_methods_on_freed_arrays_are_clear_errors(h):
    a = h.from_numpy(np.arange(8, dtype=np.float32))
    v = a.view((4,), offset_elements=4)
    with pytest.raises(df.BadArgumentError, match="cannot free a view"):
        h.free(v)
    np.testing.assert_array_equal(v.numpy(), [4, 5, 6, 7])
    h.free(a)
    for use in (a.numpy, v.numpy, lambda: a.copy_from_numpy(np.zeros(8, np.float32)),
                lambda: v.copy_from_numpy(np.zeros(4, np.float32)), lambda: a.view((2,)),
                lambda: v.view((2,)), lambda: df.ops.add(h, a, a), lambda: h.set_mem(v, 0)):
        with pytest.raises(df.BadArgumentError, match="freed"):
            use()
    with pytest.raises(df.BadArgumentError, match="already freed"):
        h.free(a)
    a.free()  # Array.free is idempotent, as garbage collection calls it too
    v.free()


def test_arrays_after_their_handle_closed_are_clear_errors():
    h = df.Handle("host", streams=1, device_memory="1MiB")
    a = h.from_numpy(np.ones(4, np.float32))
    v = a.view((2,))
    h.close()
    for use in (a.numpy, v.numpy, lambda: a.copy_from_numpy(np.zeros(4, np.float32)), lambda: h.free(a)):
        with pytest.raises(df.BadArgumentError, match="handle is closed"):
            use()
    a.free()
    v.free()
