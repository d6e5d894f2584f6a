"""Runs a snippet in a subprocess under a wall-clock timeout and an address-space limit, for the
adversarial tests whose failure is a crash, a hang or a runaway allocation: those end the
subprocess (a signal, the timeout, MemoryError), never the test session."""
import os
import resource
import subprocess
import sys
import textwrap

TIMEOUT_SECONDS = 60
MEMORY_BYTES = 4 << 30  # address space; the host backend's arenas and oneDNN fit well inside


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_isolated(code, timeout=TIMEOUT_SECONDS, args=()):
    """Runs `code` (dedented) with this interpreter; returns (exit status, stdout + stderr).
    Fails the calling test, naming the snippet's output so far, when it outlives `timeout`."""
    import pytest
    try:
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                           timeout=timeout, preexec_fn=_limit_memory, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"still running after {timeout} s (a hang): {e.stdout}{e.stderr}")
    return p.returncode, p.stdout + p.stderr


def assert_clean_error(code, error, message, timeout=TIMEOUT_SECONDS, args=()):
    """The snippet must end by raising `error` (a class name) whose message contains `message`:
    not a crash (a signal), not a hang, not another exception."""
    rc, out = run_isolated(code, timeout, args)
    assert rc == 1 and f"{error}: " in out and message in out, f"exit status {rc}:\n{out}"
