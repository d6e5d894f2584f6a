"""Training-step throughput and peak memory of dataflow's Llama vs Hugging Face
LlamaForCausalLM on torch eager, same config, dtype, thread count and batch.

    python bench/train.py [--quick] [--backend host] [--model reference|qwen3|qwen3_moe|1b] [--threads N]
                          [--dtypes fp32,bf16] [--steps 5] [--compile] [--experts eager|grouped_mm]
                          [--router-aux-loss]

--model qwen3: the reference sizes as a Qwen3 (per-head q/k RMSNorm; model_type qwen3), against
transformers' Qwen3ForCausalLM. --model qwen3_moe: the same with every layer's SwiGLU a mixture
of 8 experts of 352 (top-2, renormalized), against Qwen3MoeForCausalLM; --experts picks
transformers' experts implementation (eager: a Python loop over the experts that got tokens;
grouped_mm: torch's grouped matmul; default: transformers' own choice, grouped_mm where it can). --compile: also torch.compile(model) (default inductor backend;
its compilation runs in its longer warm-up, WARMUP_COMPILE untimed steps) as a third peer.
--router-aux-loss (qwen3_moe): both train with output_router_logits, the loss + 0.001 x HF's
load-balancing loss over every layer's router logits.

--backend cuda[:N]: dataflow on that GPU and torch on the same GPU (model built there, tokens
there; each step ends with loss.item(), a sync, as Trainer.step returns the loss). --model 1b:
a Llama-3.2-1B-class config (hidden 2048, 16 layers, 32 query / 8 KV heads, FFN 8192, vocab
128256, untied) at 1 x 4096 tokens, the issue's GPU target. On a GPU the rows add peak device
memory and MFU = model FLOPs per step / step time / the GPU's dense bf16 peak (PEAK_BF16, from
the datasheet; None for a GPU not in the table).

A step is forward + backward + AdamW with global-norm clipping (max norm 1.0):
dataflow Trainer.step vs torch's zero_grad / model(tokens, labels=tokens).loss.backward() /
clip_grad_norm_ / AdamW.step (sdpa attention, foreach AdamW: torch's defaults). Each
(library, dtype) runs in its own subprocess, so its peak RSS (resource.getrusage ru_maxrss)
is its own: the dataflow process never imports torch. rss_baseline_mib is the peak before
the model is built (interpreter + libraries), rss_peak_mib the peak after the timed steps.
Timing: both workers stay alive and take turns, --rounds rounds of a few steps each (the order
rotating), so load that comes and goes on a shared machine hits both alike; a library's rounds
add up to at least --steps steps and --seconds seconds after 2 warm-up steps
(WARMUP_COMPILE for torch.compile, which recompiles in its first steps). tokens/s = batch *
seq / the median of all of a library's timed steps; speedup is the median over the rounds of
dataflow's tokens/s / torch's in the same round, and its spread the quartiles of those ratios.
The loadavg is recorded around each worker's run. Both run with the same OpenMP wait policy
(bench/harness.py).
bf16: dataflow keeps bf16 weights and activations with fp32 gradients, m and v; torch keeps
everything (params, grads, AdamW state) in bf16, as model.to(torch.bfloat16) does.

Model FLOPs per step (reported as achieved GFLOP/s; on a GPU also as MFU against its datasheet peak):
6 * (non-embedding params + lm_head) * tokens + attention 6 * 2 * layers * heads * head_dim *
sum over documents of seq^2 / 2 (causal; QK^T and PV, forward 2 + backward 4 multiply-adds).
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REFERENCE = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                 num_attention_heads=8, num_key_value_heads=4, rms_norm_eps=1e-5, rope_theta=500000.0,
                 max_position_embeddings=2048, tie_word_embeddings=False)
REFERENCE_BATCH = (4, 512)
QUICK = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=256,
             tie_word_embeddings=False)
QUICK_BATCH = (2, 64)
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=500000.0,
                max_position_embeddings=4096, tie_word_embeddings=False)
LLAMA_1B_BATCH = (1, 4096)
QWEN3 = dict(REFERENCE, model_type="qwen3", head_dim=64, rms_norm_eps=1e-6)
QWEN3_MOE = dict(QWEN3, model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=352,
                 norm_topk_prob=True)
PEAK_BF16 = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}  # dense tensor-core FLOP/s (SXM datasheets)
WARMUP = 2
# torch.compile recompiles during its first few steps (measured here: steps 3 and 4 still took
# the 10 s of the first two, then 2.5-5 s), so its warm-up is longer
WARMUP_COMPILE = 6


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def config(args):
    if args.quick:
        return QUICK, QUICK_BATCH
    if args.router_aux_loss:  # both libraries add HF's load-balancing loss (its default weight)
        return dict(QWEN3_MOE, output_router_logits=True), REFERENCE_BATCH
    return {"1b": (LLAMA_1B, LLAMA_1B_BATCH), "qwen3": (QWEN3, REFERENCE_BATCH),
            "qwen3_moe": (QWEN3_MOE, REFERENCE_BATCH)}.get(args.model, (REFERENCE, REFERENCE_BATCH))


def peak_flops(gpu_name):
    return next((v for k, v in PEAK_BF16.items() if k in gpu_name), None)


def step_flops(cfg, batch, seq):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    h, f, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    experts = cfg.get("num_experts")  # the router and the top-k experts a token meets (any routing)
    ffn = experts * h + cfg["num_experts_per_tok"] * 3 * h * cfg["moe_intermediate_size"] if experts else 3 * h * f
    per_layer = h * hd * (cfg["num_attention_heads"] * 2 + cfg["num_key_value_heads"] * 2) + ffn
    dense = L * per_layer + cfg["vocab_size"] * h  # lm_head; the embedding is a lookup
    attention = 2 * L * cfg["num_attention_heads"] * hd * batch * seq * seq / 2
    return 6 * dense * batch * seq + 6 * attention


def worker(args):
    import numpy as np
    cfg, (batch, seq) = config(args)
    tokens = np.random.default_rng(0).integers(0, cfg["vocab_size"], size=(batch, seq))
    if args.worker == "dataflow":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from harness import import_dataflow, open_handle
        df = import_dataflow()
        baseline = peak_rss_mib()
        h = open_handle(df, args.backend, args.threads)
        model = df.models.Llama(h, df.models.LlamaConfig.from_dict(cfg), dtype=args.dtype, seed=0)
        trainer = df.Trainer(model, lr=1e-4, weight_decay=0.1, grad_clip=1.0)
        step = lambda: trainer.step(tokens)  # returns the loss: synchronous
        extra = dict(device_memory_in_use_mib=None)
    else:
        import torch
        import transformers
        from harness import torch_device
        torch.set_num_threads(args.threads)
        baseline = peak_rss_mib()
        device = torch_device(args.backend)
        experts = {"experts_implementation": args.experts} if args.experts else {}
        with torch.device(device):  # built on the device: a 1B model initialises in seconds there
            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(**{"model_type": "llama", **cfg}), **experts)
        model = model.to(torch.bfloat16 if args.dtype == "bf16" else torch.float32).train()
        opt_params = model.parameters()
        if args.worker == "torch_compile":
            model = torch.compile(model)
        opt = torch.optim.AdamW(opt_params, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
        t = torch.from_numpy(tokens).to(device)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = model(t, labels=t).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss.item()
        extra = {}
    # Commands from the parent, one per line: "run N" times N steps and answers their seconds;
    # "end" answers the summary. Between commands the process waits on its stdin, using no CPU.
    warmup = WARMUP_COMPILE if args.worker == "torch_compile" else WARMUP
    load, losses = [os.getloadavg()[0]], [step() for _ in range(warmup)]
    for line in sys.stdin:
        if line.split()[0] == "end":
            break
        times = []
        for _ in range(int(line.split()[1])):
            t0 = time.perf_counter()
            losses.append(step())
            times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)
    load.append(os.getloadavg()[0])
    if args.worker == "dataflow":
        extra["device_memory_in_use_mib"] = round(h.memory_in_use() / 2**20, 1)
    elif args.backend != "host":
        extra["device_memory_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(dict(library=args.worker, dtype=args.dtype, first_loss=losses[0], last_loss=losses[-1],
                          rss_baseline_mib=round(baseline, 1), rss_peak_mib=round(peak_rss_mib(), 1),
                          loadavg_start_end=load, **extra)), flush=True)


class Worker:
    """One library's worker process (its own, for its own peak RSS), driven over its stdin."""

    def __init__(self, args, lib, dtype, env):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", lib, "--dtype", dtype, "--backend", args.backend,
               "--model", args.model, "--threads", str(args.threads)] + (["--quick"] if args.quick else []) + (
                   ["--experts", args.experts] if args.experts else []) + (
                   ["--router-aux-loss"] if args.router_aux_loss else [])
        self.name, self.err = f"{lib} {dtype}", tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True)

    def ask(self, command):
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: readline below finds out
        answer = self.proc.stdout.readline()
        if not answer:
            self.proc.wait()
            self.err.seek(0)
            sys.exit(f"{self.name} worker failed:\n{self.err.read()[-4000:]}")
        return json.loads(answer)


def measure(args, dtype, libs, env):
    """The libraries' workers, alive together, take turns: --rounds rounds, each library timing n
    steps per round, the order rotating by one library each round (so none always runs first). n
    makes a library's rounds add up to at least --steps steps and --seconds of them, from one step's
    time after warm-up. Returns {library: row} and, per library, the per-round ratios of dataflow's
    tokens/s to its."""
    cfg, (batch, seq) = config(args)
    workers = {lib: Worker(args, lib, dtype, env) for lib in libs}
    per_round = {lib: max(math.ceil(args.steps / args.rounds),
                          math.ceil(args.seconds / args.rounds / max(w.ask("run 1")[0], 1e-6)))
                 for lib, w in workers.items()}
    times = {lib: [] for lib in workers}
    for r in range(args.rounds):
        for lib in libs[r % len(libs):] + libs[:r % len(libs)]:
            times[lib].append(workers[lib].ask(f"run {per_round[lib]}"))
    rows = {}
    for lib, w in workers.items():
        steps = [t for turn in times[lib] for t in turn]
        median = statistics.median(steps)
        rows[lib] = dict(w.ask("end"), step_s=steps, steps_per_round=per_round[lib], median_s=median,
                         tokens_per_s=batch * seq / median,
                         tokens_per_s_rounds=[batch * seq / statistics.median(t) for t in times[lib]],
                         gflops=step_flops(cfg, batch, seq) / median / 1e9)
        w.proc.wait()
    ratios = {lib: [a / b for a, b in zip(rows["dataflow"]["tokens_per_s_rounds"], rows[lib]["tokens_per_s_rounds"])]
              for lib in libs[1:]}
    return rows, ratios


def quartiles(values):
    return statistics.quantiles(values, n=4) if len(values) > 1 else values * 3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="host", help="dataflow Handle backend: host, cuda or cuda:N (torch runs there)")
    p.add_argument("--model", choices=["reference", "qwen3", "qwen3_moe", "1b"], default="reference",
                   help="config (see the docstring)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--steps", type=int, help="least timed steps per library, after 2 warm-up steps (default 10; "
                                             "--quick 40)")
    p.add_argument("--seconds", type=float, help="least timed seconds per library (default 20; --quick 3)")
    p.add_argument("--rounds", type=int, default=10, help="turns each library takes, alternating (default 10)")
    p.add_argument("--quick", action="store_true", help="a small smoke config")
    p.add_argument("--compile", action="store_true", help="also time torch.compile(model)")
    p.add_argument("--experts", choices=["eager", "grouped_mm"],
                   help="transformers' experts implementation (--model qwen3_moe; default: its own choice)")
    p.add_argument("--router-aux-loss", action="store_true",
                   help="--model qwen3_moe: train with output_router_logits (the load-balancing loss) in both")
    p.add_argument("--worker", choices=["dataflow", "torch", "torch_compile"], help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.steps = args.steps if args.steps is not None else 40 if args.quick else 10
    args.seconds = args.seconds if args.seconds is not None else 3.0 if args.quick else 20.0
    if args.worker:
        return worker(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness import machine_info, require_peers
    require_peers("torch", "transformers")
    if args.router_aux_loss and (args.model != "qwen3_moe" or args.quick):
        p.error("--router-aux-loss: only with --model qwen3_moe (not --quick)")
    for name in ("steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: must be at least 1, got {getattr(args, name)}")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    rows = []
    for dtype in args.dtypes.split(","):
        if dtype not in ("fp32", "bf16"):
            p.error(f"--dtypes: {dtype!r} is not fp32 or bf16")
        libs = ("dataflow", "torch") + (("torch_compile",) if args.compile else ())
        pair, ratios = measure(args, dtype, libs, env)
        d, t = pair["dataflow"], pair["torch"]
        rows.append(dict(dtype=dtype, dataflow=d, torch=t, speedup=statistics.median(ratios["torch"]),
                         speedup_rounds=ratios["torch"], speedup_quartiles=quartiles(ratios["torch"]),
                         rss_ratio=d["rss_peak_mib"] / t["rss_peak_mib"]))
        if args.compile:
            rows[-1].update(torch_compile=pair["torch_compile"],
                            speedup_vs_compile=statistics.median(ratios["torch_compile"]),
                            speedup_vs_compile_quartiles=quartiles(ratios["torch_compile"]))
    cfg, (batch, seq) = config(args)
    machine = machine_info(args.backend)
    peak = peak_flops(machine.get("gpu", "")) if args.backend != "host" else None
    for r in rows:
        for lib in ("dataflow", "torch") + (("torch_compile",) if args.compile else ()):
            r[lib]["mfu"] = round(r[lib]["gflops"] * 1e9 / peak, 4) if peak else None
    print(json.dumps(dict(bench="train", backend=args.backend, threads=args.threads, quick=args.quick,
                          model=args.model, experts_implementation=args.experts, config=cfg,
                          router_aux_loss=args.router_aux_loss, batch=batch, seq=seq, steps=args.steps, seconds=args.seconds,
                          rounds=args.rounds, machine=machine,
                          peak_bf16_flops=peak, mfu_formula="step_flops(cfg, batch, seq) / median step s / peak_bf16_flops",
                          rows=rows), indent=1))
    gpu = args.backend != "host"
    parts = [f"{r['dtype']}: {r['speedup']:.2f}x torch tokens/s (quartiles of {len(r['speedup_rounds'])} rounds "
             f"{r['speedup_quartiles'][0]:.2f}-{r['speedup_quartiles'][2]:.2f}x; {r['dataflow']['tokens_per_s']:.0f} vs "
             f"{r['torch']['tokens_per_s']:.0f})" + (
                 f", MFU {r['dataflow']['mfu']} vs {r['torch']['mfu']}" if gpu else
                 f", peak RSS {r['rss_ratio']:.2f}x ({r['dataflow']['rss_peak_mib']:.0f} vs "
                 f"{r['torch']['rss_peak_mib']:.0f} MiB)") + (
                 f", {r['speedup_vs_compile']:.2f}x torch.compile ({r['torch_compile']['tokens_per_s']:.0f})"
                 if args.compile else "") for r in rows]
    where = machine.get("gpu", args.backend) if gpu else f"{args.threads} threads"
    target = "target >= 1.1x tokens/s" if gpu else "target >= 1.5x tokens/s, <= 0.7x RSS"
    print(f"train {args.backend} ({where}, {cfg.get('model_type', 'llama')}, hidden {cfg['hidden_size']} x "
          f"{cfg['num_hidden_layers']} layers, {batch}x{seq} tokens): " + "; ".join(parts) + "; " + target)


if __name__ == "__main__":
    main()
