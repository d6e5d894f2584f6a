"""`dataflow serve` under concurrent clients: time to first token (p50, p99) and generated tok/s
with 1 and with --clients streaming clients (the openai package, one thread each), on
bench/train.py's REFERENCE model (8 layers, hidden 512) with random weights in fp32, served from
a temporary HF directory. The peer, in the same run: the same BatchEngine in this process with
the same requests all queued at once (no HTTP, no tokenizer), so ratio = server tok/s / engine
tok/s is what the HTTP layer and the engine thread cost. Every request: a prompt of --prompt
random token ids, --new-tokens greedy tokens (ignore_eos: all of them; logprobs on, so each token
is its own event).

    python bench/serve.py [--clients 16] [--requests 3] [--prompt 32] [--new-tokens 64] [--quick]
Prints one JSON object and a summary line. --quick: a 2-layer model, 4 clients, 8 new tokens."""
import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import dataflow as df
from dataflow.io import tokenizer as tokenizers
from dataflow.models.batch_engine import BatchEngine
from train import QUICK, REFERENCE


def save_model(directory, config):
    with df.Handle("host") as h:
        model = df.models.Llama(h, df.models.LlamaConfig(**config), dtype="fp32", seed=0)
        model.save_pretrained(directory)
        model.close()
    tokenizers.default().save(directory)


def start_server(directory, clients):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(df.__path__[0]),
                                                         os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "dataflow.cli", "serve", "--model", directory, "--port", "0",
                              "--served-model-name", "bench", "--max-batch", str(clients),
                              "--max-batch-tokens", "512"], env=env, stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    if " on http://" not in line:
        child.kill()
        raise SystemExit(f"serve.py: the server did not start: {line}")
    return child, line.split(" on ")[1].split()[0]


def one_request(client, prompt, new_tokens):
    """(seconds to the first token, tokens) of one streamed greedy completion."""
    t0 = time.perf_counter()
    first, tokens = None, 0
    for chunk in client.completions.create(model="bench", prompt=prompt, max_tokens=new_tokens, temperature=0,
                                           logprobs=0, stream=True, extra_body={"ignore_eos": True}):
        n = len(chunk.choices[0].logprobs.tokens) if chunk.choices and chunk.choices[0].logprobs else 0
        if n and first is None:
            first = time.perf_counter() - t0
        tokens += n
    return first, tokens


def load(url, clients, requests, prompts, new_tokens):
    """(time to first token of every request, tok/s over the run) with `clients` concurrent clients."""
    from openai import OpenAI
    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)

    def worker(c):
        return [one_request(client, prompts[(c * requests + r) % len(prompts)], new_tokens) for r in range(requests)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = [x for rs in pool.map(worker, range(clients)) for x in rs]
    seconds = time.perf_counter() - t0
    return [r[0] for r in results], sum(r[1] for r in results) / seconds


def engine_peer(directory, clients, requests, prompts, new_tokens):
    """tok/s of the same requests through a BatchEngine in this process, `clients` at a time."""
    with df.Handle("host") as h:
        model = df.models.Llama.from_pretrained(directory, h)
        engine = BatchEngine(model, max_seqs=clients, max_seq_tokens=len(prompts[0]) + new_tokens,
                             max_batch_tokens=512)
        for c in range(clients * requests):
            engine.add(prompts[c % len(prompts)], new_tokens)
        t0 = time.perf_counter()
        out = engine.run()
        seconds = time.perf_counter() - t0
        engine.close()
        model.close()
    return sum(c.tokens.size for c in out.values()) / seconds


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=3, help="requests per client, one after another")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    config = QUICK if args.quick else REFERENCE
    if args.quick:
        args.clients, args.requests, args.new_tokens = 4, 1, 8
    rng = np.random.default_rng(0)
    prompts = [rng.integers(2, config["vocab_size"], args.prompt).tolist() for _ in range(args.clients * args.requests)]
    rows = {}
    with tempfile.TemporaryDirectory() as directory:
        save_model(directory, config)
        child, url = start_server(directory, args.clients)
        try:
            load(url, 1, 1, prompts, 4)  # warm-up: the workspace grown, the code paths run once
            for clients in (1, args.clients):
                ttft, rate = load(url, clients, args.requests, prompts, args.new_tokens)
                rows[clients] = dict(clients=clients, requests=len(ttft), tok_s=round(rate, 1),
                                     ttft_p50_ms=round(1e3 * percentile(ttft, 50), 1),
                                     ttft_p99_ms=round(1e3 * percentile(ttft, 99), 1),
                                     ttft_max_ms=round(1e3 * max(ttft), 1))
        finally:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=120)
        for clients, row in rows.items():
            peer = engine_peer(directory, clients, args.requests, prompts, args.new_tokens)
            row.update(peer_tok_s=round(peer, 1), ratio_vs_peer=round(row["tok_s"] / peer, 2))
    top = rows[args.clients]
    result = dict(bench="serve", model="quick" if args.quick else "reference", dtype="fp32",
                  prompt=args.prompt, new_tokens=args.new_tokens, rows=list(rows.values()),
                  peer="the same BatchEngine in-process, as many sequences at a time as clients",
                  ratio_vs_one_client=round(top["tok_s"] / rows[1]["tok_s"], 2))
    print(json.dumps(result))
    print(f"serve: {args.clients} clients {top['tok_s']:.0f} tok/s ({top['ratio_vs_peer']:.2f}x the engine "
          f"in-process, {result['ratio_vs_one_client']:.2f}x one client), time to first token p50 "
          f"{top['ttft_p50_ms']:.0f} ms, p99 {top['ttft_p99_ms']:.0f} ms")


if __name__ == "__main__":
    main()
