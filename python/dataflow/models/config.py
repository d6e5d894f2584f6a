"""LlamaConfig: a dense decoder of the Llama-3, Qwen2/2.5 or Qwen3 family in Hugging Face's
config.json terms, and its C form (Dataflow_Llama_Config)."""
import dataclasses

from .. import dtypes
from .._ffi import ffi
from ..errors import BadArgumentError, FileFormatError

# model_type -> (the transformers class that loads it, defaults its config class has that
# LlamaConfig's do not). What tells the families apart in the decoder: Qwen2 always has q/k/v
# biases; Qwen3 normalizes each head's q and k (q_norm, k_norm); attention_bias (Llama, Qwen3)
# puts biases on q, k, v and o.
FAMILIES = {
    "llama": ("LlamaForCausalLM", {}),
    "qwen2": ("Qwen2ForCausalLM", {"max_position_embeddings": 32768}),
    "qwen3": ("Qwen3ForCausalLM", {"max_position_embeddings": 32768, "head_dim": 128}),
}
_CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
                "max_position_embeddings", "tie_word_embeddings", "attention_bias")


@dataclasses.dataclass
class LlamaConfig:
    """The architecture, in Hugging Face LlamaConfig's field names and defaults; model_type
    "qwen2" or "qwen3" for those families (from_dict fills in their config classes' defaults)."""
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
    attention_bias: bool = False         # biases on q, k, v, o (Llama, Qwen3; Qwen2 has q, k, v biases always)
    model_type: str = "llama"
    extra: dict = dataclasses.field(default_factory=dict)  # other config.json keys, kept for to_dict

    def __post_init__(self):
        if not isinstance(self.model_type, str) or self.model_type not in FAMILIES:
            raise BadArgumentError(f"LlamaConfig: model_type {self.model_type!r} is not supported; supported: "
                                   f"{', '.join(FAMILIES)}")
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d):
        """From a Hugging Face config dict (config.json). Accepts rope_theta + rope_scaling
        (transformers 4) and rope_parameters (transformers 5)."""
        d = dict(d)
        family = d.pop("model_type", "llama")
        if not isinstance(family, str) or family not in FAMILIES:
            raise BadArgumentError(f"LlamaConfig: model_type {family!r} is not supported; supported: "
                                   f"{', '.join(FAMILIES)}")
        for k, v in FAMILIES[family][1].items():
            if d.get(k) is None:
                d[k] = v
        if family == "qwen2":
            d.pop("attention_bias", None)  # Qwen2's q/k/v biases are not a config choice
        if d.get("use_sliding_window") or "sliding_attention" in (d.get("layer_types") or ()):
            raise BadArgumentError(f"LlamaConfig: sliding-window attention ({family}) is not supported")
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
        if d.get("mlp_bias"):
            raise BadArgumentError("LlamaConfig: mlp_bias = true is not supported")
        if d.get("hidden_act", "silu") != "silu":
            raise BadArgumentError(f"LlamaConfig: hidden_act must be 'silu', got {d['hidden_act']!r}")
        known = {k: d.pop(k) for k in _CONFIG_KEYS if k in d}
        return cls(**known, model_type=family, extra=d)

    def to_dict(self):
        """A config.json dict that transformers' AutoModelForCausalLM loads as this family."""
        out = dict(self.extra)
        out.update({"architectures": [FAMILIES[self.model_type][0]], "model_type": self.model_type,
                    "hidden_act": "silu"})
        out.update({k: getattr(self, k) for k in _CONFIG_KEYS})
        if self.model_type == "qwen2":
            del out["attention_bias"]
        else:
            out["mlp_bias"] = False
        if self.model_type != "llama":
            out["use_sliding_window"] = False
        out["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling else None
        return out

    @property
    def quantization(self):
        """The checked quantization_config (dataflow.quantize) of a quantized model, else None."""
        return self.extra.get("quantization_config")

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
        c.qkv_bias = int(self.model_type == "qwen2" or bool(self.attention_bias))
        c.o_bias = int(self.model_type != "qwen2" and bool(self.attention_bias))
        c.qk_norm = int(self.model_type == "qwen3")
        if not isinstance(dtype, str) or dtype not in ("fp32", "bf16"):
            raise BadArgumentError(f"Llama: dtype must be 'fp32' or 'bf16', got {dtype!r}")
        c.dtype = dtypes.enum(dtype)
        q = self.quantization
        if q:
            c.quant_bits = q["bits"]
            c.quant_group_size = q.get("group_size") or 0
            c.quant_zero_point = int(bool(q.get("zero_point")))
            c.quant_lm_head = int(bool(q.get("lm_head")))
        return c


def checked_config(config, where):
    """A LlamaConfig from a LlamaConfig or an HF config dict, through the one validator a
    config.json gets (dataflow.pretrained.validate_config: types, ranges, the layer bound) before
    anything is sized from it; a dict may leave out model_type and the sizes (LlamaConfig's
    defaults). BadArgumentError naming `where` and the field."""
    from ..pretrained import REQUIRED, validate_config
    if isinstance(config, LlamaConfig):
        config = config.to_dict()
    elif not isinstance(config, dict):
        raise BadArgumentError(f"{where}: expected a LlamaConfig or an HF config dict, got {type(config).__name__}")
    defaults = LlamaConfig()
    filled = {"model_type": "llama", **{f: getattr(defaults, f) for f in REQUIRED if config.get(f) is None}, **config}
    try:
        return LlamaConfig.from_dict(validate_config(filled, where))
    except FileFormatError as e:
        raise BadArgumentError(str(e)) from None
