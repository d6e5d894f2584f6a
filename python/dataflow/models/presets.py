"""The models a command names with --config: one set of presets and one reader for `dataflow
train`, `dataflow plan` and df.ring.plan, so that a plan previews the very model train builds.

A spec is a preset name, an HF config.json or an HF model directory (its config.json, and its
tokenizer.json when the model's vocabulary comes from the tokenizer)."""
import os

from ..io import tokenizer as tokenizers
from ..errors import BadArgumentError, FileFormatError
from ..io.file_checks import read_json
from ..io.pretrained import CONFIG_NAME

_LLAMA3 = {"vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "num_key_value_heads": 8,
           "max_position_embeddings": 8192}
_QWEN = {"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False}
# "tiny" (the default of `dataflow train`) and "small" take vocab_size from the tokenizer: tiny is
# small enough that the default run (a couple of minutes on 2 CPU cores) ends writing recognisable
# words. The Llama-3 family, Qwen2.5 (Qwen/Qwen2.5-7B), Qwen3 (Qwen/Qwen3-8B) and Mistral
# (mistralai/Mistral-7B-v0.1: the version with a 4096-token sliding window; v0.3 has none, a
# 32768 vocabulary and rope_theta 1e6) are Hugging Face's configs (their config.json; rope scaling
# left out: it changes neither sizes nor flops). Mixtral (mistralai/Mixtral-8x7B-v0.1) and Qwen3-MoE
# (Qwen/Qwen3-30B-A3B) are mixtures of experts in every layer.
PRESETS = {
    "tiny": {"hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 6,
             "num_key_value_heads": 2, "max_position_embeddings": 256},
    "small": {"hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 6,
              "num_key_value_heads": 2, "max_position_embeddings": 512},
    "llama3.2-1b": {**_LLAMA3, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                    "num_attention_heads": 32, "head_dim": 64, "tie_word_embeddings": True},
    "llama3.2-3b": {**_LLAMA3, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
                    "num_attention_heads": 24, "head_dim": 128, "tie_word_embeddings": True},
    "llama3-8b": {**_LLAMA3, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32},
    "llama3-70b": {**_LLAMA3, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                   "num_attention_heads": 64},
    "qwen2.5-7b": {**_QWEN, "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                   "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "max_position_embeddings": 32768},
    "qwen3-8b": {**_QWEN, "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
                 "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960},
    "mistral-7b": {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                   "sliding_window": 4096, "tie_word_embeddings": False},
    "mixtral-8x7b": {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
                     "num_local_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False},
    "qwen3-30b-a3b": {**_QWEN, "model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048,
                      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                      "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
                      "max_position_embeddings": 40960},
}
WHAT = f"a preset ({', '.join(PRESETS)}), an HF config.json or an HF model directory"


def resolve(spec, flag="--config", tokenizer=None, directory_only=False):
    """(tokenizer, unvalidated config dict, where the config came from, model directory or None) of
    a model spec. tokenizer: a --tokenizer value; by default the model directory's tokenizer.json,
    else the BPE trained on the embedded corpus. directory_only: the spec must be a model directory
    (--init). Reads files; raises BadArgumentError naming `flag`."""
    if spec in PRESETS and not directory_only:
        tok = tokenizers.load(tokenizer) if tokenizer else tokenizers.default()
        config = {"model_type": "llama", "vocab_size": tok.vocab_size, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                  "tie_word_embeddings": False, **PRESETS[spec]}
        return tok, config, f"preset {spec}", None
    directory = spec if os.path.isdir(spec) else None
    path = os.path.join(spec, CONFIG_NAME) if directory else spec
    if directory_only and directory is None:
        raise BadArgumentError(f"{flag}: {spec} is not a directory; expected a Hugging Face model directory "
                               "(config.json, tokenizer.json, *.safetensors)")
    if not os.path.exists(path):
        raise BadArgumentError(f"{flag}: {spec!r} is not {WHAT}" +
                               (f" (the directory has no {CONFIG_NAME})" if directory else ""))
    try:  # the one safe reader: regular files only, bounded in size and nesting
        config = read_json(path, CONFIG_NAME)
    except FileFormatError as e:
        raise BadArgumentError(f"{flag}: {e}") from None
    if isinstance(config, dict):
        config = {"model_type": "llama", **config}
    own = directory and os.path.exists(os.path.join(directory, tokenizers.TOKENIZER_NAME))
    if tokenizer:
        tok = tokenizers.load(tokenizer)
    elif own:
        ids = {k: config.get(k) if isinstance(config, dict) and isinstance(config.get(k), int) else None
               for k in ("bos_token_id", "eos_token_id")}
        tok = tokenizers.load(directory, bos_id=ids["bos_token_id"], eos_id=ids["eos_token_id"])
    else:
        tok = tokenizers.default()
    if isinstance(config, dict):
        config.setdefault("vocab_size", tok.vocab_size)
    return tok, config, path, directory
