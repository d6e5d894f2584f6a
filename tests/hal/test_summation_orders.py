"""The tests that compare two training runs whose fp32 sums run in different orders, once more
under other orders than this CPU's default: the host kernels' and oneDNN's vector paths capped
(DATAFLOW_SIMD, ONEDNN_MAX_CPU_ISA). oneDNN's AVX-512, AVX2 and SSE4.1 kernels block their sums
differently, so their tolerances (tolerances.assert_trained_weights_close) are exercised with
more than one order on every machine, and a tolerance that only holds for one CPU fails here
rather than on a user's. Each run's report header must show the caps in force."""
import os
import subprocess
import sys

import pytest
from paths import find_test_file

pytestmark = pytest.mark.slow  # reruns the training comparisons under two ISA caps

COMPARISONS = [
    "test_ring_trainer.py::test_ring_trainer_splits_sequences_over_a_context",
    "test_ring_kv_context.py::test_fp32_ring_over_a_context_equals_whole_sequences[0-None]",
    "test_ring_kv_context.py::test_every_save_level_and_rounds_of_several_sequences",
    "test_ring_kv_context.py::test_bf16_ring_over_a_context_equals_whole_sequences",
    "test_llama.py::test_adamw_five_steps_match_torch[host-gqa_untied]",
    "test_llama.py::test_gradient_accumulation_equals_one_batch[host]",
    "test_distributed.py::test_two_ranks_on_half_batches_equal_one_process_on_whole_batches",
]


@pytest.mark.parametrize("caps, header", [
    ({"DATAFLOW_SIMD": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "host kernels: avx2; host matmul: oneDNN"),
    ({"DATAFLOW_SIMD": "scalar", "ONEDNN_MAX_CPU_ISA": "SSE41"}, "host kernels: scalar; host matmul: oneDNN"),
])
def test_training_comparisons_under_capped_vector_paths(caps, header):
    from dataflow.build_info import info
    if not info()["onednn"]:
        pytest.skip("this build has no oneDNN: its matmul order is the fallback's on every CPU")
    env = {**os.environ, **caps}
    tests = [find_test_file(t.split("::")[0]) + "::" + t.split("::", 1)[1] for t in COMPARISONS]
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *tests], env=env,
                       capture_output=True, text=True, timeout=1200)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    want_isa = "ISA " + caps["ONEDNN_MAX_CPU_ISA"].lower()
    assert header in out and want_isa in out, out[:2000]
