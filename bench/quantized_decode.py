"""Single-stream greedy decode of one random Llama at fp32, bf16 and with weight-only int8 / int4
linear weights (dataflow quantize's layouts; fp32 or bf16 activations), measured in the same run.

    python bench/quantized_decode.py [--threads N] [--rounds 3] [--prompt 64] [--new 128] [--quick]

The model is the issue's: 8 layers, hidden 512 (intermediate 1408, 8 heads), vocab --vocab;
embedding and norms stay in the model dtype, lm_head too except in the "+head" variants. Per
variant and round: t1 = generate(prompt, 1 token) (the prefill), tN = generate(prompt, N tokens);
decode tok/s = (N - 1) / (tN - t1),
prompt tok/s = prompt / t1. Variants take turns within each round (these machines are shared and
noisy); medians over rounds. ratio = decode tok/s / fp32's. Prints JSON (rows, machine), then
a summary line. The peer here is the fp32 model; llama.cpp's q8_0 / q4_0 are bench/generate.py's.
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

from harness import import_dataflow, machine_info

CONFIG = dict(model_type="llama", hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
              num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=1024)
QUICK = dict(CONFIG, hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4)
# name -> (model dtype, quantization_config arguments or None)
# (quantization_config's bits, group_size, zero_point, lm_head); "+head": lm_head quantized too
VARIANTS = {"fp32": ("fp32", None), "bf16": ("bf16", None), "int8": ("fp32", (8,)), "int8-bf16": ("bf16", (8,)),
            "int8+head": ("fp32", (8, None, False, True)), "int4": ("fp32", (4, 128)),
            "int4-bf16": ("bf16", (4, 128)), "int4+head": ("fp32", (4, 128, False, True))}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    p.add_argument("--new", type=int, default=128, help="greedy tokens to generate")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--quick", action="store_true", help="a 2-layer hidden-128 model, for a smoke run")
    return p.parse_args()


def build(df, h, config, state, dtype, q):
    """A model of dtype over state: as is when q is None, else with the layers' linear weights
    quantized by quantization_config(*q)."""
    from dataflow import quantize as qz
    if q is None:
        model = df.models.Llama(h, config, dtype=dtype)
        model.load_state_dict(state)
        return model
    qc = qz.quantization_config(*q)
    model = df.models.Llama(h, {**config, "quantization_config": qc}, dtype=dtype)
    model.load_state_dict(qz.quantize_state(state, qc))
    return model


def main():
    args = parse_args()
    df = import_dataflow()
    config = dict(QUICK if args.quick else CONFIG, vocab_size=args.vocab)
    h = df.Handle("host", threads=args.threads)
    state = df.models.Llama(h, config, seed=0).state_dict()
    models = {v: build(df, h, config, state, *VARIANTS[v]) for v in VARIANTS}
    weight_bytes = {v: m.layout.total((0,)) for v, m in models.items()}
    prompt = np.random.default_rng(0).integers(0, args.vocab, args.prompt)
    times = {v: [] for v in VARIANTS}
    tokens = {}
    for _ in range(args.rounds):
        for v, m in models.items():
            t0 = time.perf_counter()
            m.generate(prompt, 1, temperature=0)
            t1 = time.perf_counter()
            tokens[v] = m.generate(prompt, args.new, temperature=0)
            tn = time.perf_counter() - t1
            times[v].append((t1 - t0, tn))
    rows = []
    for v in VARIANTS:
        prefill = statistics.median(t for t, _ in times[v])
        decode = statistics.median((args.new - 1) / max(tn - t1, 1e-9) for t1, tn in times[v])
        rows.append({"variant": v, "dtype": VARIANTS[v][0], "weights_mib": weight_bytes[v] / 2**20,
                     "prompt_tok_s": args.prompt / prefill, "decode_tok_s": decode,
                     "decode_spread": [min((args.new - 1) / max(tn - t1, 1e-9) for t1, tn in times[v]),
                                       max((args.new - 1) / max(tn - t1, 1e-9) for t1, tn in times[v])],
                     "greedy_agrees_with_fp32": float(np.mean(tokens[v] == tokens["fp32"]))})
    base = rows[0]["decode_tok_s"]
    for r in rows:
        r["ratio"] = r["decode_tok_s"] / base
    print(json.dumps({"config": config, "prompt": args.prompt, "new": args.new, "threads": args.threads,
                      "rows": rows, "machine": machine_info()}, indent=1))
    print(f"quantized decode host ({args.threads} threads), tok/s: "
          + ", ".join(f"{r['variant']} {r['decode_tok_s']:.0f} ({r['ratio']:.2f}x)" for r in rows))
    for m in models.values():
        m.close()
    h.close()


if __name__ == "__main__":
    main()
