"""`dataflow train --nproc N`: the same command as N local ranks of an Open MPI job.

The launcher runs `mpirun -n N python -m dataflow.cli ARGV...` (ranks see the same arguments,
--nproc included, and check it against the job's size). mpirun runs in a session of its own, so
a Ctrl-C reaches only the launcher, which turns it into a request the ranks share at the end of
their step (a stop file named in STOP_FILE_ENV; mpirun itself would answer SIGINT by killing the
ranks, saving nothing): they save the checkpoint and rank 0 prints the resume command. A second
Ctrl-C ends the job at once. A rank that fails ends the job: mpirun kills the others and names it.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from ..errors import BadArgumentError

STOP_FILE_ENV = "DATAFLOW_STOP_FILE"


def mpirun_command(nproc, argv):
    """The mpirun command line running argv (`dataflow` arguments) on nproc local ranks."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise BadArgumentError(f"--nproc {nproc}: running {nproc} ranks needs Open MPI's mpirun, which is not on "
                               "PATH (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    # --oversubscribe: more ranks than cores works, as with torchrun; --bind-to none: each rank
    # runs --threads workers (default: its share of the cores), not one pinned core
    return [mpirun, "-n", str(nproc), "--oversubscribe", "--bind-to", "none", sys.executable, "-m", "dataflow.cli",
            *argv]


def run(command):
    """Runs the job; returns (its exit code, whether a Ctrl-C stopped it: the ranks saved a checkpoint
    and ended with 0, or a second Ctrl-C ended them)."""
    # a local job run by the user who asked for it: Open MPI's refusal to start as root guards clusters
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **os.environ}
    with tempfile.TemporaryDirectory(prefix="dataflow-launch-") as tmp:
        stop = os.path.join(tmp, "stop")
        env[STOP_FILE_ENV] = stop
        job = subprocess.Popen(command, env=env, start_new_session=True)
        requests = []

        def interrupt(*_):
            requests.append(True)
            if len(requests) > 1:  # the second Ctrl-C: mpirun ends every rank
                job.terminate()
                return
            open(stop, "w").close()
            print("\ndataflow train: interrupted: the ranks finish this step and save a checkpoint (Ctrl-C again "
                  "to quit without saving)", file=sys.stderr, flush=True)

        # the job has a session of its own: whatever ends the launcher ends it too
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, interrupt),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: job.terminate())}
        try:
            code = job.wait()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            if job.poll() is None:
                job.terminate()
                job.wait()
    stopped = len(requests) > 1 or (bool(requests) and code == 0)
    return (code if code >= 0 else 128 - code), stopped  # killed by a signal: the shell's 128 + signal
