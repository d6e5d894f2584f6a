"""The generated op wrappers (dataflow.op_wrapper): every catalogue op has its Python function,
and every generated wrapper refuses, naming the op and the argument, an array that is not a
dataflow Array, a freed one, one of the wrong dtype and one whose shape disagrees with the
dims another array bound; outputs not given are allocated with the bound shape."""
import numpy as np
import pytest

import dataflow as df
from dataflow import catalogue, ops
from dataflow.op_wrapper import WRAPPERS


@pytest.fixture(scope="module")
def h():
    with df.Handle("host", streams=1) as handle:
        yield handle


def test_every_catalogue_op_has_a_python_function():
    for name, info in catalogue.OPS.items():
        assert callable(getattr(ops, info.part_of or name, None)), name
    assert set(WRAPPERS) == {name for name, info in catalogue.OPS.items() if not info.part_of}


def valid_arguments(h, wrapper):
    """Arrays for every tensor of the op (its first variant, every named dim 2), by name."""
    variant = dict(zip(wrapper.info.slots, wrapper.info.variants[0]))
    names = set().union(*(d.names for dims in wrapper.dims.values() for d in dims))
    bound = dict.fromkeys(names, 2)
    return {a.name: h.zeros(wrapper.shape(a.name, bound), variant.get(a.dtype, a.dtype)) for a in wrapper.tensors}


def rebound_tensor(wrapper):
    """(a tensor, the index of a dim named alone that an earlier tensor binds), or None."""
    seen, found = set(), None
    for a in wrapper.tensors:
        for i, d in enumerate(wrapper.dims[a.name]):
            if d.name in seen:
                found = (a.name, i)
        seen |= {d.name for d in wrapper.dims[a.name] if d.name}
    return found


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_generated_wrappers_name_the_op_and_argument(h, name):
    wrapper = WRAPPERS[name]
    first = wrapper.tensors[0].name
    given = valid_arguments(h, wrapper)
    with pytest.raises(df.BadArgumentError, match=rf"^{name}: {first}: expected a dataflow Array, got ndarray"):
        wrapper(h, 0, **{**given, first: np.zeros(2, np.float32)})
    freed = h.zeros(given[first].shape, given[first].dtype)
    h.free(freed)
    with pytest.raises(df.BadArgumentError, match=rf"^{name}: {first}: the array was freed"):
        wrapper(h, 0, **{**given, first: freed})
    last = wrapper.tensors[-1].name
    wrong = "fp32" if given[last].dtype == "int8" else "int8"
    with pytest.raises(df.BadArgumentError, match=rf"^{name}: (\w+/)*{last}(/\w+)* (dtype )?must be"):
        wrapper(h, 0, **{**given, last: h.zeros(given[last].shape, wrong)})
    rebound = rebound_tensor(wrapper)
    if rebound:
        arg, i = rebound
        shape = list(given[arg].shape)
        shape[i] += 1
        with pytest.raises(df.BadArgumentError, match=rf"^{name}: {arg} must have"):
            wrapper(h, 0, **{**given, arg: h.zeros(tuple(shape), given[arg].dtype)})


def test_outputs_take_the_shape_of_their_like_input(h):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = ops.add(h, h.from_numpy(a), h.from_numpy(a + 1), alpha=2.0, beta=-1.0)
    assert out.shape == (2, 3, 4) and out.dtype == "fp32"
    np.testing.assert_array_equal(out.numpy(), 2 * a - (a + 1))
    rows = h.from_numpy(np.ones((6, 8), np.float32))
    _, rstd = ops.rms_norm(h, rows, h.from_numpy(np.ones(8, np.float32)), eps=0.0)
    assert rstd.shape == (6,)
    np.testing.assert_array_equal(rstd.numpy(), np.ones(6, np.float32))


def test_dims_must_agree_across_arrays(h):
    x = h.zeros((3, 8))
    with pytest.raises(df.BadArgumentError, match=r"^rms_norm: w must have shape \[hidden\] with hidden = 8 "
                                                  r"\(from x\), got \(7,\)"):
        ops.rms_norm(h, x, h.zeros((7,)))
    with pytest.raises(df.BadArgumentError, match=r"^add: b must have the shape of a, \(3, 8\), got \(8, 3\)"):
        ops.add(h, x, h.zeros((8, 3)))
    with pytest.raises(df.BadArgumentError, match=r"^swiglu: up must be fp32 \(like gate\), got bf16"):
        ops.swiglu(h, x, h.zeros((3, 8), "bf16"))
    w = h.zeros((4, 32), "uint8")  # N = 4 rows of cdiv(K, 2) = 32 bytes for K = 64: two groups of 32
    with pytest.raises(df.BadArgumentError, match=r"^qmatmul_int4: scales must have shape \[N, cdiv\(K, group_size\)\] "
                                                  r"= \(4, 2\), got \(4, 1\)"):
        ops.qmatmul_int4(h, h.zeros((2, 64)), w, h.zeros((4, 1)), 32)


def scalar_arguments(wrapper):
    """A value for every scalar of the op: named dims 2 (as valid_arguments' arrays), other ints 1,
    bools False, floats 0.5."""
    names = set().union(*(d.names for dims in wrapper.dims.values() for d in dims))
    value = {"bool": False, "int64": 1, "int32": 1, "uint64": 1}
    return {a.name: 2 if a.name in names else value.get(wrapper.kind[a.name], 0.5) for a in wrapper.scalars}


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_a_plain_call_takes_the_generated_path_and_agrees_with_checked_call(h, name, monkeypatch):
    wrapper = WRAPPERS[name]
    given = {**valid_arguments(h, wrapper), **scalar_arguments(wrapper)}
    for a in wrapper.tensors:  # outputs left to the wrapper to allocate, their dtype slots given
        if a.role == "out" and not a.nullable:
            if a.dtype in wrapper.info.slots:
                given[a.dtype] = given[a.name].dtype
            del given[a.name]
    results = []
    for fast in (False, True):
        if fast:
            monkeypatch.setattr(type(wrapper), "fallback", lambda *args: pytest.fail("fell back to checked_call"))
        try:
            out = (wrapper if fast else wrapper.checked_call)(h, 0, **given)
            outs = out if isinstance(out, tuple) else (out,)
            results.append([(x.shape, x.dtype) if x is not None else None for x in outs])
        except df.DataflowError as e:  # the C layer may refuse these values: both paths alike
            results.append((type(e), str(e)))
    assert results[0] == results[1]


def test_uncommon_arguments_go_through_checked_call(h):
    a = h.from_numpy(np.arange(4, dtype=np.float32))
    out = WRAPPERS["add"](h, 0, a=a, b=a, n=np.int64(4), alpha=1, beta=np.float32(2.0))
    np.testing.assert_array_equal(out.numpy(), 3 * np.arange(4, dtype=np.float32))
    with pytest.raises(df.BadArgumentError, match=r"^add: give n \(int64\): no array fixes it"):
        WRAPPERS["add"](h, 0, a=a, b=a, n=None, alpha=1.0, beta=1.0)
    with pytest.raises(TypeError, match=r"^add: unexpected arguments \['m'\]"):
        WRAPPERS["add"](h, 0, a=a, b=a, m=4, alpha=1.0, beta=1.0)


def test_the_generated_path_refuses_views_of_freed_arrays_and_other_handles_as_checked_call_does(h):
    base = h.from_numpy(np.arange(8, dtype=np.float32))
    view, b = base.view((4,), 4), h.from_numpy(np.ones(4, np.float32))
    np.testing.assert_array_equal(ops.add(h, view, b).numpy(), np.arange(4, 8) + 1)  # a live view: fine
    base.free()
    with pytest.raises(df.BadArgumentError, match=r"^add: a: the array is a view of a freed array"):
        ops.add(h, view, b)
    with df.Handle("host", streams=1) as other:
        with pytest.raises(df.BadArgumentError, match=r"^add: b: the array belongs to another handle"):
            ops.add(h, b, other.zeros((4,)))
        other.enable_peer_access(h)  # ops on `other` may use h's memory: checked_call takes the call
        np.testing.assert_array_equal(ops.add(other, b, other.zeros((4,)), beta=0.0).numpy(), np.ones(4))
