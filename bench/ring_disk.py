"""The ring's disk tier against its host tier (host backend): one plan whose optimizer state
lives in a file under a directory (read into staging on the disk stream, block b + 1 while
block b updates, written back after), run unthrottled and throttled to a slower disk, next to
the same plan with the state in host memory. Same model, weights and batches on every side.

    python bench/ring_disk.py [--steps 5] [--throttle 200MB] [--dir /tmp]

Sides take turns step by step (host, disk, throttled disk, host, ...) after a warm-up step
each, so this shared machine's load hits all alike; medians are reported, with the disk's
bytes per step (m and v read and written once) and the time the throttle alone would take for
them: the part of it above the host tier's step is what the optimizer could not hide.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

CFG = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 8,
       "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 256,
       "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
SEQ, ROWS = 128, 4


def plans(df):
    """The smallest device cap, the plan at it with the optimizer state on disk, and the same
    plan with the state on the host."""
    kw = dict(tokens_per_step=SEQ * ROWS, profile="h100-sxm", dtype="fp32")
    try:
        df.ring.plan(CFG, SEQ, 1024, "8GiB", **kw)
    except df.errors.OutOfMemoryError as e:
        cap = 2 * e.min_device_bytes
    host = df.ring.plan(CFG, SEQ, cap, "8GiB", **kw)
    disk = df.ring.plan(CFG, SEQ, cap, host.host_total_bytes - 1, disk_memory="1GiB", **kw,
                        disk_kinds=("optimizer state",))
    return cap, disk.without_disk(), disk


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--throttle", default="200MB", help="the slower disk's bytes/s")
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where the disk tier's file goes")
    args = p.parse_args()
    import dataflow as df
    cap, host_plan, disk_plan = plans(df)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, CFG["vocab_size"], (ROWS, SEQ)) for _ in range(args.steps + 1)]
    kw = dict(lr=1e-3, grad_clip=1.0)
    sides = {}
    for name, plan, disk in (("host tier", host_plan, {}), ("disk tier", disk_plan, {"disk": args.dir}),
                             ("disk tier, throttled", disk_plan, {"disk": args.dir, "disk_throttle": args.throttle})):
        model = df.models.Llama(df.Handle("host", device_memory=cap, streams=5), CFG, seed=1)
        sides[name] = df.Trainer(model, plan=plan, **kw, **disk)
    times = {name: [] for name in sides}
    losses = {name: [] for name in sides}
    for i, b in enumerate(batches):
        for name, t in sides.items():
            start = time.perf_counter()
            losses[name].append(t.step(b))
            if i:  # the first step warms up
                times[name].append(time.perf_counter() - start)
    state = disk_plan.disk_memory["optimizer state"]
    throttle = df.handle.parse_bytes(args.throttle)
    out = {"uptime": os.getloadavg(), "steps": args.steps, "optimizer_state_bytes": state,
           "disk_mode": sides["disk tier"]._engine.ring.executor.disk_mode,
           "throttle_bytes_per_sec": throttle, "throttle_seconds_per_step": 2 * state / throttle,
           "same_losses": losses["host tier"] == losses["disk tier"] == losses["disk tier, throttled"],
           "median_step_seconds": {name: statistics.median(v) for name, v in times.items()},
           "step_seconds": times}
    print(json.dumps(out, indent=1))
    med = out["median_step_seconds"]
    print(f"ring_disk ({out['disk_mode']}, load {out['uptime'][0]:.1f}): median step host tier "
          f"{med['host tier']:.3f} s, "
          f"disk tier {med['disk tier']:.3f} s, throttled to {throttle:.3g} B/s {med['disk tier, throttled']:.3f} s "
          f"(the throttle alone: {out['throttle_seconds_per_step']:.3f} s); same losses: {out['same_losses']}")


if __name__ == "__main__":
    main()
