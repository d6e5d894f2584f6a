"""Train a small Llama on your own text with the Python API (what `dataflow train --data FILE` does),
sample from it, and save it as a Hugging Face model directory.

    python examples/train_on_your_text.py [TEXT_FILE] [--steps N] [--out DIR]

TEXT_FILE is any UTF-8 text (default: the corpus shipped with the package). The tokenizer is the
package's BPE (trained on that corpus; byte-level, so any text encodes).
"""
import argparse

import numpy as np

import dataflow as df
from dataflow.io import tokenizer as tokenizers
from dataflow.cli.corpus import Batches, read_text, split


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("text", nargs="?", help="UTF-8 text file (default: the embedded corpus)")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    p.add_argument("--out", default="my-model", help="where to save the model (default ./my-model)")
    args = p.parse_args()

    tok = tokenizers.default()
    text, _ = read_text(args.text)
    seq_len = 64
    train_tokens, validation = split(tok.encode(text, eos=True), seq_len)
    batches = Batches(train_tokens, batch=8, seq_len=seq_len)
    config = df.models.LlamaConfig(vocab_size=tok.vocab_size, hidden_size=128, intermediate_size=384,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=256, rms_norm_eps=1e-5)
    with df.Handle("host") as h:
        model = df.models.Llama(h, config, dtype="fp32", seed=0)
        trainer = df.Trainer(model, lr=2e-3)
        for step in range(1, args.steps + 1):
            loss = trainer.step(batches.next())  # [batch, seq_len] rows; labels: each next token
            if step % 20 == 0 or step == args.steps:
                val = model.loss(validation) if len(validation) else float("nan")
                print(f"step {step}: loss {loss:.3f}, held-out loss {val:.3f}")
        prompt = tok.encode("The")
        new = model.generate(prompt, 40, temperature=0.8, top_p=0.95, seed=0, eos_token_id=tok.eos_id)
        print(repr(tok.decode(np.concatenate([prompt, new]))))
        model.save_pretrained(args.out)  # config.json + model.safetensors, loadable by transformers
        tok.save(args.out)               # tokenizer.json: `dataflow generate --checkpoint DIR` reads all three
        model.close()
    print(f"saved {args.out}; sample again with: dataflow generate --checkpoint {args.out} --prompt Return")


if __name__ == "__main__":
    main()
