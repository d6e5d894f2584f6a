"""The safetensors format, read (memory-mapped) and written with numpy alone.

A file is: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the data section, offsets relative to its start. Sharded checkpoints add
`model.safetensors.index.json` with {"weight_map": {name: shard file}}.

Tensors come back as `Tensor(bits, dtype)`: `bits` is a read-only numpy view of the mapped file in
the storage type of the dataflow datatype `dtype` (bf16 as uint16 bits), `values()` decodes it.
"""
import json
import math
import mmap
import os
import struct
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..errors import FileFormatError
from .file_checks import member, open_regular, parse_json, read_json

# safetensors dtype code <-> dataflow datatype name (numpy storage from dtypes.STORAGE, little-endian).
DTYPES = {
    "F64": "fp64", "F32": "fp32", "F16": "fp16", "BF16": "bf16", "F8_E4M3": "fp8e4m3", "F8_E5M2": "fp8e5m2",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
}
CODES = {name: code for code, name in DTYPES.items()}
INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_NAME = "model.safetensors"
# The reference implementation refuses larger headers; so do we, before reading one into memory.
MAX_HEADER_BYTES = 100 * 1000 * 1000
# numpy's limits on an array's dimensions (an empty tensor's other sizes are unbounded by its bytes).
MAX_DIMS, MAX_DIM = 64, 2**63 - 1


class Tensor(NamedTuple):
    bits: np.ndarray  # storage-typed array (uint16 for bf16)
    dtype: str        # dataflow datatype name

    def values(self):
        """numpy values: float32 for bf16/fp8, the stored type otherwise."""
        return dtypes.decode(self.bits, self.dtype).reshape(self.bits.shape)  # decode makes 0-d arrays 1-d


def _storage(dtype):
    return np.dtype(dtypes.STORAGE[dtype]).newbyteorder("<")


def _header(path, f, file_size):
    prefix = f.read(8)
    if len(prefix) < 8:
        raise FileFormatError(f"{path}: truncated: {file_size} bytes, too short for the 8-byte header length")
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER_BYTES:
        raise FileFormatError(f"{path}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if n > file_size - 8:
        raise FileFormatError(f"{path}: header length {n} runs past the end of the file ({file_size} bytes): "
                              "truncated or not a safetensors file")
    header = parse_json(f.read(n), path, "header")
    if not isinstance(header, dict):
        raise FileFormatError(f"{path}: header must be a JSON object, got {type(header).__name__}")
    return n, header


def _entry(path, name, info):
    """(dtype, shape, begin, end) of one header entry, each field checked on its own."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise FileFormatError(f"{path}: tensor {name!r}: header entry must have dtype, shape and data_offsets, "
                              f"got {info!r:.200}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in DTYPES:
        raise FileFormatError(f"{path}: tensor {name!r}: unknown dtype {code!r:.40}; expected one of "
                              f"{sorted(DTYPES)}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(d) is int and 0 <= d <= MAX_DIM for d in shape)):
        raise FileFormatError(f"{path}: tensor {name!r}: shape must be a list of at most {MAX_DIMS} ints in "
                              f"[0, 2^63), got {shape!r:.200}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise FileFormatError(f"{path}: tensor {name!r}: data_offsets must be [begin, end] with "
                              f"0 <= begin <= end, got {offsets!r:.200}")
    begin, end = offsets
    dtype = DTYPES[code]
    expected = math.prod(shape) * _storage(dtype).itemsize
    if end - begin != expected:
        raise FileFormatError(f"{path}: tensor {name!r}: shape {shape} of {code} needs {expected} bytes but "
                              f"data_offsets [{begin}, {end}] hold {end - begin}")
    return dtype, tuple(shape), begin, end


def _check_layout(path, entries, data_size):
    """As the reference implementation: sorted by offsets, the tensors tile the data section exactly,
    from 0 to its end (no gap, no overlap, no trailing bytes; empty tensors only where the previous
    one ends). A header length cut into its padding shifts the data and fails here."""
    position = 0
    for begin, end, name in sorted((b, e, n) for n, (_, _, b, e) in entries.items()):
        if begin != position:
            what = "overlaps the tensor before it" if begin < position else f"leaves a gap after byte {position}"
            raise FileFormatError(f"{path}: tensor {name!r}: data_offsets [{begin}, {end}] {what} in the data "
                                  "section")
        position = end
    if position != data_size:
        if position > data_size:
            raise FileFormatError(f"{path}: the tensors' data_offsets end at byte {position}, past the end of the "
                                  f"data section ({data_size} bytes): the file is truncated")
        raise FileFormatError(f"{path}: {data_size - position} bytes after the last tensor's data (the tensors "
                              f"cover {position} of {data_size} bytes): trailing data or a wrong header length")


class SafetensorsFile:
    """One safetensors file, validated at open and memory-mapped: tensors are views, not copies.

    f = SafetensorsFile("model.safetensors"); f.names; f.metadata; f["w"].values()
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        with open_regular(self.path, "safetensors file") as f:
            size = os.fstat(f.fileno()).st_size
            header_len, header = _header(self.path, f, size)
            data_size = size - 8 - header_len
            metadata = header.pop("__metadata__", None)
            metadata = {} if metadata is None else metadata
            if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
                raise FileFormatError(f"{self.path}: __metadata__ must map strings to strings, got {metadata!r:.200}")
            self.metadata = metadata
            self._start = 8 + header_len
            self._entries = {name: _entry(self.path, name, info) for name, info in header.items()}
            _check_layout(self.path, self._entries, data_size)
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if data_size else b""
            except OSError as e:
                raise FileFormatError(f"{self.path}: cannot map: {e.strerror or e}") from None

    @property
    def names(self):
        return list(self._entries)

    def __contains__(self, name):
        return name in self._entries

    def dtype(self, name):
        return self._lookup(name)[0]

    def shape(self, name):
        return self._lookup(name)[1]

    def _lookup(self, name):
        try:
            return self._entries[name]
        except KeyError:
            raise FileFormatError(f"{self.path}: no tensor {name!r}; it has {sorted(self._entries)}") from None

    def __getitem__(self, name):
        dtype, shape, begin, end = self._lookup(name)
        storage = _storage(dtype)
        bits = np.frombuffer(self._map, dtype=storage, count=math.prod(shape), offset=self._start + begin) \
            if end > begin else np.empty(0, dtype=storage)
        return Tensor(bits.reshape(shape), dtype)

    def tensors(self):
        return {name: self[name] for name in self._entries}


def _as_tensor(name, value):
    if isinstance(value, Tensor):
        if value.dtype not in CODES:
            raise FileFormatError(f"tensor {name!r}: datatype {value.dtype!r} has no safetensors dtype")
        return Tensor(_contiguous(value.bits, _storage(value.dtype)), value.dtype)
    value = np.asarray(value)
    return Tensor(_contiguous(value, value.dtype.newbyteorder("<")), dtypes.from_numpy(value.dtype))


def _contiguous(array, dtype):
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    return np.asarray(array).astype(dtype, order="C", copy=False)


def write(path, tensors, metadata=None):
    """Writes {name: numpy array or Tensor(bits, dtype)} to `path` (bf16: Tensor(uint16 bits, "bf16")
    or Tensor(dtypes.encode(x, "bf16"), "bf16")). Tensors are laid out in name order. Not atomic
    and not fsynced: atomic.replaced_file / replace_directory do both for files that must survive."""
    items = [(name, _as_tensor(name, value)) for name, value in sorted(tensors.items())]
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in items:
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.bits.shape),
                        "data_offsets": [offset, offset + t.bits.nbytes]}
        offset += t.bits.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the reference pads to 8 so the data section stays aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for _, t in items:
            _write_data(f, t.bits)


def _write_data(f, bits):
    f.write(memoryview(bits.reshape(-1)).cast("B"))


def write_sharded(directory, tensors, max_shard_bytes, metadata=None):
    """Writes HF-style shards model-0000i-of-0000n.safetensors plus model.safetensors.index.json,
    each shard at most max_shard_bytes (a larger single tensor gets a shard of its own)."""
    shards, current, size = [], {}, 0
    for name, value in sorted(tensors.items()):
        t = _as_tensor(name, value)
        if current and size + t.bits.nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = t
        size += t.bits.nbytes
    shards.append(current)
    weight_map, total, paths = {}, 0, []
    for i, shard in enumerate(shards):
        paths.append(os.path.join(directory, f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"))
        write(paths[-1], shard, metadata)
        weight_map.update({name: os.path.basename(paths[-1]) for name in shard})
        total += sum(t.bits.nbytes for t in shard.values())
    with open(os.path.join(directory, INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    return paths


def read_directory(directory):
    """{name: (Tensor, file path)} for a model directory: the shards its index names, else
    model.safetensors, else every *.safetensors file in it (a name in two of them is an error).
    Shard names must stay inside the directory."""
    directory = os.fspath(directory)
    index_path = os.path.join(directory, INDEX_NAME)
    found = {}
    if os.path.lexists(index_path):
        index = read_json(index_path, "safetensors index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise FileFormatError(f"{index_path}: weight_map: expected an object mapping tensor names to shard "
                                  f"files, got {weight_map!r:.100}")
        files = {}
        for name, shard in sorted(weight_map.items()):
            shard_path = member(directory, shard, index_path, f"weight_map[{name!r}]")
            if shard not in files:
                files[shard] = SafetensorsFile(shard_path)
            if name not in files[shard]:
                raise FileFormatError(f"{index_path}: tensor {name!r} is mapped to {shard}, which does not hold it")
            found[name] = (files[shard][name], files[shard].path)
        return found
    single = os.path.join(directory, WEIGHTS_NAME)
    try:
        paths = [single] if os.path.lexists(single) else sorted(
            os.path.join(directory, p) for p in os.listdir(directory) if p.endswith(".safetensors"))
    except OSError as e:
        raise FileFormatError(f"{directory}: cannot list the model directory: {e.strerror or e}") from None
    if not paths:
        raise FileFormatError(f"{directory}: no *.safetensors files and no {INDEX_NAME}")
    for path in paths:
        st = SafetensorsFile(path)
        for name in st.names:
            if name in found:
                raise FileFormatError(f"{path}: tensor {name!r} is also in {found[name][1]}")
            found[name] = (st[name], path)
    return found
