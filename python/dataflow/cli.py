"""The `dataflow` command.

dataflow train      a small Llama on the embedded corpus (options: see --help); checkpoint + loss PNG
dataflow generate   text sampled from a checkpoint of `dataflow train`
dataflow plan       how training a model would be placed under device/host capacities, and its predicted speed
dataflow demo       a matmul and a custom native op on the host backend, timed next to numpy
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from . import checkpoint, dtypes, ops, ring, ring_timeline
from .errors import BadArgumentError, DataflowError
from .generate import generate
from .handle import Handle, parse_bytes
from .pretrained import config_argument, model_from_config, validate_config
from .tokenizer import ByteTokenizer
from .train import PRESETS, RUN_DEFAULTS, open_handle, train

SCALE_SOURCE = r"""
#include "dataflow/host_kernel.h"
/* y[i] = alpha * x[i] + 1 over this part's slice */
void scale_shift(void **args, int part, int num_parts) {
    int64_t n = DATAFLOW_ARG(args, 0, int64_t), begin, end;
    float alpha = DATAFLOW_ARG(args, 1, float);
    const float *x = DATAFLOW_ARG(args, 2, const float *);
    float *y = DATAFLOW_ARG(args, 3, float *);
    dataflow_part_range(n, part, num_parts, 1024, &begin, &end);
    for (int64_t i = begin; i < end; i++) y[i] = alpha * x[i] + 1.0f;
}
Dataflow_Status scale_shift_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c) {
    (void)h; (void)state;
    c->num_parts = dataflow_elementwise_parts(*(int64_t *)op->op_args[0], 1 << 16);
    return DATAFLOW_OK;
}
"""


def _best_time(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def demo(args):
    h = Handle("host", streams=2, threads=args.threads)
    n = args.size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    results = {"size": n}
    for dtype in ("fp32", "bf16"):
        a = h.from_numpy(x, dtype=dtype)
        out = h.empty((n, n), "fp32")

        def run():
            ops.matmul(h, a, a, out=out, transpose_b=True)
            h.sync()
        t = _best_time(run, args.repeats)
        results[f"matmul_{dtype}_gflops"] = round(2 * n**3 / t / 1e9, 1)
    t_np = _best_time(lambda: x @ x.T, args.repeats)
    results["numpy_fp32_gflops"] = round(2 * n**3 / t_np / 1e9, 1)
    xb = dtypes.decode(dtypes.encode(x, "bf16"), "bf16").astype(np.float64)  # the inputs the bf16 run saw
    ref = xb @ xb.T
    results["matmul_bf16_max_rel_err"] = float(np.max(np.abs(out.numpy() - ref)) / np.max(np.abs(ref)))

    op = h.register_native_op("scale_shift", ["int64_scalar", "fp32_scalar", "fp32", "fp32"],
                              source=SCALE_SOURCE, symbol="scale_shift", launch="scale_shift_launch")
    xs = h.from_numpy(x)
    ys = h.empty(x.shape, "fp32")
    op(x.size, 2.0, xs, ys)
    ok = bool(np.allclose(ys.numpy(), 2 * x + 1))
    results["custom_op_fingerprint"] = op.fingerprint
    results["custom_op_correct"] = ok
    print(json.dumps(results, indent=2))
    print(f"demo: matmul {n}^3 fp32 {results['matmul_fp32_gflops']} GFLOP/s, bf16 {results['matmul_bf16_gflops']} "
          f"GFLOP/s (numpy fp32 {results['numpy_fp32_gflops']}); custom C op {'ok' if ok else 'WRONG'}")
    h.close()
    return 0 if ok else 1


def generate_text(args):
    ck = checkpoint.load(args.checkpoint)
    tokenizer = ByteTokenizer.from_dict(ck.state["tokenizer"])
    handle = open_handle(args)
    model = model_from_config(ck.config, handle, args.dtype or ck.state["run"]["dtype"],
                              where=os.path.join(ck.path, checkpoint.CONFIG_NAME))
    model.load_state_dict(ck.model_state)
    prompt = tokenizer.encode(args.prompt)
    if hasattr(model, "generate"):  # Llama: KV-cached decoding
        new = model.generate(np.asarray(prompt, np.int64), args.max_new_tokens, args.temperature, args.top_p,
                             args.seed, eos_token_id=tokenizer.eos_id)
    else:  # any model with forward() only: recompute the context at every step
        new = generate(model, prompt, args.max_new_tokens, args.temperature, args.top_p, args.seed,
                       stop_id=tokenizer.eos_id)
    sys.stdout.write(args.prompt + tokenizer.decode(new) + "\n")
    handle.close()
    return 0


def _positive(value, flag):
    if value is not None and value <= 0:
        raise BadArgumentError(f"{flag}: must be a positive integer, got {value}")
    return value


def _plan_config(spec):
    config = config_argument(spec, ring.PRESETS)
    return config if isinstance(config, str) else validate_config(config, where=f"--config {spec}")


def plan(args):
    """Validates every flag first, then plans and prints."""
    config = _plan_config(args.config)
    seq_len = _positive(args.seq_len, "--seq-len")
    tokens = _positive(args.tokens_per_step, "--tokens-per-step")
    if tokens is not None and tokens % seq_len:
        raise BadArgumentError(f"--tokens-per-step: must be a multiple of --seq-len ({seq_len}), got {tokens}")
    sizes = {flag: parse_bytes(value, flag) for flag, value in
             (("--device-memory", args.device_memory), ("--host-memory", args.host_memory))}
    rates = {flag: parse_bytes(value, flag) if value is not None else None for flag, value in
             (("--h2d-bandwidth", args.h2d_bandwidth), ("--d2h-bandwidth", args.d2h_bandwidth))}
    if args.timeline is not None and os.path.exists(args.timeline):
        raise BadArgumentError(f"--timeline: {args.timeline} exists; remove it or choose another path")
    if args.profile == "host":
        handle = Handle("host", streams=2, threads=args.threads)
        try:
            profile = ring.calibrate(handle)
        finally:
            handle.close()
    elif args.profile in ring.profile_names():
        profile = args.profile
    else:
        raise BadArgumentError(f"--profile: unknown {args.profile!r}; known: host (measured here), "
                               f"{', '.join(ring.profile_names())}")
    p = ring.plan(config, seq_len, sizes["--device-memory"], sizes["--host-memory"], tokens_per_step=tokens,
                  profile=profile, dtype=args.dtype, master_weights=args.master_weights,
                  h2d_bandwidth=rates["--h2d-bandwidth"], d2h_bandwidth=rates["--d2h-bandwidth"])
    if args.timeline is not None:
        ring_timeline.save(args.timeline, p)
    if args.json:
        print(json.dumps({"step_seconds": p.predicted_step_seconds, "tokens_per_second": p.tokens_per_second,
                          "mfu": p.mfu, "chunk_tokens": p.chunk_tokens, "chunks_per_round": p.chunks_per_round,
                          "rounds_per_step": p.rounds_per_step, "weight_slots": p.weight_slots,
                          "grad_slots": p.grad_slots, "optimizer": p.optimizer, "save_levels": p.save_levels,
                          "activations_on_device": p.activations_on_device, "device_memory": p.device_memory,
                          "host_memory": p.host_memory, "phases": p.phases}, indent=2))
    else:
        print(p.describe(), end="")
    return 0


def _add_plan(sub):
    p = sub.add_parser("plan", help="place a model's training under device/host capacities; predict its speed")
    p.add_argument("--config", required=True, help=f"model preset ({', '.join(ring.PRESETS)}) or an HF config.json")
    p.add_argument("--seq-len", dest="seq_len", type=int, required=True, help="tokens per sequence")
    p.add_argument("--tokens-per-step", dest="tokens_per_step", type=int,
                   help="tokens per optimizer step, a multiple of --seq-len (default: one sequence)")
    p.add_argument("--device-memory", dest="device_memory", required=True, help="device capacity, e.g. 24GiB")
    p.add_argument("--host-memory", dest="host_memory", required=True, help="host memory to use, e.g. 60GiB")
    p.add_argument("--profile", default="h100-sxm",
                   help=f"device speeds: {', '.join(ring.profile_names())} or host (measured now; default h100-sxm)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16", help="model dtype (default bf16)")
    p.add_argument("--master-weights", dest="master_weights", action="store_true",
                   help="bf16: fp32 master weights for AdamW")
    p.add_argument("--h2d-bandwidth", dest="h2d_bandwidth", help="host->device bytes/s (default: the profile's)")
    p.add_argument("--d2h-bandwidth", dest="d2h_bandwidth", help="device->host bytes/s (default: the profile's)")
    p.add_argument("--threads", type=int, help="host threads for --profile host (default: all cores)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--timeline", help="also draw the predicted timeline into this PNG (a new file)")
    p.set_defaults(run=plan)


def _add_train(sub):
    p = sub.add_parser("train", help="train a small Llama (default: on the embedded corpus)")
    p.add_argument("--config", help=f"model preset ({', '.join(PRESETS)}; default tiny) or an HF config.json")
    p.add_argument("--data", help="UTF-8 text file to train on (default: the embedded corpus)")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps to run now (default 200)")
    p.add_argument("--batch", type=int, help=f"sequences per step (default {RUN_DEFAULTS['batch']})")
    p.add_argument("--seq-len", dest="seq_len", type=int,
                   help=f"tokens per sequence (default {RUN_DEFAULTS['seq_len']})")
    p.add_argument("--dtype", choices=("fp32", "bf16"), help="model dtype (default fp32)")
    p.add_argument("--lr", type=float, help=f"AdamW learning rate (default {RUN_DEFAULTS['lr']})")
    p.add_argument("--master-weights", dest="master_weights", action="store_const", const=True,
                   help="bf16: keep fp32 master weights for AdamW (saved in checkpoints; kept on resume)")
    p.add_argument("--seed", type=int, help="weight initialisation seed (default 0)")
    p.add_argument("--threads", type=int, help="host worker threads (default: all cores)")
    p.add_argument("--device-memory", dest="device_memory", help="device memory capacity, e.g. 512MiB")
    p.add_argument("--out", default="dataflow-train", help="output directory (default ./dataflow-train)")
    p.add_argument("--resume", help="checkpoint directory to continue from (model, optimizer, data position)")
    p.add_argument("--save-every", dest="save_every", type=int, default=0, help="also checkpoint every N steps")
    p.set_defaults(run=train)


def _add_generate(sub):
    p = sub.add_parser("generate", help="sample text from a checkpoint of `dataflow train`")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (e.g. dataflow-train/checkpoint)")
    p.add_argument("--prompt", default="The ", help="text to continue (default 'The ')")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help="0 for greedy (default 0.8)")
    p.add_argument("--top-p", dest="top_p", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", choices=("fp32", "bf16"), help="default: the dtype it was trained in")
    p.add_argument("--threads", type=int)
    p.add_argument("--device-memory", dest="device_memory")
    p.set_defaults(run=generate_text)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dataflow")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_generate(sub)
    _add_plan(sub)
    p = sub.add_parser("demo", help="matmul + a custom native op on the host backend, with timings")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(run=demo)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except DataflowError as e:  # bad files and arguments: the message says what to fix; no traceback
        print(f"dataflow {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
