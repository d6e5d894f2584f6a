"""Hugging Face checkpoints both ways: model.save_pretrained(dir) writes config.json +
model.safetensors (fp32, bf16 or fp16) that transformers' LlamaForCausalLM loads, and
Llama.from_pretrained(dir) reads such a directory (single or sharded safetensors), checking the
config, the files and the memory the model needs before allocating it.

    python examples/hf_checkpoint.py [MODEL_DIR]

With MODEL_DIR (a Llama directory, e.g. one transformers saved), loads it and prints its next-token
prediction for a prompt. Without, builds a small model, saves it in bf16, loads it back, and, when
transformers is installed, checks that transformers computes the same logits from the same files.
"""
import os
import sys
import tempfile

import numpy as np

import dataflow as df
from dataflow.io import tokenizer as tokenizers


def load_and_predict(directory, h):
    model = df.models.Llama.from_pretrained(directory, handle=h, dtype="fp32")
    tok = tokenizers.load(directory) if os.path.exists(os.path.join(directory, "tokenizer.json")) else None
    tokens = tok.encode("Return the") if tok else np.arange(1, 6)
    logits = model.forward(tokens[None, :])
    best = int(np.argmax(logits[0, -1]))
    print(f"{directory}: {model.config.num_hidden_layers} layers, vocab {model.config.vocab_size}; next token after "
          f"the prompt: {tok.decode([best]) if tok else best!r}")
    return model, tokens, logits


def main():
    with df.Handle("host") as h:
        if len(sys.argv) > 1:
            load_and_predict(sys.argv[1], h)
            return
        config = {"model_type": "llama", "vocab_size": 2048, "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "max_position_embeddings": 128, "tie_word_embeddings": False}
        model = df.models.Llama(h, config, dtype="fp32", seed=0)
        with tempfile.TemporaryDirectory(prefix="dataflow-hf-") as directory:
            model.save_pretrained(directory, dtype="bf16")
            tokenizers.default().save(directory)
            print(f"saved {sorted(os.listdir(directory))} in {directory}")
            _, tokens, logits = load_and_predict(directory, h)
            try:
                import torch
                import transformers
            except ImportError:
                print("transformers is not installed: skipping the cross-check")
                return
            hf = transformers.LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
            with torch.no_grad():
                want = hf(torch.from_numpy(tokens[None, :].astype(np.int64))).logits.numpy()
        error = float(np.max(np.abs(want - logits)))
        print(f"transformers loads the same files: max |logit difference| {error:.2e}")
        assert error < 1e-3


if __name__ == "__main__":
    main()
