"""The op catalogue (libdataflowops/catalogue.toml, read back through dataflow/op_catalogue.h):
every entry is complete and consistent with its C functions, every variant's signature compiles
and is registered on the host backend, slot errors name the arguments, the generic
submit-by-name refuses wrong argument sets, and the workspace-size helpers never overflow.
The signature language itself is tested in C (tests/c/test_op_signature.c)."""
import numpy as np
import pytest

import dataflow as df
from dataflow import catalogue
from dataflow._ffi import ffi, lib, opslib
from dataflow.errors import check

COMPOSITES = {"grad_norm_sq", "rms_norm_bwd_w", "attention_bwd", "attention_kv_bwd", "paged_attention", "moe_permute"}


@pytest.fixture(scope="module")
def h():
    with df.Handle("host", streams=1) as handle:
        yield handle


def variant_skeleton(info, variant):
    s = ffi.new("Op_Skeleton *")
    slots = ffi.new("DataflowDatatype[]", [df.dtypes.enum(d) for d in variant] or [0])
    check(opslib.dataflow_op_catalogue_skeleton(opslib.dataflow_op_catalogue_find(info.name.encode()), slots, s))
    return s


def test_entries_are_complete():
    assert len(catalogue.OPS) == opslib.DATAFLOW_NUM_DEFAULT_OPS
    for i, (name, info) in enumerate(catalogue.OPS.items()):
        assert getattr(opslib, f"DATAFLOW_OP_{name.upper()}") == i
        assert info.doc and info.signature and info.variants and info.args
        assert hasattr(opslib, f"dataflow_{name}_skeleton")
        if info.part_of:  # attention_bwd names both the composite and its second half
            assert info.part_of in COMPOSITES and (name in COMPOSITES or not hasattr(opslib, f"dataflow_submit_{name}"))
        else:
            assert info.c_function is getattr(opslib, f"dataflow_submit_{name}") and info.submit
        for a in info.args:
            assert (a.extent is not None) == (a.role is not None), a
            assert a.dtype in info.slots or df.dtypes.enum(a.dtype)
    assert {info.part_of for info in catalogue.OPS.values()} - {None} == COMPOSITES
    assert catalogue.OPS["matmul"].external


def test_every_variant_is_registered_on_host(h):
    for info in catalogue.OPS.values():
        for variant in info.variants:
            s = variant_skeleton(info, variant)
            assert ffi.string(s.nickname).decode() == info.name and s.num_args == len(info.args)
            assert lib.dataflow_op_is_registered(h._ptr(), s), (info.name, variant)


def test_signatures_compile_for_every_variant():
    for info in catalogue.OPS.values():
        for variant in info.variants:
            sig = ffi.new("Dataflow_Op_Signature **")
            check(lib.dataflow_op_signature_compile(info.signature.encode(), variant_skeleton(info, variant), sig))
            lib.dataflow_op_signature_destroy(sig[0])


@pytest.mark.parametrize("builder,slots,match", [
    ("cast", ("fp32", "fp32"), r"cast: dst dtype must be one of \{fp16, bf16, fp8e4m3, fp8e5m2\}, got fp32 \(1\)"),
    ("matmul", ("fp16", "bf16"), r"matmul: C/D dtype must be one of \{fp32, fp16\}, got bf16"),
    ("matmul", ("int8", "fp32"), r"matmul: A/B dtype must be one of \{fp32, fp16, bf16\}, got int8"),
    ("rms_norm", ("fp8e4m3",), r"rms_norm: x/w/y dtype must be one of \{fp32, fp16, bf16\}, got fp8e4m3"),
    ("embedding_bwd_w", ("int32", "fp32", "bf16"), r"embedding_bwd_w: d_table dtype must be one of \{fp32\}, got bf16"),
    ("adamw_step", ("bf16", "fp16"), r"adamw_step: grad dtype must be one of \{fp32, bf16\}, got fp16"),
])
def test_slot_errors_name_the_arguments(builder, slots, match):
    s = ffi.new("Op_Skeleton *")
    with pytest.raises(df.BadArgumentError, match=match):
        check(getattr(opslib, f"dataflow_{builder}_skeleton")(s, *[df.dtypes.enum(d) for d in slots]))
    with pytest.raises(df.BadArgumentError, match="not one of its entries"):
        check(opslib.dataflow_op_catalogue_skeleton(ffi.NULL, ffi.new("DataflowDatatype[1]"), s))
    assert opslib.dataflow_op_catalogue_entry(-1) == ffi.NULL
    assert opslib.dataflow_op_catalogue_entry(opslib.dataflow_op_catalogue_size()) == ffi.NULL
    assert opslib.dataflow_op_catalogue_find(b"nope") == ffi.NULL


def test_submit_by_name_checks_the_names(h):
    x = h.from_numpy(np.array([1.0, 2.0], np.float32))
    set_mem = catalogue.OPS["set_mem"].submit
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'value'"):
        set_mem(h, 0, dtype="fp32", n=2, x=x)
    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        set_mem(h, 0, dtype="fp32", n=2, value=1.0, x=x, y=x)
    with pytest.raises(TypeError):
        set_mem(h, 0, "fp32", 2, 1.0, x)  # by name only
    with pytest.raises(df.BadArgumentError, match="set_mem: x is NULL"):
        set_mem(h, 0, dtype="fp32", n=2, value=1.0, x=None)
    set_mem(h, 0, dtype="fp32", n=2, value=3.0, x=x)
    assert list(x.numpy()) == [3.0, 3.0]
    assert catalogue.OPS["grad_norm_sq_partials"].submit is None  # a composite's half


def test_composites_submit_both_halves_or_neither():
    """grad_norm_sq on a handle with its first half registered but not its second queues
    nothing: the partials never run."""
    with df.Handle("host", streams=1, register_default_ops=False) as bare:
        info = catalogue.OPS["grad_norm_sq_partials"]
        library = lib.dataflow_handle_default_ops_library(bare._ptr())
        keep = [ffi.new("char[]", b"dataflow_host_grad_norm_sq_partials_fp32"),
                ffi.new("char[]", b"dataflow_host_grad_norm_sq_partials_launch"),
                ffi.new("char[]", info.signature.encode())]
        check(lib.dataflow_register_native_code(bare._ptr(), library, ffi.NULL, 1, variant_skeleton(info, ("fp32",)),
                                                ffi.new("char *[]", keep[:1]), ffi.new("char *[]", keep[1:2]),
                                                ffi.NULL, ffi.new("char *[]", keep[2:]), 0))
        x, out = bare.from_numpy(np.array([3.0, 4.0], np.float32)), bare.zeros(1)
        ws = bare.from_numpy(np.array([-1.0]))
        with pytest.raises(df.UnknownOpError, match=r"no op registered with fingerprint \w+\.\.\. for "
                                                    r"grad_norm_sq_reduce\(int64_scalar, fp64, fp32, bool_scalar\)"):
            check(opslib.dataflow_submit_grad_norm_sq(bare._ptr(), 0, df.dtypes.enum("fp32"), df.dtypes.enum("fp32"),
                                                      2, x.cdata, ws.cdata, out.cdata, 0))
        assert ws.numpy()[0] == -1.0


def test_composite_second_half_checked_before_the_first_is_queued(h):
    """Both halves registered: a second half whose arguments fail its signature (grad_norm_sq's
    out NULL) queues nothing either."""
    x, out = h.from_numpy(np.array([3.0, 4.0], np.float32)), h.zeros(1)
    ws = h.from_numpy(np.array([-1.0]))
    with pytest.raises(df.BadArgumentError, match=r"^grad_norm_sq_reduce: out is NULL$"):
        check(opslib.dataflow_submit_grad_norm_sq(h._ptr(), 0, df.dtypes.enum("fp32"), df.dtypes.enum("fp32"),
                                                  2, x.cdata, ws.cdata, ffi.NULL, 0))
    h.sync()
    assert ws.numpy()[0] == -1.0
    check(opslib.dataflow_submit_grad_norm_sq(h._ptr(), 0, df.dtypes.enum("fp32"), df.dtypes.enum("fp32"),
                                              2, x.cdata, ws.cdata, out.cdata, 0))
    assert out.numpy()[0] == 25.0


def test_workspace_sizes_never_overflow():
    """The workspace-size helpers on sizes near int64's limits: exact or the documented
    'invalid' value, never undefined behaviour (the sanitizer build runs the C side)."""
    big = 2**63 - 1
    gn = opslib.dataflow_grad_norm_sq_workspace_bytes
    assert gn(big) == (big // 8192 + 1) * 8 and gn(8192) == 8 and gn(8193) == 16 and gn(0) == 0 and gn(-5) == 0
    rb = opslib.dataflow_rms_norm_bwd_w_workspace_bytes
    assert rb(big, 1) == (big // 64 + 1) * 4 and rb(65, 3) == 2 * 3 * 4
    assert rb(big, big) == 0 and rb(2**40, 2**30) == 0 and rb(0, 8) == 0 and rb(8, -1) == 0
    ab = opslib.dataflow_attention_bwd_workspace_bytes
    assert ab(10, 1, 4, 2, 64) == 10 * 4 * 4
    assert ab(big, 1, 2, 1, 64) == -1 and ab(2**62, 1, 1, 1, 1) == -1 and ab(0, 1, 1, 1, 1) == -1
    assert ab(10, -1, 4, 2, 64) == -1


def test_signature_api_through_cffi():
    """The signature compiler is public C: hostile text fails with a message, not a crash."""
    s = ffi.new("Op_Skeleton *")
    check(lib.dataflow_op_skeleton_init(s, b"t", 2, ffi.new("DataflowDatatype[]", [df.dtypes.enum("int64_scalar"),
                                                                                    df.dtypes.enum("fp32")])))
    sig = ffi.new("Dataflow_Op_Signature **")
    for text in (b"n; x: in[" + b"(" * 10000 + b"n", b"n; x: in[n]; require n >" + b"\xff" * 5, b"", b"n x"):
        assert lib.dataflow_op_signature_compile(text, s, sig) == lib.DATAFLOW_ERR_INVALID_ARGUMENT
        assert ffi.string(lib.dataflow_last_error()).startswith(b"t: ") and sig[0] == ffi.NULL
