"""Running a bench/ script as a user does: its JSON and its one-line summary."""
import json
import os
import subprocess
import sys

from paths import ROOT

BENCH = os.path.join(ROOT, "bench")


def run_bench(script, *args, timeout=120):
    """(the JSON result, the summary line) of `python bench/SCRIPT ARGS`; fails on a non-zero exit."""
    out = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr
    body, summary = out.stdout.rstrip("\n").rsplit("\n", 1)
    assert summary.strip()
    return json.loads(body), summary
