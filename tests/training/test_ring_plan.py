"""dataflow.ring.plan / calibrate and `dataflow plan`: the planner's Python surface (the C unit
tests in tests/c/test_ring_plan.c cover the planner itself)."""
import json

import numpy as np
import pytest

import dataflow as df
from dataflow.cli import main as cli, plan_timeline as ring_timeline
from dataflow import ring
from dataflow.models.llama import GRAD
from dataflow.training.calibration import calibrate

GIB = 1 << 30
TINY = {"vocab_size": 500, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2}


def _within(plan):
    both = sum(b for b, ph in zip(plan.device_bytes, plan.device_phase) if ph == 0)
    for phase in (1, 2):
        assert both + sum(b for b, ph in zip(plan.device_bytes, plan.device_phase) if ph == phase) <= plan.device_capacity
    assert sum(plan.host_memory.values()) == plan.host_total_bytes <= plan.host_capacity


def test_everything_fits_is_resident():
    p = ring.plan(TINY, seq_len=64, tokens_per_step=256, device_memory="1GiB", host_memory="1GiB", dtype="fp32")
    assert (p.weight_slots, p.grad_slots, p.rounds_per_step) == (3, 3, 1)
    assert p.optimizer == "device (resident state)" and p.inbound_bytes == p.outbound_bytes == 0
    assert all(p.activations_on_device) and p.save_levels == [2, 2, 2]
    assert p.predicted_step_seconds == pytest.approx(sum(ph["seconds"] for ph in p.phases))
    assert p.tokens_per_second == pytest.approx(256 / p.predicted_step_seconds)
    _within(p)
    text = p.describe()
    assert "all resident" in text and "MFU" in text


def test_8b_at_24gib_needs_more_host_and_the_minimum_is_enough():
    with pytest.raises(df.OutOfMemoryError, match="GiB host") as e:
        ring.plan("llama3-8b", 8192, "24GiB", "60GiB", tokens_per_step=8 * 8192)
    assert e.value.min_host_bytes > 60 * GIB
    p = ring.plan("llama3-8b", 8192, "24GiB", e.value.min_host_bytes, tokens_per_step=8 * 8192)
    _within(p)
    assert p.weight_slots <= 32 and p.optimizer != "device (resident state)"
    assert 0 < p.mfu < 1


def test_less_device_memory_is_never_faster():
    times = []
    for gib in (160, 80, 40, 20, 10):
        p = ring.plan("llama3.2-1b", 4096, f"{gib}GiB", "256GiB", tokens_per_step=4 * 4096)
        _within(p)
        times.append(p.predicted_step_seconds)
    assert times == sorted(times)
    with pytest.raises(df.OutOfMemoryError, match="GiB device") as e:
        ring.plan("llama3.2-1b", 4096, "256MiB", "256GiB", tokens_per_step=4 * 4096)
    assert e.value.min_device_bytes > 256 << 20
    ring.plan("llama3.2-1b", 4096, e.value.min_device_bytes, "256GiB", tokens_per_step=4 * 4096)


@pytest.mark.parametrize("kwargs, match", [
    ({"seq_len": 0}, "seq_len"), ({"seq_len": True}, "seq_len"), ({"tokens_per_step": 100}, "tokens_per_step"),
    ({"device_memory": "lots"}, "device_memory"), ({"host_memory": -1}, "host_memory"),
    ({"device_memory": 2**70}, "device_memory"),
    ({"profile": "tpu"}, "h100-sxm"), ({"dtype": "fp8"}, "dtype"), ({"master_weights": 1}, "master_weights"),
    ({"h2d_bandwidth": -5.0}, "h2d_bandwidth"), ({"d2h_bandwidth": float("nan")}, "d2h_bandwidth"),
    ({"config": 3}, "config"), ({"config": "llama9"}, "preset"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    args = {"config": TINY, "seq_len": 64, "device_memory": "1GiB", "host_memory": "1GiB", **kwargs}
    with pytest.raises(df.BadArgumentError, match=match):
        ring.plan(**args)


def test_master_weights_need_bf16():
    with pytest.raises(df.BadArgumentError, match="master_weights"):
        ring.plan(TINY, 64, "1GiB", "1GiB", dtype="fp32", master_weights=True)
    p = ring.plan(TINY, 64, "1GiB", "1GiB", dtype="bf16", master_weights=True)
    assert p.master_weights == 1


def test_calibrate_measures_the_handle():
    h = df.Handle("host", streams=2, threads=1, transfer_bandwidth="100MB")
    try:
        prof = calibrate(h, size=256, tokens=256, transfer_bytes=8 << 20, repeats=2)
    finally:
        h.close()
    assert prof.name == "host" and "measured" in prof.source
    for field in ("peak_flops_bf16", "peak_flops_fp32", "memory_bytes_per_sec"):
        assert np.isfinite(getattr(prof, field)) and getattr(prof, field) > 0
    assert 0 < prof.attention_fraction <= 1 and prof.matmul_fraction == 1
    # the link is throttled to 100 MB/s: the measurement must see it
    assert 50e6 < prof.h2d_bytes_per_sec < 110e6 and 50e6 < prof.d2h_bytes_per_sec < 110e6
    p = ring.plan(TINY, 64, "1GiB", "1GiB", profile=prof, dtype="fp32")
    assert p.predicted_step_seconds > 0


@pytest.mark.parametrize("true_s,true_half", [(0.3, 0.0), (0.4, 300.0), (2.5, 50.0)])
def test_fit_rates_recovers_the_scale_and_falloff(true_s, true_half):
    # layer times made by the planner's own formula from a known scale and falloff, at a
    # short-sequence chunk and a many-sequence one: the fit must give them back
    from dataflow.training.calibration import _fit_rates
    from dataflow.ring import blocked_ring_model
    base = ring.Profile.named("a100-sxm")
    _, blocks = blocked_ring_model(ring.model_config(TINY), "bf16")
    layer, S = blocks[1], 64
    R = base.peak_flops_bf16 * base.matmul_fraction

    def seconds(T, seq):
        pairs = T / seq * seq * (seq + 1) / 2
        return (3 * layer.matmul_flops_per_token * (T + true_half) / R
                + 3.5 * pairs * layer.attention_flops_per_pair / (base.peak_flops_bf16 * base.attention_fraction)
                + 3 * layer.memory_bytes_per_token * T / base.memory_bytes_per_sec) / true_s

    fitted = ring.Profile.named("a100-sxm")
    s, half = _fit_rates(fitted._c, layer, "bf16", [(S // 2, S // 2, seconds(S // 2, S // 2)),
                                                    (8 * S, S, seconds(8 * S, S))])
    assert s == pytest.approx(true_s, rel=1e-9) and half == pytest.approx(true_half, abs=1e-6)
    rate = fitted.peak_flops_bf16 * fitted.matmul_fraction
    assert rate == pytest.approx(R * true_s, rel=1e-9) and 0 < fitted.attention_fraction <= 1
    assert fitted.matmul_fraction <= 1 and fitted.matmul_half_tokens == half


def test_fit_rates_without_a_visible_fixed_cost_uses_the_large_chunk():
    # measured times growing faster than the model (noise): no negative falloff, the 4 x chunk's rate
    from dataflow.training.calibration import _fit_rates
    from dataflow.ring import blocked_ring_model
    _, blocks = blocked_ring_model(ring.model_config(TINY), "bf16")
    fitted = ring.Profile.named("a100-sxm")
    s, half = _fit_rates(fitted._c, blocks[1], "bf16", [(64, 64, 1e-6), (256, 64, 1e-3)])
    assert half == 0 and 0 < s < 1


def test_layer_seconds_rejects_bad_arguments():
    from dataflow._ffi import ffi, ringlib
    _, blocks = ring.blocked_ring_model(ring.model_config(TINY), "bf16")
    prof, out = ring.Profile.named("a100-sxm"), ffi.new("double *")
    layer = ffi.addressof(blocks, 1)
    bf16 = df.dtypes.enum("bf16")
    assert ringlib.dataflow_ring_layer_seconds(prof._c, layer, bf16, 64, 128, out) == 0 and out[0] > 0
    for args, message in (((prof._c, layer, bf16, 0, 128, out), "seq_len and tokens > 0, got dtype .*, 0 and 128"),
                          ((prof._c, ffi.NULL, bf16, 64, 128, out), "layer and seconds are required")):
        with pytest.raises(df.BadArgumentError, match=message):
            df.errors.check(ringlib.dataflow_ring_layer_seconds(*args))


def test_calibrate_fits_to_a_model():
    h = df.Handle("host", streams=2, threads=1)
    try:
        prof = calibrate(h, size=128, tokens=128, transfer_bytes=1 << 20, repeats=1, config=TINY, seq_len=32,
                              dtype="fp32")
        big = calibrate(h, size=128, tokens=128, transfer_bytes=1 << 20, repeats=1, config="llama3-8b",
                             seq_len=8192)  # minutes of CPU: refused, said so
        assert "not fitted to the model: measuring its layers would take" in big.source
        assert big.matmul_fraction == 1
        with pytest.raises(df.BadArgumentError, match="seq_len must be a positive integer, got 0"):
            calibrate(h, config=TINY, seq_len=0)
        with pytest.raises(df.BadArgumentError, match="tokens_per_step must be a multiple of seq_len .32., at "
                                                      "least two sequences, got 48"):
            calibrate(h, config=TINY, seq_len=32, tokens_per_step=48)
        with pytest.raises(df.BadArgumentError, match="dtype must be 'bf16' or 'fp32', got 'fp8'"):
            calibrate(h, config=TINY, seq_len=32, dtype="fp8")
    finally:
        h.close()
    assert "fitted to a fp32 layer of this model" in prof.source, prof.source
    assert 0 < prof.matmul_fraction <= 1 and 0 < prof.attention_fraction <= 1 and prof.matmul_half_tokens >= 0
    p = ring.plan(TINY, 32, "1GiB", "1GiB", tokens_per_step=128, profile=prof, dtype="fp32")
    assert p.predicted_step_seconds > 0


def test_cli_plan_prints_the_plan(capsys):
    assert cli.main(["plan", "--config", "llama3-8b", "--seq-len", "8192", "--tokens-per-step", "65536",
                     "--device-memory", "24GiB", "--host-memory", "128GiB", "--profile", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "weight slot" in out and "tokens/s" in out and "MFU" in out


def test_cli_plan_json_and_config_file(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", **TINY}))
    assert cli.main(["plan", "--config", str(path), "--seq-len", "64", "--device-memory", "1GiB",
                     "--host-memory", "1GiB", "--dtype", "fp32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weight_slots"] == 3 and out["step_seconds"] > 0 and len(out["phases"]) == 4


def test_cli_plan_on_this_host_fits_the_model(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", **TINY}))
    assert cli.main(["plan", "--config", str(path), "--seq-len", "32", "--tokens-per-step", "128", "--device-memory",
                     "1GiB", "--host-memory", "1GiB", "--dtype", "fp32", "--profile", "host", "--threads", "1",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "fitted to a fp32 layer of this model" in out["profile"] and out["step_seconds"] > 0


def test_cli_plan_timeline_picture(tmp_path, capsys):
    path = tmp_path / "timeline.png"
    argv = ["plan", "--config", "llama3-8b", "--seq-len", "8192", "--tokens-per-step", "131072",
            "--device-memory", "24GiB", "--host-memory", "128GiB", "--timeline", str(path)]
    assert cli.main(argv) == 0
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000
    assert f"timeline: wrote {path}" in capsys.readouterr().out
    assert cli.main(argv) == 2  # never overwrites unless told
    assert "--overwrite" in capsys.readouterr().err
    path.write_bytes(b"old")
    assert cli.main(argv + ["--overwrite"]) == 0
    assert path.read_bytes().startswith(b"\x89PNG") and f"wrote {path}" in capsys.readouterr().out
    assert cli.main(argv[:-2] + ["--overwrite"]) == 2 and "add --timeline" in capsys.readouterr().err
    assert cli.main(argv[:-1] + [str(tmp_path), "--overwrite"]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_small_plans_print_in_units_that_suit_them(capsys):
    """A tiny model's plan is mebibytes and microseconds: no figure may print as zero."""
    assert cli.main(["plan", "--config", "tiny", "--seq-len", "64", "--device-memory", "8GiB",
                     "--host-memory", "32GiB"]) == 0
    out = capsys.readouterr().out
    assert "0.00 " not in out and " 0.0000 " not in out and "GiB of weights" not in out, out
    assert "MiB of weights" in out and "capacity 8.00 GiB, peak " in out and "MiB)" in out, out
    assert "predicted timeline (us;" in out and out.splitlines()[-1].split()[2] == "us,", out
    assert cli.main(["plan", "--config", "tiny", "--seq-len", "64", "--device-memory", "1MiB",
                     "--host-memory", "32GiB"]) == 1
    err = capsys.readouterr().err
    assert "nothing fits in 1.00 MiB device memory: the smallest plan needs" in err and " MiB device" in err, err
    assert "0.00" not in err, err


def test_plan_and_train_take_the_same_model_specs(tmp_path, capsys):
    """Every preset of `dataflow train` plans, and a model directory plans as train would build it."""
    from dataflow.models import presets as model_specs
    base = ["--seq-len", "64", "--device-memory", "64GiB", "--host-memory", "2TiB"]
    for name in model_specs.PRESETS:
        assert cli.main(["plan", "--config", name] + base) == 0, capsys.readouterr().err
    capsys.readouterr()
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", **TINY}))
    assert cli.main(["plan", "--config", str(directory), "--json"] + base) == 0
    assert json.loads(capsys.readouterr().out)["weight_slots"] == TINY["num_hidden_layers"]
    assert cli.main(["plan", "--config", str(tmp_path), "--json"] + base) == 2
    assert "has no config.json" in capsys.readouterr().err
    # train takes the large presets too: llama3.2-1b is planned (and found not to fit), not refused
    out = tmp_path / "run"
    assert cli.main(["train", "--config", "llama3.2-1b", "--device-memory", "64MiB", "--host-memory", "64MiB",
                     "--steps", "1", "--out", str(out)]) != 0
    err = capsys.readouterr().err
    assert err.startswith("dataflow train: ring plan: nothing fits in 64.0 MiB device memory"), err
    assert not out.exists()


def test_timeline_bars_follow_the_phases():
    phases = [{"name": "a", "start": 0.0, "inbound": 0.0, "compute": 1.0, "outbound": 0.5},
              {"name": "b", "start": 1.0, "inbound": 1.0, "compute": 1.0, "outbound": 0.0},
              {"name": "c", "start": 1.0, "inbound": 0.0, "compute": 0.5, "outbound": 0.25}]
    rows = ring_timeline.bars(phases)
    assert rows["inbound"] == [(1, 1.0, 1.0, 1.6, 0.8)]
    # b and c start together and both compute: b takes the lower half of the row, c the upper
    assert rows["compute"] == [(0, 0.0, 1.0, 0.6, 0.8), (1, 1.0, 1.0, 0.6, 0.4), (2, 1.0, 0.5, 1.0, 0.4)]
    assert rows["outbound"] == [(0, 0.0, 0.5, -0.4, 0.8), (2, 1.0, 0.25, -0.4, 0.8)]
    ax = ring_timeline.figure(phases, 2.0).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["outbound", "compute", "inbound"]
    assert ax.get_xlim() == (0.0, 2.0) and ax.get_xlabel() and len(ax.collections) == 6
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "c"]


@pytest.mark.parametrize("flags, flag", [
    (["--seq-len", "0"], "--seq-len"), (["--tokens-per-step", "100"], "--tokens-per-step"),
    (["--device-memory", "24 apples"], "--device-memory"), (["--host-memory", "0"], "--host-memory"),
    (["--profile", "tpu-v9"], "--profile"), (["--config", "/nonexistent.json"], "--config"),
    (["--h2d-bandwidth", "fast"], "--h2d-bandwidth"), (["--d2h-bandwidth", "-1"], "--d2h-bandwidth"),
])
def test_cli_plan_errors_name_the_flag(flags, flag, capsys):
    base = {"--config": "llama3-8b", "--seq-len": "8192", "--device-memory": "24GiB", "--host-memory": "128GiB"}
    argv = ["plan"]
    given = dict(zip(flags[::2], flags[1::2]))
    for k, v in {**base, **given}.items():
        argv += [k, v]
    assert cli.main(argv) == 2
    assert flag in capsys.readouterr().err


def test_cli_plan_nothing_fits_states_the_minimum(capsys):
    assert cli.main(["plan", "--config", "llama3-8b", "--seq-len", "8192", "--device-memory", "2GiB",
                     "--host-memory", "128GiB"]) == 1  # a runtime answer, not a flag error
    assert "needs" in capsys.readouterr().err


def test_sliding_window_cuts_the_predicted_attention():
    """mistral-7b's 4096-token window at 32k sequences: the model flops count each query's
    pairs within the window (w(w+1)/2 + (S - w) w per sequence, not S(S+1)/2), and the predicted
    step is shorter than the same model without the window."""
    from dataflow.models import presets as model_specs
    preset, S = model_specs.PRESETS["mistral-7b"], 32768
    windowed = ring.plan(preset, S, "80GiB", "256GiB")
    full = ring.plan({**preset, "sliding_window": None}, S, "80GiB", "256GiB")
    w, per_pair, layers = 4096, 4 * 32 * 128, 32  # attention flops per pair: 4 * heads * head_dim
    pairs = w * (w + 1) / 2 + (S - w) * w
    assert full.model_flops - windowed.model_flops == pytest.approx(3 * layers * per_pair * (S * (S + 1) / 2 - pairs))
    assert windowed.predicted_step_seconds < full.predicted_step_seconds


def test_zero1_counts_one_ranks_part_of_the_optimizer_state():
    """shard_ranks N: each block's m and v counted as a rank keeps them (n // N + n % N
    elements), wherever the plan puts them; never streamed through slots; describe() says so."""
    model = df.models.Llama(df.Handle("host"), df.models.LlamaConfig.from_dict(TINY), dtype="fp32", seed=0)
    numels = [row[GRAD] // 4 for row in model.layout.bytes]
    for ranks, device in ((1, "1GiB"), (3, "1GiB"), (1, "2MiB"), (3, "2MiB")):
        p = ring.plan(TINY, seq_len=64, tokens_per_step=256, device_memory=device, host_memory="1GiB", dtype="fp32",
                      shard_ranks=ranks)
        state = p.host_bytes[df._ffi.ringlib.DATAFLOW_RING_HOST_OPTIMIZER_STATE] + \
            p.device_bytes[df._ffi.ringlib.DATAFLOW_RING_DEV_OPTIMIZER_STATE]
        assert state == sum(2 * 4 * (n // ranks + n % ranks) for n in numels), (ranks, device, p.optimizer)
        assert p.shard_ranks == ranks
        assert ranks == 1 or "streamed" not in p.optimizer
        assert ("ZeRO-1: each of 3 ranks keeps 1/3" in p.describe()) == (ranks == 3)
        _within(p)


@pytest.mark.parametrize("kw, error, message", [
    (dict(shard_ranks=0), df.BadArgumentError, "shard_ranks must be a positive integer"),
    (dict(shard_ranks=True), df.BadArgumentError, "shard_ranks must be a positive integer"),
    (dict(shard_ranks=2, optimizer_state="bf16"), df.UnsupportedError, "shard_ranks (ZeRO-1) shards fp32 optimizer state"),
    (dict(shard_ranks=2, disk_memory="1GiB"), df.UnsupportedError, "without a disk tier"),
])
def test_zero1_plan_refusals_name_the_argument(kw, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        ring.plan(TINY, seq_len=64, tokens_per_step=256, device_memory="1GiB", host_memory="1GiB", dtype="fp32", **kw)
