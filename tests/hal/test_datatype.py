"""Datatype conversions (dataflow_convert and the scalar dataflow_fp32_to_* helpers) are
bit-exact with the reference libraries: ml_dtypes for bf16 / float8_e4m3fn / float8_e5m2,
numpy for fp16. Round to nearest even, subnormals, overflow (Inf, or NaN for e4m3), NaN
sign and payload. Every SIMD path (AVX-512, AVX2, scalar) must give the same bits: arrays of
length 1..40 put values in the scalar tail, large arrays in the vector body, and a
subprocess per DATAFLOW_SIMD level compares whole outputs."""
import hashlib

import ml_dtypes
import numpy as np
import pytest

import dataflow as df
from determinism import assert_simd_levels_agree

NARROW = ("bf16", "fp16", "fp8e4m3", "fp8e5m2")
REF = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp8e4m3": ml_dtypes.float8_e4m3fn,
       "fp8e5m2": ml_dtypes.float8_e5m2}
UINT = {"bf16": np.uint16, "fp16": np.uint16, "fp8e4m3": np.uint8, "fp8e5m2": np.uint8, "fp32": np.uint32}


def encode_bits(x, name):
    return df.dtypes.encode(np.asarray(x, np.float32), name).view(UINT[name])


def ref_bits(x, name):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(x, np.float32).astype(REF[name]).view(UINT[name])


def ref_decode(bits, name):
    return bits.view(REF[name]).astype(np.float32)


def all_patterns(name):
    return np.arange(1 << (8 * np.dtype(UINT[name]).itemsize), dtype=np.uint32).astype(UINT[name])


def f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


@pytest.fixture(scope="module")
def h():
    with df.Handle("host", streams=2) as handle:
        yield handle


def device_convert(h, bits, src, dst):
    """Stored bits of src -> stored bits of dst, through the cast op (dataflow_convert)."""
    x = h.empty(bits.shape, src)
    h.inbound_transfer(x, np.ascontiguousarray(bits).view(df.dtypes.STORAGE[src]), stream=0)
    return df.ops.cast(h, x, dst).raw().view(UINT[dst])


def special_values(name):
    """Values where rounding is decided: +-0, +-Inf, NaNs, every exact tie between two
    neighbouring values of the format (including the tie past the largest finite value and
    the tie below the smallest subnormal), the float32 neighbours of each tie, and the format's
    own values with their float32 neighbours."""
    with np.errstate(invalid="ignore"):
        values = ref_decode(all_patterns(name), name)
    finite = np.unique(values[np.isfinite(values) & (values >= 0)]).astype(np.float64)
    above_max = finite[-1] + (finite[-1] - finite[-2])  # where the next binade would start
    grid = np.concatenate([finite, [above_max]])
    ties = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)
    assert np.array_equal(ties.astype(np.float64), (grid[:-1] + grid[1:]) / 2)  # exact in fp32
    with np.errstate(over="ignore"):  # bf16's next binade is past fp32's range
        points = np.concatenate([ties, finite.astype(np.float32), [2 * above_max, 1e30, 3e38]]).astype(np.float32)
    near = np.concatenate([points, np.nextafter(points, np.float32(np.inf)), np.nextafter(points, np.float32(0))])
    nans = f32([0x7fc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff, 0x7fc12345, 0x7f802000, 0x7f801fff])
    fp32_edges = f32([0x00000001, 0x00400000, 0x007fffff, 0x00800000, 0x00808000, 0x00818000, 0x7f7fffff,
                      0x7f7f8000, 0x7f7f7fff, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f817fff])
    out = np.concatenate([near, nans, fp32_edges, f32([0, 0x7f800000])]).astype(np.float32)
    return np.concatenate([out, -out])


def random_values(count, seed=0):
    """count float32 values: normals at scales from fp32-subnormal to near-fp32-max, plus
    uniformly random bit patterns (which include NaNs and Infs)."""
    rng = np.random.default_rng(seed)
    scales = [1e-44, 1e-40, 1e-30, 1e-9, 6e-8, 1e-5, 2e-3, 0.1, 1.0, 30.0, 448.0, 5e4, 7e4, 1e6, 1e20, 1e38]
    per = count // (len(scales) + 2)
    with np.errstate(over="ignore"):
        parts = [(rng.standard_normal(per) * s).astype(np.float32) for s in scales]
    parts.append(rng.integers(0, 1 << 32, count - per * len(scales), dtype=np.uint64).astype(np.uint32).view(np.float32))
    x = np.concatenate(parts)
    rng.shuffle(x)
    return x


def assert_bits_equal(got, want, what):
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        examples = ", ".join(f"[{i}] got 0x{int(got[i]):x} want 0x{int(want[i]):x}" for i in bad[:5])
        pytest.fail(f"{what}: {bad.size} of {got.size} differ: {examples}")


# ---- widening ----

@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_all_16bit_patterns_round_trip(h, name):
    bits = all_patterns(name)
    wide = device_convert(h, bits, name, "fp32")
    with np.errstate(invalid="ignore"):
        want = ref_decode(bits, name).view(np.uint32)
    assert_bits_equal(wide, want, f"{name} -> fp32")  # exact, NaN payloads kept as the reference does
    back = encode_bits(wide.view(np.float32), name)
    nan = np.isnan(wide.view(np.float32))
    assert_bits_equal(back[~nan], bits[~nan], f"{name} -> fp32 -> {name}")
    assert np.all(np.isnan(ref_decode(back[nan], name)))
    assert np.array_equal(back[nan] >> 15, bits[nan] >> 15)  # sign kept


@pytest.mark.parametrize("name", ["fp8e4m3", "fp8e5m2"])
def test_all_fp8_patterns_decode(h, name):
    bits = all_patterns(name)
    want = ref_decode(bits, name).view(np.uint32)
    assert_bits_equal(df.dtypes.decode(bits, name).view(np.uint32), want, f"{name} -> fp32")
    assert_bits_equal(device_convert(h, bits, name, "fp32"), want, f"{name} -> fp32 (cast)")


def test_bf16_decode_matches_reference():
    bits = all_patterns("bf16")
    assert_bits_equal(df.dtypes.decode(bits, "bf16").view(np.uint32), ref_decode(bits, "bf16").view(np.uint32),
                      "bf16 -> fp32")


# ---- narrowing ----

@pytest.mark.parametrize("name", NARROW)
def test_random_values_match_reference(name):
    x = random_values(1_000_000)
    assert_bits_equal(encode_bits(x, name), ref_bits(x, name), f"fp32 -> {name}")


@pytest.mark.parametrize("name", NARROW)
def test_special_values_match_reference(name):
    x = special_values(name)
    assert_bits_equal(encode_bits(x, name), ref_bits(x, name), f"fp32 -> {name}")


@pytest.mark.parametrize("name,value,want", [
    ("fp8e4m3", 448.0, 0x7e), ("fp8e4m3", 464.0, 0x7e), ("fp8e4m3", np.nextafter(np.float32(464), 1e9), 0x7f),
    ("fp8e4m3", np.inf, 0x7f), ("fp8e4m3", -np.inf, 0xff), ("fp8e4m3", -1e9, 0xff), ("fp8e4m3", 2.0 ** -10, 0x00),
    ("fp8e4m3", 3 * 2.0 ** -10, 0x02), ("fp8e5m2", 57344.0, 0x7b), ("fp8e5m2", 61440.0, 0x7c),
    ("fp8e5m2", np.nextafter(np.float32(61440), 0), 0x7b), ("fp8e5m2", -np.nan, 0xfe), ("fp16", 65520.0, 0x7c00),
    ("fp16", 2.0 ** -25, 0x0000), ("fp16", np.nextafter(np.float32(2.0 ** -25), 1), 0x0001),
    ("bf16", 1.00390625, 0x3f80), ("bf16", 1.01171875, 0x3f82), ("bf16", f32(0x00400000), 0x0040),
])
def test_documented_rounding(name, value, want):
    """Spot checks of the rules in datatype.h (RNE ties, e4m3 overflow -> NaN, subnormals)."""
    assert int(encode_bits([value], name)[0]) == want


@pytest.mark.parametrize("src,dst", [(s, d) for s in NARROW for d in NARROW if s != d])
def test_narrow_to_narrow(h, src, dst):
    """Through fp32 (exact), then one rounding: all src patterns."""
    bits = all_patterns(src)
    got = device_convert(h, bits, src, dst)
    with np.errstate(invalid="ignore"):
        want = ref_bits(ref_decode(bits, src), dst)
    assert_bits_equal(got, want, f"{src} -> {dst}")


def test_empty_input():
    assert encode_bits(np.empty(0, np.float32), "bf16").size == 0


# ---- vector body vs scalar tail vs SIMD level ----

@pytest.mark.parametrize("name", NARROW)
def test_every_length_and_offset(h, name):
    """Lengths 1..40 at several offsets: each element is converted by the vector body or the
    scalar tail depending on where it falls; all must match the reference."""
    x = special_values(name)
    rng = np.random.default_rng(1)
    x = x[rng.permutation(x.size)]
    want = ref_bits(x, name)
    for n in range(1, 41):
        for start in (0, 1, 5, 16, 37):
            assert_bits_equal(encode_bits(x[start:start + n], name), want[start:start + n], f"fp32 -> {name} n={n}")
    narrow = want[:4099]
    with np.errstate(invalid="ignore"):
        wide = ref_decode(narrow, name).view(np.uint32)
    for n in list(range(1, 41)) + [4099]:
        assert_bits_equal(device_convert(h, narrow[:n], name, "fp32"), wide[:n], f"{name} -> fp32 n={n}")


def _run_all(h):
    """Every conversion the SIMD paths implement, on special and random values."""
    for name in NARROW:
        x = np.concatenate([special_values(name), random_values(200_003, seed=3)])
        yield encode_bits(x, name)
        yield device_convert(h, all_patterns(name), name, "fp32")
        for dst in NARROW:
            if dst != name:
                yield device_convert(h, all_patterns(name), name, dst)


@pytest.mark.slow
def test_simd_levels_agree():
    """DATAFLOW_SIMD caps the path; avx512, avx2 and scalar must produce identical bits."""
    digests = assert_simd_levels_agree("test_datatype")
    # and they agree with the reference computed here
    digest = hashlib.sha256()
    for name in NARROW:
        x = np.concatenate([special_values(name), random_values(200_003, seed=3)])
        digest.update(ref_bits(x, name).tobytes())
        bits = all_patterns(name)
        with np.errstate(invalid="ignore"):
            digest.update(ref_decode(bits, name).view(np.uint32).tobytes())
            for dst in NARROW:
                if dst != name:
                    digest.update(ref_bits(ref_decode(bits, name), dst).tobytes())
    assert digests["scalar"] == digest.hexdigest()
