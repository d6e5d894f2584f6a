"""The Vulkan backend beyond the backend-parametrized tests: its device listing, a clear error
for a device that is not there, and which default ops it has: each op it lacks skips with a
reason naming the op, so the coverage shows in every run."""
import pytest

import dataflow as df
from dataflow.catalogue import OPS
from conftest import backend_unavailable, missing_op

pytestmark = pytest.mark.skipif(bool(backend_unavailable("vulkan")), reason=str(backend_unavailable("vulkan")))


def test_list_devices_has_properties():
    import dataflow.vulkan
    devices = dataflow.vulkan.list_devices()
    assert devices and [d["index"] for d in devices] == list(range(len(devices)))
    d = devices[0]
    assert d["usable"] and d["missing"] == "" and d["name"] and d["device_local_bytes"] > 0
    assert d["type"] in ("discrete", "integrated", "virtual", "cpu", "other")
    assert int(d["api_version"].split(".")[0]) == 1 and int(d["api_version"].split(".")[1]) >= 2


def test_train_banner_names_the_device():
    import dataflow.vulkan
    from dataflow.cli.train import _device
    name = dataflow.vulkan.list_devices()[0]["name"]
    assert _device("vulkan") == f"vulkan: {name}" and _device("vulkan:0") == f"vulkan:0: {name}"
    assert _device("host") == "host"


def test_missing_device_index_lists_the_devices():
    import dataflow.vulkan
    n = len(dataflow.vulkan.list_devices())
    with pytest.raises(df.DataflowError, match=rf"vulkan:{n} requested, {n} device\(s\): vulkan:0 = "):
        df.Handle(f"vulkan:{n}", streams=1)


@pytest.mark.parametrize("op", sorted(name for name, info in OPS.items() if not info.part_of or name.endswith("_partials")))
def test_default_op_is_on_vulkan(op):
    if missing_op("vulkan", [op]):
        pytest.skip(f"op {op} is not on vulkan yet")
    with df.Handle("vulkan", streams=1) as h:
        assert h.backend == "vulkan"  # the handle registered every default op vulkan has
