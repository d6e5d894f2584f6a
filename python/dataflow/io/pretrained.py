"""Hugging Face model directories: config.json + *.safetensors, read into and written from a Llama
(the decoder of the Llama-3, Qwen2/2.5, Qwen3 and Mistral families and the Mixtral and Qwen3-MoE
mixtures of experts, chosen by config.json's model_type).

from_pretrained(path, handle, dtype) / save_pretrained(model, path) back dataflow.models.from_pretrained,
Llama.from_pretrained and model.save_pretrained. Directories written here load with transformers'
AutoModelForCausalLM (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM,
MixtralForCausalLM, Qwen3MoeForCausalLM) and back.
"""
import json
import math
import numbers
import os

import numpy as np

from . import atomic
from .. import dtypes
from . import safetensors as st
from .._ffi import modelslib
from ..errors import BadArgumentError, FileFormatError, OutOfMemoryError
from .file_checks import member, read_json
from ..models.config import FAMILIES, MOE_FAMILIES, sliding_window
from ..ops import ROPE_TYPES
from ..quantize import table_dtype, validate_quantization_config

CONFIG_NAME = "config.json"
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# What transformers' LlamaConfig assumes for fields a config.json leaves out.
DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False,
            "max_position_embeddings": 2048}
# What a family's config class assumes beyond DEFAULTS (after rope_parameters is read).
FAMILY_DEFAULTS = {"mixtral": {"rope_theta": 1e6}}
# Architecture variants the decoder here does not implement: field -> the only accepted value.
UNSUPPORTED = {"hidden_act": "silu", "mlp_bias": False}
HF_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Non-parameter buffers that older checkpoints carry and loading skips.
BUFFER_SUFFIXES = (".rotary_emb.inv_freq",)


MAX_DIM = 2**31                 # what libdataflowmodels accepts for each size
MAX_HEAD_DIM = 256              # DATAFLOW_ATTENTION_MAX_HEAD_DIM
FLOAT32_MAX = float(np.finfo(np.float32).max)  # eps, theta and rope factors are C floats


def _positive_int(config, field, where):
    value = config[field]
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 0 < value <= MAX_DIM:
        raise FileFormatError(f"{where}: {field} must be a positive integer (at most 2^31), got {value!r:.60}")
    return int(value)


def _positive_number(value, field, where):
    """A positive number that a C float holds."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value <= FLOAT32_MAX
    if not ok:  # NaN fails the comparison too
        raise FileFormatError(f"{where}: {field} must be a positive finite number, got {value!r:.60}")
    return float(value)


def _rope_scaling(scaling, where):
    """None, or a checked rope_scaling dict of a type the model implements (linear, llama3, yarn)."""
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise FileFormatError(f"{where}: rope_scaling must be an object or null, got {scaling!r:.60}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        why = " (dynamic NTK scaling changes the frequencies with the sequence length)" if kind == "dynamic" else ""
        raise FileFormatError(f"{where}: rope_scaling.rope_type {kind!r:.60} is not supported{why}; expected one of "
                              f"{list(ROPE_TYPES)}")
    if kind == "default":
        return None
    out = dict(scaling)
    out["factor"] = _positive_number(scaling.get("factor"), "rope_scaling.factor", where)
    if kind == "llama3":
        low = _positive_number(scaling.get("low_freq_factor", 1.0), "rope_scaling.low_freq_factor", where)
        high = _positive_number(scaling.get("high_freq_factor", 4.0), "rope_scaling.high_freq_factor", where)
        if not high > low:
            raise FileFormatError(f"{where}: rope_scaling: high_freq_factor ({high}) must exceed low_freq_factor "
                                  f"({low})")
    if kind == "yarn":
        for field in ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim"):
            if scaling.get(field) is not None:
                _positive_number(scaling[field], f"rope_scaling.{field}", where)
        if not isinstance(scaling.get("truncate", True), bool):
            raise FileFormatError(f"{where}: rope_scaling.truncate must be true or false, "
                                  f"got {scaling['truncate']!r:.60}")
    if "original_max_position_embeddings" in scaling:
        _positive_int(scaling, "original_max_position_embeddings", where)
    return out


def _check_experts(out, where):
    """The MoE fields of a mixtral / qwen3_moe config (FileFormatError naming the field): counts,
    the experts' size, the aux-loss weight; every layer a mixture of experts (Qwen3-MoE's
    decoder_sparse_step / mlp_only_layers may make some dense: not supported), no router noise."""
    if out.get("num_experts") is not None and out.get("num_local_experts") is None:
        out["num_local_experts"] = out["num_experts"]  # Qwen's name; transformers 5 writes num_local_experts
    experts = _positive_int(out, "num_local_experts", where)
    if experts > modelslib.DATAFLOW_MOE_MAX_EXPERTS:
        raise FileFormatError(f"{where}: num_local_experts must be at most {modelslib.DATAFLOW_MOE_MAX_EXPERTS}, "
                              f"got {experts}")
    top_k = _positive_int(out, "num_experts_per_tok", where)
    if top_k > min(experts, modelslib.DATAFLOW_MOE_MAX_TOP_K):
        raise FileFormatError(f"{where}: num_experts_per_tok ({top_k}) must be at most num_local_experts "
                              f"({experts}) and {modelslib.DATAFLOW_MOE_MAX_TOP_K}")
    size = "intermediate_size" if out["model_type"] == "mixtral" else "moe_intermediate_size"
    if experts * _positive_int(out, size, where) * out["hidden_size"] > modelslib.DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS:
        raise FileFormatError(f"{where}: num_local_experts x {size} x hidden_size is more than the experts of a "
                              f"layer may hold ({modelslib.DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS:,} elements)")
    coef = out.get("router_aux_loss_coef", 0.001)
    if not isinstance(coef, numbers.Real) or isinstance(coef, bool) or not 0 <= coef <= FLOAT32_MAX:
        raise FileFormatError(f"{where}: router_aux_loss_coef must be a finite number >= 0, got {coef!r:.60}")
    for field in ("norm_topk_prob", "output_router_logits"):
        if not isinstance(out.get(field, False), bool):
            raise FileFormatError(f"{where}: {field} must be true or false, got {out[field]!r:.60}")
    if out.get("router_jitter_noise", 0) not in (0, 0.0):
        raise FileFormatError(f"{where}: router_jitter_noise={out['router_jitter_noise']!r:.60} is not supported "
                              "(training noise on the router's input); expected 0")
    step, dense = out.get("decoder_sparse_step", 1), out.get("mlp_only_layers") or []
    if not isinstance(step, int) or isinstance(step, bool) or step < 1 or not isinstance(dense, list):
        raise FileFormatError(f"{where}: decoder_sparse_step must be an integer >= 1 and mlp_only_layers a list, "
                              f"got {step!r:.40} and {dense!r:.60}")
    layers = out["num_hidden_layers"]
    dense_layers = [i for i in range(layers) if i in dense or (i + 1) % step]
    if dense_layers:
        raise FileFormatError(f"{where}: layers {dense_layers[:8]} would be dense (decoder_sparse_step {step}, "
                              f"mlp_only_layers {dense[:8]}); a model mixing dense and mixture-of-experts layers "
                              "is not supported: every layer must have experts")


def validate_config(config, where=CONFIG_NAME):
    """A checked copy of an HF Llama config dict with implied fields filled in (num_key_value_heads,
    head_dim, rope_theta/rope_scaling also from transformers 5's rope_parameters); errors name
    `where` and the field. Every value the model reads is type- and range-checked here, so a
    config that passes builds a model (memory permitting)."""
    if not isinstance(config, dict):
        raise FileFormatError(f"{where}: expected a JSON object, got {type(config).__name__}")
    family = config.get("model_type")
    if not isinstance(family, str) or family not in FAMILIES:
        raise FileFormatError(f"{where}: model_type {family!r:.60} is not supported; supported: {', '.join(FAMILIES)}")
    out = dict(config)
    for field, default in FAMILIES[family][1].items():
        if out.get(field) is None:
            out[field] = default
    for field in REQUIRED:
        if out.get(field) is None:
            raise FileFormatError(f"{where}: {field} is missing")
        out[field] = _positive_int(out, field, where)
    if out["num_hidden_layers"] > modelslib.DATAFLOW_LLAMA_MAX_LAYERS:  # before anything is sized from it
        raise FileFormatError(f"{where}: num_hidden_layers must be at most {modelslib.DATAFLOW_LLAMA_MAX_LAYERS}, "
                              f"got {out['num_hidden_layers']}")
    for field, accepted in UNSUPPORTED.items():
        if out.get(field, accepted) != accepted:
            raise FileFormatError(f"{where}: {field}={out[field]!r:.60} is not supported; expected {accepted!r}")
    try:
        sliding_window(out, family)
    except BadArgumentError as e:
        raise FileFormatError(f"{where}: {e}") from None
    if family in ("qwen2", "mistral", "mixtral"):
        out.pop("attention_bias", None)  # Qwen2's q/k/v biases are always there; Mistral, Mixtral have none
    elif not isinstance(out.get("attention_bias", False), bool):
        raise FileFormatError(f"{where}: attention_bias must be true or false, got {out['attention_bias']!r:.60}")
    heads = out["num_attention_heads"]
    if out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = heads
    kv_heads = _positive_int(out, "num_key_value_heads", where)
    if heads % kv_heads:
        raise FileFormatError(f"{where}: num_attention_heads ({heads}) is not a multiple of "
                              f"num_key_value_heads ({kv_heads})")
    if out.get("head_dim") is None:
        if out["hidden_size"] % heads:
            raise FileFormatError(f"{where}: hidden_size ({out['hidden_size']}) is not divisible by "
                                  f"num_attention_heads ({heads}) and no head_dim is given")
        out["head_dim"] = out["hidden_size"] // heads
    head_dim = _positive_int(out, "head_dim", where)
    if head_dim % 2 or head_dim > MAX_HEAD_DIM:
        raise FileFormatError(f"{where}: head_dim must be even and at most {MAX_HEAD_DIM}, got {head_dim}")
    hidden, most = out["hidden_size"], modelslib.DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS
    for what, rows in (("vocab_size", out["vocab_size"]), ("intermediate_size", out["intermediate_size"]),
                       ("num_attention_heads x head_dim", heads * head_dim)):
        if rows * hidden > most:  # before anything is sized from them (libdataflowmodels' bound)
            raise FileFormatError(f"{where}: {what} x hidden_size is {rows * hidden:,} elements, more than a weight "
                                  f"matrix may hold ({most:,})")
    rope = out.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise FileFormatError(f"{where}: rope_parameters must be an object, got {rope!r:.60}")
    if out.get("rope_theta") is None and "rope_theta" in rope:
        out["rope_theta"] = rope["rope_theta"]
    if out.get("rope_scaling") is None and rope.get("rope_type", "default") != "default":
        out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    for field, default in {**DEFAULTS, **FAMILY_DEFAULTS.get(family, {})}.items():
        if out.get(field) is None:
            out[field] = default
    if family in MOE_FAMILIES:
        _check_experts(out, where)
    _positive_int(out, "max_position_embeddings", where)
    for field in ("rms_norm_eps", "rope_theta"):
        _positive_number(out[field], field, where)
    out["rope_scaling"] = _rope_scaling(out["rope_scaling"], where)
    if not isinstance(out["tie_word_embeddings"], bool):
        raise FileFormatError(f"{where}: tie_word_embeddings must be true or false, "
                              f"got {out['tie_word_embeddings']!r:.60}")
    if out.get("quantization_config") is not None:
        out["quantization_config"] = validate_quantization_config(out["quantization_config"], where, FileFormatError)
    return out


def read_config(directory):
    """The validated config.json dict of a model directory."""
    path = os.path.join(directory, CONFIG_NAME)
    return validate_config(read_json(path, CONFIG_NAME), path)


def parameter_shapes(config):
    """{Hugging Face name: shape} of a validated config's parameters, as Llama.shapes() will have
    them (from libdataflowmodels' block layout); known before any allocation, so files and memory
    are checked first."""
    from ..models.config import LlamaConfig
    from ..models.host_blocks import Layout
    return {name: shape for name, shape, _, _ in Layout(LlamaConfig.from_dict(config), "fp32").tensors}


def model_memory(config, dtype, training=False, master_weights=False):
    """Device bytes a Llama of a validated config takes, by part: weights (model dtype) and fp32
    gradients are allocated when it is created; training adds the AdamW moments (2 x fp32) and
    the optional fp32 master weights.
    Activations and the logits come on top, sized by the batch."""
    params = sum(math.prod(shape) for shape in parameter_shapes(config).values())
    parts = {"weights": params * dtypes.itemsize(dtype), "gradients": params * 4}
    if config.get("quantization_config"):  # codes and scales in the block layout; inference only, no gradients
        from ..models.config import LlamaConfig
        from ..models.host_blocks import PARAM, Layout
        return params, {"weights": Layout(LlamaConfig.from_dict(config), dtype).total((PARAM,))}
    if training:
        parts["optimizer"] = params * 8
        if master_weights:
            parts["master weights"] = params * 4
    return params, parts


def check_memory(handle, config, dtype, where, training=False, master_weights=False, hint=""):
    """Raises OutOfMemoryError naming `where` when the model cannot fit in the handle's free memory;
    returns (parameter count, bytes by part)."""
    params, parts = model_memory(config, dtype, training, master_weights)
    free = handle.memory_capacity() - handle.memory_in_use()
    need = sum(parts.values())
    if need > free:
        detail = ", ".join(f"{k} {_mib(v)}" for k, v in parts.items())
        raise OutOfMemoryError(f"{where}: the model ({params:,} parameters, {dtype}) needs {_mib(need)} of device "
                               f"memory ({detail}) before activations, but the handle has {_mib(free)} free of "
                               f"{_mib(handle.memory_capacity())}{hint}")
    return params, parts


def _mib(nbytes):
    return f"{nbytes / 2**20:,.1f} MiB"


def _is_buffer(name):
    return name.endswith(BUFFER_SUFFIXES)


def check_weights(found, expected, tied, directory, quantization=None):
    """{name: (Tensor, path)} holding exactly the `expected` {name: shape} tensors, from read_directory's
    `found`; strict: missing, unexpected, wrong-shape and non-floating tensors (a quantized model's codes
    and zero points: not of their integer datatype) are all reported, each with its file. A tied model
    takes lm_head.weight from the embedding or drops a stored copy."""
    found = {name: v for name, v in found.items() if not _is_buffer(name)}
    if tied and "lm_head.weight" in found and "lm_head.weight" not in expected:
        del found["lm_head.weight"]  # a copy of embed_tokens; transformers writes it for some tied models
    if tied and "lm_head.weight" in expected and "lm_head.weight" not in found:
        found["lm_head.weight"] = found.get("model.embed_tokens.weight")
    files = sorted({os.path.basename(path) for _, path in filter(None, found.values())})
    problems = [f"{name}: missing (not in {', '.join(files) or 'any file'})"
                for name in expected if found.get(name) is None]
    problems += [f"{name}: unexpected (in {os.path.basename(found[name][1])})"
                 for name in found if name not in expected]
    problems += [f"{name}: shape {found[name][0].bits.shape} in {os.path.basename(found[name][1])}, "
                 f"the model needs {tuple(shape)}"
                 for name, shape in expected.items() if found.get(name) and found[name][0].bits.shape != tuple(shape)]
    if problems:
        raise FileFormatError(f"{directory}: the weights do not match the model ({len(problems)} problems):\n  "
                              + "\n  ".join(problems))
    for name in expected:
        tensor, path = found[name]
        want = table_dtype(name, quantization)
        if want and tensor.dtype != want:
            raise FileFormatError(f"{path}: tensor {name!r} has datatype {tensor.dtype}; the quantized model "
                                  f"({quantization['bits']}-bit codes) stores it as {want}")
        if not want and tensor.dtype not in dtypes.CONVERTIBLE + ("fp64",):
            raise FileFormatError(f"{path}: tensor {name!r} has datatype {tensor.dtype}; weights must be floating")
    return {name: found[name] for name in expected}


def copy_weights(model, weights):
    """Copies checked {name: (Tensor, path)} into the model's parameters one tensor at a time, so the
    host holds at most one decoded tensor (a host-held model: one block) beside the memory-mapped files."""
    model._write_kind(0, lambda name: weights[name][0].values())  # 0: the weights (Dataflow_Block_Kind)
    return model


def load_weights(model, directory):
    """Loads every parameter of `model` from the directory's safetensors, converting dtypes (check_weights)."""
    expected = model.shapes()
    weights = check_weights(st.read_directory(directory), expected, model.config.tie_word_embeddings, directory,
                            model.config.quantization)
    return copy_weights(model, weights)


def model_from_config(config, handle, dtype="fp32", seed=None, where=CONFIG_NAME, placement="auto"):
    """A freshly initialised Llama for an HF config dict, validated first (errors name `where`)."""
    from .. import models  # lazily: models imports this module to expose it as Llama.from_pretrained
    return models.Llama(handle, models.LlamaConfig.from_dict(validate_config(config, where)), dtype=dtype, seed=seed,
                        placement=placement)


def from_pretrained(path, handle, dtype="fp32", placement="auto"):
    """A Llama on `handle` from an HF model directory (config.json + single or sharded safetensors)
    or a llama.cpp .gguf file (dataflow.io.gguf),
    the family by config.json's model_type (FAMILIES; any other is an error naming it).
    The config, the files' headers against it, and the model's memory against the handle (placement
    "device") or the host (a model that does not fit the device: see Llama's placement) are all
    checked before anything is allocated."""
    path = os.fspath(path)
    if os.path.isfile(path):  # a llama.cpp GGUF file (anything else: a FileFormatError naming it)
        from . import gguf as gguf_import
        return gguf_import.load(path, handle, dtype, placement)
    config = read_config(path)
    weights = check_weights(st.read_directory(path), parameter_shapes(config), config["tie_word_embeddings"], path,
                            config.get("quantization_config"))
    where = os.path.join(path, CONFIG_NAME)
    if placement == "device":
        check_memory(handle, config, dtype, where)
    try:
        model = model_from_config(config, handle, dtype, where=where, placement=placement)
    except OutOfMemoryError as e:
        raise OutOfMemoryError(f"{where}: {e}") from None
    return copy_weights(model, weights)


def save_pretrained(model, path, dtype=None):
    """Writes config.json and model.safetensors (each atomically) into directory `path`, loadable by
    transformers' AutoModelForCausalLM.from_pretrained (the family's class). dtype: "fp32", "bf16" or "fp16" for the stored
    weights; None keeps the dtypes model.state_dict() returns."""
    if dtype is not None and dtype not in HF_DTYPE:
        raise BadArgumentError(f"save_pretrained: dtype must be one of {sorted(HF_DTYPE)} or None, got {dtype!r}")
    if dtype is not None and model.config.quantization:
        raise BadArgumentError(f"save_pretrained: dtype {dtype!r} would convert a quantized model's codes; pass None")
    os.makedirs(path, exist_ok=True)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    tensors = {name: st.Tensor(dtypes.encode(v, dtype), dtype) if dtype else np.asarray(v)
               for name, v in state.items()}
    stored = dtype or dtypes.from_numpy(next(iter(state.values())).dtype)
    config = {**model.config.to_dict(), "dtype": HF_DTYPE.get(stored, "float32")}
    write_model_files(path, config, tensors)
    stale_index = os.path.join(path, st.INDEX_NAME)
    if os.path.lexists(stale_index):  # shards of an earlier save would shadow model.safetensors
        index = read_json(stale_index, "safetensors index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        for shard in set((weight_map or {}).values()) if isinstance(weight_map, dict) else ():
            shard_path = member(path, shard, stale_index, "weight_map")  # never delete outside the directory
            if os.path.isfile(shard_path):
                os.remove(shard_path)
        os.remove(stale_index)


def write_model_files(directory, config, tensors):
    """config.json + model.safetensors ({"format": "pt"} metadata, which transformers expects)."""
    with atomic.replaced_file(os.path.join(directory, CONFIG_NAME)) as tmp:
        with open(tmp, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
    with atomic.replaced_file(os.path.join(directory, st.WEIGHTS_NAME)) as tmp:
        st.write(tmp, tensors, metadata={"format": "pt"})
