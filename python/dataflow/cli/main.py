"""The `dataflow` command.

dataflow train      train a small Llama (default: on the embedded corpus); checkpoint + loss plot
dataflow generate   stream text sampled from a checkpoint or a Hugging Face model directory
dataflow quantize   a model's linear weights to int8 / int4, into a directory that generate and from_pretrained load
dataflow serve      an OpenAI-compatible HTTP server (completions, chat, streaming) over a model
dataflow import-gguf  a llama.cpp .gguf file as a model directory (generate, serve, from_pretrained also read the file)
dataflow plan       how training a model would be placed under device/host capacities, and its predicted speed
dataflow demo       a matmul and a custom native op on the host backend, timed next to numpy

Errors in arguments or files end in one line naming the flag or the file (exit 2); runtime
failures such as a full disk in one line too (exit 1); Ctrl-C exits 130.
"""
import argparse
import difflib
import functools
import json
import math
import os
import re
import sys
import textwrap
import time

import numpy as np

from .. import __version__, distributed, dtypes, ops, ring
from ..training.calibration import calibrate
from ..io import atomic, checkpoint, gguf as gguf_import
from ..models import presets as model_specs
from . import plan_timeline as ring_timeline
from ..io import tokenizer as tokenizers
from .. import build_info
from ..errors import BadArgumentError, DataflowError, FileFormatError
from ..models.generate import stream
from ..handle import Handle, parse_bytes
from ..io.pretrained import CONFIG_NAME, from_pretrained, model_from_config, read_config, validate_config
from .progress import mib
from ..io.tokenizer import StreamDecoder
from ..custom_ops import AXPY_DTYPES, AXPY_SOURCE
from .train import DEFAULT_STEPS, INTERRUPTED, RUN_DEFAULTS, TRACE_STEPS, open_handle, train


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
    results = {"size": n, "host_matmul": build_info.matmul_engine()}
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

    op = h.register_native_op("axpy", AXPY_DTYPES, source=AXPY_SOURCE, symbol="axpy", launch="axpy_launch")
    xs = h.from_numpy(x)
    ys = h.from_numpy(np.ones_like(x))
    op(x.size, 2.0, xs, ys)
    ok = bool(np.allclose(ys.numpy(), 2 * x + 1))
    results["custom_op_fingerprint"] = op.fingerprint
    results["custom_op_correct"] = ok
    print(json.dumps(results, indent=2))
    print(f"demo: matmul {n}^3 fp32 {results['matmul_fp32_gflops']} GFLOP/s, bf16 {results['matmul_bf16_gflops']} "
          f"GFLOP/s (numpy fp32 {results['numpy_fp32_gflops']}) on {results['host_matmul']}; custom C op "
          f"{'ok' if ok else 'WRONG'}")
    if not build_info.info()["onednn"]:
        print(f"WARNING: {build_info.SLOW}", file=sys.stderr)
    h.close()
    return 0 if ok else 1


def _load_for_generation(args, handle, flag="--checkpoint"):
    """(model, tokenizer, bos): from a dataflow checkpoint (trained without bos: prompts get none), a
    Hugging Face model directory or a llama.cpp .gguf file (prompts start with bos, as such models
    were trained); config, files and memory are checked before the model is allocated."""
    path = args.checkpoint
    if gguf_import.is_gguf(path):  # a llama.cpp .gguf: its tokenizer.json lies beside it (or --tokenizer)
        config = gguf_import.hf_config(gguf_import.read(path), path)
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), tokenizers.TOKENIZER_NAME)
        if not args.tokenizer and not os.path.isfile(beside):
            raise BadArgumentError(f"--tokenizer: {path}'s embedded tokenizer is not converted; put a "
                                   f"{tokenizers.TOKENIZER_NAME} beside it ({beside}) or pass --tokenizer")
        tokenizer = tokenizers.load(args.tokenizer or beside,
                                    bos_id=config.get("bos_token_id"), eos_id=config.get("eos_token_id"))
        return from_pretrained(path, handle, args.dtype or "fp32"), tokenizer, args.bos
    found = atomic.readable_directory(os.path.abspath(path))  # or what a save killed mid-swap left
    expected = "a checkpoint (e.g. dataflow-train/checkpoint), a Hugging Face model directory or a .gguf file"
    if not os.path.exists(found):
        raise BadArgumentError(f"{flag}: {path} does not exist; expected {expected}")
    if not os.path.isdir(found):
        raise BadArgumentError(f"{flag}: {path} is not a directory; expected {expected}")
    if not any(os.path.exists(os.path.join(found, name)) for name in
               (checkpoint.STATE_NAME, CONFIG_NAME, os.path.join("checkpoint", checkpoint.STATE_NAME))):
        raise BadArgumentError(f"{flag}: {path} holds neither {checkpoint.STATE_NAME} (a checkpoint) nor "
                               f"{CONFIG_NAME} (a Hugging Face model directory)")
    if os.path.exists(os.path.join(path, "checkpoint", checkpoint.STATE_NAME)):
        raise BadArgumentError(f"{flag}: {path} is the output directory of a run; its checkpoint is "
                               f"{os.path.join(path, 'checkpoint')}")
    if os.path.exists(os.path.join(path, checkpoint.STATE_NAME)) or not os.path.exists(os.path.join(path, CONFIG_NAME)):
        ck = checkpoint.load(path)
        where = os.path.join(ck.path, CONFIG_NAME)
        config = validate_config(ck.config, where)
        tokenizer = (tokenizers.load(args.tokenizer) if args.tokenizer else
                     tokenizers.from_dict(ck.state.get("tokenizer"), os.path.join(ck.path, checkpoint.STATE_NAME)))
        dtype = args.dtype or ck.state.get("run", {}).get("dtype", "fp32")
        model = model_from_config(config, handle, dtype, where=where)
        model.load_state_dict(ck.model_state)
        return model, tokenizer, False
    config = read_config(path)
    ids = {k: config.get(k) if isinstance(config.get(k), int) else None for k in ("bos_token_id", "eos_token_id")}
    tokenizer = tokenizers.load(args.tokenizer or path, bos_id=ids["bos_token_id"], eos_id=ids["eos_token_id"])
    return from_pretrained(path, handle, args.dtype or "fp32"), tokenizer, args.bos


def generate_text(args):
    handle = open_handle(args)
    try:
        model, tokenizer, bos = _load_for_generation(args, handle)
        if model.placement == "host":
            print(f"dataflow generate: the model does not fit {mib(handle.memory_capacity())} of device memory; "
                  "generating on the CPU from a host copy of its weights", file=sys.stderr, flush=True)
        if model.config.vocab_size < tokenizer.vocab_size:
            raise BadArgumentError(f"--tokenizer: {tokenizer.vocab_size} tokens, more than the model's vocab_size "
                                   f"{model.config.vocab_size}")
        try:
            prompt = tokenizer.encode(args.prompt, bos=bos and tokenizer.bos_id is not None)
        except BadArgumentError as e:
            raise BadArgumentError(f"--prompt: {e}") from None
        if prompt.size == 0:
            raise BadArgumentError("--prompt: empty; give at least one character (the default is 'The')")
        context = model.config.max_position_embeddings
        if prompt.size >= context:
            raise BadArgumentError(f"--prompt: {prompt.size} tokens, but the model's context is {context} tokens; "
                                   "shorten it")
        max_new = args.max_new_tokens
        if prompt.size + max_new > context:
            max_new = context - prompt.size
            print(f"dataflow generate: stopping at the model's context of {context} tokens: {max_new} new tokens "
                  f"after the {prompt.size}-token prompt (--max-new-tokens {args.max_new_tokens} asks for more)",
                  file=sys.stderr, flush=True)
        sys.stdout.write(args.prompt)
        sys.stdout.flush()
        decoder = StreamDecoder(tokenizer)
        for token in stream(model, prompt, max_new, args.temperature, args.top_p, args.seed,
                            stop_id=tokenizer.eos_id, vocab_size=tokenizer.vocab_size):
            sys.stdout.write(decoder.push(token))
            sys.stdout.flush()
        sys.stdout.write(decoder.flush() + "\n")
        sys.stdout.flush()
        model.close()
        return 0
    finally:
        handle.close()


# ---- argument types: each error names its flag (argparse prefixes "argument --flag:") ----

def _integer(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    parse.__name__ = "integer"
    return parse


def _number(low, high=math.inf, low_open=False):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (low < value if low_open else low <= value) or not value <= high:
            raise argparse.ArgumentTypeError(f"must be in {'(' if low_open else '['}{low:g}, {high:g}], got {text}")
        return value
    parse.__name__ = "number"
    return parse


def _bytes(text):
    try:
        parse_bytes(text, "size")
    except BadArgumentError:
        raise argparse.ArgumentTypeError(f"expected a size like 512MiB or 2GiB, got {text!r}") from None
    return text


def _backend(text):
    if not re.fullmatch(r"(host|cuda|vulkan)(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected host, cuda, cuda:N, vulkan or vulkan:N, got {text!r}")
    return text


def _add_device(p):
    p.add_argument("--backend", type=_backend, default="host", metavar="NAME",
                   help="device to run on: host, cuda[:N] or vulkan[:N] (default host)")
    p.add_argument("--threads", type=_integer(1), help="host worker threads (default: all cores)")
    p.add_argument("--device-memory", dest="device_memory", type=_bytes, metavar="SIZE",
                   help="device memory capacity, e.g. 512MiB (default: all the backend offers)")


def _positive(value, flag):
    if value is not None and value <= 0:
        raise BadArgumentError(f"{flag}: must be a positive integer, got {value}")
    return value


def _plan_config(spec):
    _, config, source, _ = model_specs.resolve(spec)
    try:
        return validate_config(config, where=source)
    except FileFormatError as e:
        raise BadArgumentError(f"--config: {e}") from None


def plan(args):
    """Validates every flag first, then plans and prints."""
    config = _plan_config(args.config)
    seq_len = _positive(args.seq_len, "--seq-len")
    tokens = _positive(args.tokens_per_step, "--tokens-per-step")
    if tokens is not None and tokens % seq_len:
        raise BadArgumentError(f"--tokens-per-step: must be a multiple of --seq-len ({seq_len}), got {tokens}")
    sizes = {flag: parse_bytes(value, flag) if value is not None else None for flag, value in
             (("--device-memory", args.device_memory), ("--host-memory", args.host_memory),
              ("--disk-memory", args.disk_memory))}
    rates = {flag: parse_bytes(value, flag) if value is not None else None for flag, value in
             (("--h2d-bandwidth", args.h2d_bandwidth), ("--d2h-bandwidth", args.d2h_bandwidth),
              ("--disk-bandwidth", args.disk_bandwidth))}
    if rates["--disk-bandwidth"] is not None and sizes["--disk-memory"] is None:
        raise BadArgumentError("--disk-bandwidth: the rate of a disk tier; add --disk-memory SIZE")
    if args.timeline is not None and os.path.isdir(args.timeline):
        raise BadArgumentError(f"--timeline: {args.timeline} is a directory; name a file, e.g. "
                               f"{os.path.join(args.timeline, 'plan.png')}")
    if args.timeline is not None and os.path.exists(args.timeline) and not args.overwrite:
        raise BadArgumentError(f"--timeline: {args.timeline} exists; replace it with --overwrite or choose another path")
    if args.overwrite and args.timeline is None:
        raise BadArgumentError("--overwrite: replaces an existing --timeline file; add --timeline FILE")
    if args.profile == "host":
        handle = Handle("host", streams=2, threads=args.threads)
        try:
            profile = calibrate(handle, config=config, seq_len=seq_len, dtype=args.dtype,
                                     tokens_per_step=max(tokens, 2 * seq_len) if tokens else None)
        finally:
            handle.close()
    elif args.profile in ring.profile_names():
        profile = args.profile
    else:
        raise BadArgumentError(f"--profile: unknown {args.profile!r}; known: host (measured here), "
                               f"{', '.join(ring.profile_names())}")
    p = ring.plan(config, seq_len, sizes["--device-memory"], sizes["--host-memory"], tokens_per_step=tokens,
                  profile=profile, dtype=args.dtype, master_weights=args.master_weights,
                  h2d_bandwidth=rates["--h2d-bandwidth"], d2h_bandwidth=rates["--d2h-bandwidth"],
                  optimizer_state=args.optimizer_state, disk_memory=sizes["--disk-memory"],
                  disk_bandwidth=rates["--disk-bandwidth"], host_gradients=args.host_gradients)
    if args.json:
        print(json.dumps({"step_seconds": p.predicted_step_seconds, "tokens_per_second": p.tokens_per_second,
                          "mfu": p.mfu, "chunk_tokens": p.chunk_tokens, "chunks_per_round": p.chunks_per_round,
                          "rounds_per_step": p.rounds_per_step, "weight_slots": p.weight_slots,
                          "grad_slots": p.grad_slots, "optimizer": p.optimizer,
                          "optimizer_state": p.optimizer_state, "host_gradients": p.host_gradients,
                          "save_levels": p.save_levels,
                          "activations_on_device": p.activations_on_device, "device_memory": p.device_memory,
                          "host_memory": p.host_memory, "disk": p.disk, "phases": p.phases,
                          "profile": profile.source if isinstance(profile, ring.Profile) else profile}, indent=2))
    else:
        print(p.describe(), end="")
    if args.timeline is not None:
        ring_timeline.save(args.timeline, p)
        print(f"timeline: wrote {args.timeline}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _add_plan(sub):
    p = sub.add_parser("plan", help="place a model's training under device/host capacities; predict its speed")
    p.add_argument("--config", required=True, help=f"the model: {model_specs.WHAT} (as dataflow train takes it)")
    p.add_argument("--seq-len", dest="seq_len", type=int, required=True, help="tokens per sequence")
    p.add_argument("--tokens-per-step", dest="tokens_per_step", type=int,
                   help="tokens per optimizer step, a multiple of --seq-len (default: one sequence)")
    p.add_argument("--device-memory", dest="device_memory", required=True, help="device capacity, e.g. 24GiB")
    p.add_argument("--host-memory", dest="host_memory", required=True, help="host memory to use, e.g. 60GiB")
    p.add_argument("--profile", default="h100-sxm",
                   help=f"device speeds: {', '.join(ring.profile_names())} or host (measured now, fitted to the "
                        "model when that is quick; default h100-sxm)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16", help="model dtype (default bf16)")
    p.add_argument("--master-weights", dest="master_weights", action="store_true",
                   help="bf16: fp32 master weights for AdamW")
    p.add_argument("--optimizer-state", dest="optimizer_state", choices=ring.OPTIMIZER_STATES, default="fp32",
                   help="how AdamW's m and v are stored: fp32, bf16 (stochastic rounding) or 8bit (blockwise, "
                        "Dettmers et al. 2021); default fp32")
    p.add_argument("--disk-memory", dest="disk_memory",
                   help="a disk tier of this size (e.g. 1TiB) for optimizer state, then weights, then gradients "
                        "when host memory runs out (default: none)")
    p.add_argument("--disk-bandwidth", dest="disk_bandwidth",
                   help="the disk's read/write bytes/s, e.g. 3GB (default 2GB: a PCIe 3.0 NVMe)")
    p.add_argument("--host-gradients", dest="host_gradients", choices=ring.HOST_GRADIENTS, default="fp32",
                   help="how gradients kept on the host between rounds are stored: fp32, or bf16 (half the host "
                        "memory and transfers; each round's partial sum rounded to nearest even); default fp32")
    p.add_argument("--h2d-bandwidth", dest="h2d_bandwidth", help="host->device bytes/s (default: the profile's)")
    p.add_argument("--d2h-bandwidth", dest="d2h_bandwidth", help="device->host bytes/s (default: the profile's)")
    p.add_argument("--threads", type=int, help="host threads for --profile host (default: all cores)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--timeline", metavar="FILE", help="also draw the predicted timeline into this PNG (a new file, "
                                                      "unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --timeline FILE")
    p.set_defaults(run=plan)


def _add_train(sub):
    p = sub.add_parser("train", help="train a small Llama (default: on the embedded corpus)",
                       description="Train a Llama: the embedded corpus (Python docstrings) or --data, a BPE "
                                   "tokenizer, AdamW; a checkpoint in OUT/checkpoint and the loss curve in "
                                   "OUT/loss.png. An existing run is never replaced without --overwrite.")
    p.add_argument("--config", help=f"the model: a preset ({', '.join(model_specs.PRESETS)}; default tiny), an HF config.json, or an "
                                    "HF model directory (its config.json and tokenizer.json; weights start fresh)")
    p.add_argument("--init", metavar="DIR", help="start from the weights of an HF model directory (config.json, "
                                                 "tokenizer.json, *.safetensors) instead of a random init")
    p.add_argument("--tokenizer", help="'bytes', or a tokenizer.json (or a directory holding one); default: the "
                                       "BPE trained on the embedded corpus, or the --config/--init directory's")
    p.add_argument("--data", metavar="FILE", help="UTF-8 text file to train on (default: the embedded corpus)")
    p.add_argument("--steps", type=_integer(1), default=DEFAULT_STEPS,
                   help=f"optimizer steps to run now (default {DEFAULT_STEPS})")
    p.add_argument("--batch", type=_integer(1), help=f"sequences per step (default {RUN_DEFAULTS['batch']})")
    p.add_argument("--seq-len", dest="seq_len", type=_integer(2), metavar="N",
                   help=f"tokens per sequence (default {RUN_DEFAULTS['seq_len']})")
    p.add_argument("--dtype", choices=("fp32", "bf16"), help="model dtype (default fp32)")
    p.add_argument("--lr", type=_number(0, 1, low_open=True),
                   help=f"AdamW peak learning rate (see --schedule-steps), in (0, 1] (default {RUN_DEFAULTS['lr']:g})")
    p.add_argument("--schedule-steps", dest="schedule_steps", type=_integer(1), metavar="N",
                   help="the lr schedule's length: a warmup, then a cosine decay of --lr to a tenth of it at step N "
                        "(default: the run's last step; a resumed run keeps its schedule unless it trains past it)")
    p.add_argument("--master-weights", dest="master_weights", action="store_const", const=True,
                   help="bf16: keep fp32 master weights for AdamW (saved in checkpoints; kept on resume)")
    p.add_argument("--optimizer-state", dest="optimizer_state", choices=("fp32", "bf16", "8bit"),
                   help="how AdamW's m and v are stored: fp32, bf16 (stochastic rounding) or 8bit (blockwise); "
                        "saved as trained in checkpoints, kept on resume (default fp32)")
    p.add_argument("--host-gradients", dest="host_gradients", choices=("fp32", "bf16"),
                   help="how the ring keeps gradients on the host between rounds: fp32, or bf16 (half the host memory "
                        "and transfers, rounded to nearest even each round); no effect all-resident (default fp32)")
    p.add_argument("--seed", type=_integer(0), help="weight initialisation seed of a new run (default 0)")
    _add_device(p)
    p.add_argument("--host-memory", dest="host_memory", type=_bytes, metavar="SIZE",
                   help="host memory the ring may use when training does not fit --device-memory (weights, "
                        "gradients and optimizer state streamed through the device), e.g. 4GiB (default: what the "
                        "host has available)")
    p.add_argument("--disk", metavar="DIR",
                   help="a directory for a disk tier: the ring keeps optimizer state in a file there when host "
                        "memory runs out (a working copy; checkpoints stay in --out)")
    p.add_argument("--disk-memory", dest="disk_memory", type=_bytes, metavar="SIZE",
                   help="bytes the disk tier may use, e.g. 1TiB (default: the directory's free space)")
    p.add_argument("--out", default="dataflow-train", help="output directory (default ./dataflow-train)")
    p.add_argument("--resume", nargs="?", const="", metavar="CHECKPOINT",
                   help="continue a run: model, optimizer, data position, losses (default CHECKPOINT: "
                        "OUT/checkpoint); --lr, --batch, --seq-len and --dtype may change")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in OUT")
    p.add_argument("--save-every", dest="save_every", type=_integer(0), default=0, metavar="N",
                   help="also checkpoint every N steps (default 0: at the end and on Ctrl-C only)")
    p.add_argument("--eval-every", dest="eval_every", type=_integer(0), default=0, metavar="N",
                   help="validation loss on held-out text every N steps (default 0: ten times per run; a resumed "
                        "run keeps its interval)")
    p.add_argument("--nproc", type=_integer(1), metavar="N",
                   help="data-parallel on N local processes through Open MPI's mpirun, each on --batch / N "
                        "sequences of every step (or run `mpirun -n N dataflow train ...`); checkpoints "
                        "resume with any N")
    p.add_argument("--shard-optimizer", dest="shard_optimizer", action="store_true",
                   help="with several ranks: each keeps 1/N of the optimizer state (ZeRO-1)")
    p.add_argument("--trace", metavar="FILE",
                   help="write a Chrome trace (Perfetto) of the first --trace-steps steps to FILE (a new file, or "
                        "with --overwrite): a track per stream, memory counters per step; rank 0's in a job")
    p.add_argument("--trace-steps", dest="trace_steps", type=_integer(1), metavar="N",
                   help=f"steps the --trace covers, from the first of this run (default {TRACE_STEPS}); the file "
                        "is written after them, while training goes on")
    p.set_defaults(run=train)


def _add_quantize(sub):
    from ..quantize import INT4_GROUP_SIZES
    from .quantize import quantize_command
    p = sub.add_parser("quantize", help="weight-only int8/int4 quantization of a model, for inference",
                       description="Quantize the layers' linear weights (q, k, v, o, gate, up, down; the embedding, "
                                   "norms and lm_head stay fp32) of a `dataflow train` checkpoint or a Hugging Face "
                                   "model directory, round-to-nearest, into OUT_DIR (config.json with a "
                                   "quantization_config, model.safetensors, the tokenizer).")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a checkpoint (e.g. dataflow-train/checkpoint) or an HF "
                                                          "model directory")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write (replaced only with --overwrite)")
    p.add_argument("--bits", type=int, choices=(8, 4), required=True,
                   help="8: int8, one scale per output channel; 4: int4 codes in groups along the input")
    p.add_argument("--group-size", dest="group_size", type=_integer(1), metavar="N",
                   help=f"--bits 4: inputs per scale, one of {', '.join(map(str, INT4_GROUP_SIZES))} (default 128)")
    p.add_argument("--zero-point", dest="zero_point", action="store_true",
                   help="--bits 4: a zero point per group (asymmetric codes) instead of the symmetric zero 8")
    p.add_argument("--lm-head", dest="lm_head", action="store_true",
                   help="quantize lm_head too (an untied one; default: kept in full precision)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.set_defaults(run=quantize_command)


def _add_import_gguf(sub):
    from .import_gguf import import_gguf_command
    p = sub.add_parser("import-gguf", help="a llama.cpp .gguf file as a model directory",
                       description="Write a llama.cpp GGUF file (Q4_0, Q8_0, F16, BF16, F32 layers) as the directory "
                                   "`dataflow quantize` writes: Q4_0 as int4 in groups of 32 (the same weights), "
                                   "Q8_0 as int8 per channel; the tokenizer.json beside FILE is copied.")
    p.add_argument("file", metavar="FILE", help="a llama-architecture .gguf file")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.set_defaults(run=import_gguf_command)


def _add_generate(sub):
    p = sub.add_parser("generate", help="stream text sampled from a checkpoint or an HF model directory",
                       description="Sample a continuation of --prompt, printing tokens as they come.")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="a checkpoint of `dataflow train` (e.g. dataflow-train/checkpoint), an HF model directory "
                        "(config.json, *.safetensors, tokenizer.json) or a llama.cpp .gguf file (Q4_0, Q8_0, F16, "
                        "F32; with a tokenizer.json beside it or --tokenizer)")
    p.add_argument("--prompt", default="The", help="text to continue (default 'The'; end it without a space: "
                                                   "BPE tokens carry their leading space)")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=_integer(1), default=200, metavar="N",
                   help="tokens to sample at most, within the model's context (default 200)")
    p.add_argument("--temperature", type=_number(0), default=0.8, help="0 for greedy (default 0.8)")
    p.add_argument("--top-p", dest="top_p", type=_number(0, 1, low_open=True), default=0.95,
                   help="nucleus sampling mass, in (0, 1] (default 0.95)")
    p.add_argument("--seed", type=_integer(0), default=None, help="sampling seed (default: a fresh one)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), help="default: the dtype it was trained in (fp32 for HF)")
    p.add_argument("--tokenizer", help="a tokenizer.json (or a directory holding one) instead of the model's")
    p.add_argument("--no-bos", dest="bos", action="store_false",
                   help="an HF model directory's prompt starts with its bos token unless this is given")
    _add_device(p)
    p.set_defaults(run=generate_text)


def serve(args):
    from ..serve.command import serve as run_server
    return run_server(args, functools.partial(_load_for_generation, flag="--model"))


def _add_serve(sub):
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server over a checkpoint or an HF model directory",
                       description="Serve /v1/models, /v1/completions and /v1/chat/completions (streaming with "
                                   "stream: true) and /health; concurrent requests share decode steps "
                                   "(continuous batching over a paged KV cache). SIGTERM finishes the requests in "
                                   "flight and exits 0.")
    p.add_argument("--model", dest="checkpoint", required=True, metavar="DIR",
                   help="a checkpoint of `dataflow train` or an HF model directory (config.json, *.safetensors, "
                        "tokenizer.json; tokenizer_config.json's chat_template serves chat)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_integer(0), default=8000, help="port to listen on (default 8000; 0: any free one)")
    p.add_argument("--served-model-name", dest="served_model_name", metavar="NAME",
                   help="the model's name in the API (default: the directory's name)")
    p.add_argument("--max-batch", dest="max_batch", type=_integer(1), default=16, metavar="N",
                   help="sequences decoded together at most (default 16)")
    p.add_argument("--queue", type=_integer(0), default=64, metavar="N",
                   help="requests waiting for a place in the batch at most; past it the answer is 429 (default 64)")
    p.add_argument("--max-batch-tokens", dest="max_batch_tokens", type=_integer(1), default=256, metavar="N",
                   help="tokens one step runs at most, prompt chunks and decoding together (default 256)")
    p.add_argument("--max-seq-tokens", dest="max_seq_tokens", type=_integer(2), metavar="N",
                   help="context per request, prompt + answer (default and most: the model's)")
    p.add_argument("--page-size", dest="page_size", type=_integer(1), default=16, metavar="N",
                   help="tokens per KV cache page (default 16)")
    p.add_argument("--shutdown-timeout", dest="shutdown_timeout", type=_number(0), default=30.0, metavar="SECONDS",
                   help="on SIGTERM, how long requests in flight may take to finish before they are cancelled "
                        "(default 30)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), help="default: the dtype it was trained in (fp32 for HF)")
    p.add_argument("--tokenizer", help="a tokenizer.json (or a directory holding one) instead of the model's")
    p.add_argument("--no-bos", dest="bos", action="store_false",
                   help="an HF model directory's text prompts start with its bos token unless this is given")
    _add_device(p)
    p.set_defaults(run=serve)


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help at spaces only: argparse's default also breaks at hyphens, splitting flag names
    (--trace-/steps) over two lines."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser (and, through add_subparsers, its commands') with _HelpFormatter."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def _parse(parser, argv):
    """parse_args, except that a flag the command lacks is reported by that command's parser (its
    usage, not the top level's), with the nearest flag it has."""
    args, extra = parser.parse_known_args(argv)
    command = parser.commands.get(args.command, parser)
    if extra:
        known = [o for a in command._actions for o in a.option_strings]
        near = difflib.get_close_matches(extra[0].split("=")[0], known, n=1)
        command.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {near[0]}?)" if near else ""))
    return args


def build_parser():
    parser = _Parser(
        prog="dataflow", description="Train and run Llama models on the dataflow C core.",
        epilog="Start with `dataflow train`, then `dataflow generate --checkpoint dataflow-train/checkpoint`. "
               "`dataflow COMMAND --help` lists a command's flags.")
    parser.add_argument("--version", action="version",
                        version=f"dataflow {__version__} (host matmul: {build_info.matmul_engine()})",
                        help="print the version and the host matmul engine, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="what to do (no command: this help)")
    parser.commands = sub.choices
    _add_train(sub)
    _add_generate(sub)
    _add_quantize(sub)
    _add_import_gguf(sub)
    _add_plan(sub)
    _add_serve(sub)
    p = sub.add_parser("demo", help="a matmul and a custom native op on the host backend, timed",
                       description="Times a square matmul (fp32, bf16) next to numpy and runs a custom C op.")
    p.add_argument("--size", type=_integer(1), default=1024, help="matrix size (default 1024)")
    p.add_argument("--threads", type=_integer(1), default=None, help="host worker threads (default: all cores)")
    p.add_argument("--repeats", type=_integer(1), default=5, help="timed repetitions, best kept (default 5)")
    p.set_defaults(run=demo)
    return parser


def main(argv=None):
    parser = build_parser()
    args = _parse(parser, argv)
    if args.command is None:
        parser.print_help()
        return 0
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what `train --nproc` hands each rank
    rank = distributed.launcher_rank()
    name = f"dataflow {args.command}" + ("" if rank is None else f": rank {rank}")
    code = _run_command(args, name)
    if code and rank is not None:
        # a failed rank leaves at once, without MPI_Finalize: mpirun then ends the other ranks,
        # which would otherwise wait in a collective for this one until their timeout
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_command(args, name):
    try:
        return args.run(args)
    except (BadArgumentError, FileFormatError) as e:  # what to fix, in one line: no traceback
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    except DataflowError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # disk full, permissions: the atomic writes left the previous files in place
        where = f"{e.filename}: " if e.filename else ""
        print(f"{name}: {where}{e.strerror or e}; earlier checkpoints are intact", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{name}: interrupted; earlier checkpoints are intact", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
