"""The benches run and print well-formed output: JSON, then one summary line. No timing
assertions: these machines are shared and noisy."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs the benchmarks

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")


def run_bench(script, *args):
    out = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    body, summary = out.stdout.rstrip("\n").rsplit("\n", 1)
    assert summary.strip()
    return json.loads(body), summary


def test_ops_quick():
    result, summary = run_bench("ops.py", "--quick")
    assert result["memcpy"]["gbs"] > 0
    assert {r["group"] for r in result["rows"]} >= {"attention", "cross_entropy", "optimizer", "rope_embedding",
                                                    "elementwise"}
    for r in result["rows"]:
        assert r["dataflow_ms"] > 0 and r["torch_ms"] > 0, r
    assert summary.startswith("ops host (2 threads") and f"{len(result['rows'])} cases" in summary


def test_matmul_small():
    result, summary = run_bench("matmul.py", "--sizes", "64", "--dtypes", "fp32")
    assert [(r["size"], r["dtype"]) for r in result["rows"]] == [(64, "fp32")]
    for r in result["rows"]:
        assert r["dataflow_gflops"] > 0 and r["torch_gflops"] > 0, r
    assert summary.startswith("matmul host:")


def test_ring_quick():
    result, summary = run_bench("ring.py", "--quick", "--steps", "1")
    assert result["scaling"]["throttle_bytes_per_s"] > 0 and len(result["rows"]) == 2
    for r in result["rows"]:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["ratio"] > 0, r
        assert r["device_peak_bytes"] <= r["cap_bytes"], r
    assert set(result["rows"][0]["trace"]["busy_s"]) >= {"compute", "inbound", "outbound"}
    assert summary.startswith("ring host (") and "predicted vs measured within 20% on" in summary


def test_train_quick():
    result, summary = run_bench("train.py", "--quick", "--dtypes", "fp32")
    (row,) = result["rows"]
    assert row["dtype"] == "fp32" and row["dataflow"]["tokens_per_s"] > 0 and row["torch"]["tokens_per_s"] > 0
    assert row["dataflow"]["rss_peak_mib"] > 0 and row["torch"]["rss_peak_mib"] > 0
    assert summary.startswith("train host (")
