"""Zero-config ring training: a Llama on a handle too small for its training is held in host
memory and a Trainer trains it through the ring executor, with the all-resident Trainer as the
oracle (itself checked against Hugging Face in test_llama.py): the same losses and weights
(fp32 within 1e-6 relative), checkpoints that resume bit for bit, save_pretrained, generate, and
`dataflow train --device-memory ... --host-memory ...` staying under its cap."""
import json
import re

import numpy as np
import pytest

import dataflow as df
from dataflow.io import checkpoint
from dataflow.cli import main as cli
from dataflow.errors import BadArgumentError, OutOfMemoryError
from dataflow.training import loss_backward
from dataflow.training.adamw_hyperparameters import adamw_hyperparameters
from resident_oracle import resident_adamw
from ring_models import CFG, HOST, KW, PROFILE, ROWS, SEQ, batches
from tolerances import TRAINED_WEIGHTS_RTOL, assert_trained_weights_close



def smallest_cap(dtype="fp32", master=False):
    with pytest.raises(OutOfMemoryError) as e:
        df.ring.plan(CFG, SEQ, 1024, HOST, tokens_per_step=SEQ * ROWS, dtype=dtype, master_weights=master)
    return e.value.min_device_bytes


def ring_trainer(cap, dtype="fp32", master=False, **kw):
    h = df.Handle("host", device_memory=cap)
    model = df.models.Llama(h, CFG, dtype=dtype, seed=1)
    t = df.Trainer(model, **KW, master_weights=master or None, host_memory=HOST, seq_len=SEQ, batch_size=ROWS,
                   profile=PROFILE, **kw)
    return h, model, t


def model_adamw(trainer):
    """AdamW with the trainer's hyperparameters over the gradients its model's loss_backward left
    (resident_oracle); returns the pre-clip gradient norm."""
    params, clip = adamw_hyperparameters(trainer)
    trainer.step_count += 1
    return resident_adamw(trainer.model, params, clip, trainer.step_count)


def resident_need(dtype="fp32"):
    """Device bytes all-resident training on ROWS x SEQ batches takes: its plan's."""
    with pytest.raises(OutOfMemoryError) as e:
        df.ring.resident_plan(CFG, SEQ, SEQ * ROWS, 1024, profile=PROFILE, dtype=dtype)
    return e.value.min_device_bytes


def resident_trainer(dtype="fp32", master=False):
    model = df.models.Llama(df.Handle("host"), CFG, dtype=dtype, seed=1, placement="device")
    return df.Trainer(model, **KW, master_weights=master or None)


def assert_weights_close(a, b):
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-12, err_msg=name)


def test_a_model_too_large_for_the_device_is_held_in_host_memory():
    small = df.Handle("host", device_memory="64KiB")
    held = df.models.Llama(small, CFG, seed=3)
    resident = df.models.Llama(df.Handle("host"), CFG, seed=3)
    assert (held.placement, resident.placement, small.memory_in_use()) == ("host", "device", 0)
    a, b = held.state_dict(), resident.state_dict()
    assert all(np.array_equal(a[n], b[n]) for n in b)
    tokens = np.arange(20) % CFG["vocab_size"]
    np.testing.assert_array_equal(held.forward(tokens), resident.forward(tokens))  # on its CPU copy
    np.testing.assert_array_equal(held.generate(tokens[:5], 6, temperature=0),
                                  resident.generate(tokens[:5], 6, temperature=0))
    with pytest.raises(df.UnsupportedError, match=r"held in host memory .* a Trainer trains them"):
        held.named_parameters()
    assert small.memory_in_use() == 0


def test_trainer_stays_all_resident_when_everything_fits():
    h, model, t = ring_trainer("64MiB")
    assert t.plan is None and model.placement == "device"


def test_ring_step_equals_resident_step():
    """A cap just under the all-resident need: batches of one plan chunk make a ring step the same
    computation as the all-resident step."""
    ref = resident_trainer()
    need = resident_need()
    fits = ring_trainer(need + 4096)  # the handle rounds capacities down a little
    assert fits[2].plan is None and np.isfinite(fits[2].step(batches(1)[0]))
    assert fits[0].memory_peak() <= fits[0].memory_capacity()
    h, model, t = ring_trainer(need - 1)
    assert t.plan is not None and model.placement == "host"
    assert t.plan.predicted_step_seconds > 0 and "device memory" in t.plan.describe()
    rows = t.plan.chunk_tokens // SEQ
    losses = [(t.step(b[:rows]), ref.step(b[:rows]), t.last_grad_norm, ref.last_grad_norm) for b in batches()]
    rng = np.random.default_rng(7)  # ragged documents with ignored labels, packed into one chunk
    docs = [rng.integers(0, CFG["vocab_size"], n) for n in (5, 11, rows * SEQ - 16)]
    labels = [np.where(rng.random(d.size) < 0.3, -100, d) for d in docs]
    losses.append((t.step(docs, labels=labels), ref.step(docs, labels=labels), t.last_grad_norm, ref.last_grad_norm))
    ring_l, ref_l, ring_n, ref_n = map(np.array, zip(*losses))
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-6, atol=0)
    np.testing.assert_allclose(ring_n, ref_n, rtol=1e-6, atol=0)
    assert_weights_close(model.state_dict(), ref.model.state_dict())
    assert h.memory_peak() <= h.memory_capacity()


@pytest.mark.parametrize("fraction, batch_rows", [(2, ROWS), (1, ROWS), (1, 3 * ROWS)])
def test_ring_chunked_step_equals_resident_on_the_same_chunks(fraction, batch_rows):
    """Smaller caps split a step into chunks (and a batch larger than planned into several
    executor calls); the oracle is the resident model fed the same chunks (loss_scale 1 / the
    step's labelled tokens, gradients accumulated) and one AdamW step."""
    cap = fraction * smallest_cap() + 4096  # the handle rounds capacities down a little
    h, model, t = ring_trainer(cap)
    rows = t.plan.chunk_tokens // SEQ
    assert rows < ROWS, t.plan.describe()
    ref = resident_trainer()
    for b in batches():
        b = np.concatenate([b] * (batch_rows // ROWS))
        ring_loss = t.step(b)
        scale, ref_loss = 1.0 / (batch_rows * (SEQ - 1)), 0.0
        for i in range(0, batch_rows, rows):
            ref_loss += loss_backward(ref.model, b[i:i + rows], accumulate=i > 0, loss_scale=scale)[0]
        ref_norm = model_adamw(ref)
        np.testing.assert_allclose(ring_loss, ref_loss, rtol=1e-6)
        np.testing.assert_allclose(t.last_grad_norm, ref_norm, rtol=1e-6)
    assert_weights_close(model.state_dict(), ref.model.state_dict())
    assert h.memory_peak() <= h.memory_capacity()
    assert t._engine.ring.executor.host_bytes() <= t.plan.host_capacity


def test_ring_accumulate_apply_equals_resident():
    h, model, t = ring_trainer(smallest_cap() + 4096)
    ref = resident_trainer()
    for b in batches(4):
        for row in b:
            assert t.accumulate(row) == pytest.approx(ref.accumulate(row), rel=1e-6)
        assert t.apply() == pytest.approx(ref.apply(), rel=1e-6)
        assert model.loss(b) == pytest.approx(ref.model.loss(b), rel=1e-6)  # the CPU copy follows the steps
    assert t.last_grad_norm == pytest.approx(ref.last_grad_norm, rel=1e-6)
    assert_weights_close(model.state_dict(), ref.model.state_dict())
    assert_weights_close(model.gradients(), ref.model.gradients())
    assert h.memory_peak() <= h.memory_capacity()


@pytest.mark.parametrize("dtype, master", [("fp32", False), ("bf16", True)])
def test_ring_checkpoint_resumes_bit_for_bit(tmp_path, dtype, master):
    cap = 2 * smallest_cap(dtype, master)
    data = batches(6, seed=5)
    h, model, t = ring_trainer(cap, dtype, master)
    assert t.plan is not None
    for b in data[:3]:
        t.step(b)
    checkpoint.save_training(tmp_path / "ck", model, t)
    straight = [t.step(b) for b in data[3:]]
    ck = checkpoint.load(tmp_path / "ck")
    h2 = df.Handle("host", device_memory=cap)
    model2 = df.models.Llama(h2, ck.config, dtype=dtype, seed=9)
    t2 = df.Trainer(model2, **KW, master_weights=master or None, host_memory=HOST, seq_len=SEQ, batch_size=ROWS,
                    profile=PROFILE)
    checkpoint.restore_training(ck, model2, t2)
    assert t2.step_count == 3
    resumed = [t2.step(b) for b in data[3:]]
    assert resumed == straight
    a, b = model.state_dict(), model2.state_dict()
    assert all(np.array_equal(a[n], b[n]) for n in a)
    if master:
        a, b = t.state_dict()["master"], t2.state_dict()["master"]
        assert all(np.array_equal(a[n], b[n]) for n in a)


def test_ring_save_pretrained_and_generate(tmp_path):
    h, model, t = ring_trainer(smallest_cap() + 4096)
    for b in batches(2):
        t.step(b)
    model.save_pretrained(tmp_path / "hf")
    loaded = df.models.Llama.from_pretrained(tmp_path / "hf", handle=df.Handle("host"))
    assert loaded.placement == "device"
    trained = model.state_dict()
    assert all(np.array_equal(v, trained[n]) for n, v in loaded.state_dict().items())
    prompt = np.array([1, 2, 3])
    np.testing.assert_array_equal(model.generate(prompt, 8, temperature=0), loaded.generate(prompt, 8, temperature=0))
    small = df.models.Llama.from_pretrained(tmp_path / "hf", handle=df.Handle("host", device_memory="64KiB"))
    assert small.placement == "host"
    assert all(np.array_equal(v, trained[n]) for n, v in small.state_dict().items())


def test_ring_trainer_bad_input():
    low = smallest_cap()
    two_streams = df.Handle("host", streams=2, device_memory=low * 2)
    with pytest.raises(BadArgumentError, match=r"ring needs a handle with 4 streams .* this one has 2"):
        df.Trainer(df.models.Llama(two_streams, CFG), host_memory=HOST, seq_len=SEQ, batch_size=ROWS, profile=PROFILE)
    with pytest.raises(OutOfMemoryError, match=r"plans that fit .* need at least .* \(in bytes: [\d,]+ device "
                                               r"free, 65,536 host; the smallest plan needs [\d,]+ device"):
        df.Trainer(
            df.models.Llama(df.Handle("host", device_memory=low * 2), CFG), host_memory="64KiB", seq_len=SEQ,
            batch_size=ROWS, profile=PROFILE)
    with pytest.raises(BadArgumentError, match=r"seq_len must be a positive integer, got 0"):
        df.Trainer(df.models.Llama(df.Handle("host", device_memory=low * 2), CFG), host_memory=HOST, seq_len=0)
    h, model, t = ring_trainer(low * 2)
    with pytest.raises(BadArgumentError, match=r"a sequence of 40 tokens is longer than the plan's chunks of "
                                               r"\d+ tokens; plan for longer sequences \(Trainer\(seq_len=40\)\)"):
        t.step(np.zeros(40, np.int64))
    with pytest.raises(BadArgumentError, match=r"no labelled tokens"):
        t.step(np.zeros(8, np.int64), labels=np.full(8, -100))


def test_ring_trainer_splits_sequences_over_a_context():
    """A cap whose plan splits sequences (kv_context): the Trainer cuts each document longer than
    a chunk into pieces (and keeps a document's pieces in one executor call and round) and
    trains as the all-resident Trainer on the whole sequences, ragged documents included (fp32:
    only the order of the sums differs, so losses and the gradient norm within 1e-5, the weights
    as tolerances.assert_trained_weights_close)."""
    cfg, seq, kw = {**CFG, "vocab_size": 256, "num_hidden_layers": 3, "max_position_embeddings": 1024}, 512, \
        {**KW, "lr": 1e-3}
    with pytest.raises(OutOfMemoryError) as e:
        df.ring.plan(cfg, seq, 1024, HOST, tokens_per_step=2 * seq, dtype="fp32")
    h = df.Handle("host", device_memory=e.value.min_device_bytes + 4096)
    model = df.models.Llama(h, cfg, seed=1)
    t = df.Trainer(model, **kw, host_memory=HOST, seq_len=seq, batch_size=2, profile=PROFILE)
    assert t.plan.kv_context and t.plan.chunk_tokens < seq, t.plan.describe()
    ref = df.Trainer(df.models.Llama(df.Handle("host"), cfg, seed=1, placement="device"), **kw)
    rng = np.random.default_rng(3)
    steps = [rng.integers(0, cfg["vocab_size"], (2, seq)) for _ in range(3)]
    docs = [rng.integers(0, cfg["vocab_size"], n) for n in (40, 300, 500, 100)]  # pieces across calls
    labels = [np.where(rng.random(d.size) < 0.2, -100, d) for d in docs]
    losses = [(t.step(b), ref.step(b)) for b in steps]
    losses.append((t.step(docs, labels=labels), ref.step(docs, labels=labels)))
    ring_l, ref_l = map(np.array, zip(*losses))
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-5, atol=0)
    assert t.last_grad_norm == pytest.approx(ref.last_grad_norm, rel=1e-5)
    assert_trained_weights_close(model.state_dict(), ref.model.state_dict(), TRAINED_WEIGHTS_RTOL["fp32"], kw["lr"],
                                 len(losses))
    assert h.memory_peak() <= h.memory_capacity()
    with pytest.raises(BadArgumentError, match=r"a sequence of 513 tokens is longer than the plan's sequences of "
                                               r"512 tokens"):
        t.step(np.zeros(seq + 1, np.int64))


# ---- dataflow train / generate ----

def run_cli(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def tiny_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CFG, "model_type": "llama", "vocab_size": 260}))
    return str(path)


def test_cli_trains_a_model_larger_than_the_device(tmp_path, capsys):
    config = tiny_config(tmp_path)
    cap = 1 << 20
    args = ["train", "--config", config, "--tokenizer", "bytes", "--batch", "4", "--seq-len", "16", "--steps", "3",
            "--device-memory", "1MiB", "--host-memory", "256MiB", "--out", str(tmp_path / "run")]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "ring: training does not fit the device" in out
    peak, capacity = re.search(r"device memory peak ([\d.]+) MiB of ([\d.]+) MiB", out).groups()
    assert float(peak) <= float(capacity) <= cap / 2**20
    state = checkpoint.load(tmp_path / "run" / "checkpoint")
    assert state.state["step"] == 3
    code, out, err = run_cli(["generate", "--checkpoint", str(tmp_path / "run" / "checkpoint"), "--device-memory",
                              "64KiB", "--max-new-tokens", "4", "--seed", "0"], capsys)
    assert code == 0 and "generating on the CPU from a host copy" in err


def test_cli_plan_that_cannot_fit_writes_nothing(tmp_path, capsys):
    args = ["train", "--config", tiny_config(tmp_path), "--tokenizer", "bytes", "--batch", "4", "--seq-len", "16",
            "--steps", "1", "--device-memory", "64KiB", "--host-memory", "256MiB", "--out", str(tmp_path / "run")]
    code, out, err = run_cli(args, capsys)
    assert code == 1
    assert re.search(r"ring plan: nothing fits .* the smallest plan needs .* \(in bytes: [\d,]+ device free, "
                     r"268,435,456 host; the smallest plan needs [\d,]+ device, [\d,]+ host\); pass a larger "
                     r"--device-memory or --host-memory", err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, message", [
    (["--host-memory", "4XB"], "argument --host-memory: expected a size like 512MiB"),
    (["--device-memory", "-1"], "argument --device-memory: expected a size like 512MiB"),
    (["--backend", "gpu"], "argument --backend: expected host, cuda, cuda:N, vulkan or vulkan:N, got 'gpu'"),
])
def test_cli_bad_flags(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--out", str(tmp_path / "run")] + flags)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend", ["cuda", "vulkan:7"])
@pytest.mark.parametrize("command", ["train", "generate"])
def test_cli_unavailable_backend(tmp_path, capsys, command, backend):
    try:
        df.Handle(backend).close()
        pytest.skip(f"{backend} is available on this machine")
    except df.DataflowError:
        pass
    extra = ["--tokenizer", "bytes", "--out", str(tmp_path / "run")] if command == "train" else \
        ["--checkpoint", str(tmp_path)]
    code, out, err = run_cli([command, "--backend", backend] + extra, capsys)
    assert code == 2
    assert f"dataflow {command}: --backend: {backend} is not available here: {backend.split(':')[0]} backend: " in err
    assert not (tmp_path / "run").exists()
