import functools

import pytest

import dataflow as df

BACKENDS = ("host", "cuda", "vulkan")


def pytest_report_header(config):
    """What decides the host's fp32 summation orders here (test_summation_orders.py reruns the
    training comparisons under lower caps)."""
    from dataflow.build_info import cpu_report
    return [cpu_report()]


@functools.lru_cache(maxsize=None)
def backend_unavailable(backend):
    """None if a handle of this backend can be created here, else the reason (once per session)."""
    try:
        df.Handle(backend, streams=1, register_default_ops=False).close()
    except df.LoadError as e:
        return f"no {backend} driver: {e}"
    except df.DataflowError as e:
        return f"{backend} unavailable: {e}"
    return None


def open_handle(backend, **kwargs):
    """df.Handle(backend, **kwargs), skipping the test with the reason when the backend is absent."""
    reason = backend_unavailable(backend) if backend != "host" else None
    if reason:
        pytest.skip(reason)
    return df.Handle(backend, **kwargs)


@functools.lru_cache(maxsize=None)
def _library_symbols(backend):
    import ctypes
    import os
    from dataflow._ffi import LIB_DIR
    return ctypes.CDLL(os.path.join(LIB_DIR, f"libdataflow_{backend}.so"))


def missing_op(backend, ops):
    """The first of the catalogue ops `ops` (None: all of them) that backend's default ops library
    lacks, or None (host has them all). An op is there when the library exports its launch or its
    init function (a native op may have an init, as cuda's attention for its cuDNN plans)."""
    from dataflow.catalogue import OPS
    if backend == "host":
        return None
    lib = _library_symbols(backend)
    for op in OPS if ops is None else ops:
        if not any(hasattr(lib, f"dataflow_{backend}_{op}_{kind}") for kind in ("launch", "init")):
            return op
    return None


def open_op_handle(backend, ops, **kwargs):
    """open_handle(backend, **kwargs), also skipping with the reason when the backend does not
    have every op of `ops` (catalogue names; None: all of them) yet."""
    reason = backend_unavailable(backend) if backend != "host" else None
    if reason:
        pytest.skip(reason)
    op = missing_op(backend, ops)
    if op:
        pytest.skip(f"op {op} is not on {backend} yet")
    return df.Handle(backend, **kwargs)


def handle_fixture(name, ops=None, scope="module", **kwargs):
    """A fixture `name` giving Handle(backend, **kwargs) once per backend of BACKENDS, closed
    after its scope; a case skips with the reason where its backend has no usable device or lacks
    one of `ops` (the catalogue ops the tests use; None, for models: all of them). Op test files
    use it for their handle, so the same tests with the same tolerances run on every backend."""
    @pytest.fixture(scope=scope, params=BACKENDS, name=name)
    def fixture(request):
        with open_op_handle(request.param, ops, **kwargs) as handle:
            yield handle
    return fixture


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each backend in turn; cuda and vulkan cases skip with the reason where no device is usable."""
    reason = backend_unavailable(request.param) if request.param != "host" else None
    if reason:
        pytest.skip(reason)
    return request.param


@pytest.fixture
def h():
    handle = df.Handle("host", streams=4, device_memory="256MiB")
    yield handle
    handle.close()


@pytest.fixture
def bh(backend):
    """Like h, on each backend."""
    handle = df.Handle(backend, streams=4, device_memory="256MiB")
    yield handle
    handle.close()


@pytest.fixture
def stand_in(monkeypatch):
    """The CLI trains a numpy bigram with plain SGD instead of the Llama (tests/helpers/cli_helpers.py)."""
    from cli_helpers import install_stand_in
    install_stand_in(monkeypatch)
