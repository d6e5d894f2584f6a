"""Models over libdataflowmodels: the decoders of the Llama-3, Qwen2/2.5, Qwen3 and Mistral families
and the mixtures of experts Mixtral and Qwen3-MoE (LlamaConfig, Llama, KVCache), generation
(generate, batch_engine, sampling) and the --config presets (presets); training them is
dataflow.training's.

    import dataflow as df
    h = df.Handle("host")
    model = df.models.from_pretrained("Qwen3-0.6B/", handle=h)   # family by config.json's model_type
    model = df.models.Llama(h, df.models.LlamaConfig.from_dict(json.load(open("config.json"))))
    model.load_state_dict({name: numpy_array, ...})     # Hugging Face names and shapes
    logits = model.forward(tokens)                       # [B, T, V] numpy
    new = model.generate(prompt, max_new_tokens=20, temperature=0)   # KV-cached decoding
    trainer = df.Trainer(model, lr=3e-4)
    loss = trainer.step(tokens)                          # forward + backward + AdamW

Labels everywhere in this package follow Hugging Face's `labels` argument: same length as the
tokens, NOT shifted (the model shifts: the logits at t are scored against labels[t + 1] of
the same document), -100 = ignored. Default labels are the tokens themselves, i.e. next-token
prediction within each document. A [B, T] batch is B documents of T tokens; documents are
packed into one chunk with variable-length causal attention and positions restarting at 0.

Modules, one concept each (imports go down this list only): config (LlamaConfig), batch
(packing a batch into one buffer), device_io (reading results back), kv_cache (KVCache),
paged_kv_cache (PagedKVCache), llama (Llama); beside them generate (one sequence's sampling),
sampling (a batch's, in C), batch_engine (continuous batching) and presets (the named models).
"""
from .batch import IGNORE_INDEX
from .config import LlamaConfig
from .kv_cache import KVCache
from .paged_kv_cache import PagedKVCache
from .llama import ADAM_M, ADAM_V, GRAD, MASTER, PARAM, Llama


def from_pretrained(path, handle=None, dtype="fp32", placement="auto"):
    """The model of a Hugging Face directory (config.json + safetensors) or a llama.cpp .gguf
    file (dataflow.io.gguf), its family chosen by config.json's model_type (llama, qwen2, qwen3,
    mistral, mixtral, qwen3_moe; any other is a FileFormatError naming it and the supported ones);
    handle None: a new host handle. See dataflow.io.pretrained."""
    return Llama.from_pretrained(path, handle, dtype, placement)


__all__ = ["ADAM_M", "ADAM_V", "GRAD", "IGNORE_INDEX", "KVCache", "Llama", "LlamaConfig", "MASTER", "PARAM", "PagedKVCache",
           "from_pretrained"]
