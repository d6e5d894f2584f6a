"""The loss curve of a small Llama on the embedded corpus with each AdamW state precision
(Trainer(optimizer_state=...)): fp32 (the reference), bf16 (stochastic rounding), 8-bit
(blockwise). Prints JSON (the curves, averaged per window of steps) and a one-line summary: the
last window's loss of each precision relative to fp32's, and its host bytes per parameter of
optimizer state (the executor's m and v, as the planner counts them).

usage: python bench/optimizer_state.py [--steps N] [--window W]"""
import argparse
import json

import numpy as np

import dataflow as df
from dataflow.cli import corpus
from dataflow.training import ring_training
from dataflow.io.tokenizer import ByteTokenizer

CONFIG = {"vocab_size": 258, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
          "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
BATCH, SEQ = 8, 64


def loss_curve(state, steps, seed=0):
    """The per-step training losses of `steps` AdamW steps (lr 3e-3, a fixed data order)."""
    tokens = corpus.load_tokens(ByteTokenizer())
    stream = corpus.Batches(tokens, BATCH, SEQ, source="corpus")
    model = df.models.Llama(df.Handle("host"), CONFIG, seed=seed, placement="device")
    trainer = df.Trainer(model, lr=3e-3, weight_decay=0.1, optimizer_state=state, optimizer_seed=seed)
    losses = []
    for _ in range(steps):
        losses.append(trainer.step(stream.next()))
    bytes_per_param = ring_training.state_bytes(model, state) / sum(row[1] // 4 for row in model.layout.bytes)
    return np.array(losses), bytes_per_param


def compare(steps, window):
    """{state: {"curve": window means, "last": the last window's mean, "vs_fp32": its ratio,
    "state_bytes_per_param": ...}}"""
    out = {}
    for state in ("fp32", "bf16", "8bit"):
        losses, per_param = loss_curve(state, steps)
        curve = losses[:steps // window * window].reshape(-1, window).mean(axis=1)
        out[state] = {"curve": [round(float(x), 4) for x in curve], "last": float(curve[-1]),
                      "state_bytes_per_param": round(per_param, 4)}
    for state in out:
        out[state]["vs_fp32"] = out[state]["last"] / out["fp32"]["last"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--window", type=int, default=25)
    args = p.parse_args()
    out = compare(args.steps, args.window)
    print(json.dumps(out, indent=1))
    print("optimizer_state: last-window loss vs fp32: " + ", ".join(
        f"{s} {out[s]['vs_fp32']:.4f} ({out[s]['state_bytes_per_param']:.3f} B/param)" for s in out))


if __name__ == "__main__":
    main()
