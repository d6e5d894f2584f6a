"""Skeleton fingerprints: SHA-256 of the documented canonical encoding, stable, distinct."""
import hashlib
import itertools
import subprocess
import sys

import pytest

import dataflow as df
from dataflow.custom_ops import fingerprint_hex, skeleton

# Golden values: changing the encoding (or a datatype's number) breaks every registered op
# reference out there, so it must show up here.
GOLDEN = {
    ("matmul", ("bf16", "bf16", "fp32", "fp32", "int64_scalar", "int64_scalar", "int64_scalar", "bool_scalar",
                "bool_scalar", "fp32_scalar", "fp32_scalar")):
        "52fc6c724e09d1a38f4feb595f56ac708cdc37dd8dd69987a60bc00e6864e2f8",
    ("add", ("int64_scalar", "fp32_scalar", "fp32", "fp32_scalar", "fp32", "fp32")):
        "37efbc2dbeb222574f73af3b068f92281bb54c16ba039a13e5e34392279e1652",
    ("noargs", ()): "2e9c6308b011152dbc0728f7b6a823d380de779fd4843be528a1723a8c00a953",
}


def reference_fingerprint(name, arg_dtypes):
    """The encoding as documented in fingerprint.c, hashed with Python's hashlib."""
    enc = b"DFOP" + bytes([1, len(name)]) + name.encode() + bytes([len(arg_dtypes)])
    for d in arg_dtypes:
        enc += df.dtypes.enum(d).to_bytes(2, "little")
    return hashlib.sha256(enc).hexdigest()


@pytest.mark.parametrize("name,arg_dtypes", list(GOLDEN))
def test_fingerprint_is_sha256_of_canonical_encoding(name, arg_dtypes):
    assert fingerprint_hex(skeleton(name, arg_dtypes)) == reference_fingerprint(name, arg_dtypes)


def test_golden_fingerprints():
    assert {k: fingerprint_hex(skeleton(*k)) for k in GOLDEN} == GOLDEN


def test_fingerprint_same_in_a_fresh_process():
    code = ("from dataflow.custom_ops import fingerprint_hex, skeleton;"
            "print(fingerprint_hex(skeleton('matmul', ['fp16'] * 4)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == fingerprint_hex(skeleton("matmul", ["fp16"] * 4))


def test_distinct_skeletons_have_distinct_fingerprints():
    names = ["a", "b", "ab", "matmul", "matmul2"]
    dts = ["fp32", "bf16", "int64_scalar"]
    seen = {}
    for name in names:
        for n in range(3):
            for combo in itertools.product(dts, repeat=n):
                fp = fingerprint_hex(skeleton(name, combo))
                assert fp not in seen, (name, combo, seen.get(fp))
                seen[fp] = (name, combo)
    assert len(seen) == len(names) * (1 + 3 + 9)
