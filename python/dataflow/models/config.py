"""LlamaConfig: a decoder of the Llama-3, Qwen2/2.5, Qwen3 or Mistral family, or of the mixture-of-
experts families Mixtral and Qwen3-MoE, in Hugging Face's config.json terms, and its C form
(Dataflow_Llama_Config)."""
import dataclasses

from .. import dtypes
from .._ffi import ffi
from ..ops import ROPE_TYPES, rope_scaling as c_rope_scaling
from ..errors import BadArgumentError, FileFormatError

# model_type -> (the transformers class that loads it, defaults its config class has that
# LlamaConfig's do not). What tells the families apart in the decoder: Qwen2 always has q/k/v
# biases; Qwen3 normalizes each head's q and k (q_norm, k_norm); attention_bias (Llama, Qwen3)
# puts biases on q, k, v and o; Mistral attends over a sliding window (sliding_window below).
FAMILIES = {
    "llama": ("LlamaForCausalLM", {}),
    "qwen2": ("Qwen2ForCausalLM", {"max_position_embeddings": 32768}),
    "qwen3": ("Qwen3ForCausalLM", {"max_position_embeddings": 32768, "head_dim": 128}),
    "mistral": ("MistralForCausalLM", {"max_position_embeddings": 131072, "intermediate_size": 14336,
                                       "num_key_value_heads": 8}),
    "mixtral": ("MixtralForCausalLM", {"max_position_embeddings": 131072, "intermediate_size": 14336,
                                       "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "num_local_experts": 8,
                                       "num_experts_per_tok": 2}),
    "qwen3_moe": ("Qwen3MoeForCausalLM", {"max_position_embeddings": 32768, "num_key_value_heads": 4,
                                          "num_experts": 128, "num_experts_per_tok": 8,
                                          "moe_intermediate_size": 768}),
}
# The mixture-of-experts families: every layer's feed-forward is a router over experts (Mixtral's
# experts have intermediate_size and always renormalize the chosen probabilities; Qwen3-MoE's have
# moe_intermediate_size and renormalize with norm_topk_prob; its num_experts is transformers 5's
# num_local_experts, which wins when both are given).
MOE_FAMILIES = ("mixtral", "qwen3_moe")
MOE_DEFAULTS = {"router_aux_loss_coef": 0.001, "output_router_logits": False}
# MistralConfig's sliding_window when config.json has none (an explicit null is no window).
MISTRAL_DEFAULT_WINDOW = 4096
# Qwen2Config's and Qwen3Config's max_window_layers default.
QWEN_MAX_WINDOW_LAYERS = 28
_WINDOW_KEYS = ("sliding_window", "use_sliding_window", "max_window_layers", "layer_types")


def sliding_window(d, family):
    """The sliding window (None: none) every layer of an HF config dict uses, by transformers'
    rules: Mistral's sliding_window (4096 when absent, null for none) on every layer; Qwen2 and
    Qwen3 slide only with use_sliding_window, on the layers from max_window_layers on (or those
    layer_types names); Llama never. The decoder has one window for all layers: a config that
    slides on some layers only is refused. Raises BadArgumentError naming the field."""
    window = d.get("sliding_window", MISTRAL_DEFAULT_WINDOW) if family == "mistral" else d.get("sliding_window")
    if family == "qwen3_moe":  # Qwen3MoeConfig: every layer slides with use_sliding_window (4096 by default)
        use = d.get("use_sliding_window", False)
        if not isinstance(use, bool):
            raise BadArgumentError(f"use_sliding_window must be true or false, got {use!r:.60}")
        window = d.get("sliding_window", MISTRAL_DEFAULT_WINDOW) if use else None
    types = d.get("layer_types")
    if family in ("qwen2", "qwen3"):
        use = d.get("use_sliding_window", False)
        if not isinstance(use, bool):
            raise BadArgumentError(f"use_sliding_window must be true or false, got {use!r:.60}")
        if not use:
            return None
        first = d.get("max_window_layers", QWEN_MAX_WINDOW_LAYERS)
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise BadArgumentError(f"max_window_layers must be an integer >= 0, got {first!r:.60}")
    layers = d.get("num_hidden_layers")
    if types is not None and (not isinstance(types, list) or len(types) != layers or
                              not all(t in ("sliding_attention", "full_attention") for t in types)):
        raise BadArgumentError(f"layer_types must list 'sliding_attention' or 'full_attention' for each of the "
                               f"{layers} layers, got {types!r:.80}")
    if family in ("qwen2", "qwen3"):
        if types is None:
            if not isinstance(layers, int):
                raise BadArgumentError(f"use_sliding_window needs num_hidden_layers, got {layers!r:.60}")
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    elif family == "llama" or window is None:
        window = None
        if types is not None and "sliding_attention" in types:
            raise BadArgumentError(f"layer_types has sliding_attention layers, which {family} models do not have")
    if window is None:
        return None
    if not isinstance(window, int) or isinstance(window, bool) or not 0 < window < 2**31:
        raise BadArgumentError(f"sliding_window must be a positive integer (below 2^31) or null, got {window!r:.60}")
    if types is not None:
        if len(set(types)) > 1:
            raise BadArgumentError(f"a sliding window on some layers only ({types.count('sliding_attention')} of "
                                   f"{len(types)}: max_window_layers / layer_types) is not supported; every layer "
                                   f"must slide or none")
        if types[0] == "full_attention":
            return None
    return window


_CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
                "max_position_embeddings", "tie_word_embeddings", "attention_bias")
_MOE_KEYS = ("num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
             "router_aux_loss_coef", "output_router_logits")
# config.json keys of the MoE families that describe what every layer is (checked by
# dataflow.io.pretrained.validate_config: every layer must be a mixture of experts) or that only
# matter in training with noise (Mixtral's router_jitter_noise, refused there unless 0)
_MOE_LAYER_KEYS = ("decoder_sparse_step", "mlp_only_layers", "router_jitter_noise", "num_experts")


def moe_fields(d, family):
    """The MoE fields of a (validated) HF config dict of `family`, by its config class's names and
    defaults: Qwen3-MoE's num_experts is num_local_experts (transformers 5's name), Mixtral's
    experts have intermediate_size and always renormalize the top-k probabilities."""
    if family not in MOE_FAMILIES:
        return {}
    out = {**MOE_DEFAULTS, **{k: d[k] for k in _MOE_KEYS if d.get(k) is not None}}
    if d.get("num_experts") is not None and d.get("num_local_experts") is None:
        out["num_local_experts"] = d["num_experts"]
    if family == "mixtral":
        out["moe_intermediate_size"], out["norm_topk_prob"] = d["intermediate_size"], True
    out.setdefault("norm_topk_prob", False)
    return out


@dataclasses.dataclass
class LlamaConfig:
    """The architecture, in Hugging Face LlamaConfig's field names and defaults; model_type
    "qwen2", "qwen3" or "mistral" for those families (from_dict fills in their config classes'
    defaults and resolves their sliding-window fields into sliding_window)."""
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = None      # None: num_attention_heads
    head_dim: int = None                 # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict = None            # {"rope_type": "llama3" | "linear" | "yarn", "factor", ...} or None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False         # biases on q, k, v, o (Llama, Qwen3; Qwen2 has q, k, v biases always)
    sliding_window: int = None           # every layer's (Mistral: query i sees keys i - w < j <= i); None: none
    # mixture of experts (model_type mixtral, qwen3_moe): 0 experts is a dense model
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = None    # Mixtral: intermediate_size
    norm_topk_prob: bool = False         # renormalize the chosen experts' probabilities (Mixtral: always)
    router_aux_loss_coef: float = 0.001  # the load-balancing loss's weight in training ...
    output_router_logits: bool = False   # ... added to the loss only with this (HF's rule)
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
        if (self.model_type in MOE_FAMILIES) != bool(self.num_local_experts):
            raise BadArgumentError(f"LlamaConfig: model_type {self.model_type!r} with num_local_experts "
                                   f"{self.num_local_experts}: experts belong to {' and '.join(MOE_FAMILIES)} models "
                                   "and those need at least one")

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
        if family in ("qwen2", "mistral", "mixtral"):
            d.pop("attention_bias", None)  # Qwen2's q/k/v biases are not a config choice; Mistral has none
        try:
            window = sliding_window(d, family)
        except BadArgumentError as e:
            raise BadArgumentError(f"LlamaConfig: {e}") from None
        for k in _WINDOW_KEYS:
            d.pop(k, None)
        moe = moe_fields(d, family)
        for k in _MOE_KEYS + _MOE_LAYER_KEYS:
            d.pop(k, None)
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
            elif kind not in ROPE_TYPES:
                c_rope_scaling(scaling=scaling)  # names what is not supported
        d["rope_scaling"] = scaling
        if d.get("mlp_bias"):
            raise BadArgumentError("LlamaConfig: mlp_bias = true is not supported")
        if d.get("hidden_act", "silu") != "silu":
            raise BadArgumentError(f"LlamaConfig: hidden_act must be 'silu', got {d['hidden_act']!r}")
        known = {k: d.pop(k) for k in _CONFIG_KEYS if k in d}
        return cls(**known, **moe, sliding_window=window, model_type=family, extra=d)

    def to_dict(self):
        """A config.json dict that transformers' AutoModelForCausalLM loads as this family."""
        out = dict(self.extra)
        out.update({"architectures": [FAMILIES[self.model_type][0]], "model_type": self.model_type,
                    "hidden_act": "silu"})
        out.update({k: getattr(self, k) for k in _CONFIG_KEYS})
        if self.model_type in ("qwen2", "mistral", "mixtral"):
            del out["attention_bias"]
        if self.model_type not in ("qwen2", "mistral", "mixtral"):
            out["mlp_bias"] = False
        if self.model_type == "qwen3_moe":  # every layer a mixture of experts
            out.update({k: getattr(self, k) for k in _MOE_KEYS}, decoder_sparse_step=1, mlp_only_layers=[])
        elif self.model_type == "mixtral":  # its experts' size is intermediate_size; it always renormalizes
            out.update({k: getattr(self, k) for k in _MOE_KEYS[:2] + _MOE_KEYS[4:]}, router_jitter_noise=0.0)
        if self.model_type in ("mistral", "mixtral"):
            out["sliding_window"] = self.sliding_window
        elif self.model_type == "qwen3_moe":
            out.update(use_sliding_window=bool(self.sliding_window), sliding_window=self.sliding_window)
        elif self.model_type != "llama":  # every layer slides, or none
            out.update(use_sliding_window=bool(self.sliding_window), sliding_window=self.sliding_window,
                       max_window_layers=0)
        out["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling else None
        return out

    @property
    def router_loss_coef(self):
        """The load-balancing loss's weight in training: router_aux_loss_coef for a mixture of
        experts that outputs its router logits (HF adds the loss only then), else 0."""
        return self.router_aux_loss_coef if self.num_local_experts and self.output_router_logits else 0.0

    @property
    def quantization(self):
        """The checked quantization_config (dataflow.quantize) of a quantized model, else None."""
        return self.extra.get("quantization_config")

    def _c_config(self, dtype):
        c = ffi.new("Dataflow_Llama_Config *")
        c.vocab_size, c.hidden_size = self.vocab_size, self.hidden_size
        c.intermediate_size, c.num_layers = self.intermediate_size, self.num_hidden_layers
        c.num_heads, c.num_kv_heads, c.head_dim = self.num_attention_heads, self.num_key_value_heads, self.head_dim
        c.rms_eps = self.rms_norm_eps
        # HF (transformers 5's standardize_rope_params) takes a missing original_max_position_embeddings
        # from max_position_embeddings; llama3's frequency factors default as Meta's
        scaling = {"original_max_position_embeddings": self.max_position_embeddings, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, **(self.rope_scaling or {})}
        c_rope_scaling(self.rope_theta, scaling, out=c.rope)
        c.tie_embeddings = int(bool(self.tie_word_embeddings))
        c.qkv_bias = int(self.model_type == "qwen2" or bool(self.attention_bias))
        c.o_bias = int(self.model_type != "qwen2" and bool(self.attention_bias))
        c.qk_norm = int(self.model_type in ("qwen3", "qwen3_moe"))
        c.sliding_window = self.sliding_window or 0
        if self.num_local_experts:
            c.num_experts, c.num_experts_per_tok = self.num_local_experts, self.num_experts_per_tok
            c.moe_intermediate_size, c.norm_topk_prob = self.moe_intermediate_size, int(bool(self.norm_topk_prob))
            c.router_aux_loss_coef = self.router_loss_coef
            c.mixtral_names = int(self.model_type == "mixtral")
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
    config.json gets (dataflow.io.pretrained.validate_config: types, ranges, the layer bound) before
    anything is sized from it; a dict may leave out model_type and the sizes (LlamaConfig's
    defaults). BadArgumentError naming `where` and the field."""
    from ..io.pretrained import REQUIRED, validate_config
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
