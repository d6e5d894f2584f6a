"""`dataflow train --nproc N` and `mpirun -n N dataflow train`: data-parallel runs of the real model
whose checkpoints resume with any number of processes, continuing as one process would (the oracle:
an uninterrupted single-process run); rank 0 alone speaks; a lost rank or a Ctrl-C ends the job as
the command promises. Flag checks run in-process."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dataflow.io import checkpoint
from tolerances import TRAINED_WEIGHTS_RTOL, assert_trained_weights_close
from cli_helpers import MICRO, SMALL, dataflow_subprocess, run_cli, subprocess_env

pytestmark = pytest.mark.slow  # multi-process CLI training runs

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (Debian: apt-get install openmpi-bin "
                                                         "libopenmpi-dev)")
# the 4-step lr schedule of the reference, which runs of 2 + 2 steps continue across their resume
COMMON = ("--config", "micro.json", "--batch", "4", "--seq-len", "16", "--eval-every", "1", "--schedule-steps", "4")
GUARD_SECONDS = 60  # a job still running after this has hung: the test fails


def _mpirun(ranks, *args, cwd):
    """`mpirun -n ranks dataflow ARGS` as a user types it."""
    env = {**subprocess_env(), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return subprocess.run([MPIRUN, "--oversubscribe", "-n", str(ranks), sys.executable, "-m", "dataflow.cli", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _assert_continues(run, reference):
    """run's losses and weights equal the uninterrupted single-process run's (the sums over ranks
    add in another order: the weights as tolerances.assert_trained_weights_close)."""
    assert run.state["step"] == reference.state["step"]
    assert run.state["data"]["position"] == reference.state["data"]["position"]
    np.testing.assert_allclose(run.state["losses"], reference.state["losses"], rtol=1e-6, atol=0)
    np.testing.assert_allclose([v for _, v in run.state["val_losses"]],
                               [v for _, v in reference.state["val_losses"]], rtol=1e-6, atol=0)
    assert_trained_weights_close(run.model_state, reference.model_state, TRAINED_WEIGHTS_RTOL["fp32"],
                                 reference.state["run"]["lr"], reference.state["step"])  # the peak lr bounds each step


@needs_mpirun
def test_checkpoints_resume_with_any_number_of_processes(tmp_path):
    (tmp_path / "micro.json").write_text(MICRO)
    assert dataflow_subprocess("train", "--steps", "4", *COMMON, "--out", "ref", cwd=tmp_path).returncode == 0
    reference = checkpoint.load(tmp_path / "ref" / "checkpoint")

    # 2 ranks (the launcher; the optimizer state sharded) -> 1 process
    two = dataflow_subprocess("train", "--steps", "2", *COMMON, "--out", "a", "--nproc", "2", "--shard-optimizer", cwd=tmp_path)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("dataflow train: Llama") == 1 and two.stdout.count("train: 2 steps") == 1, two.stdout
    assert "data-parallel: 2 ranks (mpirun), 2 sequences each per step, optimizer state sharded" in two.stdout
    assert two.stderr.count("step 2/2") == 1, two.stderr  # rank 1 prints no progress
    assert dataflow_subprocess("train", "--steps", "2", "--resume", "--out", "a", cwd=tmp_path).returncode == 0
    _assert_continues(checkpoint.load(tmp_path / "a" / "checkpoint"), reference)

    # 1 process -> 2 ranks (mpirun as a user runs it; sharded: each rank loads its part)
    assert dataflow_subprocess("train", "--steps", "2", *COMMON, "--out", "b", cwd=tmp_path).returncode == 0
    resumed = _mpirun(2, "train", "--steps", "2", "--resume", "--out", "b", "--shard-optimizer", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("resuming b/checkpoint at step 2") == 1, resumed.stdout
    _assert_continues(checkpoint.load(tmp_path / "b" / "checkpoint"), reference)
    assert sorted(os.listdir(tmp_path / "b")) == ["checkpoint", "loss.png"]


@needs_mpirun
@pytest.mark.parametrize("shard", [[], ["--shard-optimizer"]])
def test_nproc_trains_in_the_ring_under_a_device_cap(tmp_path, shard):
    """--nproc 2 with a device cap all-resident training does not fit: each rank plans into the ring
    (the executor sums every block's gradient over the ranks as it goes home; ZeRO-1: each rank
    keeps and updates its half of the optimizer state) and the run continues as one uninterrupted
    all-resident process would."""
    (tmp_path / "micro.json").write_text(MICRO)
    assert dataflow_subprocess("train", "--steps", "2", *COMMON, "--out", "ref", cwd=tmp_path).returncode == 0
    ring = dataflow_subprocess("train", "--steps", "2", *COMMON, "--out", "ring", "--nproc", "2", "--device-memory", "800KiB",
                     "--host-memory", "1GiB", *shard, cwd=tmp_path)
    assert ring.returncode == 0, ring.stdout + ring.stderr
    assert "ring: training does not fit the device" in ring.stdout, ring.stdout
    assert ("optimizer state sharded (ZeRO-1)" in ring.stdout) == bool(shard), ring.stdout
    _assert_continues(checkpoint.load(tmp_path / "ring" / "checkpoint"),
                      checkpoint.load(tmp_path / "ref" / "checkpoint"))
    if shard:  # the gathered state resumes into 2 sharded ring ranks (each writes its part)
        assert dataflow_subprocess("train", "--steps", "2", "--resume", "--out", "ref", cwd=tmp_path).returncode == 0
        resumed = _mpirun(2, "train", "--steps", "2", "--resume", "--out", "ring", "--shard-optimizer",
                          "--device-memory", "800KiB", "--host-memory", "1GiB", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "ring: training does not fit the device" in resumed.stdout, resumed.stdout
        _assert_continues(checkpoint.load(tmp_path / "ring" / "checkpoint"),
                          checkpoint.load(tmp_path / "ref" / "checkpoint"))


@pytest.mark.parametrize("argv,message", [
    (["--nproc", "0"], "argument --nproc: must be >= 1, got 0"),
    (["--nproc", "2", "--batch", "3"], "--batch: 3 sequences per step do not split evenly over 2 ranks; pass a "
                                       "multiple of 2"),
    (["--shard-optimizer"], "--shard-optimizer: shards the optimizer state over several ranks; add --nproc N"),
    (["--nproc", "2", "--shard-optimizer", "--disk", "."], "--disk: --shard-optimizer (ZeRO-1) keeps each rank's "
                                                            "part of the optimizer state in memory"),
])
def test_nproc_is_checked_before_anything_starts(stand_in, tmp_path, capsys, argv, message):  # noqa: F811
    assert run_cli("train", *SMALL, *argv, "--out", str(tmp_path / "run")) == 2
    assert message in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_missing_mpirun_is_a_clear_error(stand_in, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_cli("train", *SMALL, "--nproc", "2", "--out", str(tmp_path / "run")) == 2
    assert ("--nproc 2: running 2 ranks needs Open MPI's mpirun, which is not on PATH (Debian: apt-get install "
            "openmpi-bin libopenmpi-dev)") in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@needs_mpirun
def test_nproc_under_mpirun_must_match_the_job(tmp_path):
    (tmp_path / "micro.json").write_text(MICRO)
    r = _mpirun(2, "train", "--steps", "1", *COMMON, "--nproc", "3", "--out", "run", cwd=tmp_path)
    assert r.returncode == 2
    for rank in (0, 1):  # every rank names itself
        assert (f"dataflow train: rank {rank}: --nproc 3: this process is one of 2 ranks started by mpirun; drop "
                f"--nproc") in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "run")


def _start(tmp_path):
    """A long --nproc 2 run; returns the launcher once rank 0 has printed its banner."""
    (tmp_path / "micro.json").write_text(MICRO)
    job = subprocess.Popen([sys.executable, "-m", "dataflow.cli", "train", *COMMON, "--steps", "100000", "--out",
                            "run", "--nproc", "2", "--save-every", "2"], cwd=tmp_path, env=subprocess_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in job.stdout:
        if line.startswith("  output:"):
            break
    return job


def _rank_pid(rank, cwd):
    """The pid of the rank of `dataflow` running in directory cwd."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") != str(cwd):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no rank {rank} runs in {cwd}")


@needs_mpirun
def test_a_lost_rank_ends_the_job_naming_it(tmp_path):
    job = _start(tmp_path)
    time.sleep(2)
    os.kill(_rank_pid(1, tmp_path), signal.SIGKILL)
    try:
        out, err = job.communicate(timeout=GUARD_SECONDS)
    except subprocess.TimeoutExpired:
        job.kill()
        pytest.fail(f"the job still runs {GUARD_SECONDS} s after rank 1 was killed")
    assert job.returncode != 0
    assert re.search(r"process rank 1 with PID \d+ .*exited on signal 9", err), err
    if os.path.exists(tmp_path / "run" / "checkpoint"):
        checkpoint.load(tmp_path / "run" / "checkpoint")  # complete or absent


@needs_mpirun
def test_ctrl_c_saves_every_rank_at_the_same_step_and_prints_the_resume_command(tmp_path):
    job = _start(tmp_path)
    time.sleep(2)
    job.send_signal(signal.SIGINT)
    out, err = job.communicate(timeout=GUARD_SECONDS)
    assert job.returncode == 130, err
    assert "the ranks finish this step and save a checkpoint" in err and "Traceback" not in err
    assert "non-zero" not in err  # the ranks ended cleanly: mpirun has nothing to report
    command = re.search(r"resume with: (dataflow train .*)", err).group(1)
    step = checkpoint.load(tmp_path / "run" / "checkpoint").state["step"]
    assert step >= 1 and command == f"dataflow train --resume run/checkpoint --out run --steps {100000 - step} " \
                                    "--nproc 2"
    argv = command.split()[1:]
    argv[argv.index("--steps") + 1] = "2"
    resumed = dataflow_subprocess(*argv, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    ck = checkpoint.load(tmp_path / "run" / "checkpoint")
    assert ck.state["step"] == step + 2 and len(ck.state["losses"]) == step + 2
