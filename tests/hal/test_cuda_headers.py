"""The CUDA backend declares the few CUDA, cuBLASLt and cuDNN types and constants it uses in
private headers (it builds without NVIDIA's headers and loads the libraries with dlopen). This
checks every enumerator value and every struct layout there against NVIDIA's real headers, as
the pip wheels ship them (nvidia-cublas: cublasLt.h, cublas_api.h; nvidia-cuda-runtime: cuda.h,
library_types.h; nvidia-cudnn-cu13: cudnn_graph.h), or a CUDA toolkit's include directory.
Headers are read as text: enumerators with their values (implicit ones counted on from the
previous), structs as their member lists. In CI (CI=true) a missing header fails; elsewhere it
skips naming the wheel to install."""
import glob
import os
import re
import sysconfig

import pytest
from paths import ROOT

SRC = os.path.join(ROOT, "backends", "cuda", "src")


def include_dirs():
    site = sysconfig.get_paths()["purelib"]
    dirs = sorted(glob.glob(os.path.join(site, "nvidia", "*", "include")))
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            dirs.append(os.path.join(root, "include"))
    return dirs + ["/usr/include"]


def real_header(name, wheel):
    for d in include_dirs():
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must check the private CUDA headers, but {name} is missing (pip install {wheel})")
    pytest.skip(f"{name} not found (pip install {wheel})")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _evaluate(expr, names):
    """The value of a header's integer expression, or None when it uses anything unknown."""
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr.strip())
    expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda t: str(names.get(t.group(0), t.group(0))), expr)
    if re.search(r"[A-Za-z_]", re.sub(r"0[xX][0-9a-fA-F]+", "", expr)) or "None" in expr:
        return None
    try:
        return int(eval(expr, {"__builtins__": {}}))  # noqa: S307 (digits and operators of a header)
    except (SyntaxError, ArithmeticError, TypeError):
        return None


def enumerators(text):
    """name -> value of every enumerator of every enum in the header text (None where it rests
    on something the text does not define)."""
    text = strip_comments(text)
    values = {}
    for name, expr in re.findall(r"^\s*#\s*define\s+([A-Za-z_]\w*)[ \t]+([^\n]+)$", text, flags=re.M):
        v = _evaluate(expr, values)
        if v is not None:
            values[name] = v
    text = re.sub(r"^\s*#[^\n]*$", "", text, flags=re.M)  # conditionals inside enums: every branch read
    for body in re.findall(r"\benum\b[^{;]*\{(.*?)\}", text, flags=re.S):
        nxt = 0
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            m = re.match(r"([A-Za-z_]\w*)(?:\s+[A-Za-z_]\w*)*\s*(?:=\s*(.+))?$", item, flags=re.S)
            assert m, f"cannot read enumerator {item!r}"
            name, expr = m.groups()
            if expr is not None:
                nxt = _evaluate(expr, values)
            values[name] = nxt
            nxt = None if nxt is None else nxt + 1
    return values


def structs(text):
    """typedef name -> tuple of member declarations, whitespace-normalized."""
    text = strip_comments(text)
    out = {}
    for body, name in re.findall(r"typedef\s+struct\s*\w*\s*\{([^{}]*)\}\s*(\w+)\s*;", text):
        out[name] = tuple(" ".join(m.split()) for m in body.split(";") if m.strip())
    return out


def private(name):
    with open(os.path.join(SRC, name)) as f:
        return f.read()


def real(*names_and_wheels):
    text = ""
    for name, wheel in names_and_wheels:
        with open(real_header(name, wheel)) as f:
            text += f.read() + "\n"
    return text


def assert_same_values(ours, theirs, what):
    assert ours, f"{what}: no enumerators read"
    missing = sorted(n for n in ours if theirs.get(n) is None)
    wrong = {n: (v, theirs[n]) for n, v in ours.items() if theirs.get(n) is not None and theirs[n] != v}
    assert not missing, f"{what}: not in the real headers (or not readable there): {missing}"
    assert not wrong, f"{what}: ours vs real: {wrong}"


def test_enumerator_reader():
    text = """typedef enum { A = 2, B, C = A + 10, D CUDNN_DEPRECATED_ENUM = 0x10, E = (1 << 3), /* x, y */ F } T;
              enum { G = 5u, H };"""
    assert enumerators(text) == {"A": 2, "B": 3, "C": 12, "D": 16, "E": 8, "F": 9, "G": 5, "H": 6}
    assert structs("typedef struct { int a[4];\n float  b; } S;") == {"S": ("int a[4]", "float b")}


def test_cublaslt_private_header_matches_cublas():
    theirs_text = real(("cublasLt.h", "nvidia-cublas"), ("cublas_api.h", "nvidia-cublas"),
                       ("library_types.h", "nvidia-cuda-runtime"))
    ours_text = private("cublaslt.h")
    assert_same_values(enumerators(ours_text), enumerators(theirs_text), "cublaslt.h")
    ours, theirs = structs(ours_text), structs(theirs_text)
    for name in ("cublasLtMatmulAlgo_t", "cublasLtMatmulHeuristicResult_t"):
        assert name in ours and name in theirs, name
        assert ours[name] == theirs[name], f"{name}: ours {ours[name]} vs real {theirs[name]}"


# The cuDNN version the backend needs before it uses each group of names (cuda_launch_config.h's
# CUDA_CUDNN_SDPA_*, checked against cudnnGetVersion at run time); a header older than that may
# lack them. Longest prefix first; names not listed are needed by every version the backend uses.
CUDNN_SINCE = (("CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH", "CUDA_CUDNN_SDPA_CAUSAL"),
               ("CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH", "CUDA_CUDNN_SDPA_CAUSAL"),
               ("CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK", "CUDA_CUDNN_SDPA_CAUSAL"),
               ("CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK", "CUDA_CUDNN_SDPA_CAUSAL"),
               ("CUDNN_ATTR_OPERATION_SDPA_BWD", "CUDA_CUDNN_SDPA_BWD"),
               ("CUDNN_BACKEND_OPERATION_SDPA_BWD", "CUDA_CUDNN_SDPA_BWD"),
               ("CUDNN_ATTR_OPERATION_SDPA_FWD", "CUDA_CUDNN_SDPA_FWD"),
               ("CUDNN_BACKEND_OPERATION_SDPA_FWD", "CUDA_CUDNN_SDPA_FWD"))


def assert_cudnn_values(ours, theirs, version, needs):
    """As assert_same_values, but a name the header lacks passes when the backend uses it only from
    a cuDNN newer than the header's version (needs: the CUDA_CUDNN_SDPA_* values)."""
    def since(name):
        return next((needs[macro] for prefix, macro in CUDNN_SINCE if name.startswith(prefix)), 0)
    kept = {n: v for n, v in ours.items() if theirs.get(n) is not None or since(n) <= version}
    assert_same_values(kept, theirs, f"cudnn_api.h against cuDNN {version}")


def cudnn_needs():
    with open(os.path.join(SRC, "cuda_launch_config.h")) as f:
        values = enumerators(f.read())
    return {macro: values[macro] for _, macro in CUDNN_SINCE}


def test_cudnn_private_header_matches_cudnn():
    text = real(("cudnn_version.h", "nvidia-cudnn-cu13"), ("cudnn_graph.h", "nvidia-cudnn-cu13"))
    theirs = enumerators(text)
    assert_cudnn_values(enumerators(private("cudnn_api.h")), theirs, theirs["CUDNN_VERSION"], cudnn_needs())


def test_cudnn_names_newer_than_the_header_may_be_missing():
    """A header older than 9.21 lacks the causal subgraph's names (the backend uses them only from
    9.21 on): that passes; lacking a name every version needs, or a wrong value, fails."""
    needs = cudnn_needs()
    ours = {"CUDNN_STATUS_SUCCESS": 0, "CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC": 2800,
            "CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH": 2811, "CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_XDESC": 3000}
    old = {"CUDNN_STATUS_SUCCESS": 0, "CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC": 2800}
    assert_cudnn_values(ours, old, needs["CUDA_CUDNN_SDPA_CAUSAL"] - 100, needs)
    with pytest.raises(AssertionError, match="SUBGRAPH"):
        assert_cudnn_values(ours, old, needs["CUDA_CUDNN_SDPA_CAUSAL"], needs)
    with pytest.raises(AssertionError, match="SDPA_FWD_QDESC"):
        assert_cudnn_values(ours, {"CUDNN_STATUS_SUCCESS": 0}, needs["CUDA_CUDNN_SDPA_FWD"], needs)
    with pytest.raises(AssertionError, match="ours vs real"):
        assert_cudnn_values(ours, dict(old, CUDNN_STATUS_SUCCESS=1), 90000, needs)


def test_driver_private_header_matches_cuda_h():
    theirs = enumerators(real(("cuda.h", "nvidia-cuda-runtime")))
    assert_same_values(enumerators(private("cuda_driver.h")), theirs, "cuda_driver.h")
