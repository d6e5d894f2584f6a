"""Training with the ring's disk tier (Trainer(disk=..., disk_memory=...)): the optimizer state
in a file under the directory equals the host tier bit for bit (fp32 and 8-bit state; a bf16
model's fp32 master weights too), under
the device cap, throttled or not; checkpoints read the state through the executor and resume
bit for bit, also after the process is killed (SIGKILL) in the middle of a disk write; bad
directories and sizes are clear errors."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dataflow as df
from dataflow.cli import main as cli
from dataflow.errors import BadArgumentError, OutOfMemoryError
from dataflow.io import checkpoint
from ring_models import CFG, HOST, KW, PROFILE, ROWS, SEQ, batches


def plans(state="fp32", dtype="fp32", master=False):
    """The smallest cap, a plan at it with too little host memory for its optimizer state and a
    disk tier taking it, and the same plan with the state on the host (the host tier)."""
    kw = dict(tokens_per_step=SEQ * ROWS, profile=PROFILE, optimizer_state=state, dtype=dtype, master_weights=master)
    with pytest.raises(OutOfMemoryError) as e:
        df.ring.plan(CFG, SEQ, 1024, HOST, **kw)
    cap = e.value.min_device_bytes
    host = df.ring.plan(CFG, SEQ, cap, HOST, **kw)
    disk = df.ring.plan(CFG, SEQ, cap, host.host_total_bytes - 1, disk_memory="64MiB", **kw)
    assert set(disk.disk_memory) == {"optimizer state"}
    return cap, disk.without_disk(), disk


def trainer(cap, plan, state="fp32", dtype="fp32", master=False, **disk):
    model = df.models.Llama(df.Handle("host", device_memory=cap, streams=5), CFG, dtype=dtype, seed=1)
    return df.Trainer(model, **KW, plan=plan, optimizer_state=state, master_weights=master or None, **disk)


@pytest.mark.parametrize("state, dtype, master", [("fp32", "fp32", False), ("8bit", "fp32", False),
                                                  ("fp32", "bf16", True)])
def test_disk_tier_equals_host_tier_bit_for_bit(tmp_path, state, dtype, master):
    cap, host_plan, disk_plan = plans(state, dtype, master)
    ref = trainer(cap, host_plan, state, dtype, master)
    t = trainer(cap, disk_plan, state, dtype, master, disk=tmp_path, disk_throttle="200MB")
    assert t._engine.ring.executor.disk_mode in ("O_DIRECT", "buffered")
    for b in batches(4, seed=3):
        assert t.step(b) == ref.step(b)
        assert t.last_grad_norm == ref.last_grad_norm
    a, b = t.model.state_dict(), ref.model.state_dict()
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    sa, sb = t.state_dict(), ref.state_dict()
    for key in ("exp_avg", "exp_avg_sq") + (("master",) if master else ()):
        for name in sb[key]:
            np.testing.assert_array_equal(sa[key][name], sb[key][name], err_msg=f"{key} {name}")
    h = t.model.handle
    assert h.memory_peak() <= h.memory_capacity() <= cap
    assert os.listdir(tmp_path) == []  # the working copy is unlinked: nothing outlives the run


def test_disk_reads_and_writes_are_on_their_stream(tmp_path):
    cap, _, disk_plan = plans()
    t = trainer(cap, disk_plan, disk=tmp_path, trace=True)
    t.step(batches(1)[0])
    t.trace(tmp_path.parent / "disk_trace.json")
    events = json.loads((tmp_path.parent / "disk_trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e.get("name", "") for e in events}
    assert any(n.startswith("disk read") for n in names) and any(n.startswith("disk write") for n in names)
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "disk" in tracks


def test_bad_disk_arguments_are_clear_errors(tmp_path):
    cap, _, disk_plan = plans()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(BadArgumentError, match="is not a directory"):
        trainer(cap, disk_plan, disk=a_file)
    with pytest.raises(BadArgumentError, match="does not exist"):
        trainer(cap, disk_plan, disk=tmp_path / "missing")
    with pytest.raises(BadArgumentError, match="not writable"):
        trainer(cap, disk_plan, disk="/proc")  # even root cannot make a file there
    with pytest.raises(BadArgumentError, match="disk_memory: sizes a disk tier; add disk"):
        trainer(cap, disk_plan, disk_memory="1GiB")
    for size in ("-1", "1e999TiB", 2**64, "lots", 0):
        with pytest.raises(BadArgumentError, match="disk_memory"):
            trainer(cap, None, disk=tmp_path, disk_memory=size)
    with pytest.raises(BadArgumentError, match="disk_throttle"):
        trainer(cap, disk_plan, disk=tmp_path, disk_throttle="-3MB")
    with pytest.raises(BadArgumentError, match="optimizer state on disk: a disk directory is required"):
        trainer(cap, disk_plan)  # the plan needs a directory
    model = df.models.Llama(df.Handle("host", device_memory=cap + 1024), CFG, seed=1)  # the arena's rounding
    with pytest.raises(OutOfMemoryError, match="on disk"):  # the disk is too small for the state
        df.Trainer(model, **KW, host_memory=disk_plan.host_total_bytes, seq_len=SEQ, batch_size=ROWS, profile=PROFILE,
                   disk=tmp_path, disk_memory=4096)


@pytest.mark.parametrize("dtype, master", [("fp32", False), ("bf16", True)])
def test_checkpoint_of_a_disk_tier_resumes_bit_for_bit(tmp_path, dtype, master):
    cap, _, disk_plan = plans("fp32", dtype, master)
    data = batches(6, seed=5)
    t = trainer(cap, disk_plan, "fp32", dtype, master, disk=tmp_path)
    for b in data[:3]:
        t.step(b)
    checkpoint.save_training(tmp_path / "ck", t.model, t)
    straight = [t.step(b) for b in data[3:]]
    ck = checkpoint.load(tmp_path / "ck")
    t2 = trainer(cap, disk_plan, "fp32", dtype, master, disk=tmp_path)
    checkpoint.restore_training(ck, t2.model, t2)
    assert [t2.step(b) for b in data[3:]] == straight
    a, b = t.state_dict(), t2.state_dict()
    for key in ("exp_avg", "exp_avg_sq") + (("master",) if master else ()):
        assert all(np.array_equal(a[key][n], b[key][n]) for n in a[key]), key


KILLED_RUN = """
import sys, time
import numpy as np
import dataflow as df
from dataflow.io import checkpoint
sys.path.insert(0, {helpers!r})
from ring_models import CFG, KW, PROFILE, ROWS, SEQ, batches
plan = df.ring.plan(CFG, SEQ, {cap}, {host}, tokens_per_step=SEQ * ROWS, profile=PROFILE, dtype="fp32",
                    disk_memory="64MiB")
model = df.models.Llama(df.Handle("host", device_memory={cap}, streams=5), CFG, seed=1)
t = df.Trainer(model, **KW, plan=plan, disk={disk!r}, disk_throttle="{throttle}")
data = batches(6, seed=5)
for b in data[:3]:
    t.step(b)
checkpoint.save_training({ck!r}, model, t)
print("saved", flush=True)
t.step(data[3])  # killed in its optimizer's disk writes (throttled to last)
print("finished", flush=True)
"""


def disk_bytes_written(pid):
    """Bytes the process has passed to write calls (/proc/PID/io wchar; after "saved" only the disk
    tier's pwrite calls write: stdout waits for the step)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


@pytest.mark.slow
def test_sigkill_during_a_disk_write_loses_nothing(tmp_path):
    """A process killed while the optimizer writes its state to disk leaves the last checkpoint
    whole; resuming from it gives the uninterrupted run's losses and weights."""
    cap, _, disk_plan = plans()
    state_bytes = disk_plan.disk_memory["optimizer state"]
    throttle = max(state_bytes, 1)  # the step's writes take about a second
    helpers = os.path.join(os.path.dirname(os.path.dirname(__file__)), "helpers")
    (tmp_path / "disk").mkdir()
    script = KILLED_RUN.format(helpers=helpers, cap=cap, host=disk_plan.host_capacity, disk=str(tmp_path / "disk"),
                               throttle=throttle, ck=str(tmp_path / "ck"))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert proc.stdout.readline().strip() == "saved"
    # the fourth step's optimizer writes its first block back (the bytes written grow; its reads
    # came first): kill it there, the file half old state, half new
    written = disk_bytes_written(proc.pid)
    deadline = time.monotonic() + 60
    while disk_bytes_written(proc.pid) == written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert disk_bytes_written(proc.pid) > written, "no disk write seen"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert os.listdir(tmp_path / "disk") == []  # the working copy went with the process

    data = batches(6, seed=5)
    ref = trainer(cap, disk_plan, disk=tmp_path / "disk")
    for b in data[:3]:
        ref.step(b)
    straight = [ref.step(b) for b in data[3:]]
    t = trainer(cap, disk_plan, disk=tmp_path / "disk")
    checkpoint.restore_training(checkpoint.load(tmp_path / "ck"), t.model, t)
    assert [t.step(b) for b in data[3:]] == straight
    a, b = t.model.state_dict(), ref.model.state_dict()
    assert all(np.array_equal(a[n], b[n]) for n in a)


def test_cli_train_with_a_disk_tier(tmp_path, capsys):
    """`dataflow train --disk DIR`: with less host memory than the host tier's plan needs, the
    optimizer state goes to the disk tier; the run trains, checkpoints and says where it is."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CFG, "model_type": "llama", "vocab_size": 260}))
    cfg = {**CFG, "vocab_size": 260}
    host = df.ring.plan(cfg, SEQ, 1 << 20, HOST, tokens_per_step=SEQ * ROWS, profile=PROFILE, dtype="fp32")
    (tmp_path / "disk").mkdir()
    args = ["train", "--config", str(config), "--tokenizer", "bytes", "--batch", str(ROWS), "--seq-len", str(SEQ),
            "--steps", "2", "--dtype", "fp32", "--device-memory", "1MiB", "--host-memory",
            str(host.host_total_bytes - 1), "--out", str(tmp_path / "run")]
    assert cli.main(args + ["--disk", str(tmp_path / "disk"), "--disk-memory", "64MiB"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"disk tier: optimizer state [\d.]+ MiB in .*disk \((O_DIRECT|buffered)\)", out), out
    assert checkpoint.load(tmp_path / "run" / "checkpoint").state["step"] == 2
    assert cli.main(["train", "--config", str(config), "--disk-memory", "1GiB", "--out", str(tmp_path / "r2")]) == 2
    assert "--disk-memory: sizes a disk tier; add --disk" in capsys.readouterr().err
    assert cli.main(["train", "--config", str(config), "--disk", str(config), "--out", str(tmp_path / "r3")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_the_trainer_plans_with_the_disks_measured_rate(tmp_path):
    """A Trainer's plan counts the directory's measured rate (disk_tier.measured_rate: written
    and read back, the probe file gone after) or the throttle when that is slower."""
    from dataflow.training.disk_tier import DiskTier, measured_rate
    assert measured_rate(tmp_path) > 1e6 and os.listdir(tmp_path) == []
    cap, _, disk_plan = plans()
    model = df.models.Llama(df.Handle("host", device_memory=cap + 1024, streams=5), CFG, seed=1)
    t = df.Trainer(model, **KW, host_memory=disk_plan.host_capacity, seq_len=SEQ, batch_size=ROWS, profile=PROFILE,
                   disk=tmp_path, disk_memory="64MiB", disk_throttle="1MB")
    assert t.plan.disk["bytes_per_second"] == 1e6 and t.plan.disk_memory
    assert DiskTier(tmp_path).bytes_per_second > 1e6
