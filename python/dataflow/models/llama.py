"""Llama: the all-resident Llama-3-family model over libdataflowmodels (dataflow_llama_*)."""
import numbers
import weakref

import numpy as np

from .. import dtypes
from .._ffi import ffi, modelslib
from ..array import Array
from ..errors import BadArgumentError, OutOfMemoryError, UnsupportedError, check, require_open
from ..quantize import quantize_state
from .batch import BatchBuffer, PackedBatch, check_tokens
from .config import checked_config
from .device_io import fetch
from .host_blocks import HostBlocks, Layout, host_memory_available
from .kv_cache import KVCache
from .paged_kv_cache import PagedKVCache

# which copy of a tensor (Dataflow_Block_Kind)
# the C enums (blocked_model.h): block kinds, and save levels by name
PARAM, GRAD, ADAM_M, ADAM_V, MASTER = (modelslib.DATAFLOW_BLOCK_PARAM, modelslib.DATAFLOW_BLOCK_GRAD,
                                       modelslib.DATAFLOW_BLOCK_ADAM_M, modelslib.DATAFLOW_BLOCK_ADAM_V,
                                       modelslib.DATAFLOW_BLOCK_MASTER)
SAVE_LEVELS = {"input": modelslib.DATAFLOW_SAVE_INPUT, "attention": modelslib.DATAFLOW_SAVE_ATTENTION,
               "all": modelslib.DATAFLOW_SAVE_ALL}
PLACEMENTS = ("auto", "device", "host")


def _as_numpy(value, name, integer=False):
    """values of a floating tensor (integer: a quantized model's codes or zero points, which
    must be integers)"""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
        value = (value if integer else value.float()).numpy()
    value = np.asarray(value)
    if integer and value.dtype.kind not in "iu":
        raise BadArgumentError(f"load_state_dict: {name}: expected integer codes, got dtype {value.dtype}")
    if not integer and value.dtype.kind != "f" and value.dtype.name != "bfloat16":
        raise BadArgumentError(f"load_state_dict: {name}: expected floating-point values, got dtype {value.dtype}")
    return value


class Llama:
    """A Llama-3-family causal LM on a dataflow handle: Llama(handle, config, dtype="fp32",
    seed=0, recompute=False, save_level=None, master_weights=False). config: LlamaConfig or a
    Hugging Face config dict. Weights start as Hugging Face initializes them (normal(0, 0.02)
    for linears and embeddings, ones for norms, zeros for biases), from numpy's default_rng(seed).
    save_level: what each layer keeps from the forward for the backward: "all" (default),
    "attention" (attention output and logsumexp; the rest is recomputed) or "input" (nothing:
    each layer's forward reruns in the backward); recompute=True is save_level="input". Every
    level gives the same gradients, bit for bit. master_weights (bf16 models): keep fp32 master
    weights that AdamW updates (the bf16 weights are their rounding), so updates smaller than
    a bf16 step accumulate instead of being rounded away.

    placement: where the weights live. "device": all-resident on the handle (weights and fp32
    gradients allocated now, AdamW state at the first step). "host": in host memory, in the
    blocked layout; a Trainer then trains through the ring executor, which streams blocks
    through device slots (dataflow.ring), and forward / loss / generate run on a CPU copy (see
    _cpu_copy). "auto" (default): "device" when the weights and gradients fit in the handle's
    free memory, else "host"; OutOfMemoryError when the weights fit neither."""

    def __init__(self, handle, config, dtype="fp32", seed=0, recompute=False, save_level=None,
                 master_weights=False, placement="auto"):
        config = checked_config(config, "Llama config")
        if not isinstance(dtype, str) or dtype not in ("fp32", "bf16"):
            raise BadArgumentError(f"Llama: dtype must be 'fp32' or 'bf16', got {dtype!r:.40}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
            raise BadArgumentError(f"Llama: seed must be None or an integer >= 0, got {seed!r:.40}")
        if not isinstance(placement, str) or placement not in PLACEMENTS:
            raise BadArgumentError(f"Llama: placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        self.handle, self.config, self.dtype = handle, config, dtype
        self._c_model = self._store = self._mirror = self._layout = self._grad_comm = self._backward = None
        self._closed = self._optimizer_sharded = False
        self._master = False  # host-held models: whether MASTER is kept
        if config.quantization and placement != "device":
            if placement == "host":
                raise BadArgumentError("Llama: a quantized model (config quantization_config) runs all-resident: "
                                       "placement must be 'device' or 'auto', got 'host'")
            placement = "device"
        if placement == "auto":
            free = handle.memory_capacity() - handle.memory_in_use()
            placement = "device" if self.layout.total((PARAM, GRAD)) <= free else "host"
        if placement == "device":
            out = ffi.new("Dataflow_Llama **")
            check(modelslib.dataflow_llama_create(handle._ptr(), config._c_config(dtype), out))
            self._c_model = out[0]
            infos = [self._info(i, PARAM) for i in range(modelslib.dataflow_llama_num_tensors(self._m))]
            self._shapes = {name: shape for name, shape, _, _ in infos}
            self._integer = {name for name, _, _, dtype in infos if dtype in ("int8", "uint8")}
        else:
            need, have = self.layout.total((PARAM, MASTER) if master_weights else (PARAM,)), host_memory_available()
            if need > have:
                raise OutOfMemoryError(
                    f"Llama: the weights take {need:,} bytes; they fit neither the handle's free device memory "
                    f"({handle.memory_capacity() - handle.memory_in_use():,} of {handle.memory_capacity():,} bytes, "
                    f"with the gradients: {self.layout.total((PARAM, GRAD)):,}) nor the host's available "
                    f"{have:,} bytes")
            self._store = HostBlocks(self.layout)
            self._shapes = {name: shape for name, shape, _, _ in self.layout.tensors}
            self._integer = set()
        self.names = list(self._shapes)
        self._batches = BatchBuffer(handle)
        self._logits = None
        self._caches = weakref.WeakSet()
        self._adopters = weakref.WeakSet()  # ring executors training the device blocks in place
        self._gen_cache = None
        self._stream = None  # the stream of the model's last work (see _on)
        self.save_level = ("input" if recompute else "all") if save_level is None else save_level
        if master_weights:
            self.enable_master_weights()
        rng = np.random.default_rng(seed)
        init = {}
        for name, shape in self._float_shapes().items():
            if len(shape) == 2:
                init[name] = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
            else:  # norms start at one, biases at zero
                init[name] = np.full(shape, 0.0 if name.endswith(".bias") else 1.0, np.float32)
        self.load_state_dict(quantize_state(init, config.quantization) if config.quantization else init)

    def _float_shapes(self):
        """name -> shape of the full-precision model's tensors (a quantized model's before quantization)"""
        if not self.config.quantization:
            return self.shapes()
        from ..io.pretrained import parameter_shapes
        return parameter_shapes({k: v for k, v in self.config.to_dict().items() if k != "quantization_config"})

    @classmethod
    def from_pretrained(cls, path, handle=None, dtype="fp32", placement="auto"):
        """A Llama from a Hugging Face model directory (config.json + safetensors), see
        dataflow.io.pretrained; handle None: a new host handle."""
        from ..io import pretrained
        if handle is None:
            from ..handle import Handle
            handle = Handle("host")
        return pretrained.from_pretrained(path, handle, dtype, placement)

    def save_pretrained(self, path, dtype=None):
        """Writes config.json + model.safetensors that transformers loads (dataflow.io.pretrained)."""
        from ..io import pretrained
        pretrained.save_pretrained(self, path, dtype)

    @property
    def _m(self):
        """The C model (None: host-held); ClosedError once the model or its handle is closed."""
        require_open(self._closed, self.handle, "Llama")
        return self._c_model

    def _set_grad_comm(self, comm):
        """The ranks a Trainer's ZeRO-1 shards the optimizer state over (its executor sums the
        gradients over them)."""
        check(modelslib.dataflow_llama_set_grad_comm(self._m, comm._comm()))
        self._grad_comm = comm  # it lives as long as the model
        comm._models.add(self)

    def _forget_grad_comm(self):
        """Called as comm closes: C forgets the communicator. A state sharded over it cannot be
        detached (close() refuses then; only the finalizer at exit gets here with one)."""
        if self._c_model is not None and not self._optimizer_sharded and self.handle._alive():
            modelslib.dataflow_llama_set_grad_comm(self._c_model, ffi.NULL)

    def _in_ring(self):
        """Whether a Trainer's ring executor holds the weights (see _hand_to)."""
        return self._m is None and not isinstance(self._store, HostBlocks)

    def _sharded(self):
        """Whether the optimizer state is sharded over the ranks of the gradient communicator."""
        return self._c_model is not None and self._optimizer_sharded

    def close(self):
        """Frees the model's device memory (also done when it is garbage-collected); using the
        model afterwards raises ClosedError."""
        self._closed = True
        self._release_device()
        self._weights_changed()
        store, self._store = getattr(self, "_store", None), None
        if store is not None and hasattr(store, "close"):
            store.close()

    def _release_device(self):
        """Frees what the all-resident model holds on the device (its caches, batches, logits)."""
        for owner in list(getattr(self, "_caches", ())) + list(getattr(self, "_adopters", ())):
            owner.close()
        for array in (getattr(getattr(self, "_batches", None), "array", None), getattr(self, "_logits", None)):
            if array is not None:
                array.free()
        if hasattr(self, "_batches"):
            self._batches, self._logits = BatchBuffer(self.handle), None
        m, self._c_model = getattr(self, "_c_model", None), None
        if m is not None and self.handle._alive():
            modelslib.dataflow_llama_destroy(m)

    @property
    def placement(self):
        """"device" (all-resident) or "host" (weights in host memory; see the class docstring)."""
        return "device" if self._m is not None else "host"

    @property
    def layout(self):
        """The blocked layout of the model's tensors (dataflow.models.host_blocks.Layout)."""
        if self._layout is None:
            self._layout = Layout(self.config, self.dtype)
        return self._layout

    def _host_held(self, what):
        """Raises UnsupportedError for device-only calls on a host-held model."""
        if self._m is None:
            raise UnsupportedError(f"{what}: the weights are held in host memory (placement 'host'); "
                                   "state_dict() and load_state_dict() reach them, and a Trainer trains them")

    def _weights_changed(self):
        """Drops the CPU copy of host-held weights (made again when next needed)."""
        mirror, self._mirror = getattr(self, "_mirror", None), None
        if mirror is not None:
            mirror.close()
            mirror.handle.close()

    def _cpu_copy(self):
        """Host-held weights run forward, loss and generate on the CPU: on an all-resident copy on
        an uncapped host-backend handle, made at first use and again after the weights change
        (a Trainer step, load_state_dict). It takes the weights and gradients' memory once more."""
        if self._mirror is None:
            from ..handle import Handle
            copy = Llama(Handle("host"), self.config, self.dtype, placement="device")
            for block in range(len(self.layout.bytes)):
                copy._block_array(block, PARAM).copy_from_numpy(self._store.read(block, PARAM))
            self._mirror = copy
        return self._mirror

    def _block_array(self, block, kind):
        """The all-resident model's block of a kind as a device uint8 Array (None: not allocated)."""
        mem = ffi.new("Dataflow_Block_Memory *")
        check(modelslib.dataflow_llama_block(self._m, block, mem))
        ptr = [mem.param, mem.grad, mem.m, mem.v, mem.master][kind]
        if ptr == ffi.NULL:
            return None
        return Array(self.handle, int(ffi.cast("uintptr_t", ptr)), (self.layout.bytes[block][kind],), "uint8",
                     owner=self)

    def _hand_to(self, make_executor, fp32_state=True):
        """Moves the weights (and master weights, AdamW moments where present) into the ring
        executor make_executor() returns (dataflow.training.executor.RingExecutor), which holds them
        from then on; an all-resident model frees its device memory first, so that the executor
        can allocate there. If make_executor fails, the model keeps its weights (and master
        weights) in host memory. fp32_state False: the executor keeps bf16 or 8-bit moments of its
        own, so a model with fp32 ones (trained before) is refused. Returns the executor."""
        kinds = (PARAM, MASTER, ADAM_M, ADAM_V) if self.master_weights else (PARAM, ADAM_M, ADAM_V)
        if not fp32_state:
            held = self._block_array(0, ADAM_M) is not None if self._m is not None else ADAM_M in self._store.kinds
            if held:
                raise BadArgumentError("Trainer: this model holds fp32 AdamW moments from earlier training; a "
                                       "bf16 or 8-bit optimizer state starts fresh or from a checkpoint of its own "
                                       "precision (Trainer.load_state_dict(..., convert=True) converts)")
            kinds = tuple(k for k in kinds if k not in (ADAM_M, ADAM_V))
        blocks = []
        if self._m is not None:
            self.handle.sync()
        for block in range(len(self.layout.bytes)):
            if self._m is not None:
                arrays = {k: self._block_array(block, k) for k in kinds}
                blocks.append({k: fetch(a, 0) for k, a in arrays.items() if a is not None})
            else:
                blocks.append({k: self._store.read(block, k) for k in kinds if k in self._store.kinds})
        self._master = self.master_weights
        self._release_device()
        self._store = HostBlocks(self.layout)
        try:
            executor = make_executor()
        except Exception:
            if self._master:
                self._store.add_master()
            for block, raw in enumerate(blocks):
                for kind in self._store.kinds:
                    self._store.write(block, kind, raw[kind])
            raise
        for block, raw in enumerate(blocks):
            for kind, data in raw.items():  # PARAM before MASTER: writing PARAM resets MASTER
                executor.write(block, kind, data)
        self._store = executor
        self._weights_changed()
        return executor

    def _adopted_by(self, make_executor, stream, fp32_state=True):
        """A ring executor make_executor((blocks, C model)) returns that trains this all-resident
        model's own block memory in place (blocks: a Dataflow_Block_Memory[num_blocks]; the fp32
        AdamW moments are allocated on `stream` first, unless fp32_state is False: the executor
        then keeps bf16 or 8-bit ones of its own). The model closes it before freeing that memory."""
        self._on(stream)
        if fp32_state:
            check(modelslib.dataflow_llama_alloc_optimizer_state(self._m, stream))
        blocks = ffi.new("Dataflow_Block_Memory[]", len(self.layout.bytes))
        for b in range(len(self.layout.bytes)):
            check(modelslib.dataflow_llama_block(self._m, b, blocks + b))
        executor = make_executor((blocks, self._m))
        self._adopters.add(executor)
        return executor

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def save_level(self):
        return self._save_level

    @save_level.setter
    def save_level(self, value):
        if not isinstance(value, str) or value not in SAVE_LEVELS:
            raise BadArgumentError(f"save_level must be one of {', '.join(SAVE_LEVELS)}, got {value!r}")
        self._save_level = value  # the all-resident plan's (a host-held model's ring plan chooses its own)

    @property
    def recompute(self):
        """True when no layer activations are kept (save_level "input")."""
        return self._save_level == "input"

    @recompute.setter
    def recompute(self, value):
        self.save_level = "input" if value else "all"

    @property
    def master_weights(self):
        """Whether fp32 master weights are kept (see the class docstring)."""
        return self._info(0, MASTER)[2] != 0 if self._m is not None else self._master

    def enable_master_weights(self, stream=0):
        """Allocates fp32 master weights (bf16 models), exact copies of the current weights."""
        if self._m is None:
            if not isinstance(self._store, HostBlocks):
                raise UnsupportedError("enable_master_weights: the model trains in a ring whose plan fixed its "
                                       "master weights; ask for them before the Trainer (Trainer(master_weights=True))")
            if self.dtype != "bf16":
                raise BadArgumentError(f"enable_master_weights: master weights are for bf16 models, this one is "
                                       f"{self.dtype}")
            if not self._master:
                self._store.add_master()
                self._master = True
            return
        self._on(stream)
        check(modelslib.dataflow_llama_enable_master_weights(self._m, stream))
        self.handle.sync(stream)

    def _on(self, stream):
        """Orders work about to be submitted on `stream` after the model's earlier work on
        another stream (an event, no host wait): calls that return without waiting (Trainer.apply)
        may still be running there, on the same weights and buffers."""
        last, self._stream = self._stream, stream
        if last is not None and last != stream:
            self.handle.wait(stream, self.handle.record(last))

    # ---- tensors ----
    def _info(self, index, kind):
        t = ffi.new("Dataflow_Llama_Tensor *")
        check(modelslib.dataflow_llama_tensor(self._m, index, kind, t))
        shape = tuple(t.shape[d] for d in range(t.ndim))
        return ffi.string(t.name).decode(), shape, int(ffi.cast("uintptr_t", t.ptr)), dtypes.name_of(t.dtype)

    def _arrays(self, kind):
        self._host_held("device arrays of the tensors")
        out = {}
        for i in range(len(self.names)):
            name, shape, ptr, dtype = self._info(i, kind)
            if not ptr:
                return None
            out[name] = Array(self.handle, ptr, shape, dtype, owner=self)
        return out

    def shapes(self):
        """name -> Hugging Face shape."""
        return dict(self._shapes)

    def _kind_dtype(self, kind):
        return self.dtype if kind == PARAM else "fp32"

    def _read_kind(self, kind):
        """name -> float32 numpy values of a kind (None where the model has none), wherever it lives."""
        if self._m is not None:
            arrays = self._arrays(kind)
            return None if arrays is None else {n: a.numpy() for n, a in arrays.items()}
        if (kind == MASTER and not self._master) or (isinstance(self._store, HostBlocks) and
                                                     kind not in self._store.kinds):
            return None
        out, block, raw, size = {}, None, None, self.layout.itemsize[kind]
        for name, shape, b, offset in self.layout.tensors:  # grouped by block: each read once
            if b != block:
                block, raw = b, self._store.read(b, kind)
            bits = raw[offset * size:(offset + int(np.prod(shape))) * size]
            dtype = self._kind_dtype(kind)
            out[name] = dtypes.decode(bits.view(dtypes.STORAGE[dtype]), dtype).reshape(shape).copy()
        return out

    def _write_kind(self, kind, get):
        """Writes every tensor of a kind from get(name) (values, rounded to the kind's dtype),
        wherever it lives; a host-held model's blocks are written whole, one at a time."""
        if self._m is not None:
            self._on(0)  # copy_from_numpy writes on stream 0
            for name, arr in self._arrays(kind).items():
                arr.copy_from_numpy(np.ascontiguousarray(get(name), dtype=np.float32))
            return
        size, dtype = self.layout.itemsize[kind], self._kind_dtype(kind)
        block, buf = None, None
        for name, shape, b, offset in self.layout.tensors + [(None, (), -1, 0)]:
            if b != block:
                if buf is not None:
                    self._store.write(block, kind, buf)
                if name is None:
                    break
                block, buf = b, np.zeros(self.layout.bytes[b][kind], np.uint8)
            bits = dtypes.encode(np.ascontiguousarray(get(name), dtype=np.float32), dtype).view(np.uint8).reshape(-1)
            buf[offset * size:offset * size + bits.size] = bits
        self._weights_changed()

    def named_parameters(self):
        """name -> device Array (Hugging Face names and shapes, the model dtype); views of the
        model's blocks, valid while the model lives."""
        return self._arrays(PARAM)

    def named_gradients(self):
        """name -> device Array of the fp32 gradient."""
        return self._arrays(GRAD)

    def named_master_weights(self):
        """name -> device Array of the fp32 master weights, or None without them."""
        return self._arrays(MASTER)

    def gradients(self):
        """name -> numpy float32 gradient (None for a host-held model before it trains)."""
        return self._read_kind(GRAD)

    def state_dict(self):
        """name -> numpy float32 values (bf16 weights decoded exactly). Tied models have no
        lm_head.weight, as Hugging Face's safetensors files."""
        return self._read_kind(PARAM)

    def load_state_dict(self, state):
        """Copies name -> array (numpy, anything np.asarray takes, or torch tensors) into the
        weights, rounding to the model dtype (and, with master weights, unrounded into them).
        Strict: every tensor must be present with its Hugging Face shape and a floating dtype;
        unknown names raise. A tied model accepts a redundant lm_head.weight equal to
        model.embed_tokens.weight."""
        state = dict(state)
        params = self.shapes()
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
        for name, shape in params.items():
            v = _as_numpy(state[name], name, integer=name in self._integer)
            if v.shape != shape:
                raise BadArgumentError(f"load_state_dict: {name}: expected shape {shape}, got {v.shape}")
            values[name] = v
        self._write_kind(PARAM, values.__getitem__)
        if self.master_weights:
            self._write_kind(MASTER, values.__getitem__)

    # ---- batches ----
    def _pack(self, tokens, labels=None, documents=None, need_labels=True):
        return PackedBatch(tokens, labels, documents, self.config.vocab_size, need_labels)

    def _upload(self, packed, stream):
        """The packed batch on the device (one inbound transfer), as a Dataflow_Llama_Batch;
        ordered after the model's earlier work."""
        self._on(stream)
        return self._batches.upload(packed, stream)

    def _read_token_losses(self, stream):
        """Submits the read-back of the last loss's token losses into a fresh host float32
        array, valid once `stream` has synced (the handle keeps it referenced until then)."""
        out = ffi.new("Dataflow_Llama_Outputs *")
        check(modelslib.dataflow_llama_outputs(self._m, out))
        host = np.empty(out.num_tokens, np.float32)
        device = Array(self.handle, int(ffi.cast("uintptr_t", out.token_losses)), host.shape, "fp32", owner=self)
        self.handle.outbound_transfer(host, device, stream=stream)
        return host

    @staticmethod
    def _batch_loss(token_losses, loss_scale):
        return float(modelslib.dataflow_batch_loss(ffi.cast("float *", ffi.from_buffer(token_losses)),
                                                   token_losses.size, loss_scale))

    # ---- compute ----
    def forward(self, tokens, documents=None, stream=0):
        """Logits as numpy float32 [B, T, V] for tokens [B, T] (B documents) or [T] (B = 1)."""
        if self._m is None:
            return self._cpu_copy().forward(tokens, documents, stream)
        packed = self._pack(tokens, documents=documents, need_labels=False)
        n, vocab = packed.num_tokens, self.config.vocab_size
        if self._logits is None or self._logits.size < n * vocab:
            self._logits = self.handle.empty((n, vocab), self.dtype)
        out = self._logits.view((n, vocab))
        check(modelslib.dataflow_llama_forward(self._m, stream, self._upload(packed, stream), out.cdata))
        logits = fetch(out, stream)
        return logits.reshape(packed.shape + (vocab,)) if packed.shape else logits

    def loss(self, tokens, labels=None, documents=None, stream=0):
        """Mean cross-entropy over the labelled next-token targets (HF-style labels; default:
        the tokens), as LlamaForCausalLM(tokens, labels=labels).loss. Gradients untouched."""
        if self._m is None:
            return self._cpu_copy().loss(tokens, labels, documents, stream)
        packed = self._pack(tokens, labels, documents)
        if packed.num_labels == 0:
            raise BadArgumentError("loss: no labelled tokens (every target is -100)")
        check(modelslib.dataflow_llama_loss(self._m, stream, self._upload(packed, stream)))
        losses = self._read_token_losses(stream)
        self.handle.sync(stream)
        return self._batch_loss(losses, 1.0 / packed.num_labels)

    def loss_backward(self, tokens, labels=None, documents=None, accumulate=False, loss_scale=None, stream=0):
        """Forward + loss + backward into the gradients (added to them with accumulate), with no
        optimizer step: run by the training engine, an executor of the all-resident plan over the
        model's own blocks (dataflow.training.ring_training.resident_training; like a Trainer's first step
        it allocates AdamW's m and v, zeroed). loss_scale default 1 / labelled tokens (mean
        loss). Returns (loss_scale * summed loss, number of labelled tokens)."""
        self._host_held("loss_backward")
        if self.config.quantization:
            raise BadArgumentError(f"loss_backward: the model's linear weights are quantized "
                                   f"(int{self.config.quantization['bits']}), for inference only")
        packed = self._pack(tokens, labels, documents)
        if loss_scale is None:
            if packed.num_labels == 0:
                raise BadArgumentError("loss_backward: no labelled tokens (every target is -100)")
            loss_scale = 1.0 / packed.num_labels
        from ..training.ring_training import resident_training
        self._backward = resident_training(self, (tokens, labels, documents), stream, self._backward)
        self._on(stream)
        chunks = self._backward.chunks(tokens, labels, documents, "loss_backward")
        losses = self._backward.run(chunks, accumulate, loss_scale)
        return self._batch_loss(losses, loss_scale) + self._backward.aux_loss, packed.num_labels

    def zero_grads(self, stream=0):
        self._host_held("zero_grads")
        self._on(stream)
        for block in range(len(self.layout.bytes)):
            self.handle.set_mem(self._block_array(block, GRAD), 0, stream)

    # ---- inference with a KV cache ----
    def kv_cache(self, max_tokens):
        """A KVCache for one sequence of up to max_tokens tokens (of the CPU copy of a host-held
        model, see _cpu_copy: valid until its weights change)."""
        if self._m is None:
            return self._cpu_copy().kv_cache(max_tokens)
        return KVCache(self, max_tokens)

    def paged_kv_cache(self, num_pages, page_size=16, max_seqs=16, max_seq_tokens=None, max_batch_tokens=256):
        """A PagedKVCache for batched decoding (of the CPU copy of a host-held model, see kv_cache)."""
        if self._m is None:
            return self._cpu_copy().paged_kv_cache(num_pages, page_size, max_seqs, max_seq_tokens, max_batch_tokens)
        return PagedKVCache(self, num_pages, page_size, max_seqs, max_seq_tokens, max_batch_tokens)

    def generate(self, prompt_tokens, max_new_tokens, temperature=1.0, top_p=1.0, seed=None, use_cache=True,
                 eos_token_id=None, stream=0):
        """New token ids (int64 numpy, stopping after eos_token_id when given) continuing the
        1-D prompt_tokens: greedy when temperature == 0, else temperature + top-p sampling
        (dataflow.models.generate.sample_next) from numpy's default_rng(seed). use_cache: prefill the
        prompt in one cached forward, then one token per step over the KV cache; False:
        recompute the whole context with forward() at every step (same tokens). A host-held
        model generates on its CPU copy (see _cpu_copy)."""
        if self._m is None:
            return self._cpu_copy().generate(prompt_tokens, max_new_tokens, temperature, top_p, seed, use_cache,
                                             eos_token_id, stream)
        from .generate import check_sampling, sample_next
        max_new_tokens, rng = check_sampling(temperature, top_p, max_new_tokens, seed)
        prompt = check_tokens(prompt_tokens, self.config.vocab_size, "generate: prompt_tokens")
        new = []
        if max_new_tokens == 0:
            return np.zeros(0, np.int64)
        if use_cache:
            need = prompt.size + max_new_tokens - 1  # the last token is sampled, never fed back
            cache = self._gen_cache
            if cache is None or cache.closed or cache.capacity < need:
                if cache is not None:
                    cache.close()
                cache = self._gen_cache = self.kv_cache(need)
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
