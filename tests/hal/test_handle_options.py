"""Backend options: Handle(threads=, transfer_bandwidth=) and options="key=value,...", checked by
the backend (unknown keys name the known ones, values in range)."""
import numpy as np
import pytest

import dataflow as df


def test_threads_and_bandwidth_become_options():
    with df.Handle("host", streams=1, device_memory="1MiB", threads=1, transfer_bandwidth="1GB") as h:
        np.testing.assert_array_equal(h.from_numpy(np.arange(5, dtype=np.float32)).numpy(), np.arange(5))
    with df.Handle("host", streams=1, device_memory="1MiB", options="threads=2,transfer_bytes_per_sec=1e9"):
        pass


@pytest.mark.parametrize("kwargs, message", [
    (dict(threads=5000), r"host backend option threads: must be in \[1, \d+\], got 5000"),
    (dict(options="threads=1.5"), "expected a whole number"),
    (dict(options="bogus=1"), 'unknown option "bogus"; known: threads, transfer_bytes_per_sec'),
    (dict(options="threads=2", threads=3), "threads given twice"),
])
def test_bad_options_are_rejected(kwargs, message):
    with pytest.raises(df.BadArgumentError, match=message):
        df.Handle("host", streams=1, device_memory="1MiB", **kwargs)
    with pytest.raises(df.BadArgumentError, match="options must be a string"):
        df.Handle("host", options=3)
