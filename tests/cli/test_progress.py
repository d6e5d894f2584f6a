"""The progress line: labelled figures, and a validation loss from an earlier step said to be one."""
import io

from dataflow.cli.progress import Progress


def test_progress_line_labels_memory_and_dates_an_old_validation():
    out = io.StringIO()
    now = [0.0]
    p = Progress(10, first=20, stream=out, clock=lambda: now[0])
    p.every = 1  # a line per step
    for done in range(1, 4):
        now[0] += 1.0
        p.update(done, 5.0 - done / 10, 1000.0, 3 << 20, val=4.5 if done == 2 else None)
    first, second, third = out.getvalue().splitlines()
    assert "val" not in first
    assert "| val 4.500 |" in second  # this step's
    assert "| val 4.500 (step 22) |" in third  # step 23 shows step 22's, and says so
    assert third.startswith("step 23/30 ") and third.endswith("| device memory 3.0 MiB")
