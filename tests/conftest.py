import pytest

import dataflow as df


@pytest.fixture
def h():
    handle = df.Handle("host", streams=4, device_memory="256MiB")
    yield handle
    handle.close()
