"""Models over libdataflowmodels: Llama-3 family (LlamaConfig, Llama, KVCache) and its Trainer.

    import dataflow as df
    h = df.Handle("host")
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
llama (Llama), trainer (Trainer).
"""
from .batch import IGNORE_INDEX
from .config import LlamaConfig
from .kv_cache import KVCache
from .llama import ADAM_M, ADAM_V, GRAD, MASTER, PARAM, Llama
from .trainer import Trainer

__all__ = ["ADAM_M", "ADAM_V", "GRAD", "IGNORE_INDEX", "KVCache", "Llama", "LlamaConfig", "MASTER", "PARAM",
           "Trainer"]
