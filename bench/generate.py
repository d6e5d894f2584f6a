"""Generation on the host vs llama.cpp and Hugging Face generate, one random Llama in one run:
single-stream greedy decode and prompt tok/s of dataflow at fp32 / bf16 / int8 / int4 against
llama.cpp (llama-cpp-python) at f32 / bf16 / q8_0 / q4_0 and transformers' generate at fp32 /
bf16, then BatchEngine's decode throughput at 1, 4, 16 and 64 concurrent streams.

    python bench/generate.py [--threads 2] [--rounds 3] [--prompt 64] [--new 128]
                             [--streams 1 4 16 64] [--converter PATH] [--quick]

The model is bench/train.py's REFERENCE (8 layers, hidden 512, vocab 8192) with seed-0 random
weights, written as an HF directory (with a byte-fallback BPE tokenizer.json, which llama.cpp's
converter needs) and converted by llama.cpp's own convert_hf_to_gguf.py (--converter, or
$LLAMA_CPP_CONVERTER; the llama-cpp-python wheel does not ship it: it lies in the llama.cpp
source the sdist vendors) to f32 / bf16 / q8_0; q4_0 is llama.cpp's quantize of the f32 file
with every tensor q4_0 (pure), as q8_0's converter output is. dataflow's int8 / int4 match
them: lm_head quantized too, int4 in groups of 32 with q4_0's implicit zero point 8; fp32
activations. Every peer runs 2 threads (--threads). Where the CPU reports AMX but the kernel does
not grant its tile state (arch_prctl ARCH_GET_XCOMP_SUPP lacks XTILEDATA: some VMs), a natively
built llama.cpp dies of SIGILL in its AMX q8_0/q4_0 kernels: build its ggml-cpu with
GGML_NATIVE=OFF, the AVX-512 options on and GGML_AMX_INT8/TILE/BF16=OFF.

Per peer, variant and round: t1 = generate(prompt, 1 token) (the prefill), tN = generate(prompt,
N tokens); decode tok/s = (N - 1) / (tN - t1), prompt tok/s = prompt / t1; every (peer, variant)
takes its turn within each round (the machine is shared and noisy), medians over rounds.
ratio = dataflow tok/s / the peer's. greedy_agrees: the fraction of greedy tokens equal to
dataflow fp32's (the same weights: near 1 at full precision). Batched rows are
bench/batched_decode.py's run() on the bf16 model. Without llama-cpp-python (or the converter)
the bench says so in the JSON and the summary and measures the others. --quick: a 2-layer
hidden-128 model, short runs (a smoke run)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from harness import import_dataflow, installed, machine_info, require_peers

import batched_decode
from quantized_decode import QUICK as QUANT_QUICK
from quantized_decode import build
from train import REFERENCE

QUICK = dict(QUANT_QUICK, vocab_size=512, max_position_embeddings=256)
# dataflow variant -> (model dtype, quantization_config arguments), llama.cpp's type of the same size
VARIANTS = {"fp32": ("fp32", None), "bf16": ("bf16", None), "int8": ("fp32", (8, None, False, True)),
            "int4": ("fp32", (4, 32, False, True))}
LLAMA_CPP = {"fp32": "f32", "bf16": "bf16", "int8": "q8_0", "int4": "q4_0"}
HF = ("fp32", "bf16")
CONVERTER_ENV = "LLAMA_CPP_CONVERTER"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    p.add_argument("--new", type=int, default=128, help="greedy tokens to generate")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 64], help="batched: concurrent streams")
    p.add_argument("--converter", default=os.environ.get(CONVERTER_ENV),
                   help=f"llama.cpp's convert_hf_to_gguf.py (default: ${CONVERTER_ENV})")
    p.add_argument("--quick", action="store_true", help="a 2-layer hidden-128 model, short runs (smoke run)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.prompt, args.new, args.streams = 1, 8, 8, [1, 4]
    for name in ("threads", "rounds", "prompt"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.new < 2:
        p.error("--new must be >= 2 (decode tok/s counts the tokens after the first)")
    if min(args.streams) < 1:
        p.error("--streams must be >= 1")
    return args


def byte_fallback_tokenizer(directory, vocab_size):
    """A Llama-style tokenizer.json (BPE with byte fallback, <unk> <s> </s>, the 256 byte tokens,
    filler pieces up to vocab_size): the converter reads a model's vocabulary from it."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    vocab.update({f"\u2581t{i}": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>"}, f)


def gguf_files(directory, converter):
    """llama.cpp type -> .gguf path of the HF model in directory."""
    import ctypes

    import llama_cpp
    files = {}
    for outtype in ("f32", "bf16", "q8_0"):
        files[outtype] = os.path.join(directory, f"model-{outtype}.gguf")
        done = subprocess.run([sys.executable, converter, directory, "--outtype", outtype, "--outfile", files[outtype]],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"generate.py: {converter} --outtype {outtype} failed:\n{done.stderr[-2000:]}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.pure, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, True, 2
    files["q4_0"] = os.path.join(directory, "model-q4_0.gguf")
    if llama_cpp.llama_model_quantize(files["f32"].encode(), files["q4_0"].encode(), ctypes.byref(params)) != 0:
        sys.exit("generate.py: llama.cpp's llama_model_quantize to q4_0 failed")
    return files


def llama_cpp_generator(path, threads, context):
    """generate(prompt, n): n greedy tokens of llama.cpp's model at path, from a fresh context."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=context, n_batch=context, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    vocab = llm.n_vocab()

    def generate(prompt, n):
        llm.reset()
        llm.eval(prompt.tolist())
        new = []
        while True:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))
            new.append(int(np.argmax(logits)))
            if len(new) == n:
                return np.asarray(new)
            llm.eval(new[-1:])
    return generate


def hf_generator(directory, dtype, threads):
    import torch
    import transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, {"fp32": "float32",
                                                                                             "bf16": "bfloat16"}[dtype]))
    model.eval()

    def generate(prompt, n):
        with torch.inference_mode():
            ids = torch.from_numpy(prompt).reshape(1, -1)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, pad_token_id=0)
        return out[0, prompt.size:].numpy()
    return generate


def measure(generators, prompt, new, rounds):
    """{key: (prefill seconds per round, decode tok/s per round, last tokens)}, peers taking turns."""
    times = {k: ([], [], None) for k in generators}
    for generate in generators.values():  # warm-up: first calls build kernels, caches, workspaces
        generate(prompt, 2)
    for r in range(rounds):
        keys = list(generators)
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:  # a different peer first each round
            t0 = time.perf_counter()
            generators[k](prompt, 1)
            t1 = time.perf_counter()
            tokens = generators[k](prompt, new)
            tn = time.perf_counter() - t1
            prefill, decode, _ = times[k]
            prefill.append(t1 - t0)
            decode.append((new - 1) / max(tn - (t1 - t0), 1e-9))
            times[k] = (prefill, decode, tokens)
    return times


def single_stream_rows(times, prompt_len):
    reference = times[("dataflow", "fp32")][2]
    rows = []
    for (peer, variant), (prefill, decode, tokens) in times.items():
        rows.append(dict(peer=peer, variant=variant, decode_tok_s=round(statistics.median(decode), 1),
                         decode_spread=[round(min(decode), 1), round(max(decode), 1)],
                         prompt_tok_s=round(prompt_len / statistics.median(prefill), 1),
                         greedy_agrees=float(np.mean(tokens == reference))))
    return rows


def ratios(rows, peer, pairs):
    """dataflow variant -> (peer's variant, decode ratio, prompt ratio) for the pairs measured."""
    by = {(r["peer"], r["variant"]): r for r in rows}
    out = {}
    for ours, theirs in pairs.items():
        a, b = by.get(("dataflow", ours)), by.get((peer, theirs))
        if a and b:
            out[ours] = dict(peer_variant=theirs, decode=round(a["decode_tok_s"] / b["decode_tok_s"], 2),
                             prompt=round(a["prompt_tok_s"] / b["prompt_tok_s"], 2))
    return out


def llama_cpp_missing(converter):
    if not installed("llama_cpp"):
        return "llama-cpp-python is not installed (CMAKE_BUILD_PARALLEL_LEVEL=2 pip install llama-cpp-python)"
    if not converter or not os.path.isfile(converter):
        return (f"llama.cpp's convert_hf_to_gguf.py not found (--converter or ${CONVERTER_ENV}; it is in the "
                f"llama.cpp source, e.g. vendor/llama.cpp of the llama-cpp-python sdist), got {converter!r}")
    return None


def main():
    args = parse_args()
    require_peers("torch", "transformers")
    df = import_dataflow()
    config = dict(QUICK if args.quick else REFERENCE, model_type="llama")
    missing = llama_cpp_missing(args.converter)
    prompt = np.random.default_rng(0).integers(0, config["vocab_size"], args.prompt)
    with tempfile.TemporaryDirectory() as directory, df.Handle("host", threads=args.threads) as h:
        reference = df.models.Llama(h, config, seed=0)
        state = reference.state_dict()
        reference.save_pretrained(directory)
        reference.close()
        generators = {}
        models = {v: build(df, h, config, state, *VARIANTS[v]) for v in VARIANTS}
        for v, m in models.items():
            generators[("dataflow", v)] = lambda p, n, m=m: m.generate(p, n, temperature=0)
        if missing is None:
            byte_fallback_tokenizer(directory, config["vocab_size"])
            for kind, path in gguf_files(directory, args.converter).items():
                generators[("llama.cpp", kind)] = llama_cpp_generator(path, args.threads, args.prompt + args.new)
        for dtype in HF:
            generators[("transformers", dtype)] = hf_generator(directory, dtype, args.threads)
        load = [round(os.getloadavg()[0], 2)]
        rows = single_stream_rows(measure(generators, prompt, args.new, args.rounds), args.prompt)
        del generators
        for v, m in models.items():
            if v != "bf16":
                m.close()
        batched_decode.run(h, models["bf16"], max(args.streams), args.prompt, args.new, 1)  # warm-up
        batched, base = [], None
        for n in args.streams:
            med, lo, hi, mem = batched_decode.run(h, models["bf16"], n, args.prompt, args.new, args.rounds)
            base = base or med
            batched.append(dict(dtype="bf16", streams=n, decode_tok_s=round(med, 1), spread=[round(lo, 1), round(hi, 1)],
                                ratio_vs_first=round(med / base, 2), peak_bytes_per_seq=int(mem)))
        models["bf16"].close()
        load.append(round(os.getloadavg()[0], 2))
    vs_llama = ratios(rows, "llama.cpp", LLAMA_CPP)
    vs_hf = ratios(rows, "transformers", {d: d for d in HF})
    print(json.dumps(dict(bench="generate", config=config, prompt=args.prompt, new=args.new, threads=args.threads,
                          rounds=args.rounds, llama_cpp=missing or "measured", rows=rows,
                          ratio_vs_llama_cpp=vs_llama, ratio_vs_transformers=vs_hf, batched=batched,
                          machine=dict(machine_info(), loadavg_1min_start_end=load)), indent=1))

    def line(pairs):
        return ", ".join(f"{v} {p['decode']:.2f}x/{p['prompt']:.2f}x ({p['peer_variant']})" for v, p in pairs.items())
    print(f"generate host ({args.threads} threads), dataflow decode/prompt tok/s ratio: "
          + (f"vs llama.cpp {line(vs_llama)}" if vs_llama else f"llama.cpp not measured: {missing}")
          + f"; vs transformers {line(vs_hf)}; batched bf16 "
          + ", ".join(f"x{b['streams']} {b['decode_tok_s']:.0f} tok/s ({b['ratio_vs_first']:.2f}x)" for b in batched))


if __name__ == "__main__":
    main()
