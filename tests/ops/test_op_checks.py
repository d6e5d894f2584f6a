"""Ops are checked once, by the dispatch layer, against the signature they were registered with:
user ops registered from Python with signature=..., and default ops submitted raw (a CustomOp
over a default op's skeleton, bypassing dataflow_submit_<op>). Bad arguments fail at the call
with the signature's message and nothing runs; a signature that does not compile fails the
registration and registers nothing. (The signature language: tests/c/test_op_signature.c; the
same checks from C, under ASan + UBSan: tests/c/test_op_checks.c.)"""
import numpy as np
import pytest

import dataflow as df
from dataflow.custom_ops import AXPY_DTYPES, AXPY_SOURCE, CustomOp, skeleton

AXPY_SIGNATURE = "n; a; x: in[n]; y: inout[n]; require n > 0; require finite(a)"
ADD_DTYPES = ["int64_scalar", "fp32_scalar", "fp32", "fp32_scalar", "fp32", "fp32"]  # n, alpha, a, beta, b, out


@pytest.fixture
def xy(h):
    x = np.arange(16, dtype=np.float32)
    return x, h.from_numpy(x), h.from_numpy(np.ones(16, np.float32))


def test_native_op_with_signature(h, xy):
    x, dx, dy = xy
    axpy = h.register_native_op("axpy_signed", AXPY_DTYPES, source=AXPY_SOURCE, symbol="axpy", launch="axpy_launch",
                                signature=AXPY_SIGNATURE)
    cases = [((16, 2.0, dx, None), r"^axpy_signed: y is NULL$"),
             ((32, 2.0, dx, dy), r"^axpy_signed: x \(32 fp32 elements = n\): range of 128 bytes at 0x[0-9a-f]+ runs "
                                 r"64 bytes past the end of its allocation, nor of a peer handle it has access to$"),
             ((8, 2.0, dx, dx.view((8,), offset_elements=4)), r"^axpy_signed: x \[0x[0-9a-f]+, \+32 bytes\) and y "
                                                              r"\[0x[0-9a-f]+, \+32 bytes\) overlap; y may not overlap "
                                                              r"another tensor$"),
             ((8, 2.0, dx, dx), r"^axpy_signed: x and y are the same buffer; y may not overlap another tensor$"),
             ((0, 2.0, dx, dy), r"^axpy_signed: n must be > 0, got 0$"),
             ((16, float("inf"), dx, dy), r"^axpy_signed: requires finite\(a\), got a = inf$")]
    for args, match in cases:
        with pytest.raises(df.BadArgumentError, match=match):
            axpy(*args)
    np.testing.assert_array_equal(dy.numpy(), np.ones(16, np.float32))  # nothing ran
    axpy(16, 2.0, dx, dy)
    np.testing.assert_array_equal(dy.numpy(), 1 + 2 * x)


def test_python_external_op_with_signature(h, xy):
    x, dx, dy = xy
    calls = []
    op = h.register_external_op("note", ["int64_scalar", "fp32", "fp32"], fn=lambda n, x, y: calls.append(n),
                                signature="n; x: in[n]; y: out?[n]; require n % 4 == 0 && (present(y) || n < 8)")
    with pytest.raises(df.BadArgumentError, match=r"^note: requires n % 4 == 0 && \(present\(y\) \|\| n < 8\), got "
                                                  r"n = 8, y = NULL$"):
        op(8, dx, None)
    with pytest.raises(df.BadArgumentError, match=r"^note: x \(20 fp32 elements = n\): range of 80 bytes"):
        op(20, dx, dy)
    op(4, dx, None)
    op(16, dx, dy)
    h.sync()
    assert calls == [4, 16]


@pytest.mark.parametrize("signature,match", [
    ("n; a; x: in[n]", r"3 argument clauses for 4 arguments"),
    ("n; a; x: in[n]; y: inout[n]; require m > 0", r"unknown name 'm' \(not an argument or a datatype\)"),
    ("n; a: in[n]; x: in[n]; y: inout[n]", r"argument is a scalar \(fp32_scalar\): write just its name"),
    ("n; a; x: in[n]; y: inout[a]", r"an extent must be an integer expression"),
])
def test_a_signature_that_does_not_compile_registers_nothing(h, signature, match):
    with pytest.raises(df.BadArgumentError, match=r"^register: the signature of op 0 \('axpy_bad'\) does not compile: "
                                                  r"axpy_bad: signature error at offset \d+ \(near '.*'\): " + match):
        h.register_native_op("axpy_bad", AXPY_DTYPES, source=AXPY_SOURCE, symbol="axpy", launch="axpy_launch",
                             signature=signature)
    with pytest.raises(df.BadArgumentError, match=r"^register: the signature of op 0 \('axpy_bad'\) does not compile"):
        h.register_external_op("axpy_bad", AXPY_DTYPES, fn=lambda *args: None, signature=signature)
    assert not h._python_ops  # the refused callback is not kept
    with pytest.raises(df.UnknownOpError, match="no op registered"):
        CustomOp(h, skeleton("axpy_bad", AXPY_DTYPES))(1, 1.0, None, None)


def test_a_signature_must_be_a_string(h):
    with pytest.raises(df.BadArgumentError, match="signature must be a string or None, got bytes"):
        h.register_external_op("typed", ["int64_scalar"], fn=print, signature=b"n")


def test_raw_submit_of_a_default_op_is_checked_against_its_signature(h, xy):
    """Issue 8 item 5: a default op's skeleton submitted through submit_op directly."""
    x, dx, dy = xy
    add = CustomOp(h, skeleton("add", ADD_DTYPES))
    freed = h.from_numpy(np.ones(16, np.float32))
    freed_ptr = freed.ptr
    freed.free()
    other = df.Handle("host", streams=1, device_memory="1MiB")
    foreign = other.from_numpy(np.ones(16, np.float32))  # passed as raw pointers: the C checks, not Array's
    cases = [((16, 1.0, None, 1.0, dx, dy), r"^add: a is NULL$"),
             ((16, 1.0, dx, 1.0, dx, None), r"^add: out is NULL$"),
             ((17, 1.0, dx, 1.0, dx, dy), r"^add: a \(17 fp32 elements = n\): range of 68 bytes at 0x[0-9a-f]+ runs "
                                          r"4 bytes past the end of its allocation, nor of a peer handle "
                                          r"it has access to$"),
             ((16, 1.0, dx, 1.0, freed_ptr, dy), r"^add: b \(16 fp32 elements = n\): pointer 0x[0-9a-f]+ is not inside "
                                                 r"a live allocation \(freed\?\), nor of a peer handle it has access "
                                                 r"to$"),
             ((16, 1.0, dx, 1.0, dx, x.ctypes.data), r"^add: out \(16 fp32 elements = n\): pointer 0x[0-9a-f]+ is not "
                                                     r"device memory of this handle"),
             ((16, 1.0, foreign.ptr, 1.0, dx, dy), r"^add: a \(16 fp32 elements = n\): pointer 0x[0-9a-f]+ is not "
                                                   r"device memory of this handle"),
             ((0, 1.0, dx, 1.0, dx, dy), r"^add: n must be > 0, got 0$"),
             ((8, 1.0, dx, 1.0, dy, dx.view((8,), offset_elements=1)), r"overlap; out may only be exactly a or b$")]
    for args, match in cases:
        with pytest.raises(df.BadArgumentError, match=match):
            add(*args)
    other.close()
    np.testing.assert_array_equal(dy.numpy(), np.ones(16, np.float32))
    add(16, 2.0, dx, 1.0, dy, dy)  # out exactly b
    np.testing.assert_array_equal(dy.numpy(), 2 * x + 1)
