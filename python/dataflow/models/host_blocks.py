"""A Llama's blocks in host memory, for models whose training does not fit the device: one numpy
buffer per block and kind in the blocked layout (blocked_model.h: every tensor at its offset
inside its block, zero padding), so the ring executor takes a block with one copy; and that
layout (names, shapes, offsets, bytes), known without allocating on the model's handle."""
import contextlib
import os

import numpy as np

from .. import dtypes
from .._ffi import ffi, modelslib
from ..errors import check

PARAM, MASTER = 0, 4  # Dataflow_Block_Kind (llama.py names them all)


@contextlib.contextmanager
def scratch_blocked_model(c_config):
    """The blocked model of a C config on a small private host handle (it allocates only its RoPE
    table there): for sizes and layouts, never for compute."""
    from ..handle import Handle
    h = Handle("host", streams=1, threads=1, device_memory="1MiB", register_default_ops=False)
    try:
        model = ffi.new("Dataflow_Blocked_Model **")
        check(modelslib.dataflow_llama_blocked_model_create(h._ptr(), c_config, model))
        try:
            yield model[0]
        finally:
            modelslib.dataflow_blocked_model_destroy(model[0])
    finally:
        h.close()


def host_memory_available():
    """Bytes of host memory the system can give without swapping (MemAvailable on Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class Layout:
    """Where a Llama config's tensors live: .tensors [(name, shape, block, element offset)] in
    Hugging Face's order, .bytes[block][kind], .itemsize[kind] (PARAM: the model dtype, else fp32)."""

    def __init__(self, config, dtype):
        with scratch_blocked_model(config._c_config(dtype)) as bm:
            self.bytes, numel = [], []
            for b in range(modelslib.dataflow_blocked_model_num_blocks(bm)):
                s = ffi.new("Dataflow_Block_Sizes *")
                check(modelslib.dataflow_blocked_model_block_sizes(bm, b, s))
                self.bytes.append([int(s.bytes[k]) for k in range(5)])
                numel.append(int(s.numel))
            self.tensors = []
            for i in range(modelslib.dataflow_blocked_model_num_tensors(bm)):
                t = ffi.new("Dataflow_Llama_Tensor *")
                check(modelslib.dataflow_blocked_model_tensor(bm, i, t))
                self.tensors.append((ffi.string(t.name).decode(), tuple(t.shape[d] for d in range(t.ndim)),
                                     t.block, t.offset))
        self.itemsize = [self.bytes[0][PARAM] // numel[0]] + [4] * 4

    def total(self, kinds):
        return sum(row[k] for row in self.bytes for k in kinds)


class HostBlocks:
    """PARAM (and MASTER once added) of every block as host numpy buffers, zeroed. The same
    read/write(block, kind) as dataflow.training.executor.RingExecutor, which takes them over."""

    def __init__(self, layout):
        self.layout = layout
        self._data = {PARAM: [np.zeros(row[PARAM], np.uint8) for row in layout.bytes]}

    def add_master(self):
        """MASTER = the fp32 values of PARAM (bf16 models)."""
        decode = (lambda p: p.copy()) if self.layout.itemsize[PARAM] == 4 else \
            (lambda p: dtypes.decode(p.view(np.uint16), "bf16").view(np.uint8))
        self._data[MASTER] = [decode(p) for p in self._data[PARAM]]

    @property
    def kinds(self):
        return tuple(self._data)

    def block_bytes(self, block, kind):
        return self.layout.bytes[block][kind]

    def read(self, block, kind):
        return self._data[kind][block].copy()

    def write(self, block, kind, data):
        self._data[kind][block][:] = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
