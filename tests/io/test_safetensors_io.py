"""safetensors_io against the `safetensors` package (the oracle), and a table of corrupted files."""
import json
import os
import struct

import numpy as np
import pytest

from dataflow import FileFormatError, dtypes
from dataflow.io import safetensors as st

safetensors = pytest.importorskip("safetensors")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

RNG = np.random.default_rng(0)
NUMPY_TENSORS = {
    "f32": RNG.standard_normal((3, 5)).astype(np.float32),
    "f16": RNG.standard_normal((7,)).astype(np.float16),
    "f64": RNG.standard_normal((2, 1, 3)),
    "i32": RNG.integers(-100, 100, (4, 4), dtype=np.int32),
    "i64": RNG.integers(-2**40, 2**40, (5,), dtype=np.int64),
    "u8": RNG.integers(0, 255, (9,), dtype=np.uint8),
    "bool": RNG.random((3,)) > 0.5,
    "scalar": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 4), dtype=np.float32),
}


def test_reads_what_the_oracle_writes(tmp_path):
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(NUMPY_TENSORS, str(path), metadata={"format": "np", "note": "x"})
    f = st.SafetensorsFile(path)
    assert sorted(f.names) == sorted(NUMPY_TENSORS)
    assert f.metadata == {"format": "np", "note": "x"}
    for name, want in NUMPY_TENSORS.items():
        got = f[name].values()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_oracle_reads_what_we_write(tmp_path):
    path = tmp_path / "b.safetensors"
    st.write(path, NUMPY_TENSORS, metadata={"format": "pt"})
    back = safetensors_numpy.load_file(str(path))
    assert sorted(back) == sorted(NUMPY_TENSORS)
    for name, want in NUMPY_TENSORS.items():
        assert back[name].dtype == want.dtype and back[name].shape == want.shape
        np.testing.assert_array_equal(back[name], want)
    assert struct.unpack("<Q", path.read_bytes()[:8])[0] % 8 == 0  # data section 8-aligned, as the reference does


def test_bf16_both_ways(tmp_path):
    x = torch.randn(6, 5, dtype=torch.float32).to(torch.bfloat16)
    safetensors_torch.save_file({"w": x}, str(tmp_path / "t.safetensors"))
    t = st.SafetensorsFile(tmp_path / "t.safetensors")["w"]
    assert t.dtype == "bf16" and t.bits.dtype == np.uint16
    np.testing.assert_array_equal(t.values(), x.float().numpy())

    values = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    st.write(tmp_path / "o.safetensors", {"w": st.Tensor(dtypes.encode(values, "bf16"), "bf16")})
    back = safetensors_torch.load_file(str(tmp_path / "o.safetensors"))["w"]
    assert back.dtype == torch.bfloat16
    np.testing.assert_array_equal(back.float().numpy(), torch.from_numpy(values).to(torch.bfloat16).float().numpy())


def test_reads_are_memory_mapped_views(tmp_path):
    st.write(tmp_path / "m.safetensors", {"w": np.arange(1000, dtype=np.float32)})
    bits = st.SafetensorsFile(tmp_path / "m.safetensors")["w"].bits
    assert not bits.flags.owndata and not bits.flags.writeable


def test_sharded_directory(tmp_path):
    tensors = {f"layer{i}.w": np.full((64,), i, dtype=np.float32) for i in range(5)}
    paths = st.write_sharded(tmp_path, tensors, max_shard_bytes=600)
    assert len(paths) == 3
    index = json.loads((tmp_path / st.INDEX_NAME).read_text())
    assert index["metadata"]["total_size"] == 5 * 256
    found = st.read_directory(tmp_path)
    assert sorted(found) == sorted(tensors)
    for name, (t, path) in found.items():
        assert path.endswith(index["weight_map"][name])
        np.testing.assert_array_equal(t.values(), tensors[name])
        assert name in safetensors_numpy.load_file(path)


def test_directory_errors_name_the_files(tmp_path):
    st.write(tmp_path / "a.safetensors", {"w": np.zeros(2, np.float32)})
    st.write(tmp_path / "b.safetensors", {"w": np.zeros(2, np.float32)})
    with pytest.raises(FileFormatError, match=r"b\.safetensors: tensor 'w' is also in .*a\.safetensors"):
        st.read_directory(tmp_path)
    (tmp_path / st.INDEX_NAME).write_text(json.dumps({"weight_map": {"v": "a.safetensors"}}))
    with pytest.raises(FileFormatError, match=r"index\.json: tensor 'v' is mapped to a\.safetensors"):
        st.read_directory(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileFormatError, match="no \\*.safetensors files"):
        st.read_directory(empty)


def _file(header, data=b"", length=None, pad=b""):
    raw = (header if isinstance(header, bytes) else json.dumps(header).encode()) + pad
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


GOOD = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
U8 = {"dtype": "U8", "shape": [2]}
# Every case is a file the reference implementation also rejects (checked below).
CORRUPTED = {
    "empty file": (b"", r"truncated: 0 bytes"),
    "short length": (b"\x01\x02\x03", r"truncated: 3 bytes"),
    "header length past EOF": (_file(GOOD, b"\0" * 8, length=10**6), r"header length 1000000 runs past the end"),
    "header length huge": (_file(GOOD, b"\0" * 8, length=2**63), r"header length 9223372036854775808 exceeds the 100000000-byte limit"),
    "bad json": (struct.pack("<Q", 5) + b"{nope", r"header is not valid JSON"),
    "json then NULs": (_file(GOOD, b"\0" * 8, pad=b"\0\0"), r"header is not valid JSON: Extra data"),
    "not UTF-8": (_file(b'{"\xff": 1}'), r"header is not UTF-8"),
    "nested deeply": (_file(b"[" * 100000 + b"]" * 100000), r"header is nested too deeply"),
    "header not an object": (_file([1, 2]), r"header must be a JSON object"),
    "truncated data": (_file(GOOD, b"\0" * 5), r"the tensors' data_offsets end at byte 8, past the end of the data section "
                                               r"\(5 bytes\): the file is truncated"),
    "trailing data": (_file(GOOD, b"\0" * 9), r"1 bytes after the last tensor's data"),
    "header length cut into its padding": (_file(GOOD, b"\0" * 8, pad=b"      ", length=len(json.dumps(GOOD))),
                                           r"6 bytes after the last tensor's data .*wrong header length"),
    "gap": (_file({"a": {**U8, "data_offsets": [0, 2]}, "b": {**U8, "data_offsets": [4, 6]}}, b"\0" * 6),
            r"tensor 'b': data_offsets \[4, 6\] leaves a gap after byte 2"),
    "data not at 0": (_file({"a": {**U8, "data_offsets": [4, 6]}}, b"\0" * 6), r"tensor 'a'.* gap after byte 0"),
    "empty tensor inside another": (_file({**GOOD, "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}},
                                          b"\0" * 8), r"tensor 'z': data_offsets \[4, 4\] overlaps"),
    "overlap": (_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12),
                r"tensor 'b': data_offsets \[4, 12\] overlaps the tensor before it"),
    "unknown dtype": (_file({"w": {"dtype": "F7", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
                      r"tensor 'w': unknown dtype 'F7'"),
    "size mismatch": (_file({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 12),
                      r"tensor 'w': shape \[3\] of F32 needs 12 bytes but data_offsets \[0, 8\] hold 8"),
    "shape overflows": (_file({"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 8]}}, b"\0" * 8),
                        r"tensor 'w': shape \[1099511627776, 1099511627776\] of F32 needs \d+ bytes"),
    "negative shape": (_file({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8),
                       r"tensor 'w': shape must be a list of at most 64 ints in \[0, 2\^63\)"),
    "float shape": (_file({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8),
                    r"tensor 'w': shape must be a list of at most 64 ints in \[0, 2\^63\)"),
    "bool shape": (_file({"w": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}}, b"\0" * 8),
                   r"tensor 'w': shape must be a list of at most 64 ints in \[0, 2\^63\)"),
    "reversed offsets": (_file({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}, b"\0" * 8),
                         r"tensor 'w': data_offsets must be \[begin, end\]"),
    "three offsets": (_file({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, b"\0" * 8),
                      r"tensor 'w': data_offsets must be \[begin, end\]"),
    "missing field": (_file({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8),
                      r"tensor 'w': header entry must have dtype, shape and data_offsets"),
    "bad metadata": (_file({"__metadata__": {"k": 1}, **GOOD}, b"\0" * 8), r"__metadata__ must map strings"),
    "false metadata": (_file({"__metadata__": False, **GOOD}, b"\0" * 8), r"__metadata__ must map strings"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTED))
def test_corrupted_files_name_file_and_tensor(tmp_path, case):
    raw, message = CORRUPTED[case]
    with pytest.raises(safetensors.SafetensorError):  # the oracle rejects it too
        safetensors_numpy.load(raw)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(FileFormatError, match=r"bad\.safetensors: " + message):
        st.SafetensorsFile(path)


ACCEPTED = {  # odd but valid, as the reference reads them
    "padding spaces": _file(GOOD, b"\0" * 8, pad=b"   "),
    "leading space": _file(b" " + json.dumps(GOOD).encode(), b"\0" * 8),
    "extra entry field": _file({"w": {**GOOD["w"], "x": 1}}, b"\0" * 8),
    "null metadata": _file({"__metadata__": None, **GOOD}, b"\0" * 8),
    "empty tensors at the ends": _file({**GOOD, "a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                                        "z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [8, 8]}}, b"\0" * 8),
    "no tensors": _file({}),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_odd_but_valid_files_load_as_the_reference_loads_them(tmp_path, case):
    want = safetensors_numpy.load(ACCEPTED[case])
    path = tmp_path / "ok.safetensors"
    path.write_bytes(ACCEPTED[case])
    f = st.SafetensorsFile(path)
    assert sorted(f.names) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(f[name].values(), value)
        assert f[name].values().shape == value.shape


def test_special_files_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(FileFormatError, match=r"pipe\.safetensors: safetensors file must be a regular file, this "
                                              r"is a FIFO"):
        st.SafetensorsFile(fifo)
    with pytest.raises(FileFormatError, match=r"/dev/zero: safetensors file must be a regular file, this is a device"):
        st.SafetensorsFile("/dev/zero")
    with pytest.raises(FileFormatError, match="this is a directory"):
        st.SafetensorsFile(tmp_path)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/tmp/x.safetensors", "sub/../../x.safetensors", "",
                                   None, 3])
def test_index_shards_stay_inside_the_directory(tmp_path, shard):
    model = tmp_path / "model"
    model.mkdir()
    st.write(tmp_path / "outside.safetensors", {"w": np.zeros(2, np.float32)})
    (model / st.INDEX_NAME).write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(FileFormatError, match=r"index\.json: weight_map\['w'\]: "):
        st.read_directory(model)


def test_index_naming_a_fifo_fails_instead_of_hanging(tmp_path):
    os.mkfifo(tmp_path / "model-00001-of-00001.safetensors")
    (tmp_path / st.INDEX_NAME).write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    with pytest.raises(FileFormatError, match="this is a FIFO"):
        st.read_directory(tmp_path)


@pytest.mark.parametrize("index", ['{"weight_map": [1]}', "[" * 50000, '{"weight_map": {"w": "a"', "[]", "1e999999"])
def test_malformed_index_is_a_file_format_error(tmp_path, index):
    (tmp_path / st.INDEX_NAME).write_text(index)
    with pytest.raises(FileFormatError, match=r"model\.safetensors\.index\.json: "):
        st.read_directory(tmp_path)


def test_truncating_a_real_file_anywhere_is_caught(tmp_path):
    path = tmp_path / "t.safetensors"
    st.write(path, {"a": np.ones((8, 8), np.float32), "b": np.ones(3, np.int64)})
    raw = path.read_bytes()
    for cut in range(0, len(raw), 7):
        path.write_bytes(raw[:cut])
        with pytest.raises(FileFormatError, match="t.safetensors"):
            st.SafetensorsFile(path)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(FileFormatError, match=r"nothere\.safetensors: cannot read"):
        st.SafetensorsFile(tmp_path / "nothere.safetensors")
    st.write(tmp_path / "a.safetensors", {"w": np.zeros(2, np.float32)})
    with pytest.raises(FileFormatError, match=r"a\.safetensors: no tensor 'v'"):
        st.SafetensorsFile(tmp_path / "a.safetensors")["v"]
