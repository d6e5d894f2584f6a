"""The CUDA backend without a GPU: it loads, and asking for a handle fails with a clear
error, never a crash. With a GPU, the backend-parametrized tests cover it."""
import ctypes

import pytest

import dataflow as df


def _driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is installed here")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_handle_without_driver_raises_load_error(spec):
    with pytest.raises(df.LoadError, match=r"cannot load libcuda\.so\.1 \(no NVIDIA driver\?\)"):
        df.Handle(spec)


def test_bad_device_spec_is_a_bad_argument():
    with pytest.raises(df.BadArgumentError, match="non-negative integer"):
        df.Handle("cuda:x")


def test_import_loads_nothing_cuda_specific():
    import subprocess
    import sys
    code = "import sys, dataflow; print(any('cuda' in m for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
