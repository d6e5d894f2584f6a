"""Models over libdataflowmodels: Llama-3 family (LlamaConfig, Llama) and its Trainer.

    import dataflow as df
    h = df.Handle("host")
    model = df.models.Llama(h, df.models.LlamaConfig.from_dict(json.load(open("config.json"))))
    model.load_state_dict({name: numpy_array, ...})     # Hugging Face names and shapes
    logits = model.forward(tokens)                       # [B, T, V] numpy
    new = model.generate(prompt, max_new_tokens=20, temperature=0)   # KV-cached decoding
    trainer = df.Trainer(model, lr=3e-4)
    loss = trainer.step(tokens)                          # forward + backward + AdamW

Labels everywhere in this module follow Hugging Face's `labels` argument: same length as the
tokens, NOT shifted (the model shifts: the logits at t are scored against labels[t + 1] of
the same document), -100 = ignored. Default labels are the tokens themselves, i.e. next-token
prediction within each document. A [B, T] batch is B documents of T tokens; documents are
packed into one chunk with variable-length causal attention and positions restarting at 0.
"""
import dataclasses
import math
import weakref

import numpy as np

from . import dtypes
from ._ffi import ffi, modelslib
from .array import Array
from .errors import BadArgumentError, check

IGNORE_INDEX = -100
PARAM, GRAD, ADAM_M, ADAM_V = 0, 1, 2, 3
_CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
                "max_position_embeddings", "tie_word_embeddings")


@dataclasses.dataclass
class LlamaConfig:
    """The architecture, in Hugging Face LlamaConfig's field names and defaults."""
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = None      # None: num_attention_heads
    head_dim: int = None                 # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict = None            # {"rope_type": "llama3", "factor", "low_freq_factor", ...} or None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    extra: dict = dataclasses.field(default_factory=dict)  # other config.json keys, kept for to_dict

    def __post_init__(self):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d):
        """From a Hugging Face config dict (config.json). Accepts rope_theta + rope_scaling
        (transformers 4) and rope_parameters (transformers 5)."""
        d = dict(d)
        if d.get("model_type", "llama") != "llama":
            raise BadArgumentError(f"LlamaConfig: model_type must be 'llama', got {d.get('model_type')!r}")
        rope = d.pop("rope_parameters", None) or {}
        scaling = d.get("rope_scaling") or None
        if rope:
            d.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
            if rope.get("rope_type", "default") != "default" and scaling is None:
                scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        if scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind == "default":
                scaling = None
            elif kind != "llama3":
                raise BadArgumentError(f"LlamaConfig: rope scaling {kind!r} is not supported (only 'llama3')")
        d["rope_scaling"] = scaling
        for flag in ("attention_bias", "mlp_bias"):
            if d.get(flag):
                raise BadArgumentError(f"LlamaConfig: {flag} = true is not supported")
        if d.get("hidden_act", "silu") != "silu":
            raise BadArgumentError(f"LlamaConfig: hidden_act must be 'silu', got {d['hidden_act']!r}")
        known = {k: d.pop(k) for k in _CONFIG_KEYS if k in d}
        return cls(**known, extra=d)

    def to_dict(self):
        """A config.json dict that transformers' LlamaConfig / LlamaForCausalLM loads."""
        out = dict(self.extra)
        out.update({"architectures": out.get("architectures", ["LlamaForCausalLM"]), "model_type": "llama",
                    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False})
        out.update({k: getattr(self, k) for k in _CONFIG_KEYS})
        out["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling else None
        return out

    def _c_config(self, dtype):
        c = ffi.new("Dataflow_Llama_Config *")
        c.vocab_size, c.hidden_size = self.vocab_size, self.hidden_size
        c.intermediate_size, c.num_layers = self.intermediate_size, self.num_hidden_layers
        c.num_heads, c.num_kv_heads, c.head_dim = self.num_attention_heads, self.num_key_value_heads, self.head_dim
        c.rms_eps, c.rope_theta = self.rms_norm_eps, self.rope_theta
        if self.rope_scaling:
            s = self.rope_scaling
            c.rope_factor = s["factor"]
            c.rope_low_freq_factor = s.get("low_freq_factor", 1.0)
            c.rope_high_freq_factor = s.get("high_freq_factor", 4.0)
            c.rope_original_max_position = s.get("original_max_position_embeddings", 8192)
        c.tie_embeddings = int(bool(self.tie_word_embeddings))
        if dtype not in ("fp32", "bf16"):
            raise BadArgumentError(f"Llama: dtype must be 'fp32' or 'bf16', got {dtype!r}")
        c.dtype = dtypes.enum(dtype)
        return c


def _as_numpy(value, name):
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().float().cpu().numpy()
    value = np.asarray(value)
    if value.dtype.kind != "f" and value.dtype.name != "bfloat16":
        raise BadArgumentError(f"load_state_dict: {name}: expected floating-point values, got dtype {value.dtype}")
    return value


class _Batch:
    """Device copies of one packed batch, in buffers the model reuses across calls."""

    def __init__(self, model, tokens, labels, cu, positions):
        n = tokens.size
        if model._buf_tokens < n or model._buf_docs < cu.size:
            model._buf_tokens, model._buf_docs = max(n, model._buf_tokens), max(cu.size, model._buf_docs)
            h = model.handle
            model._bufs = [h.empty(model._buf_tokens, "int32") for _ in range(3)] + [h.empty(model._buf_docs, "int32")]
        bt, bl, bp, bc = model._bufs
        self.c = ffi.new("Dataflow_Llama_Batch *")
        self.c.num_tokens, self.c.num_docs = n, cu.size - 1
        for buf, values, field in ((bt, tokens, "tokens"), (bp, positions, "positions"), (bc, cu, "cu_seqlens"),
                                   (bl, labels, "labels")):
            if values is None:
                continue
            buf.view((values.size,)).copy_from_numpy(values)
            setattr(self.c, field, ffi.cast("int32_t *", buf.ptr))
        self.num_labels = 0 if labels is None else int(np.count_nonzero(labels != IGNORE_INDEX))


class Llama:
    """A Llama-3-family causal LM on a dataflow handle: Llama(handle, config, dtype="fp32",
    seed=0, recompute=False). config: LlamaConfig or a Hugging Face config dict. Weights start
    as Hugging Face initializes them (normal(0, 0.02) for linears and embeddings, ones for
    norms), from numpy's default_rng(seed). recompute: rerun each layer's forward in the
    backward instead of keeping its activations (less memory, same gradients)."""

    def __init__(self, handle, config, dtype="fp32", seed=0, recompute=False):
        if isinstance(config, dict):
            config = LlamaConfig.from_dict(config)
        self.handle, self.config, self.dtype = handle, config, dtype
        out = ffi.new("Dataflow_Llama **")
        check(modelslib.dataflow_llama_create(handle._ptr(), config._c_config(dtype), out))
        self._m = out[0]
        self.names = [self._info(i, PARAM)[0] for i in range(modelslib.dataflow_llama_num_tensors(self._m))]
        self._index = {n: i for i, n in enumerate(self.names)}
        self._buf_tokens = self._buf_docs = 0
        self._logits = None
        self._caches = weakref.WeakSet()
        self._gen_cache = None
        self.recompute = recompute
        rng = np.random.default_rng(seed)
        init = {}
        for name, shape in self.shapes().items():
            init[name] = (np.ones(shape, np.float32) if len(shape) == 1
                          else rng.normal(0.0, 0.02, size=shape).astype(np.float32))
        self.load_state_dict(init)

    @classmethod
    def from_pretrained(cls, path, handle=None, dtype="fp32"):
        """A Llama from a Hugging Face model directory (config.json + safetensors), see
        dataflow.pretrained; handle None: a new host handle."""
        from . import pretrained
        if handle is None:
            from .handle import Handle
            handle = Handle("host")
        return pretrained.from_pretrained(path, handle, dtype)

    def save_pretrained(self, path, dtype=None):
        """Writes config.json + model.safetensors that transformers loads (dataflow.pretrained)."""
        from . import pretrained
        pretrained.save_pretrained(self, path, dtype)

    def close(self):
        """Frees the model's device memory (also done when it is garbage-collected)."""
        for cache in list(getattr(self, "_caches", ())):
            cache.close()
        m, self._m = getattr(self, "_m", None), None
        if m is not None and self.handle._alive():
            modelslib.dataflow_llama_destroy(m)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def recompute(self):
        return self._recompute

    @recompute.setter
    def recompute(self, value):
        self._recompute = bool(value)
        check(modelslib.dataflow_llama_set_recompute(self._m, int(self._recompute)))

    # ---- tensors ----
    def _info(self, index, kind):
        t = ffi.new("Dataflow_Llama_Tensor *")
        check(modelslib.dataflow_llama_tensor(self._m, index, kind, t))
        shape = tuple(t.shape[d] for d in range(t.ndim))
        return ffi.string(t.name).decode(), shape, int(ffi.cast("uintptr_t", t.ptr)), dtypes.name_of(t.dtype)

    def _arrays(self, kind):
        out = {}
        for i in range(len(self.names)):
            name, shape, ptr, dtype = self._info(i, kind)
            if not ptr:
                return None
            out[name] = Array(self.handle, ptr, shape, dtype, owner=self)
        return out

    def shapes(self):
        """name -> Hugging Face shape."""
        return {n: self._info(i, PARAM)[1] for i, n in enumerate(self.names)}

    def named_parameters(self):
        """name -> device Array (Hugging Face names and shapes, the model dtype); views of the
        model's blocks, valid while the model lives."""
        return self._arrays(PARAM)

    def named_gradients(self):
        """name -> device Array of the fp32 gradient."""
        return self._arrays(GRAD)

    def gradients(self):
        """name -> numpy float32 gradient."""
        return {n: a.numpy() for n, a in self._arrays(GRAD).items()}

    def state_dict(self):
        """name -> numpy float32 values (bf16 weights decoded exactly). Tied models have no
        lm_head.weight, as Hugging Face's safetensors files."""
        return {n: a.numpy() for n, a in self.named_parameters().items()}

    def load_state_dict(self, state):
        """Copies name -> array (numpy, anything np.asarray takes, or torch tensors) into the
        weights, rounding to the model dtype. Strict: every tensor must be present with its
        Hugging Face shape and a floating dtype; unknown names raise. A tied model accepts a
        redundant lm_head.weight equal to model.embed_tokens.weight."""
        state = dict(state)
        params = self.named_parameters()
        if self.config.tie_word_embeddings and "lm_head.weight" in state and "model.embed_tokens.weight" in state:
            lm, emb = _as_numpy(state.pop("lm_head.weight"), "lm_head.weight"), state["model.embed_tokens.weight"]
            if lm.shape != np.shape(emb) or not np.array_equal(lm, _as_numpy(emb, "model.embed_tokens.weight")):
                raise BadArgumentError("load_state_dict: lm_head.weight differs from model.embed_tokens.weight, "
                                       "but the config ties them (tie_word_embeddings)")
        missing = [n for n in params if n not in state]
        unexpected = [n for n in state if n not in params]
        if missing or unexpected:
            raise BadArgumentError(f"load_state_dict: missing tensors {missing[:5]}"
                                   f"{' ...' if len(missing) > 5 else ''}, unexpected tensors {unexpected[:5]}")
        values = {}
        for name, arr in params.items():
            v = _as_numpy(state[name], name)
            if v.shape != arr.shape:
                raise BadArgumentError(f"load_state_dict: {name}: expected shape {arr.shape}, got {v.shape}")
            values[name] = v
        for name, arr in params.items():
            arr.copy_from_numpy(np.ascontiguousarray(values[name], dtype=np.float32))

    # ---- batches ----
    def _pack(self, tokens, labels=None, documents=None, need_labels=True):
        """Flattens tokens (+ HF-style labels) into one packed chunk: ([T] int32 tokens,
        aligned labels or None, cu_seqlens, positions, batch shape)."""
        if documents is not None and len(documents) and not np.isscalar(documents[0]):
            if tokens is not None:
                raise BadArgumentError("documents as arrays replace tokens: pass tokens=None")
            tokens, documents = list(documents), None
        if isinstance(tokens, (list, tuple)) and len(tokens) and not np.isscalar(tokens[0]):
            docs = [np.asarray(d) for d in tokens]
            if any(d.ndim != 1 or d.size == 0 for d in docs):
                raise BadArgumentError("documents must be non-empty 1-D token arrays")
            lengths, shape = [d.size for d in docs], None
            flat = np.concatenate(docs)
            if labels is not None and isinstance(labels, (list, tuple)) and not np.isscalar(labels[0]):
                labels = np.concatenate([np.asarray(x) for x in labels])
        else:
            arr = np.asarray(tokens)
            if arr.ndim not in (1, 2) or arr.size == 0:
                raise BadArgumentError(f"tokens: expected a non-empty [T] or [B, T] array, got shape {arr.shape}")
            shape = arr.shape if arr.ndim == 2 else (1, arr.shape[0])
            flat = arr.reshape(-1)
            if documents is not None:
                lengths = [int(x) for x in documents]
                if any(x <= 0 for x in lengths) or sum(lengths) != flat.size:
                    raise BadArgumentError(f"documents: lengths must be positive and sum to {flat.size} tokens, "
                                           f"got {lengths}")
            else:
                lengths = [shape[1]] * shape[0]
        if flat.dtype.kind not in "iu":
            raise BadArgumentError(f"tokens: expected integer token ids, got dtype {flat.dtype}")
        vocab = self.config.vocab_size
        bad = np.flatnonzero((flat < 0) | (flat >= vocab))
        if bad.size:
            raise BadArgumentError(f"tokens: token id {flat[bad[0]]} at position {bad[0]} is outside the "
                                   f"vocabulary [0, {vocab}) ({bad.size} out of range)")
        flat = flat.astype(np.int32)
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
        aligned = None
        if need_labels:
            lab = flat if labels is None else np.asarray(labels).reshape(-1)
            if lab.size != flat.size or lab.dtype.kind not in "iu":
                raise BadArgumentError(f"labels: expected {flat.size} integer labels like the tokens, got "
                                       f"{lab.size} of dtype {lab.dtype}")
            bad = np.flatnonzero(((lab < 0) | (lab >= vocab)) & (lab != IGNORE_INDEX))
            if bad.size:
                raise BadArgumentError(f"labels: label {lab[bad[0]]} at position {bad[0]} is neither -100 nor in "
                                       f"[0, {vocab})")
            aligned = np.full(flat.size, IGNORE_INDEX, np.int32)
            for s, e in zip(cu[:-1], cu[1:]):
                aligned[s:e - 1] = lab[s + 1:e]
        return _Batch(self, flat, aligned, cu, positions), shape

    # ---- compute ----
    def forward(self, tokens, documents=None, stream=0):
        """Logits as numpy float32 [B, T, V] for tokens [B, T] (B documents) or [T] (B = 1)."""
        batch, shape = self._pack(tokens, documents=documents, need_labels=False)
        n, vocab = batch.c.num_tokens, self.config.vocab_size
        if self._logits is None or self._logits.size < n * vocab:
            self._logits = self.handle.empty((n, vocab), self.dtype)
        out = self._logits.view((n, vocab))
        check(modelslib.dataflow_llama_forward(self._m, stream, batch.c, out.cdata, 0))
        logits = out.numpy()
        return logits.reshape(shape + (vocab,)) if shape else logits

    def loss(self, tokens, labels=None, documents=None, stream=0):
        """Mean cross-entropy over the labelled next-token targets (HF-style labels; default:
        the tokens), as LlamaForCausalLM(tokens, labels=labels).loss. Gradients untouched."""
        batch, _ = self._pack(tokens, labels, documents)
        if batch.num_labels == 0:
            raise BadArgumentError("loss: no labelled tokens (every target is -100)")
        out = ffi.new("float *")
        check(modelslib.dataflow_llama_loss(self._m, stream, batch.c, out, 1.0 / batch.num_labels))
        return float(out[0])

    def loss_backward(self, tokens, labels=None, documents=None, accumulate=False, loss_scale=None, stream=0):
        """Forward + loss + backward into the gradients (added to them with accumulate).
        loss_scale default 1 / labelled tokens (mean loss). Returns loss_scale * summed loss."""
        batch, _ = self._pack(tokens, labels, documents)
        if loss_scale is None:
            if batch.num_labels == 0:
                raise BadArgumentError("loss_backward: no labelled tokens (every target is -100)")
            loss_scale = 1.0 / batch.num_labels
        out = ffi.new("float *")
        check(modelslib.dataflow_llama_loss_backward(self._m, stream, batch.c, out, int(bool(accumulate)),
                                                     loss_scale))
        return float(out[0]), batch.num_labels

    def zero_grads(self, stream=0):
        check(modelslib.dataflow_llama_zero_grads(self._m, stream))

    # ---- inference with a KV cache ----
    def kv_cache(self, max_tokens):
        """A KVCache for one sequence of up to max_tokens tokens."""
        return KVCache(self, max_tokens)

    def _check_tokens(self, tokens, what):
        arr = np.asarray(tokens)
        if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
            raise BadArgumentError(f"{what}: expected a non-empty 1-D array of integer token ids, got "
                                   f"{arr.dtype}{arr.shape}")
        bad = np.flatnonzero((arr < 0) | (arr >= self.config.vocab_size))
        if bad.size:
            raise BadArgumentError(f"{what}: token id {arr[bad[0]]} at position {bad[0]} is outside the "
                                   f"vocabulary [0, {self.config.vocab_size})")
        return arr.astype(np.int32)

    def generate(self, prompt_tokens, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, use_cache=True,
                 eos_token_id=None, stream=0):
        """New token ids (int64 numpy, stopping after eos_token_id when given) continuing the
        1-D prompt_tokens: greedy when temperature == 0, else temperature + top-p sampling
        (dataflow.generate.sample_next) from numpy's default_rng(seed). use_cache: prefill the
        prompt in one cached forward, then one token per step over the KV cache; False:
        recompute the whole context with forward() at every step (same tokens)."""
        from .generate import check_sampling, sample_next
        check_sampling(temperature, top_p)
        prompt = self._check_tokens(prompt_tokens, "generate: prompt_tokens")
        if int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
            raise BadArgumentError(f"generate: max_new_tokens must be an integer >= 0, got {max_new_tokens}")
        max_new_tokens = int(max_new_tokens)
        rng = np.random.default_rng(seed)
        new = []
        if max_new_tokens == 0:
            return np.zeros(0, np.int64)
        if use_cache:
            need = prompt.size + max_new_tokens - 1  # the last token is sampled, never fed back
            cache = self._gen_cache
            if cache is None or cache.closed or cache.capacity < need:
                if cache is not None:
                    cache.close()
                cache = self._gen_cache = KVCache(self, need)
            cache.reset()
            logits = cache.forward(prompt, stream=stream)
        else:
            ids = list(prompt)
            logits = self.forward(np.asarray(ids, np.int32), stream=stream)[0, -1]
        while True:
            token = sample_next(logits, temperature, top_p, rng)
            new.append(token)
            if token == eos_token_id or len(new) == max_new_tokens:
                break
            if use_cache:
                logits = cache.forward(np.asarray([token], np.int32), stream=stream)
            else:
                ids.append(token)
                logits = self.forward(np.asarray(ids, np.int32), stream=stream)[0, -1]
        return np.asarray(new, dtype=np.int64)


class KVCache:
    """Keys and values of one sequence's tokens for incremental decoding (C:
    dataflow_llama_kv_cache_*): model.kv_cache(max_tokens). forward(tokens) runs the new
    tokens at positions length.. over everything cached before them and appends their K/V;
    more than capacity tokens raises. Valid while its model lives (closed with it)."""

    def __init__(self, model, max_tokens):
        if int(max_tokens) != max_tokens or max_tokens < 1:
            raise BadArgumentError(f"KVCache: max_tokens must be an integer >= 1, got {max_tokens}")
        self.model = model
        out = ffi.new("Dataflow_Llama_KV_Cache **")
        check(modelslib.dataflow_llama_kv_cache_create(model._m, int(max_tokens), out))
        self._c = out[0]
        self._tokens = model.handle.empty(int(max_tokens), "int32")
        self._logits = None
        model._caches.add(self)

    @property
    def closed(self):
        return self._c is None

    def _ptr(self):
        if self._c is None:
            raise BadArgumentError("KVCache: the cache is closed")
        return self._c

    @property
    def length(self):
        return int(modelslib.dataflow_llama_kv_cache_length(self._ptr()))

    @property
    def capacity(self):
        return int(modelslib.dataflow_llama_kv_cache_capacity(self._ptr()))

    def reset(self):
        """Forgets the cached tokens (keeps the memory)."""
        check(modelslib.dataflow_llama_kv_cache_reset(self._ptr()))

    def forward(self, tokens, all_logits=False, stream=0):
        """Logits (numpy float32) of the new tokens: [vocab] for the last one, or [n, vocab]."""
        c = self._ptr()
        tokens = self.model._check_tokens(tokens, "KVCache.forward: tokens")
        n, vocab = tokens.size, self.model.config.vocab_size
        if self.length + n > self.capacity:
            raise BadArgumentError(f"KVCache.forward: KV cache overflow: {self.length} cached + {n} new tokens "
                                   f"exceed its capacity of {self.capacity} tokens")
        rows = n if all_logits else 1
        if self._logits is None or self._logits.size < rows * vocab:
            self._logits = self.model.handle.empty((rows, vocab), self.model.dtype)
        out = self._logits.view((rows, vocab))
        self._tokens.view((n,)).copy_from_numpy(tokens, stream=stream)
        check(modelslib.dataflow_llama_forward_cached(self.model._m, stream, c, ffi.cast("int32_t *", self._tokens.ptr),
                                                      n, out.cdata, int(bool(all_logits))))
        logits = out.numpy(stream=stream)
        return logits if all_logits else logits[0]

    def close(self):
        c, self._c = getattr(self, "_c", None), None
        if c is not None and self.model.handle._alive():
            modelslib.dataflow_llama_kv_cache_destroy(c)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Trainer:
    """AdamW training of a Llama, as torch.optim.AdamW + clip_grad_norm_(grad_clip) on the
    mean next-token loss. Hyperparameters are attributes, read at every step (set trainer.lr
    for a schedule). grad_clip 0 or None: no clipping."""

    def __init__(self, model, lr=3e-4, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8, grad_clip=1.0):
        self.model, self.lr, self.weight_decay, self.betas, self.eps = model, lr, weight_decay, tuple(betas), eps
        self.grad_clip = grad_clip or 0.0
        self.step_count = 0
        self.last_grad_norm = None
        self._acc_loss, self._acc_labels = 0.0, 0

    def _adamw(self, stream):
        self.step_count += 1
        norm = ffi.new("float *")
        check(modelslib.dataflow_llama_adamw_step(self.model._m, stream, float(self.lr), float(self.betas[0]),
                                                  float(self.betas[1]), float(self.eps), float(self.weight_decay),
                                                  float(self.grad_clip), self.step_count, norm))
        self.last_grad_norm = float(norm[0])

    def step(self, tokens, labels=None, documents=None, stream=0):
        """One optimizer step on one batch: tokens [B, T] or [T], or a list of 1-D documents;
        documents: lengths packing a 1-D tokens array, or a list of 1-D arrays (tokens=None).
        labels: HF-style (default: the tokens; next-token within each document). Returns the
        mean loss before the step."""
        if self._acc_labels:
            raise BadArgumentError("step: gradients from accumulate() are pending; call apply() first")
        loss, _ = self.model.loss_backward(tokens, labels, documents, accumulate=False, stream=stream)
        self._adamw(stream)
        return loss

    def accumulate(self, tokens, labels=None, documents=None, stream=0):
        """Adds one chunk's gradients (of its summed loss; apply() divides by the labelled
        tokens of all chunks, so k chunks then apply() equal one step on all of them).
        Returns this chunk's mean loss."""
        first = self._acc_labels == 0
        batch_sum, n = self.model.loss_backward(tokens, labels, documents, accumulate=not first, loss_scale=1.0,
                                                stream=stream)
        self._acc_loss += batch_sum
        self._acc_labels += n
        return batch_sum / n if n else float("nan")

    def apply(self, stream=0):
        """The optimizer step for the accumulated chunks; returns their mean loss."""
        if self._acc_labels == 0:
            raise BadArgumentError("apply: nothing accumulated (or no labelled tokens)")
        check(modelslib.dataflow_llama_scale_grads(self.model._m, stream, 1.0 / self._acc_labels))
        loss = self._acc_loss / self._acc_labels
        self._acc_loss, self._acc_labels = 0.0, 0
        self._adamw(stream)
        return loss

    def state_dict(self):
        """{"step": int, "exp_avg": {name: float32 numpy}, "exp_avg_sq": {...}, "hyperparameters": {...}}
        (m and v as torch.optim.AdamW names them; empty dicts before the first step)."""
        m, v = self.model._arrays(ADAM_M), self.model._arrays(ADAM_V)
        return {"step": self.step_count,
                "exp_avg": {n: a.numpy() for n, a in (m or {}).items()},
                "exp_avg_sq": {n: a.numpy() for n, a in (v or {}).items()},
                "hyperparameters": {"lr": self.lr, "weight_decay": self.weight_decay, "betas": list(self.betas),
                                    "eps": self.eps, "grad_clip": self.grad_clip}}

    def load_state_dict(self, state):
        """Restores step, m and v (and hyperparameters when present) from state_dict()."""
        step = int(state["step"])
        m_state, v_state = state.get("exp_avg", {}), state.get("exp_avg_sq", {})
        if step > 0:
            check(modelslib.dataflow_llama_alloc_optimizer_state(self.model._m, 0))
            shapes = self.model.shapes()
            for key, kind, values in (("exp_avg", ADAM_M, m_state), ("exp_avg_sq", ADAM_V, v_state)):
                arrays = self.model._arrays(kind)
                missing = [n for n in arrays if n not in values]
                unexpected = [n for n in values if n not in arrays]
                if missing or unexpected:
                    raise BadArgumentError(f"Trainer.load_state_dict: {key}: missing {missing[:5]}, "
                                           f"unexpected {unexpected[:5]}")
                for n, arr in arrays.items():
                    x = np.asarray(values[n], dtype=np.float32)
                    if x.shape != shapes[n]:
                        raise BadArgumentError(f"Trainer.load_state_dict: {key} {n}: expected shape {shapes[n]}, "
                                               f"got {x.shape}")
                    arr.copy_from_numpy(np.ascontiguousarray(x))
        hp = state.get("hyperparameters")
        if hp:
            self.lr, self.weight_decay, self.betas = hp["lr"], hp["weight_decay"], tuple(hp["betas"])
            self.eps, self.grad_clip = hp["eps"], hp["grad_clip"]
        self.step_count = step
