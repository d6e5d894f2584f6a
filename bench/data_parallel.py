"""Data-parallel training: how much of the gradient all-reduce the backward hides, and an estimate
for Llama-3-8B on H100s over NCCL.

    mpirun -n 2 python bench/data_parallel.py [--steps 5]     (as root: --allow-run-as-root --oversubscribe)

Measured (2 ranks here, rank 0 prints): the step time with each block's all-reduce on a
communication stream (overlapped), on the compute stream right after the block (serialized),
and the all-reduce of every block's gradients alone. overlap = (serialized - overlapped) /
all-reduce: the fraction of the all-reduce time hidden behind the backward. From a trace of the
overlapped steps (Trainer.trace_events): the time the comm stream spent in all-reduce spans (a
rank waiting for the other included) and the part of it during which the compute stream ran a
block's backward (overlap_traced: their ratio, no subtraction of noisy step times). The peer is the
same model stepped without communication (the compute alone). ZeRO-1 (shard_optimizer): its
step time, and the device memory a model, its trainer and one step take on a fresh handle of
rank 0, against plain data-parallel (the optimizer state, m and v, is 8 bytes a parameter).

Estimated: tokens/s = N * tokens_per_gpu / max(compute, exposed communication), compute =
6 * params * tokens_per_gpu / (MFU * peak), ring all-reduce = 2 (N - 1) / N * grad bytes /
NCCL bus bandwidth (nccl-tests' busbw), assuming the overlap measured here.
"""
import argparse
import json
import time

import numpy as np

import dataflow as df
from dataflow.models import Llama, LlamaConfig

CONFIG = dict(vocab_size=512, hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, max_position_embeddings=256)
# H100 SXM: dense bf16 peak; NCCL all-reduce bus bandwidths for large messages (nccl-tests busbw):
# NVLink 4 / NVSwitch inside a DGX H100 node ~450 GB/s; 8 nodes over 8x400 Gb/s NDR InfiniBand ~360 GB/s.
H100_PEAK, MFU, BUSBW = 989e12, 0.40, {8: 450e9, 64: 360e9}
LLAMA3_8B_PARAMS, TOKENS_PER_GPU = 8.03e9, 16384


def median_step(trainer, tokens, steps):
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(tokens)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def memory_and_step(comm, cfg, tokens, steps, shard):
    """(device bytes in use after the first step on a handle of its own, median step seconds)."""
    h = df.Handle("host", streams=2, device_memory="1GiB", threads=1)
    trainer = df.Trainer(Llama(h, cfg), comm=comm, shard_optimizer=shard)
    trainer.step(tokens)
    return h.memory_in_use(), median_step(trainer, tokens, steps)


def traced_overlap(comm, h, cfg, tokens, steps):
    """Seconds per step of all-reduce spans and of their intersection with backward spans, from a
    trace of `steps` overlapped steps (after one untraced warm-up step)."""
    trainer = df.Trainer(Llama(h, cfg), comm=comm, comm_stream=1)
    trainer.step(tokens)
    trainer.start_trace()
    for _ in range(steps):
        trainer.step(tokens)
    spans, _ = trainer.trace_events()
    reduces = [(s["start"], s["end"]) for s in spans if s["what"] == "grad all-reduce"]
    backwards = [(s["start"], s["end"]) for s in spans if s["what"] == "backward"]
    hidden = sum(max(0.0, min(a1, b1) - max(a0, b0)) for a0, a1 in reduces for b0, b1 in backwards)
    return sum(a1 - a0 for a0, a1 in reduces) / steps, hidden / steps


def estimate(overlap):
    out = {}
    for n, busbw in BUSBW.items():
        compute = 6 * LLAMA3_8B_PARAMS * TOKENS_PER_GPU / (MFU * H100_PEAK)
        allreduce = 2 * (n - 1) / n * 2 * LLAMA3_8B_PARAMS / busbw  # bf16 gradients
        step = compute + (1 - overlap) * allreduce
        out[f"{n}xH100"] = {"busbw_GBps": busbw / 1e9, "compute_s": compute, "allreduce_s": allreduce,
                            "tokens_per_s": n * TOKENS_PER_GPU / step}
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    comm = df.distributed.init()
    h = df.Handle("host", streams=2, device_memory="1GiB", threads=1)
    tokens = np.random.default_rng(comm.rank).integers(0, CONFIG["vocab_size"], size=(2, 128)).astype(np.int32)
    cfg = LlamaConfig.from_dict(CONFIG)
    times = {}
    for name, comm_stream in (("overlapped", 1), ("serialized", 0)):
        times[name] = median_step(df.Trainer(Llama(h, cfg), comm=comm, comm_stream=comm_stream), tokens, args.steps)
    times["compute_only"] = median_step(df.Trainer(Llama(h, cfg)), tokens, args.steps)
    times["traced_allreduce"], times["traced_hidden"] = traced_overlap(comm, h, cfg, tokens, args.steps)
    traced = times["traced_hidden"] / times["traced_allreduce"]
    memory = {}
    for name, shard in (("plain", False), ("zero1", True)):
        memory[name], times[f"{name}_step"] = memory_and_step(comm, cfg, tokens, args.steps, shard)
    model, c = Llama(h, cfg), comm.on(h)
    grads = [a for a in model._arrays(1).values()]
    t0 = time.perf_counter()
    for _ in range(args.steps):
        for g in grads:
            c.all_reduce(g, stream=1)
        h.sync(1)
    times["allreduce"] = (time.perf_counter() - t0) / args.steps
    raw = (times["serialized"] - times["overlapped"]) / times["allreduce"]  # noisy on a shared machine
    overlap = max(0.0, min(1.0, raw))
    memory["optimizer_state"] = 8 * sum(a.size for a in model.named_parameters().values())
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "seconds": times, "overlap": overlap, "overlap_raw": raw,
                          "overlap_traced": traced,
                          "memory_rank0": memory, "estimate": estimate(overlap)}, indent=1))
        e = estimate(overlap)
        print(f"summary: {comm.size} ranks: step {times['overlapped'] * 1e3:.1f} ms overlapped vs "
              f"{times['serialized'] * 1e3:.1f} ms serialized vs {times['compute_only'] * 1e3:.1f} ms compute alone; "
              f"all-reduce {times['allreduce'] * 1e3:.1f} ms, {overlap:.0%} hidden (trace: {traced:.0%} of "
              f"{times['traced_allreduce'] * 1e3:.1f} ms of all-reduce spans under backward); Llama-3-8B estimate "
              f"{e['8xH100']['tokens_per_s']:.0f} tok/s on 8 H100, {e['64xH100']['tokens_per_s']:.0f} on 64; ZeRO-1: "
              f"rank 0 {memory['zero1'] / 2**20:.2f} MiB vs {memory['plain'] / 2**20:.2f} MiB (optimizer state "
              f"{memory['optimizer_state'] / 2**20:.2f} MiB), step {times['zero1_step'] * 1e3:.1f} ms vs "
              f"{times['plain_step'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
