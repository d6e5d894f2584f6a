"""`dataflow train`: a Llama trained on the embedded corpus (or a text file) with the byte tokenizer;
checkpoints in <out>/checkpoint, the loss curve in <out>/loss.png."""
import os
import time

from . import checkpoint, loss_plot
from .corpus import Batches, load_tokens
from .errors import BadArgumentError, UnsupportedError
from .handle import Handle
from .pretrained import config_argument, model_from_config
from .progress import Progress
from .tokenizer import ByteTokenizer

# Model shapes by name; vocab_size comes from the tokenizer. "tiny" is the default: about 0.9M
# parameters, small enough for a default run of a few minutes at most on 2 CPU cores.
PRESETS = {
    "tiny": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 256},
    "small": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 8,
              "num_key_value_heads": 4, "max_position_embeddings": 512},
}
# Run settings: the command line wins, then a resumed checkpoint's, then these.
RUN_DEFAULTS = {"batch": 8, "seq_len": 128, "lr": 1e-3, "dtype": "fp32", "seed": 0, "data": None,
                "master_weights": False}
EMBEDDED = "embedded"


def _model_config(spec, tokenizer):
    config = config_argument(spec, PRESETS)
    if isinstance(config, str):
        return {"model_type": "llama", "vocab_size": tokenizer.vocab_size, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "tie_word_embeddings": False, **PRESETS[spec]}
    config.setdefault("model_type", "llama")
    config.setdefault("vocab_size", tokenizer.vocab_size)
    if not isinstance(config["vocab_size"], int) or config["vocab_size"] < tokenizer.vocab_size:
        raise BadArgumentError(f"{spec}: vocab_size {config['vocab_size']!r} is smaller than the tokenizer's "
                               f"{tokenizer.vocab_size}")
    return config


def open_handle(args):
    """The host handle a command's --threads and --device-memory ask for."""
    return Handle("host", device_memory=args.device_memory, threads=args.threads)


def train(args):
    try:
        from . import Trainer
    except ImportError:
        raise UnsupportedError("train needs dataflow.Trainer and dataflow.models (the Llama model), which this "
                               "build lacks") from None
    tokenizer = ByteTokenizer()
    resumed = checkpoint.load(args.resume) if args.resume else None
    if resumed and args.config:
        raise BadArgumentError("--config: a resumed run keeps its checkpoint's model; drop --config or --resume")
    prior = resumed.state if resumed else {}
    run = {k: getattr(args, k) if getattr(args, k) is not None else prior.get("run", {}).get(k, default)
           for k, default in RUN_DEFAULTS.items()}
    config = resumed.config if resumed else _model_config(args.config or "tiny", tokenizer)
    where = (os.path.join(resumed.path, checkpoint.CONFIG_NAME) if resumed
             else f"preset {args.config or 'tiny'}" if (args.config or "tiny") in PRESETS else args.config)
    if run["master_weights"] and run["dtype"] != "bf16":
        raise BadArgumentError(f"--master-weights: fp32 master weights are for bf16 training; this run's dtype is "
                               f"{run['dtype']} (add --dtype bf16)")
    if run["seq_len"] > config.get("max_position_embeddings", run["seq_len"]):
        raise BadArgumentError(f"--seq-len {run['seq_len']} exceeds the model's max_position_embeddings "
                               f"{config['max_position_embeddings']}")
    tokens = load_tokens(tokenizer, run["data"])
    source = run["data"] or EMBEDDED
    if resumed and prior["data"]["tokens"] != len(tokens):
        raise BadArgumentError(f"--resume: the checkpoint was trained on {prior['data']['tokens']} tokens of "
                               f"{prior['data']['source']}, but {source} has {len(tokens)}")
    batches = Batches(tokens, run["batch"], run["seq_len"], prior.get("data", {}).get("position", 0), source)

    handle = open_handle(args)
    model = model_from_config(config, handle, run["dtype"], seed=run["seed"], where=where)
    trainer = Trainer(model, lr=run["lr"], **({"master_weights": True} if run["master_weights"] else {}))
    if resumed:
        checkpoint.restore_training(resumed, model, trainer)
    losses = list(prior.get("losses", []))
    ckpt_dir = os.path.join(args.out, "checkpoint")

    def save():
        checkpoint.save_training(ckpt_dir, model, trainer, {
            "run": run, "tokenizer": tokenizer.to_dict(), "losses": losses,
            "data": {"source": source, "tokens": len(tokens), "position": batches.position}})

    progress = Progress(args.steps)
    started, tokens_done = time.perf_counter(), 0
    for i in range(1, args.steps + 1):
        inputs, labels = batches.next()
        losses.append(float(trainer.step(inputs, labels)))
        tokens_done += inputs.size
        progress.update(i, losses[-1], tokens_done / (time.perf_counter() - started), handle.memory_in_use())
        if args.save_every and i % args.save_every == 0 and i != args.steps:
            save()
    elapsed = time.perf_counter() - started
    save()
    loss_plot.save(os.path.join(args.out, "loss.png"), losses)
    first = losses[len(losses) - args.steps] if args.steps else float("nan")
    print(f"train: {args.steps} steps (step {trainer.step_count} in all), loss {first:.4f} -> {losses[-1]:.4f}, "
          f"{tokens_done / elapsed:,.0f} tok/s; checkpoint {ckpt_dir}, loss curve "
          f"{os.path.join(args.out, 'loss.png')}")
    handle.close()
    return 0
