"""Batched decode throughput of BatchEngine (continuous batching over the paged KV cache) at
1, 4 and 16 concurrent sequences, on bench/train.py's REFERENCE model (8 layers, hidden 512)
with random weights, fp32 and bf16. The peer is the same engine with one sequence, in the
same run: ratio = tok/s at n streams / tok/s at 1 stream (n streams share each step's matmuls).
Decode tok/s counts the tokens of steps in which every running sequence decodes (prompts
read); peak memory per sequence = (handle peak during the run - memory before it) / n, after an
untimed warm-up run that grows the model's workspace to the largest step.

    python bench/batched_decode.py [--dtypes fp32 bf16] [--streams 1 4 16] [--new-tokens 64] [--quick]
Prints one JSON object (a row per dtype and stream count) and a summary line. --quick: a
2-layer model, 8 new tokens, one round (a smoke run)."""
import argparse
import json
import statistics
import time

import numpy as np

import dataflow as df
from dataflow.models.batch_engine import BatchEngine
from train import QUICK, REFERENCE


def run(h, model, streams, prompt_len, new_tokens, rounds):
    rates, per_seq = [], []
    for r in range(rounds):
        h.sync()
        before = h.memory_in_use()
        h.reset_memory_peak()
        engine = BatchEngine(model, page_size=16, max_seqs=streams, max_seq_tokens=prompt_len + new_tokens,
                             max_batch_tokens=max(streams * prompt_len, 64))
        rng = np.random.default_rng(r)
        for _ in range(streams):
            engine.add(rng.integers(0, model.config.vocab_size, prompt_len), new_tokens)
        tokens, seconds = 0, 0.0
        while engine.pending:
            decoding = all(req.fed >= req.prompt.size for req in engine._running) and engine._running \
                and not engine._waiting
            t0 = time.perf_counter()
            out = engine.step()
            if decoding:
                seconds += time.perf_counter() - t0
                tokens += len(out)
        per_seq.append((h.memory_peak() - before) / streams)
        engine.close()
        rates.append(tokens / seconds)
    return statistics.median(rates), min(rates), max(rates), statistics.median(per_seq)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"])
    ap.add_argument("--streams", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.new_tokens, args.rounds = 8, 1
    h = df.Handle("host", streams=2)
    summary, rows = [], []
    for dtype in args.dtypes:
        config = QUICK if args.quick else REFERENCE
        model = df.models.Llama(h, df.models.LlamaConfig(**config), dtype=dtype, seed=0)
        run(h, model, max(args.streams), args.prompt, args.new_tokens, 1)  # warm-up: the workspace at its largest
        base = None
        for n in args.streams:
            med, lo, hi, mem = run(h, model, n, args.prompt, args.new_tokens, args.rounds)
            base = med if n == args.streams[0] else base
            rows.append(dict(dtype=dtype, streams=n, decode_tok_s=round(med, 1), spread=[round(lo, 1), round(hi, 1)],
                             ratio_vs_first=round(med / base, 2), peak_bytes_per_seq=int(mem)))
            summary.append(f"{dtype} x{n}: {med:.0f} tok/s ({med / base:.2f}x)")
        model.close()
    print(json.dumps(dict(bench="batched_decode", model="quick" if args.quick else "reference",
                          peer=f"the same engine at {args.streams[0]} stream(s)", rows=rows)))
    print("batched_decode: " + ", ".join(summary))


if __name__ == "__main__":
    main()
