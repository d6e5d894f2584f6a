"""The planner's disk tier (ring_plan.h: Dataflow_Ring_Request.disk_bytes): when host memory
runs out it moves optimizer state, then weights, then gradients into files, keeping two blocks
of each as host staging; the disk's capacity and rate are in the plan, its description and
`dataflow plan --json`; a disk too small, or bad sizes, are clear errors."""
import json

import pytest

import dataflow as df
from dataflow.cli import main as cli
from dataflow.errors import BadArgumentError, OutOfMemoryError

GiB = 1 << 30


def llama8b(host, disk=None, rate=None, state="8bit"):
    return df.ring.plan("llama3-8b", 8192, 24 * GiB, host, tokens_per_step=524288, profile="h100-sxm",
                        optimizer_state=state, disk_memory=disk, disk_bandwidth=rate)


def test_host_plans_have_no_disk():
    p = llama8b(128 * GiB, disk="1TiB")
    assert p.disk["used"] == 0 and p.disk_memory == {}
    assert p.disk["capacity"] == 1 << 40
    assert all(ph["disk"] == 0 for ph in p.phases)


def test_optimizer_state_goes_to_disk_first_then_weights_then_gradients():
    assert llama8b(128 * GiB, disk="1TiB", state="fp32").disk_memory == {}  # the host holds it all
    # fp32 state needs ~122 GiB of host: at 96 GiB the optimizer state alone moves
    p = llama8b(96 * GiB, disk="1TiB", state="fp32")
    assert set(p.disk_memory) == {"optimizer state"}
    assert p.host_memory["optimizer state"] == 0 and p.host_memory["disk staging"] > 0
    assert p.disk["read_per_step"] == p.disk["written_per_step"] == p.disk_memory["optimizer state"]
    assert p.host_total_bytes <= p.host_capacity and p.disk["used"] <= p.disk["capacity"]
    # 32 GiB of host: weights and gradients follow
    small = llama8b(32 * GiB, disk="1TiB", state="fp32")
    assert set(small.disk_memory) == {"optimizer state", "weights", "gradients"}
    assert small.host_total_bytes <= 32 * GiB and small.device_peak_bytes <= 24 * GiB
    assert small.predicted_step_seconds > p.predicted_step_seconds


def test_a_slower_disk_predicts_a_slower_step():
    fast, slow = llama8b(24 * GiB, "1TiB", rate="7GB"), llama8b(24 * GiB, "1TiB", rate="500MB")
    assert slow.predicted_step_seconds > fast.predicted_step_seconds
    assert max(ph["disk"] for ph in slow.phases) > max(ph["disk"] for ph in fast.phases)
    text = slow.describe()
    assert "disk (capacity 1.00 TiB" in text and "disk read" in text


def test_a_disk_too_small_names_what_it_needs():
    with pytest.raises(OutOfMemoryError, match=r"of disk \(disk_bytes\).*need at least .* on disk"):
        llama8b(24 * GiB, disk="1GiB")
    with pytest.raises(OutOfMemoryError, match="host"):
        llama8b(24 * GiB)  # no disk: the host is short


@pytest.mark.parametrize("kw, match", [
    ({"disk": -1}, "disk_memory"), ({"disk": "1e999TiB"}, "disk_memory"), ({"disk": 2**64}, "disk_memory"),
    ({"disk": "lots"}, "disk_memory"), ({"disk": "1TiB", "rate": 0}, "disk_bandwidth"),
    ({"disk": "1TiB", "rate": float("inf")}, "disk_(bandwidth|bytes_per_sec)")])
def test_bad_disk_sizes_are_refused(kw, match):
    with pytest.raises(BadArgumentError, match=match):
        llama8b(24 * GiB, **kw)


def test_cli_plan_shows_the_disk_tier(capsys):
    args = ["plan", "--config", "llama3-8b", "--seq-len", "8192", "--tokens-per-step", "524288",
            "--device-memory", "24GiB", "--host-memory", "24GiB", "--optimizer-state", "8bit",
            "--profile", "h100-sxm"]
    assert cli.main(args + ["--disk-memory", "1TiB", "--disk-bandwidth", "3GB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["disk"]["capacity"] == 1 << 40 and out["disk"]["bytes_per_second"] == 3e9
    assert out["disk"]["memory"]["optimizer state"] > 0
    assert "disk" in out["phases"][0]
    assert cli.main(args + ["--disk-bandwidth", "3GB"]) == 2
    assert "--disk-bandwidth: the rate of a disk tier; add --disk-memory" in capsys.readouterr().err
    assert cli.main(args + ["--disk-memory=-5GiB"]) == 2
    assert "--disk-memory" in capsys.readouterr().err


def test_disk_kinds_limit_what_the_disk_takes():
    """The Trainer asks for what its executor runs on disk (optimizer state): the planner then
    never puts weights or gradients there, and says so when the host is short."""
    p = df.ring.plan("llama3-8b", 8192, 24 * GiB, 96 * GiB, tokens_per_step=524288, optimizer_state="fp32",
                     disk_memory="1TiB", disk_kinds=("optimizer state",))
    assert set(p.disk_memory) == {"optimizer state"}
    with pytest.raises(OutOfMemoryError, match="host"):
        df.ring.plan("llama3-8b", 8192, 24 * GiB, 32 * GiB, tokens_per_step=524288, optimizer_state="fp32",
                     disk_memory="1TiB", disk_kinds=("optimizer state",))
    for bad in ((), ("activations",), "weights"):
        with pytest.raises(BadArgumentError, match="disk_kinds"):
            df.ring.plan("llama3-8b", 8192, 24 * GiB, 32 * GiB, disk_memory="1TiB", disk_kinds=bad)


def test_timeline_picture_has_a_disk_row(tmp_path, capsys):
    from dataflow.cli import plan_timeline
    phases = [{"name": "a", "start": 0.0, "inbound": 1.0, "compute": 1.0, "outbound": 0.0, "disk": 0.0},
              {"name": "b", "start": 1.0, "inbound": 0.0, "compute": 0.5, "outbound": 0.0, "disk": 1.0}]
    rows = plan_timeline.bars(phases)
    assert rows["disk"] == [(1, 1.0, 1.0, -0.4, 0.8)] and rows["inbound"] == [(0, 0.0, 1.0, 2.6, 0.8)]
    ax = plan_timeline.figure(phases, 2.0).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["disk", "outbound", "compute", "inbound"]
    path = tmp_path / "t.png"
    assert cli.main(["plan", "--config", "llama3-8b", "--seq-len", "8192", "--tokens-per-step", "524288",
                     "--device-memory", "24GiB", "--host-memory", "24GiB", "--disk-memory", "1TiB",
                     "--optimizer-state", "8bit", "--timeline", str(path)]) == 0
    assert path.read_bytes().startswith(b"\x89PNG")
