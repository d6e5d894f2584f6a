"""bf16 host gradients (Trainer(host_gradients="bf16"), plan.host_gradients): a gradient whose
home is on the host is rounded to bf16 (nearest even) each time it goes home and widened when it
comes back, accumulating in fp32 on the device within a round.

The oracle is the same algorithm on the all-resident model: its chunks in the plan's rounds,
and after each round every gradient the plan keeps on the host rounded to bf16 in place (numpy,
nearest even), then the same AdamW step. Ring and oracle sum the same fp32 values in the same
order (an untied model: every gradient sums its chunks in the resident model's order), so they
agree bit for bit: losses and weights."""
import json

import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi, lib, modelslib
from dataflow.cli import main as cli
from dataflow.io import checkpoint
from dataflow.errors import BadArgumentError, OutOfMemoryError
from dataflow.models.batch import PackedBatch
from dataflow.models.config import LlamaConfig
from dataflow.ring import Plan
from dataflow.training import loss_backward
from dataflow.training.executor import RingExecutor
from resident_oracle import resident_adamw
from ring_models import CFG, HOST, ROWS, SEQ, block_bytes

GRAD = 1
STEPS = 6
PARAMS = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


def plan_bf16(cap, host_gradients="bf16"):
    return df.ring.plan(CFG, seq_len=SEQ, tokens_per_step=SEQ * ROWS, device_memory=cap, host_memory=HOST,
                        profile="h100-sxm", dtype="fp32", host_gradients=host_gradients)


def to_bf16_rne(x):
    """fp32 -> the nearest bf16 (ties to even), as fp32 values."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def rounded_each_round(plan, b):
    """Whether block b's gradient goes home (rounded) every round; else it stays on the device
    across the rounds (resident slots)."""
    layer = 0 < b < plan.num_layers + 1
    if layer:
        return plan.grad_slots < plan.num_layers
    return not (plan.embedding_resident if b == 0 else plan.head_resident)


def round_grad(h, model, b, n):
    mem = ffi.new("Dataflow_Block_Memory *")
    modelslib.dataflow_llama_block(model._m, b, mem)
    g = to_bf16_rne(block_bytes(h, model, b, GRAD, n).view(np.float32))
    lib.dataflow_submit_inbound_transfer(h._ptr(), 0, mem.grad, ffi.from_buffer(g), n)
    h.sync()


def train(plan, cap, rounding_oracle=True):
    """The ring on `plan` and the resident oracle with the plan's roundings emulated (none when
    rounding_oracle is False): (ring losses, oracle losses, ring weights, oracle weights, handle,
    executor)."""
    ref_h = df.Handle("host")
    ref = df.models.Llama(ref_h, CFG, dtype="fp32", seed=1)
    h = df.Handle("host", device_memory=cap)
    ex = RingExecutor(h, LlamaConfig.from_dict(CFG), plan, "fp32")
    for b in range(ex.num_blocks):
        ex.write(b, 0, block_bytes(ref_h, ref, b, 0, ex.block_bytes(b, 0)))
    homed = [b for b in range(ex.num_blocks) if not ex.on_device(b, GRAD)] if rounding_oracle else []
    params = ffi.new("Dataflow_AdamW_Params *", PARAMS)
    rng, T, K = np.random.default_rng(0), plan.chunk_tokens, plan.chunks_per_round
    ring_l, ref_l = [], []
    for step in range(1, STEPS + 1):
        tokens = rng.integers(0, CFG["vocab_size"], (ROWS, SEQ))
        rows = [tokens[i * T // SEQ:(i + 1) * T // SEQ] for i in range(SEQ * ROWS // T)]
        chunks = [PackedBatch(r, None, None, CFG["vocab_size"], True) for r in rows]
        scale = 1.0 / sum(c.num_labels for c in chunks)
        ex.accumulate(chunks, False, scale)
        ex.apply(params, 1.0, step)
        ex.wait()
        ring_l.append(float(sum(ref._batch_loss(t, scale) for t in ex.token_losses([c.num_tokens for c in chunks]))))
        loss = 0.0
        for i, r in enumerate(rows):
            loss += loss_backward(ref, r, accumulate=i > 0, loss_scale=scale)[0]
            end_of_round, last = (i + 1) % K == 0, i == len(rows) - 1
            for b in homed:
                if (end_of_round and rounded_each_round(plan, b)) or last:
                    round_grad(ref_h, ref, b, ex.block_bytes(b, GRAD))
        resident_adamw(ref, params, 1.0, step)
        ref_l.append(float(loss))
    ring_w = [ex.read(b, 0).view(np.float32) for b in range(ex.num_blocks)]
    ref_w = [block_bytes(ref_h, ref, b, 0, ex.block_bytes(b, 0)).view(np.float32) for b in range(ex.num_blocks)]
    return ring_l, ref_l, ring_w, ref_w, h, ex


def smallest_bf16_cap():
    with pytest.raises(OutOfMemoryError) as e:
        plan_bf16(1024)
    return e.value.min_device_bytes


def as_fp32(plan):
    """The same plan with fp32 host gradients."""
    same = Plan(ffi.new("Dataflow_Ring_Plan *", plan._c[0]))
    same._c.host_gradients = 0
    return same


def case(which):
    """(plan, cap): the smallest bf16 plan (4 rounds, host optimizer); larger caps' plans (one
    round, streamed or resident optimizer) regrouped one chunk per round, as the planner does
    for larger models, so their gradients go home and come back between rounds."""
    low = smallest_bf16_cap()
    cap = [low, low * 5 // 4, 2 * low][which]
    plan = plan_bf16(cap)
    if which:
        plan._c.rounds_per_step, plan._c.chunks_per_round = plan.chunks_per_round * plan.rounds_per_step, 1
    return plan, cap


@pytest.mark.slow
@pytest.mark.parametrize("which", range(3))
def test_bf16_host_gradients_equal_the_rounding_oracle(which):
    plan, cap = case(which)
    assert plan.rounds_per_step > 1 and plan.host_memory["gradients"] > 0
    ring_l, ref_l, ring_w, ref_w, h, ex = train(plan, cap)
    assert ring_l == ref_l
    for a, b in zip(ring_w, ref_w):
        np.testing.assert_array_equal(a, b)
    assert h.memory_peak() <= cap
    assert ex.host_bytes() <= plan.host_capacity


@pytest.mark.slow
@pytest.mark.parametrize("which", range(3))
def test_bf16_host_gradients_stay_near_fp32(which):
    """The rounding's cost, measured on the same plan with fp32 host gradients over 6 steps:
    losses within 2e-3 relative (seen: 6.7e-4 with 4 rounds); the weights' difference under a
    tenth of what training moved them (L2; seen 0.052). Not elementwise: where a gradient's
    rounds nearly cancel, a rounded partial sum can flip its sign, and AdamW moves such an
    element by about lr either way."""
    plan, cap = case(which)
    ring16, ring32 = train(plan, cap, rounding_oracle=False), train(as_fp32(plan), cap, rounding_oracle=False)
    np.testing.assert_allclose(ring16[0], ring32[0], rtol=2e-3, atol=0)
    init = df.models.Llama(df.Handle("host"), CFG, dtype="fp32", seed=1)
    w0 = [block_bytes(init.handle, init, b, 0, ring16[5].block_bytes(b, 0)).view(np.float32)
          for b in range(ring16[5].num_blocks)]
    diff = np.sqrt(sum(np.sum((a - b) ** 2.0) for a, b in zip(ring16[2], ring32[2])))
    moved = np.sqrt(sum(np.sum((b - a) ** 2.0) for a, b in zip(w0, ring32[2])))
    assert 0 < diff < 0.1 * moved, (diff, moved)


def aligned(n):
    return (n + 63) // 64 * 64


def test_host_bytes_halve_in_plan_and_executor():
    """The planner's host gradient bytes are the executor's gradient arrays, fp32 or bf16."""
    p16, cap = case(0)
    p32 = as_fp32(p16)
    e16 = RingExecutor(df.Handle("host", device_memory=cap), LlamaConfig.from_dict(CFG), p16, "fp32")
    e32 = RingExecutor(df.Handle("host", device_memory=cap), LlamaConfig.from_dict(CFG), p32, "fp32")
    homed = [b for b in range(e16.num_blocks) if not e16.on_device(b, GRAD)]
    fp32_bytes = [e16.block_bytes(b, GRAD) for b in homed]
    assert p16.host_memory["gradients"] == sum(n // 2 for n in fp32_bytes)
    assert plan_bf16(cap, "fp32").host_memory["gradients"] == sum(fp32_bytes)
    assert e32.host_bytes() - e16.host_bytes() == sum(aligned(n) - aligned(n // 2) for n in fp32_bytes)
    # a gradient reads back as fp32 wherever it lives, rounded to bf16 on the host
    g = np.linspace(-1, 1, e16.block_bytes(homed[0], GRAD) // 4, dtype=np.float32)
    e16.write(homed[0], GRAD, g.view(np.uint8))
    np.testing.assert_array_equal(e16.read(homed[0], GRAD).view(np.float32), to_bf16_rne(g))
    e16.scale_grads(0.5)  # scales the bf16 home (exactly, by a power of two)
    np.testing.assert_array_equal(e16.read(homed[0], GRAD).view(np.float32), to_bf16_rne(g) * 0.5)


@pytest.mark.slow
def test_planner_counts_halved_gradient_traffic():
    """llama3-8b at 8k under 24 GiB: bf16 halves the gradients the host holds and moves, and the
    plan is faster."""
    args = dict(seq_len=8192, tokens_per_step=524288, device_memory="24GiB", host_memory="512GiB",
                optimizer_state="8bit")
    p32 = df.ring.plan("llama3-8b", **args)
    p16 = df.ring.plan("llama3-8b", **args, host_gradients="bf16")
    model, _ = df.ring.blocked_ring_model(df.ring.model_config("llama3-8b"), "bf16")
    grads = [model.blocks[b].sizes.bytes[GRAD] for b in range(model.num_blocks)]
    for p, share in ((p32, 1), (p16, 0.5)):  # the host holds the gradients of streamed grad slots and edges
        homed = [b for b in range(model.num_blocks) if p.optimizer == "host" or (
            p.grad_slots < p.num_layers if 0 < b < model.num_blocks - 1
            else not (p.embedding_resident if b == 0 else p.head_resident))]
        assert p.host_memory["gradients"] == sum(grads[b] * share for b in homed) > 0
    assert p16.inbound_bytes < p32.inbound_bytes and p16.outbound_bytes < p32.outbound_bytes
    assert "host gradients: bf16" in p16.describe() and "host gradients: fp32" in p32.describe()
    assert p16.tokens_per_second >= p32.tokens_per_second


def test_all_resident_plan_has_no_host_gradients():
    req = dict(seq_len=SEQ, tokens_per_step=SEQ * ROWS, device_memory="1GiB", host_memory=HOST, dtype="fp32")
    p16 = df.ring.plan(CFG, **req, host_gradients="bf16")
    p32 = df.ring.plan(CFG, **req)
    assert p16.host_memory.get("gradients", 0) == 0
    assert p16.predicted_step_seconds == p32.predicted_step_seconds
    assert "host gradients: none" in p16.describe() and "changes nothing" in p16.describe()


def test_bad_host_gradients():
    with pytest.raises(BadArgumentError, match="host_gradients must be one of fp32, bf16, got 'fp16'"):
        plan_bf16("1GiB", "fp16")
    m = df.models.Llama(df.Handle("host"), CFG, dtype="fp32")
    with pytest.raises(BadArgumentError, match="Trainer: host_gradients must be one of fp32, bf16"):
        df.Trainer(m, host_gradients="fp8")
    with pytest.raises(BadArgumentError, match="the plan keeps host gradients in fp32"):
        df.Trainer(m, plan=plan_bf16(smallest_bf16_cap(), "fp32"), host_gradients="bf16")


def test_cli_plan_and_train_flags(capsys):
    argv = ["plan", "--config", "llama3-8b", "--seq-len", "8192", "--tokens-per-step", "524288", "--device-memory",
            "24GiB", "--host-memory", "48GiB", "--optimizer-state", "8bit", "--json"]
    assert cli.main(argv + ["--host-gradients", "bf16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["host_gradients"] == "bf16" and out["tokens_per_second"] > 9000
    with pytest.raises(SystemExit):
        cli.main(argv + ["--host-gradients", "fp16"])
    assert "--host-gradients: invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "--host-gradients", "int8"])
    assert "--host-gradients: invalid choice" in capsys.readouterr().err


@pytest.mark.slow
def test_trainer_plans_with_bf16_host_gradients():
    """Trainer(host_gradients=...) reaches the planner and the executor: just above the smallest
    bf16 cap (the handle rounds capacities down a little) the bf16 Trainer's plan keeps bf16
    gradients on the host; its losses stay within 2e-3 of the fp32 Trainer's (its own plan at that
    cap) over 4 steps."""
    cap = smallest_bf16_cap() + 4096
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, CFG["vocab_size"], (ROWS, SEQ)) for _ in range(4)]
    losses = {}
    for hg in ("bf16", "fp32"):
        model = df.models.Llama(df.Handle("host", device_memory=cap), CFG, dtype="fp32", seed=1, placement="host")
        t = df.Trainer(model, lr=1e-2, weight_decay=0.1, host_memory=HOST, seq_len=SEQ, batch_size=ROWS,
                       profile="h100-sxm", host_gradients=hg)
        assert t.plan.host_gradients == hg and t.plan.host_memory["gradients"] > 0
        losses[hg] = [t.step(b) for b in batches]
        assert model.handle.memory_peak() <= cap
    np.testing.assert_allclose(losses["bf16"], losses["fp32"], rtol=2e-3)
    assert losses["bf16"][1:] != losses["fp32"][1:]


@pytest.mark.slow
def test_cli_train_keeps_bf16_host_gradients(tmp_path, capsys):
    """dataflow train --host-gradients bf16 trains in the ring with them and records the choice in
    the run settings of its checkpoint (a resumed run keeps it unless told otherwise)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CFG, "model_type": "llama", "vocab_size": 260}))
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(config), "--tokenizer", "bytes", "--batch", "4", "--seq-len", "16",
                     "--steps", "2", "--device-memory", "1MiB", "--host-memory", "256MiB", "--host-gradients",
                     "bf16", "--out", str(out)]) == 0
    assert "ring: training does not fit the device" in capsys.readouterr().out
    assert checkpoint.load(out / "checkpoint").state["run"]["host_gradients"] == "bf16"
