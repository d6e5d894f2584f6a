"""Importing llama.cpp's GGUF files: a llama-architecture .gguf as a Llama, read with the `gguf`
package (llama.cpp's own reader; `pip install dataflow[gguf]`).

What maps where:
  metadata  llama.* keys -> the Hugging Face config (context length, sizes, head counts, rope
            freq base and linear scaling, rms eps); the vocabulary from token_embd's rows;
            Llama 3.1's rope scaling from the rope_freqs tensor (llama3_rope_scaling).
  tensors   token_embd / output_norm / output / blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,
            ffn_up,ffn_down,attn_norm,ffn_norm} -> HF names. llama.cpp's converter permutes the rows
            of attn_q / attn_k (LlamaModel.permute: each head's rotary halves interleaved, for its
            rope layout); the permutation is undone here, on whole rows, so quantized blocks move
            intact.
  types     the layers' Linear weights decide the model's quantization, all the same type:
            Q4_0 -> int4, groups of 32, symmetric zero 8: EXACTLY ggml's blocks (scale d, code q,
                    value (q - 8) * d), the nibbles repacked (ggml: low nibbles are a block's
                    elements 0..15, high 16..31; ours: two per byte along k, k even low);
            Q8_0 -> int8 per output channel, requantized from the dequantized blocks (one scale
                    per row instead of per 32: round-to-nearest once more, error ~ max|w| / 254);
            F32 / F16 / BF16 -> full precision.
            The embedding, norms and output take any type gguf.quants dequantizes (to fp32).
            Other layer types (Q4_1, K-quants, ...) are refused naming the tensor and type.
The tokenizer GGUF embeds (tokenizer.ggml.*) is not converted: generate needs a tokenizer.json
beside the file or --tokenizer; bos/eos ids come from the file's metadata."""

import numpy as np

from ..errors import BadArgumentError, FileFormatError
from ..quantize import is_quantized_linear, pack_int4, quantization_config, quantize_int8

ARCHITECTURE = "llama"
ROPE_FREQS = "rope_freqs.weight"  # Llama 3.1's rope scaling as llama.cpp stores it (llama3_rope_scaling)
Q4_0_BLOCK = 32  # elements per ggml Q4_0 / Q8_0 block

# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N.")
LAYER_TENSORS = {
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight", "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
GLOBAL_TENSORS = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}


def _gguf():
    try:
        import gguf
    except ImportError:
        raise BadArgumentError("reading .gguf files needs the `gguf` package: pip install 'dataflow[gguf]'") from None
    return gguf


def read(path):
    """A GGUFReader of `path`; whatever the reader raises on a malformed file (bad magic, version,
    truncated tensor data) becomes a FileFormatError naming the file."""
    gguf = _gguf()
    try:
        return gguf.GGUFReader(path)
    except OSError as e:
        raise BadArgumentError(f"{path}: cannot read: {e.strerror or e}") from None
    except Exception as e:  # the reader validates nothing itself; any failure means a bad file
        raise FileFormatError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None


def _field(reader, key, path, kind, required=True):
    """The value of metadata `key` (int / float / str), checked to be of `kind`."""
    field = reader.get_field(key)
    if field is None:
        if required:
            raise FileFormatError(f"{path}: metadata {key} is missing")
        return None
    try:
        value = field.contents()
    except Exception as e:
        raise FileFormatError(f"{path}: metadata {key} is unreadable ({e})") from None
    if kind is int and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise FileFormatError(f"{path}: metadata {key} must be an integer, got {value!r:.60}")
    if kind is float and not isinstance(value, (int, float, np.number)):
        raise FileFormatError(f"{path}: metadata {key} must be a number, got {value!r:.60}")
    if kind is str and not isinstance(value, str):
        raise FileFormatError(f"{path}: metadata {key} must be a string, got {value!r:.60}")
    return kind(value)


def hf_config(reader, path):
    """The HF config dict (unvalidated) of a llama-architecture GGUF; bos/eos ids when present."""
    arch = _field(reader, "general.architecture", path, str)
    if arch != ARCHITECTURE:
        raise FileFormatError(f"{path}: general.architecture {arch!r:.60} is not supported; supported: "
                              f"{ARCHITECTURE}")
    embd = {t.name: t for t in reader.tensors}.get("token_embd.weight")
    if embd is None:
        raise FileFormatError(f"{path}: tensor token_embd.weight is missing")
    heads = _field(reader, "llama.attention.head_count", path, int)
    config = {
        "model_type": "llama",
        "vocab_size": int(embd.shape[-1]),  # ggml's dims are reversed: [hidden, vocab]
        "hidden_size": _field(reader, "llama.embedding_length", path, int),
        "intermediate_size": _field(reader, "llama.feed_forward_length", path, int),
        "num_hidden_layers": _field(reader, "llama.block_count", path, int),
        "num_attention_heads": heads,
        "num_key_value_heads": _field(reader, "llama.attention.head_count_kv", path, int, False) or heads,
        "head_dim": _field(reader, "llama.attention.key_length", path, int, False),
        "max_position_embeddings": _field(reader, "llama.context_length", path, int),
        "rms_norm_eps": _field(reader, "llama.attention.layer_norm_rms_epsilon", path, float),
        "rope_theta": _field(reader, "llama.rope.freq_base", path, float, False) or 10000.0,
        "tie_word_embeddings": "output.weight" not in {t.name for t in reader.tensors},
    }
    scaling = _field(reader, "llama.rope.scaling.type", path, str, False)
    freqs = {t.name: t for t in reader.tensors}.get(ROPE_FREQS)
    if freqs is not None:
        config["rope_scaling"] = llama3_rope_scaling(freqs, config, path)
    elif scaling not in (None, "none"):
        if scaling != "linear":
            raise FileFormatError(f"{path}: llama.rope.scaling.type {scaling!r:.40} is not supported; supported: "
                                  f"none, linear")
        config["rope_scaling"] = {"rope_type": "linear",
                                  "factor": _field(reader, "llama.rope.scaling.factor", path, float)}
    for ours, key in (("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        value = _field(reader, key, path, int, False)
        if value is not None:
            config[ours] = value
    return config


def llama3_rope_scaling(tensor, config, path):
    """Llama 3.1's rope_scaling back from the rope_freqs tensor llama.cpp's converter writes in its
    place: the divisor r of each frequency (1 for short wavelengths, `factor` for long ones, between
    them 1 / ((1 - s) / factor + s) with s linear in 1 / wavelength). factor is the largest r; a
    line through the in-between s gives the two wavelength bounds, which fix the low/high freq
    factors up to the original context length's scale (taken as the low bound, as Meta's values
    are). The result is checked by computing the frequencies the model will use."""
    from ..ops import rope_inv_freq
    heads = config["num_attention_heads"]
    head_dim = config["head_dim"] or (config["hidden_size"] // heads if heads > 0 else 0)
    theta = config["rope_theta"]
    if tuple(reversed(tensor.shape.tolist())) != (head_dim // 2,) or head_dim <= 0 or theta <= 0:
        raise FileFormatError(f"{path}: tensor {ROPE_FREQS} has shape {tuple(reversed(tensor.shape.tolist()))}; "
                              f"head_dim {head_dim} needs ({head_dim // 2},)")
    r = _tensor_values(_gguf(), tensor, path).astype(np.float64)
    if not np.isfinite(r).all() or (r < 1).any():
        raise FileFormatError(f"{path}: tensor {ROPE_FREQS} must hold finite frequency divisors >= 1")
    factor = float(r.max())
    medium = (r > 1 + 1e-5) & (r < factor * (1 - 1e-5))
    if medium.sum() < 2:
        raise FileFormatError(f"{path}: tensor {ROPE_FREQS} has {medium.sum()} frequencies between the scaled and "
                              f"unscaled ones; at least 2 are needed to recover Llama 3's rope scaling")
    inv_wavelen = theta ** (-np.arange(0, head_dim, 2) / head_dim) / (2 * np.pi)
    s = (1 / r[medium] - 1 / factor) / (1 - 1 / factor)
    slope, intercept = np.polyfit(inv_wavelen[medium], s, 1)  # s = (1/wl - 1/low) / (1/high - 1/low)
    low = -slope / intercept if intercept < 0 and slope > 0 else 0.0
    high = 1 / (1 / low + 1 / slope) if low > 0 else 0.0
    old = int(round(low))
    scaling = {"rope_type": "llama3", "factor": factor, "original_max_position_embeddings": old,
               "low_freq_factor": old / low if low else 0.0, "high_freq_factor": old / high if high else 0.0}
    if old < 1 or not np.allclose(rope_inv_freq(head_dim, theta) / rope_inv_freq(head_dim, theta, scaling), r,
                                  rtol=1e-4):
        raise FileFormatError(f"{path}: tensor {ROPE_FREQS} does not follow Llama 3's rope scaling")
    return scaling


def _hf_name(name, layers, path):
    if name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < layers \
            and parts[2] in LAYER_TENSORS:
        return f"model.layers.{int(parts[1])}.{LAYER_TENSORS[parts[2]]}"
    raise FileFormatError(f"{path}: tensor {name!r:.80} is not a llama tensor this importer knows")


def _quantization(tensors, types, path):
    """The model's quantization_config (None: full precision) from its layer Linear weights' types."""
    linear = {types[name].name for name in tensors if is_quantized_linear(name, {"lm_head": False})}
    if linear == {"Q4_0"}:
        return quantization_config(4, Q4_0_BLOCK, False)
    if linear == {"Q8_0"}:
        return quantization_config(8)
    if linear <= {"F32", "F16", "BF16"}:
        return None
    for name in tensors:
        kind = types[name].name
        if is_quantized_linear(name, {"lm_head": False}) and kind not in ("Q4_0", "Q8_0", "F32", "F16", "BF16"):
            raise FileFormatError(f"{path}: tensor {name} has type {kind}, which is not supported for a layer's "
                                  f"weights; supported: Q4_0, Q8_0, F32, F16, BF16")
    raise FileFormatError(f"{path}: the layers' weights mix types {', '.join(sorted(linear))}; dataflow "
                          f"quantizes every layer alike, so all must be Q4_0, all Q8_0 or all floating")


def _unpermute(rows, heads):
    """The inverse of llama.cpp's LlamaModel.permute on the rows of `rows` [heads * head_dim, ...]
    (values or raw quantized blocks): each head's rows back from (pair, half) to (half, pair) order."""
    n = rows.shape[0]
    return rows.reshape(heads, n // heads // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def q4_0_as_int4(blocks, k):
    """Raw ggml Q4_0 rows uint8 [N, k / 32 * 18] -> (packed int4 codes uint8 [N, k / 2], fp32 scales
    [N, k / 32]) for qmatmul_int4 with group size 32 and zero 8: the same weights, bit for bit."""
    n = blocks.shape[0]
    blocks = np.ascontiguousarray(blocks).reshape(n, k // Q4_0_BLOCK, 2 + Q4_0_BLOCK // 2)
    scales = blocks[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float32)
    nibbles = blocks[:, :, 2:]
    codes = np.concatenate([nibbles & 15, nibbles >> 4], axis=2).reshape(n, k)
    return pack_int4(codes), scales


def _tensor_values(gguf, tensor, path):
    try:
        return gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
    except NotImplementedError:
        raise FileFormatError(f"{path}: tensor {tensor.name} has type {tensor.tensor_type.name}, which the gguf "
                              f"package cannot dequantize") from None
    except ValueError as e:  # data that does not fit its type's blocks
        raise FileFormatError(f"{path}: tensor {tensor.name} ({tensor.tensor_type.name}) is malformed: {e}") from None


def checked_model(path):
    """(validated HF config with its quantization_config, {HF name: ReaderTensor}) of a GGUF file:
    the metadata and every tensor's name, shape and type checked; no tensor data read yet."""
    from .pretrained import parameter_shapes, validate_config
    reader = read(path)
    config = validate_config(hf_config(reader, path), path)
    layers = config["num_hidden_layers"]
    tensors, types = {}, {}
    for t in reader.tensors:
        if t.name == ROPE_FREQS:  # in config's rope_scaling (hf_config)
            continue
        name = _hf_name(t.name, layers, path)
        tensors[name], types[name] = t, t.tensor_type
    expected = parameter_shapes(config)
    problems = [f"{name}: missing" for name in expected if name not in tensors]
    problems += [f"{name} ({t.name}): shape {tuple(reversed(t.shape.tolist()))}, the model needs {expected[name]}"
                 for name, t in tensors.items() if tuple(reversed(t.shape.tolist())) != tuple(expected[name])]
    if problems:
        raise FileFormatError(f"{path}: the tensors do not match the metadata ({len(problems)} problems):\n  "
                              + "\n  ".join(problems))
    qc = _quantization(tensors, types, path)
    if qc:
        config["quantization_config"] = qc
    return config, tensors


def state_dict(config, tensors, path):
    """The model's {HF name: numpy} (a quantized model's codes and scales as dataflow.quantize
    lays them out) from checked_model's tensors."""
    gguf = _gguf()
    qc = config.get("quantization_config")
    heads = {"self_attn.q_proj.weight": config["num_attention_heads"],
             "self_attn.k_proj.weight": config["num_key_value_heads"]}
    state = {}
    for name, t in tensors.items():
        suffix = name.split(".", 3)[-1] if name.startswith("model.layers.") else None
        if qc and is_quantized_linear(name, qc) and t.tensor_type == gguf.GGMLQuantizationType.Q4_0:
            raw = _unpermute(t.data, heads[suffix]) if suffix in heads else t.data
            state[name], state[name[:-len(".weight")] + ".scales"] = q4_0_as_int4(raw, int(t.shape[0]))
            continue
        values = _tensor_values(gguf, t, path)
        if suffix in heads:
            values = _unpermute(values, heads[suffix])
        if qc and is_quantized_linear(name, qc):
            try:
                state[name], state[name[:-len(".weight")] + ".scales"] = quantize_int8(values)
            except BadArgumentError as e:  # NaN or Inf in the blocks
                raise FileFormatError(f"{path}: tensor {t.name}: {e}") from None
        else:
            state[name] = values
    return state


def load(path, handle, dtype="fp32", placement="auto"):
    """A Llama on `handle` from a llama-architecture GGUF file (see the module docstring), checked
    (checked_model) before the model is allocated."""
    from .pretrained import check_memory, model_from_config
    config, tensors = checked_model(path)
    if placement == "device" or config.get("quantization_config"):
        check_memory(handle, config, dtype, path)
    model = model_from_config(config, handle, dtype, where=path, placement=placement)
    model.load_state_dict(state_dict(config, tensors, path))
    return model


def is_gguf(path):
    """Whether `path` is a file starting with GGUF's magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False

