import functools

import pytest

import dataflow as df

BACKENDS = ("host", "cuda", "vulkan")


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
    """The first of the catalogue ops `ops` that backend's default ops library lacks, or None
    (host has them all)."""
    from dataflow.catalogue import OPS
    if backend == "host":
        return None
    lib = _library_symbols(backend)
    for op in ops:
        if not hasattr(lib, f"dataflow_{backend}_{op}_{'init' if OPS[op].external else 'launch'}"):
            return op
    return None


def open_op_handle(backend, ops, **kwargs):
    """open_handle(backend, **kwargs), also skipping with the reason when the backend does not
    have every op of `ops` (catalogue names) yet."""
    reason = backend_unavailable(backend) if backend != "host" else None
    if reason:
        pytest.skip(reason)
    op = missing_op(backend, ops)
    if op:
        pytest.skip(f"op {op} is not on {backend} yet")
    return df.Handle(backend, **kwargs)


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
