"""The benches run and print well-formed output: JSON, then one summary line. No timing
assertions: these machines are shared and noisy."""
import os
import subprocess
import sys

import pytest
from bench_runner import BENCH, run_bench

pytestmark = pytest.mark.slow  # runs the benchmarks


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
    scaling = result["scaling"]
    assert scaling["throttle_bytes_per_s"] > 0 and len(result["rows"]) == 2
    # the link is scaled from the measured matmul rate, not the profile's rate fitted to the model
    assert scaling["throttle_bytes_per_s"] == pytest.approx(scaling["host_bf16_matmul_flops"] * scaling["bytes_per_flop"])
    for r in result["rows"]:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["ratio"] > 0, r
        assert r["device_peak_bytes"] <= r["cap_bytes"], r
    assert set(result["rows"][0]["trace"]["busy_s"]) >= {"compute", "inbound", "outbound"}
    assert summary.startswith("ring host (") and "predicted vs measured within 20% on" in summary


def test_train_quick():
    result, summary = run_bench("train.py", "--quick", "--dtypes", "fp32", "--rounds", "2", "--steps", "3",
                                "--seconds", "0.1")
    (row,) = result["rows"]
    assert row["dtype"] == "fp32" and row["dataflow"]["tokens_per_s"] > 0 and row["torch"]["tokens_per_s"] > 0
    assert row["dataflow"]["rss_peak_mib"] > 0 and row["torch"]["rss_peak_mib"] > 0
    # the peers took turns: a ratio per round, the headline their median, every step of every round kept
    assert len(row["speedup_rounds"]) == 2 and min(row["speedup_rounds"]) <= row["speedup"] <= max(row["speedup_rounds"])
    assert len(row["speedup_quartiles"]) == 3
    for lib in ("dataflow", "torch"):
        assert len(row[lib]["tokens_per_s_rounds"]) == 2 and len(row[lib]["step_s"]) == 2 * row[lib]["steps_per_round"]
        assert len(row[lib]["step_s"]) >= 3
    assert result["machine"]["env"]["OMP_WAIT_POLICY"] == "PASSIVE"  # both libraries wait alike
    assert summary.startswith("train host (") and "(quartiles of 2 rounds " in summary


BLOCK_PEERS = """
import runpy, sys
sys.modules["torch"] = sys.modules["transformers"] = None  # as if not installed
sys.path.insert(0, sys.argv[1])
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("script, args", [("train.py", ["--quick"]), ("ops.py", ["--quick"]),
                                          ("ops_attention.py", ["--quick"]), ("matmul.py", ["--sizes", "64"])])
def test_benches_without_torch_say_what_to_install(script, args):
    out = subprocess.run([sys.executable, "-c", BLOCK_PEERS, BENCH, os.path.join(BENCH, script), *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"{script}: the peer needs torch") and "pip install '.[bench]'" in line, line


def test_machine_info_without_torch():
    code = BLOCK_PEERS.split("sys.argv =")[0] + "import harness; info = harness.machine_info(); assert 'torch' not in info"
    out = subprocess.run([sys.executable, "-c", code, BENCH], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_serve_quick():
    pytest.importorskip("openai")
    result, summary = run_bench("serve.py", "--quick")
    assert [r["clients"] for r in result["rows"]] == [1, 4]
    for r in result["rows"]:
        assert r["tok_s"] > 0 and r["peer_tok_s"] > 0, r
        assert 0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"] <= r["ttft_max_ms"], r
    assert summary.startswith("serve: 4 clients")


def test_batched_decode_quick():
    result, summary = run_bench("batched_decode.py", "--quick", "--dtypes", "fp32", "--streams", "1", "2")
    assert [(r["dtype"], r["streams"]) for r in result["rows"]] == [("fp32", 1), ("fp32", 2)]
    for r in result["rows"]:
        assert r["decode_tok_s"] > 0 and r["peak_bytes_per_seq"] > 0, r
    assert summary.startswith("batched_decode: fp32 x1:")


def test_quantized_decode_quick():
    result, summary = run_bench("quantized_decode.py", "--quick", "--rounds", "1", "--prompt", "8", "--new", "4",
                                "--vocab", "512")
    assert [r["variant"] for r in result["rows"]] == ["fp32", "bf16", "int8", "int8-bf16", "int8+head", "int4",
                                                      "int4-bf16", "int4+head"]
    for r in result["rows"]:
        assert r["decode_tok_s"] > 0 and r["prompt_tok_s"] > 0 and r["weights_mib"] > 0, r
    fp32, int8, int4 = (next(r for r in result["rows"] if r["variant"] == v) for v in ("fp32", "int8", "int4"))
    assert int4["weights_mib"] < int8["weights_mib"] < fp32["weights_mib"]
    assert summary.startswith("quantized decode host (")


def test_ops_moe_quick():
    result, summary = run_bench("ops_moe.py", "--quick")
    assert {(r["dtype"], r["peer"]) for r in result["rows"]} == {
        (d, f"Qwen3MoeSparseMoeBlock ({i} experts)") for d in ("fp32", "bf16") for i in ("eager", "grouped_mm")}
    for r in result["rows"]:
        assert r["dataflow_ms"] > 0 and r["torch_ms"] > 0, r
    assert summary.startswith("ops host (2 threads")


def test_generate_quick():
    pytest.importorskip("transformers")
    # llama.cpp's converter, when it runs, takes most of the time (it loads torch three times)
    result, summary = run_bench("generate.py", "--quick", timeout=600)
    peers = {(r["peer"], r["variant"]) for r in result["rows"]}
    assert {("dataflow", v) for v in ("fp32", "bf16", "int8", "int4")} | {("transformers", "fp32"),
                                                                          ("transformers", "bf16")} <= peers
    llama_cpp = result["llama_cpp"] == "measured"
    assert llama_cpp == ({("llama.cpp", t) for t in ("f32", "bf16", "q8_0", "q4_0")} <= peers)
    for r in result["rows"]:
        assert r["decode_tok_s"] > 0 and r["prompt_tok_s"] > 0, r
    # the same weights reach every peer: at full precision their greedy tokens follow dataflow's fp32
    full = [r for r in result["rows"] if r["variant"] in ("fp32", "f32")]
    assert len(full) == 2 + llama_cpp and all(r["greedy_agrees"] >= 0.75 for r in full), full
    assert set(result["ratio_vs_transformers"]) == {"fp32", "bf16"}
    assert set(result["ratio_vs_llama_cpp"]) == ({"fp32", "bf16", "int8", "int4"} if llama_cpp else set())
    assert [b["streams"] for b in result["batched"]] == [1, 4]
    assert all(b["decode_tok_s"] > 0 and b["peak_bytes_per_seq"] > 0 for b in result["batched"])
    assert summary.startswith("generate host (2 threads)")
    assert ("vs llama.cpp fp32" in summary) == llama_cpp and "vs transformers fp32" in summary


def test_ring_disk_quick(tmp_path):
    result, summary = run_bench("ring_disk.py", "--steps", "1", "--dir", str(tmp_path))
    assert result["disk_mode"] in ("O_DIRECT", "buffered") and result["same_losses"] is True
    assert all(v > 0 for v in result["median_step_seconds"].values())
    assert summary.startswith("ring_disk (")
