"""Hugging Face model directories: config.json + *.safetensors, read into and written from a Llama.

from_pretrained(path, handle, dtype) / save_pretrained(model, path) back Llama.from_pretrained and
model.save_pretrained. Directories written here load with transformers' LlamaForCausalLM and back.
"""
import json
import numbers
import os

import numpy as np

from . import atomic, dtypes
from . import safetensors_io as st
from .errors import BadArgumentError, FileFormatError

CONFIG_NAME = "config.json"
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# What transformers' LlamaConfig assumes for fields a config.json leaves out.
DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False,
            "max_position_embeddings": 2048}
# Architecture variants the Llama here does not implement: field -> the only accepted value.
UNSUPPORTED = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
HF_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Non-parameter buffers that older checkpoints carry and loading skips.
BUFFER_SUFFIXES = (".rotary_emb.inv_freq",)


def _positive_int(config, field, where):
    value = config[field]
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise FileFormatError(f"{where}: {field} must be a positive integer, got {value!r}")
    return int(value)


def config_argument(spec, presets, flag="--config"):
    """A command-line model: a preset name (returned as given) or the dict of a config.json."""
    if spec in presets:
        return spec
    try:
        with open(spec) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise BadArgumentError(f"{flag}: {spec!r} is neither a preset ({', '.join(presets)}) nor a readable "
                               f"JSON file: {e}") from None


def validate_config(config, where=CONFIG_NAME):
    """A checked copy of an HF Llama config dict with implied fields filled in (num_key_value_heads,
    head_dim, rope_theta/rope_scaling also from transformers 5's rope_parameters); errors name
    `where` and the field."""
    if not isinstance(config, dict):
        raise FileFormatError(f"{where}: expected a JSON object, got {type(config).__name__}")
    if config.get("model_type") != "llama":
        raise FileFormatError(f"{where}: model_type must be 'llama', got {config.get('model_type')!r}")
    out = dict(config)
    for field in REQUIRED:
        if out.get(field) is None:
            raise FileFormatError(f"{where}: {field} is missing")
        out[field] = _positive_int(out, field, where)
    for field, accepted in UNSUPPORTED.items():
        if out.get(field, accepted) != accepted:
            raise FileFormatError(f"{where}: {field}={out[field]!r} is not supported; expected {accepted!r}")
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
    _positive_int(out, "head_dim", where)
    rope = out.get("rope_parameters") or {}
    if out.get("rope_theta") is None and "rope_theta" in rope:
        out["rope_theta"] = rope["rope_theta"]
    if out.get("rope_scaling") is None and rope.get("rope_type", "default") != "default":
        out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    for field, default in DEFAULTS.items():
        if out.get(field) is None:
            out[field] = default
    _positive_int(out, "max_position_embeddings", where)
    for field in ("rms_norm_eps", "rope_theta"):
        if not isinstance(out[field], numbers.Real) or isinstance(out[field], bool) or not out[field] > 0:
            raise FileFormatError(f"{where}: {field} must be a positive number, got {out[field]!r}")
    if not isinstance(out["tie_word_embeddings"], bool):
        raise FileFormatError(f"{where}: tie_word_embeddings must be true or false, "
                              f"got {out['tie_word_embeddings']!r}")
    return out


def read_config(directory):
    """The validated config.json dict of a model directory."""
    path = os.path.join(directory, CONFIG_NAME)
    try:
        with open(path) as f:
            config = json.load(f)
    except OSError as e:
        raise FileFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise FileFormatError(f"{path}: not valid JSON: {e}") from None
    return validate_config(config, path)


def _is_buffer(name):
    return name.endswith(BUFFER_SUFFIXES)


def load_weights(model, directory):
    """Loads every parameter of `model` from the directory's safetensors, converting dtypes;
    strict: missing, unexpected and wrong-shape tensors are all reported, each with its file."""
    found = {name: v for name, v in st.read_directory(directory).items() if not _is_buffer(name)}
    expected = {name: tuple(p.shape) for name, p in model.named_parameters().items()}
    tied = model.config.tie_word_embeddings
    if tied and "lm_head.weight" in found and "lm_head.weight" not in expected:
        del found["lm_head.weight"]  # a copy of embed_tokens; transformers writes it for some tied models
    if tied and "lm_head.weight" in expected and "lm_head.weight" not in found:
        found["lm_head.weight"] = found.get("model.embed_tokens.weight")
    files = sorted({os.path.basename(path) for _, path in found.values()})
    problems = [f"{name}: missing (not in {', '.join(files) or 'any file'})"
                for name in expected if found.get(name) is None]
    problems += [f"{name}: unexpected (in {os.path.basename(found[name][1])})"
                 for name in found if name not in expected]
    problems += [f"{name}: shape {found[name][0].bits.shape} in {os.path.basename(found[name][1])}, "
                 f"the model needs {shape}"
                 for name, shape in expected.items() if found.get(name) and found[name][0].bits.shape != shape]
    if problems:
        raise FileFormatError(f"{directory}: the weights do not match the model ({len(problems)} problems):\n  "
                              + "\n  ".join(problems))
    for name, (tensor, path) in found.items():
        if tensor.dtype not in dtypes.CONVERTIBLE + ("fp64",):
            raise FileFormatError(f"{path}: tensor {name!r} has datatype {tensor.dtype}; weights must be floating")
    model.load_state_dict({name: found[name][0].values().astype(np.float32, copy=False) for name in expected})
    return model


def model_from_config(config, handle, dtype="fp32", seed=None, where=CONFIG_NAME):
    """A freshly initialised Llama for an HF config dict, validated first (errors name `where`)."""
    from . import models  # lazily: models imports this module to expose it as Llama.from_pretrained
    return models.Llama(handle, models.LlamaConfig.from_dict(validate_config(config, where)), dtype=dtype, seed=seed)


def from_pretrained(path, handle, dtype="fp32"):
    """A Llama on `handle` from an HF model directory (config.json + single or sharded safetensors)."""
    config = read_config(path)
    return load_weights(model_from_config(config, handle, dtype, where=os.path.join(path, CONFIG_NAME)), path)


def save_pretrained(model, path, dtype=None):
    """Writes config.json and model.safetensors (each atomically) into directory `path`, loadable by
    transformers' LlamaForCausalLM.from_pretrained. dtype: "fp32", "bf16" or "fp16" for the stored
    weights; None keeps the dtypes model.state_dict() returns."""
    if dtype is not None and dtype not in HF_DTYPE:
        raise BadArgumentError(f"save_pretrained: dtype must be one of {sorted(HF_DTYPE)} or None, got {dtype!r}")
    os.makedirs(path, exist_ok=True)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    tensors = {name: st.Tensor(dtypes.encode(v, dtype), dtype) if dtype else np.asarray(v)
               for name, v in state.items()}
    stored = dtype or dtypes.from_numpy(next(iter(state.values())).dtype)
    config = {**model.config.to_dict(), "model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "dtype": HF_DTYPE.get(stored, "float32")}
    write_model_files(path, config, tensors)
    stale_index = os.path.join(path, st.INDEX_NAME)
    if os.path.exists(stale_index):  # shards of an earlier save would shadow model.safetensors
        with open(stale_index) as f:
            for shard in set(json.load(f).get("weight_map", {}).values()):
                if os.path.exists(os.path.join(path, shard)):
                    os.remove(os.path.join(path, shard))
        os.remove(stale_index)


def write_model_files(directory, config, tensors):
    """config.json + model.safetensors ({"format": "pt"} metadata, which transformers expects)."""
    with atomic.replaced_file(os.path.join(directory, CONFIG_NAME)) as tmp:
        with open(tmp, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
    with atomic.replaced_file(os.path.join(directory, st.WEIGHTS_NAME)) as tmp:
        st.write(tmp, tensors, metadata={"format": "pt"})
