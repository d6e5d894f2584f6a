"""Device memory: capacity, accounting, alignment, transfers and the bandwidth throttle."""
import os
import time

import numpy as np
import pytest

import dataflow as df
from conftest import open_handle

KiB, MiB = 1 << 10, 1 << 20


def test_allocation_past_capacity_raises_with_sizes_and_loses_nothing(backend):
    with df.Handle(backend, streams=1, device_memory="1MiB") as h:
        kept = h.from_numpy(np.arange(512 * KiB // 4, dtype=np.float32))
        with pytest.raises(df.OutOfMemoryError) as e:
            h.alloc(768 * KiB)
        msg = str(e.value)
        assert str(768 * KiB) in msg and "capacity 1048576" in msg and f"in use {512 * KiB}" in msg
        np.testing.assert_array_equal(kept.numpy(), np.arange(512 * KiB // 4, dtype=np.float32))
        assert h.memory_in_use() == 512 * KiB


def test_request_larger_than_capacity(backend):
    with df.Handle(backend, streams=1, device_memory="1MiB") as h:
        with pytest.raises(df.OutOfMemoryError, match="capacity is 1048576"):
            h.alloc(2**62)


def test_in_use_returns_to_zero_and_blocks_coalesce(bh):
    h = bh
    assert h.memory_in_use() == 0
    arrays = [h.empty((1000 + i,), "bf16") for i in range(50)]
    assert h.memory_in_use() == sum((2 * (1000 + i) + 255) // 256 * 256 for i in range(50))
    for a in arrays[::2] + arrays[1::2]:
        a.free()
    assert h.memory_in_use() == 0
    whole = h.alloc(h.memory_capacity())  # only possible if every freed block merged back
    h.free(whole)
    assert h.memory_in_use() == 0


def test_alignment_is_256_bytes(bh):
    h = bh
    ptrs = [h.alloc(n) for n in (1, 3, 255, 257, 1000, 4097)]
    assert all(p % 256 == 0 for p in ptrs)
    for p in ptrs:
        h.free(p)


def test_capacity_setting(backend):
    with df.Handle(backend, streams=1, device_memory="3MiB") as h:
        assert h.memory_capacity() == 3 * MiB


def test_capacity_default():
    with df.Handle("host", streams=1) as h:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        assert 0.4 * ram <= h.memory_capacity() <= 0.6 * ram


def test_throttle_makes_transfer_take_bytes_over_bandwidth():
    bandwidth = 50e6
    with df.Handle("host", streams=1, device_memory="16MiB", transfer_bandwidth=int(bandwidth)) as h:
        src = np.random.default_rng(0).integers(0, 255, 5 * MiB, dtype=np.uint8)
        a = h.empty(src.shape, "uint8")
        t0 = time.perf_counter()
        h.inbound_transfer(a, src)
        h.sync()
        elapsed = time.perf_counter() - t0
        assert elapsed >= src.nbytes / bandwidth
        np.testing.assert_array_equal(a.raw(), src)


def test_cuda_default_capacity_is_free_device_memory():
    with open_handle("cuda", streams=1, register_default_ops=False) as h:
        assert 0 < h.memory_capacity() and h.memory_in_use() == 0


def test_freed_and_foreign_pointers_are_errors(bh):
    a = bh.alloc(1000)
    with pytest.raises(df.BadArgumentError, match="not at its start"):
        bh.free(a + 256)
    bh.free(a)
    with pytest.raises(df.BadArgumentError, match="not a live allocation"):
        bh.free(a)


def test_round_trip_every_storage_dtype(bh):
    h = bh
    rng = np.random.default_rng(1)
    for name, storage in df.dtypes.STORAGE.items():
        if name in df.dtypes.CONVERTIBLE:
            continue
        x = (rng.integers(0, 2, 37) if name == "bool" else rng.integers(0, 100, 37)).astype(storage)
        np.testing.assert_array_equal(h.from_numpy(x).numpy(), x)


def test_set_mem_fills_bytes_in_stream_order(bh):
    h = bh
    a = h.from_numpy(np.zeros(1000, dtype=np.uint8))
    h.set_mem(a, 7, stream=3)
    h.sync()
    assert (a.raw() == 7).all()


def test_peer_transfer_needs_enabled_access(backend):
    with df.Handle(backend, streams=1, device_memory="1MiB") as h1, \
         df.Handle(backend, streams=1, device_memory="1MiB") as h2:
        a1 = h1.from_numpy(np.arange(100, dtype=np.float32))
        a2 = h2.empty(100, "fp32")
        with pytest.raises(df.BadArgumentError, match="not device memory of this handle|not inside a live"):
            h2.peer_transfer(a2, a1)
        h2.enable_peer_access(h1)
        h2.peer_transfer(a2, a1)
        h2.sync()
        np.testing.assert_array_equal(a2.numpy(), np.arange(100, dtype=np.float32))
        h2.disable_peer_access(h1)
        with pytest.raises(df.BadArgumentError):
            h2.peer_transfer(a2, a1)


def test_free_is_stream_ordered():
    """free returns at once; the block is unusable immediately but reused only after the work
    queued before the free has finished."""
    with df.Handle("host", streams=1, device_memory="16MiB", transfer_bandwidth="10MB") as h:
        src = np.ones(8 * MiB, dtype=np.uint8)
        a = h.empty(src.shape, "uint8")
        h.inbound_transfer(a, src)            # ~0.8 s at 10 MB/s
        ptr = a.ptr
        a.free()                              # had it waited for the transfer, nothing would be in use
        assert h.memory_in_use() == 8 * MiB   # still held by the queued transfer
        op = h.register_external_op("touch", ["uint8"], lambda p: None)
        with pytest.raises(df.BadArgumentError, match="freed"):
            op(ptr)
        h.sync()
        assert h.memory_in_use() == 0


def test_allocation_waits_for_pending_frees_instead_of_failing():
    with df.Handle("host", streams=1, device_memory="8MiB", transfer_bandwidth="40MB") as h:
        src = np.ones(6 * MiB, dtype=np.uint8)
        a = h.empty(src.shape, "uint8")
        h.inbound_transfer(a, src)
        a.free()
        b = h.empty(src.shape, "uint8")       # only fits once the transfer has finished
        assert b.nbytes == 6 * MiB


def test_peak_and_its_reset(bh):
    h = bh
    assert h.memory_peak() == 0
    a, b = h.alloc(1000), h.alloc(3000)          # 1024 + 3072 bytes in 256-byte units
    h.free(a)
    h.free(b)
    assert h.memory_in_use() == 0 and h.memory_peak() == 4096
    c = h.alloc(10)
    h.reset_memory_peak()
    assert h.memory_peak() == 256
    h.free(c)
    assert h.memory_peak() == 256 and h.memory_in_use() == 0


def test_capacity_near_2_64_is_an_error_not_zero():
    with pytest.raises(df.OutOfMemoryError, match="cannot reserve 18446744073709551360 bytes of address space"):
        df.Handle("host", streams=1, device_memory=2**64 - 1)
