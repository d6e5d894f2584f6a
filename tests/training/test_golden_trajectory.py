"""Training is bit-identical to the golden trajectory recorded before the architecture change:
20 AdamW steps of the reference Llama, fp32 and bf16, every loss and grad norm bit and the final
weights' SHA-256 (golden_trajectory.py says how it was recorded). Each dtype runs in a
subprocess with the portable matmul engine set before the library loads."""
import json
import os
import subprocess
import sys

import pytest

from golden_trajectory import ENV
from paths import DATA, HELPERS

pytestmark = pytest.mark.slow  # full training trajectories in subprocesses



@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_training_matches_golden_trajectory(dtype):
    with open(os.path.join(DATA, "golden_trajectory.json")) as f:
        want = json.load(f)[dtype]
    r = subprocess.run([sys.executable, os.path.join(HELPERS, "golden_trajectory.py"), dtype],
                       env={**os.environ, **ENV}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    first_bad = next((i for i, (g, w) in enumerate(zip(got["loss_bits"], want["loss_bits"])) if g != w), None)
    assert got["loss_bits"] == want["loss_bits"], f"{dtype}: loss differs first at step {first_bad}"
    assert got["grad_norm_bits"] == want["grad_norm_bits"], f"{dtype}: grad norms differ"
    assert got["weights_sha256"] == want["weights_sha256"], f"{dtype}: final weights differ"
