"""Python callbacks run on stream workers (host ops, Python external ops): an exception they
raise never unwinds into C; it surfaces once, at the next sync covering its stream, as a
CallbackError chained to the original. Closing a handle from its own worker is such an error."""
import numpy as np
import pytest

import dataflow as df


class Custom(Exception):
    pass


@pytest.mark.parametrize("exc", [KeyError("missing thing"), Custom("custom failure"), SystemExit(3)])
def test_host_op_exception_surfaces_at_next_sync_of_its_stream_once(h, exc):
    ran = []

    def bad():
        raise exc
    h.submit_host_op(bad, stream=2)
    h.submit_host_op(lambda: ran.append(1), stream=2)  # the stream goes on after the failure
    h.sync(1)  # another stream's sync does not report it
    with pytest.raises(df.CallbackError, match=f"stream 2: host op .*bad.* raised {type(exc).__name__}") as e:
        h.sync(2)
    assert e.value.__cause__ is exc
    assert ran == [1]
    h.sync(2)  # reported once
    h.sync()


def test_host_op_exception_surfaces_at_next_handle_sync(h):
    def bad():
        raise ValueError("boom on stream 3")
    h.submit_host_op(bad, stream=3)
    with pytest.raises(df.CallbackError, match="stream 3: .*ValueError: boom on stream 3") as e:
        h.sync()
    assert isinstance(e.value.__cause__, ValueError)
    h.sync(3)
    h.sync()


def test_external_op_exception_carries_the_original(h):
    def bad(ptr, n):
        raise LookupError(f"no entry {n}")
    op = h.register_external_op("lookup_fails", ["fp32", "int64_scalar"], bad)
    x = h.from_numpy(np.arange(4, dtype=np.float32))
    op(x, 7, stream=1)
    with pytest.raises(df.CallbackError, match="stream 1: external op 'lookup_fails' raised LookupError: no entry 7") \
            as e:
        h.sync(1)
    assert isinstance(e.value.__cause__, LookupError) and e.value.__cause__.args == ("no entry 7",)
    h.sync()
    np.testing.assert_array_equal(x.numpy(), np.arange(4, dtype=np.float32))


def test_several_failures_are_counted_and_the_first_is_chained(h):
    for i in range(3):
        h.submit_host_op(lambda i=i: [][i], stream=0)
    with pytest.raises(df.CallbackError, match=r"IndexError.*\(and 2 more\)") as e:
        h.sync(0)
    assert isinstance(e.value.__cause__, IndexError)
    h.sync(0)


def test_close_from_own_host_op_is_refused_and_reported():
    h = df.Handle("host", streams=2, device_memory="16MiB")
    h.submit_host_op(h.close, stream=1)
    with pytest.raises(df.CallbackError, match="stream 1: .*called from work queued on this handle") as e:
        h.sync()
    assert isinstance(e.value.__cause__, df.BadArgumentError)
    np.testing.assert_array_equal(h.from_numpy(np.ones(3, np.float32)).numpy(), np.ones(3))  # still open
    h.close()


def test_close_from_own_python_external_op_is_refused_and_reported():
    h = df.Handle("host", streams=2, device_memory="16MiB", register_default_ops=False)
    op = h.register_external_op("closer", ["fp32"], lambda ptr: h.close())
    op(h.empty(1), stream=0)
    # the op ran on the stream's worker, or on the submitting thread (an idle handle's work runs there)
    with pytest.raises(df.CallbackError, match="external op 'closer' raised BadArgumentError: handle destroy: called "
                       "from (work queued on this handle|inside a call on this handle)"):
        h.sync(0)
    h.sync()
    h.close()


def test_close_of_another_handle_from_a_host_op_works():
    with df.Handle("host", streams=1, device_memory="16MiB") as h1:
        h2 = df.Handle("host", streams=1, device_memory="16MiB")
        h1.submit_host_op(h2.close)
        h1.sync()
        with pytest.raises(df.BadArgumentError, match="handle is closed"):
            h2.empty(1)
