"""One rank of the data-parallel tests (run by tests/training/test_distributed.py under mpirun):

    python distributed_worker.py train OUT.npz [FAMILY]   5 steps on this rank's share of each batch
    python distributed_worker.py zero OUT.npz [FAMILY]    the same with the optimizer state sharded (ZeRO-1)
    python distributed_worker.py ring OUT.npz     the same through the ring, under half the device memory all-resident needs
    python distributed_worker.py ring-zero OUT.npz    the ring with the optimizer state sharded (ZeRO-1)
    python distributed_worker.py ring-zero-bf16 OUT.npz   the same for a bf16 model with fp32 master weights
    python distributed_worker.py kill OUTDIR       rank 1 dies in step 2; rank 0 checkpoints, then steps on
    python distributed_worker.py hang OUTDIR       rank 1 stops answering in step 2 (sleeps)
    python distributed_worker.py collectives -     each collective against numpy (exit 1 on a mismatch)
    python distributed_worker.py trace OUTDIR      2 traced steps, the all-reduce on a comm stream: OUTDIR/rank<r>.json
    python distributed_worker.py trace-serial OUTDIR   the same with the all-reduce on the compute stream
"""
import time
import os
import signal
import sys

import numpy as np

import dataflow as df
from dataflow._ffi import ringlib
from dataflow.io import checkpoint
from dataflow.models import Llama, LlamaConfig

CONFIG = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5)
BATCH, SEQ, STEPS, LR = 4, 12, 5, 1e-3
# each family's own tensors and attention: Qwen2's q/k/v biases, Qwen3's per-head q/k norms and
# explicit head_dim, Mistral's window (shorter than SEQ), Mixtral's and Qwen3-MoE's experts (and
# HF's load-balancing loss, over the global batch: every rank's router statistics summed)
FAMILIES = {"llama": CONFIG, "qwen2": dict(CONFIG, model_type="qwen2", tie_word_embeddings=True),
            "qwen3": dict(CONFIG, model_type="qwen3", head_dim=12), "mistral": dict(CONFIG, model_type="mistral",
                                                                                  sliding_window=5),
            "mixtral": dict(CONFIG, model_type="mixtral", num_local_experts=5, num_experts_per_tok=2),
            "qwen3_moe": dict(CONFIG, model_type="qwen3_moe", num_experts=6, num_experts_per_tok=3,
                              moe_intermediate_size=20, norm_topk_prob=True)}
FAMILIES["qwen3_moe_aux"] = dict(FAMILIES["qwen3_moe"], output_router_logits=True, router_aux_loss_coef=0.05)


def batches():
    rng = np.random.default_rng(11)
    return [rng.integers(0, CONFIG["vocab_size"], size=(BATCH, SEQ)).astype(np.int32) for _ in range(STEPS)]


def train(rank=0, size=1, comm=None, kill_at=None, checkpoint_dir=None, hang=False, shard=False, result=None,
          family="llama", dtype="fp32"):
    """Losses and final weights of training on rows [rank * B / size, (rank + 1) * B / size) of each
    batch; result (a dict), when given, receives the device memory in use after the first step and
    the final optimizer state. dtype bf16: with fp32 master weights."""
    h = df.Handle("host", streams=2, device_memory="64MiB", threads=1)
    model = Llama(h, LlamaConfig.from_dict(FAMILIES[family]), seed=5, dtype=dtype)
    trainer = df.Trainer(model, lr=LR, weight_decay=0.1, grad_clip=0.5, comm=comm, shard_optimizer=shard,
                         master_weights=dtype == "bf16" or None)
    rows = BATCH // size
    losses = []
    for step, tokens in enumerate(batches()):
        if step == kill_at and rank == 1:
            if hang:
                time.sleep(600)
            os.kill(os.getpid(), signal.SIGKILL)
        if step == kill_at and rank == 0:
            checkpoint.save_training(checkpoint_dir, model, trainer, state={"step": step})
        losses.append(trainer.step(tokens[rank * rows:(rank + 1) * rows]))
        if result is not None and step == 0:
            result["memory"] = h.memory_in_use()
    if result is not None:
        record_state(trainer, result)
    return np.array(losses), {n: a.numpy() for n, a in model.named_parameters().items()}


def record_state(trainer, result):
    """The trainer's final optimizer state (sharded: gathered from every rank) into result:
    m/NAME, v/NAME and, with master weights, master/NAME."""
    state = trainer.state_dict()
    for key, prefix in (("exp_avg", "m"), ("exp_avg_sq", "v"), ("master", "master")):
        result.update({f"{prefix}/{n}": a for n, a in state.get(key, {}).items()})


def resident_need(rows, dtype="fp32"):
    """Device bytes all-resident training of CONFIG on `rows` sequences takes: its plan's (bf16:
    with master weights)."""
    try:
        df.ring.resident_plan(CONFIG, SEQ, SEQ * rows, 1024, profile="h100-sxm", dtype=dtype,
                              master_weights=dtype == "bf16")
    except df.OutOfMemoryError as e:
        return e.min_device_bytes
    raise AssertionError("1 KiB holds all-resident training")


def train_ring(comm, shard, result, dtype="fp32"):
    """train() through the ring on this rank's rows, the handle capped at half the device memory
    all-resident training of the whole batch needs; result receives the cap, the device peak,
    the host bytes of the executor and of its plan, and the plan's optimizer state bytes."""
    rows = BATCH // comm.size
    cap = resident_need(BATCH, dtype) // 2
    h = df.Handle("host", streams=5, device_memory=cap, threads=1)  # the ring's four and the comm stream
    model = Llama(h, LlamaConfig.from_dict(CONFIG), seed=5, dtype=dtype)
    trainer = df.Trainer(model, lr=LR, weight_decay=0.1, grad_clip=0.5, comm=comm, comm_stream=4, shard_optimizer=shard,
                         host_memory="256MiB", seq_len=SEQ, batch_size=rows, profile="h100-sxm",
                         master_weights=dtype == "bf16" or None)
    assert trainer.plan is not None, "all-resident training fit the cap"
    losses = [trainer.step(tokens[comm.rank * rows:(comm.rank + 1) * rows]) for tokens in batches()]
    x = trainer._engine.ring.executor
    plan = trainer.plan
    result.update(cap=cap, peak=h.memory_peak(), host=x.host_bytes(), plan_host=plan.host_total_bytes,
                  state=plan.host_bytes[ringlib.DATAFLOW_RING_HOST_OPTIMIZER_STATE] +
                  plan.device_bytes[ringlib.DATAFLOW_RING_DEV_OPTIMIZER_STATE])
    record_state(trainer, result)
    return np.array(losses), model.state_dict()  # the executor holds the weights


# 8 layers of ~10 ms of backward each (256 tokens a rank): the upper blocks' all-reduce has lower
# blocks' backward to run under, even where a woken stream waits milliseconds for a core
TRACE_CONFIG = dict(CONFIG, hidden_size=64, intermediate_size=128, num_hidden_layers=8)
TRACE_BATCH = (8, 64)


def traced_steps(comm, out, comm_stream):
    """Two data-parallel steps with the trace on from the start; rank r writes out/rank<r>.json."""
    h = df.Handle("host", streams=2, device_memory="64MiB", threads=1)
    model = Llama(h, LlamaConfig.from_dict(TRACE_CONFIG), seed=5)
    trainer = df.Trainer(model, lr=1e-3, comm=comm, comm_stream=comm_stream, trace=True)
    rng, rows = np.random.default_rng(11), TRACE_BATCH[0] // comm.size
    for _ in range(2):
        tokens = rng.integers(0, CONFIG["vocab_size"], size=TRACE_BATCH)
        trainer.step(tokens[comm.rank * rows:(comm.rank + 1) * rows])
    trainer.trace(os.path.join(out, f"rank{comm.rank}.json"))


def collectives(comm):
    """Every collective on odd sizes and every reduction dtype, against numpy sums in rank order."""
    h = df.Handle("host", streams=2, device_memory="16MiB", threads=1)
    comm, n, r = comm.on(h), comm.size, comm.rank
    mine = [np.random.default_rng(k).standard_normal(1001).astype(np.float32) for k in range(n)]
    total = mine[0].copy()
    for x in mine[1:]:
        total += x
    ok = []
    for dtype in ("fp32", "fp64", "bf16"):
        a = h.from_numpy(mine[r], dtype=dtype)
        # the inputs as the dtype holds them, summed exactly in fp64 (2 ranks), rounded once to the dtype
        want = sum(h.from_numpy(x, dtype=dtype).numpy().astype(np.float64) for x in mine)
        want = want if dtype == "fp64" else want.astype(np.float32)
        ok.append(np.array_equal(comm.all_reduce(a, stream=1).numpy(1), h.from_numpy(want, dtype=dtype).numpy()))
    part = 1001 // n
    out = h.empty((part,))
    comm.reduce_scatter(h.from_numpy(mine[r][:part * n]), out, op="avg")
    ok.append(np.array_equal(out.numpy(), (total[:part * n] / np.float32(n))[r * part:(r + 1) * part]))
    gathered = h.empty((n * 7,), "bf16")
    comm.all_gather(h.from_numpy(np.full(7, r, np.float32), dtype="bf16"), gathered)
    ok.append(np.array_equal(gathered.numpy(), np.repeat(np.arange(n, dtype=np.float32), 7)))
    b = comm.broadcast(h.from_numpy(np.full(3, r + 5.0)), root=n - 1)
    ok.append(np.array_equal(b.numpy(), np.full(3, n + 4.0)))
    print(f"rank {r}: collectives {ok}", flush=True)
    comm.close()
    return all(ok)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    comm = df.distributed.init(timeout=float(os.environ.get("DATAFLOW_TEST_COMM_TIMEOUT", "30")))
    if mode == "collectives":
        sys.exit(0 if collectives(comm) else 1)
    if mode in ("trace", "trace-serial"):
        traced_steps(comm, out, comm_stream=1 if mode == "trace" else 0)
    elif mode in ("train", "zero"):
        result = {}
        family = sys.argv[3] if len(sys.argv) > 3 else "llama"
        losses, weights = train(comm.rank, comm.size, comm, shard=mode == "zero", result=result, family=family)
        if comm.rank == 0:
            np.savez(out, losses=losses, **weights, **{f"opt/{k}": v for k, v in result.items()})
    elif mode in ("ring", "ring-zero", "ring-zero-bf16"):
        result = {}
        losses, weights = train_ring(comm, mode != "ring", result, "bf16" if mode.endswith("bf16") else "fp32")
        if comm.rank == 0:
            np.savez(out, losses=losses, **weights, **{f"opt/{k}": v for k, v in result.items()})
    else:
        try:
            train(comm.rank, comm.size, comm, kill_at=2, checkpoint_dir=out, hang=mode == "hang")
        except df.DataflowError as e:
            print(f"rank {comm.rank}: {e}", file=sys.stderr, flush=True)
            os._exit(3)  # a collective failed: MPI_Finalize could wait for the lost rank forever


if __name__ == "__main__":
    main()
