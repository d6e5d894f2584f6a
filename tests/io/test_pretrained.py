"""HF model directories: config.json validation and strict weight loading (with a stand-in model),
and, once dataflow.models exists, round trips with transformers' LlamaForCausalLM."""
import json
import types

import numpy as np
import pytest

from dataflow import FileFormatError
from dataflow.io import pretrained
from dataflow.io import safetensors as st

TINY = {"model_type": "llama", "vocab_size": 67, "hidden_size": 48, "intermediate_size": 72,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 64, "tie_word_embeddings": False}


def test_config_defaults_and_implied_fields():
    out = pretrained.validate_config({k: v for k, v in TINY.items() if k not in ("num_key_value_heads",
                                                                               "rope_theta")})
    assert out["num_key_value_heads"] == 4 and out["head_dim"] == 12 and out["rope_theta"] == 10000.0
    hf5 = {**TINY, "rope_theta": None, "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}
    out = pretrained.validate_config(hf5)
    assert out["rope_theta"] == 5e5 and out["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    assert pretrained.validate_config({**TINY, "hidden_size": 50, "head_dim": 16})["head_dim"] == 16


BAD_CONFIGS = {
    "not llama": ({"model_type": "gpt2"}, r"model_type 'gpt2' is not supported; supported: llama, qwen2, qwen3"),
    "no model_type": ({"model_type": None}, r"model_type None is not supported; supported: llama, qwen2, qwen3"),
    "missing vocab_size": ({"vocab_size": None}, r"vocab_size is missing"),
    "zero layers": ({"num_hidden_layers": 0}, r"num_hidden_layers must be a positive integer \(at most 2\^31\), got 0"),
    "float hidden": ({"hidden_size": 48.0}, r"hidden_size must be a positive integer \(at most 2\^31\), got 48.0"),
    "indivisible hidden": ({"hidden_size": 50}, r"hidden_size \(50\) is not divisible by num_attention_heads \(4\)"),
    "gqa ratio": ({"num_key_value_heads": 3}, r"num_attention_heads \(4\) is not a multiple of num_key_value_heads"),
    "negative eps": ({"rms_norm_eps": -1}, r"rms_norm_eps must be a positive finite number, got -1"),
    "gelu": ({"hidden_act": "gelu"}, r"hidden_act='gelu' is not supported; expected 'silu'"),
    "mlp bias": ({"mlp_bias": True}, r"mlp_bias=True is not supported"),
    "bias not bool": ({"attention_bias": 1}, r"attention_bias must be true or false, got 1"),
    "tie not bool": ({"tie_word_embeddings": "yes"}, r"tie_word_embeddings must be true or false"),
    "huge size": ({"vocab_size": 2**70}, r"vocab_size must be a positive integer \(at most 2\^31\), got 1180591"),
    "string size": ({"num_hidden_layers": "2"}, r"num_hidden_layers must be a positive integer"),
    "odd head_dim": ({"head_dim": 13}, r"head_dim must be even and at most 256, got 13"),
    "nan eps": ({"rms_norm_eps": float("nan")}, r"rms_norm_eps must be a positive finite number, got nan"),
    "list theta": ({"rope_theta": [1]}, r"rope_theta must be a positive finite number, got \[1\]"),
    "rope type": ({"rope_scaling": {"rope_type": "dynamic", "factor": 2}},
                  r"rope_scaling.rope_type 'dynamic' is not supported \(dynamic NTK scaling changes"),
    "rope type kind": ({"rope_scaling": {"rope_type": ["yarn"], "factor": 2}}, r"rope_scaling.rope_type \['yarn'\]"),
    "yarn beta": ({"rope_scaling": {"rope_type": "yarn", "factor": 2, "beta_fast": -1}},
                  r"rope_scaling.beta_fast must be a positive finite number, got -1"),
    "rope factor": ({"rope_scaling": {"rope_type": "llama3", "factor": "8"}}, r"rope_scaling.factor must be a pos"),
    "rope freqs": ({"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4}},
                   r"rope_scaling: high_freq_factor \(4.0\) must exceed low_freq_factor \(4.0\)"),
    "rope not dict": ({"rope_scaling": "llama3"}, r"rope_scaling must be an object or null"),
    "rope_parameters list": ({"rope_parameters": [1]}, r"rope_parameters must be an object"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_names_file_and_field(tmp_path, case):
    change, message = BAD_CONFIGS[case]
    (tmp_path / "config.json").write_text(json.dumps({**TINY, **change}))
    with pytest.raises(FileFormatError, match=r"config\.json: " + message):
        pretrained.read_config(tmp_path)


def test_unreadable_config(tmp_path):
    with pytest.raises(FileFormatError, match=r"config\.json: cannot read"):
        pretrained.read_config(tmp_path)
    (tmp_path / "config.json").write_text("{oops")
    with pytest.raises(FileFormatError, match=r"config\.json: config\.json is not valid JSON"):
        pretrained.read_config(tmp_path)
    (tmp_path / "config.json").write_text("[" * 100000)
    with pytest.raises(FileFormatError, match=r"config\.json: config\.json is nested too deeply"):
        pretrained.read_config(tmp_path)
    (tmp_path / "config.json").write_bytes(b'{"model_type": "\xff"}')
    with pytest.raises(FileFormatError, match=r"config\.json: config\.json is not UTF-8"):
        pretrained.read_config(tmp_path)


class StandIn:
    """Just the parts of a Llama that load_weights touches."""

    def __init__(self, shapes, tied=False):
        self.config = types.SimpleNamespace(tie_word_embeddings=tied, quantization=None)
        self._shapes = shapes
        self.loaded = None

    def shapes(self):
        return dict(self._shapes)

    def _write_kind(self, kind, get):
        assert kind == 0  # the weights
        self.loaded = {name: np.asarray(get(name), np.float32) for name in self._shapes}


SHAPES = {"model.embed_tokens.weight": (5, 3), "model.norm.weight": (3,), "lm_head.weight": (5, 3)}


def test_load_weights_converts_dtypes_and_skips_buffers(tmp_path):
    rng = np.random.default_rng(0)
    values = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items()}
    st.write(tmp_path / "model.safetensors", {
        "model.embed_tokens.weight": st.Tensor(pretrained.dtypes.encode(values["model.embed_tokens.weight"], "bf16"),
                                               "bf16"),
        "model.norm.weight": values["model.norm.weight"].astype(np.float16),
        "lm_head.weight": values["lm_head.weight"],
        "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(2, np.float32),
    })
    model = pretrained.load_weights(StandIn(SHAPES), tmp_path)
    assert sorted(model.loaded) == sorted(SHAPES) and all(v.dtype == np.float32 for v in model.loaded.values())
    np.testing.assert_array_equal(model.loaded["lm_head.weight"], values["lm_head.weight"])
    np.testing.assert_allclose(model.loaded["model.embed_tokens.weight"], values["model.embed_tokens.weight"],
                               rtol=2**-8)
    np.testing.assert_allclose(model.loaded["model.norm.weight"], values["model.norm.weight"], rtol=2**-10)


def test_tied_embeddings_fill_or_drop_lm_head(tmp_path):
    emb = np.arange(15, dtype=np.float32).reshape(5, 3)
    st.write(tmp_path / "model.safetensors", {"model.embed_tokens.weight": emb, "model.norm.weight": np.ones(3)})
    model = pretrained.load_weights(StandIn(SHAPES, tied=True), tmp_path)
    np.testing.assert_array_equal(model.loaded["lm_head.weight"], emb)
    no_head = {k: v for k, v in SHAPES.items() if k != "lm_head.weight"}
    st.write(tmp_path / "model.safetensors", {"model.embed_tokens.weight": emb, "model.norm.weight": np.ones(3),
                                              "lm_head.weight": emb})
    assert sorted(pretrained.load_weights(StandIn(no_head, tied=True), tmp_path).loaded) == sorted(no_head)


def test_strict_load_reports_every_problem_with_its_file(tmp_path):
    st.write_sharded(tmp_path, {"model.embed_tokens.weight": np.zeros((5, 4), np.float32),
                                "model.extra": np.zeros(2, np.float32),
                                "lm_head.weight": np.zeros((5, 3), np.float32)}, max_shard_bytes=60)
    with pytest.raises(FileFormatError) as e:
        pretrained.load_weights(StandIn(SHAPES), tmp_path)
    message = str(e.value)
    assert "3 problems" in message
    assert "model.norm.weight: missing (not in model-00001-of-00003.safetensors, " in message
    assert "model.extra: unexpected (in model-00003-of-00003.safetensors)" in message
    assert ("model.embed_tokens.weight: shape (5, 4) in model-00002-of-00003.safetensors, the model needs (5, 3)"
            in message)


def test_integer_weights_are_refused(tmp_path):
    st.write(tmp_path / "model.safetensors", {name: np.zeros(shape, np.int32) for name, shape in SHAPES.items()})
    with pytest.raises(FileFormatError, match=r"model\.safetensors: tensor '.*' has datatype int32"):
        pretrained.load_weights(StandIn(SHAPES), tmp_path)


def test_transformers_loads_what_save_pretrained_writes(tmp_path):
    """The file format half of the round trip, before dataflow.models exists: a stand-in whose
    state_dict holds a transformers model's weights, saved by us, loaded by transformers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).eval()
    weights = {name: t.detach().numpy().copy() for name, t in hf.state_dict().items()}
    stand_in = types.SimpleNamespace(config=types.SimpleNamespace(tie_word_embeddings=False, quantization=None,
                                                                  to_dict=lambda: TINY),
                                     state_dict=lambda: weights)
    pretrained.save_pretrained(stand_in, tmp_path, dtype="bf16")
    tokens = np.random.default_rng(0).integers(0, TINY["vocab_size"], (2, 7))
    hf_bf16 = hf.to(torch.bfloat16).to(torch.float32)
    with torch.no_grad():
        want = hf_bf16(torch.from_numpy(tokens)).logits.numpy()
    np.testing.assert_allclose(_hf_logits(tmp_path, tokens), want, rtol=1e-5, atol=1e-5)


# ---- end to end with transformers (needs dataflow.models) ----

def _hf_logits(directory, tokens):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(torch.from_numpy(tokens)).logits.numpy()


@pytest.mark.parametrize("tied", [False, True])
def test_transformers_loads_save_pretrained(h, tmp_path, tied):
    models = pytest.importorskip("dataflow.models")
    config = models.LlamaConfig.from_dict({**TINY, "tie_word_embeddings": tied})
    model = models.Llama(h, config, dtype="fp32", seed=0)
    pretrained.save_pretrained(model, tmp_path)
    tokens = np.random.default_rng(0).integers(0, TINY["vocab_size"], (2, 11))
    np.testing.assert_allclose(model.forward(tokens), _hf_logits(tmp_path, tokens), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_from_pretrained_reads_transformers_output(h, tmp_path, shard):
    pytest.importorskip("dataflow.models")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).eval()
    hf.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    assert (tmp_path / st.INDEX_NAME).exists() == bool(shard)
    model = pretrained.from_pretrained(tmp_path, h, dtype="fp32")
    tokens = np.random.default_rng(1).integers(0, TINY["vocab_size"], (1, 9))
    with torch.no_grad():
        want = hf(torch.from_numpy(tokens)).logits.numpy()
    np.testing.assert_allclose(model.forward(tokens), want, rtol=1e-4, atol=1e-4)


def test_bf16_round_trip(h, tmp_path):
    models = pytest.importorskip("dataflow.models")
    model = models.Llama(h, models.LlamaConfig.from_dict(TINY), dtype="bf16", seed=0)
    pretrained.save_pretrained(model, tmp_path, dtype="bf16")
    f = st.SafetensorsFile(tmp_path / "model.safetensors")
    assert {f.dtype(name) for name in f.names} == {"bf16"}
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
    again = pretrained.from_pretrained(tmp_path, h, dtype="bf16")
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[name], value)


@pytest.mark.parametrize("change", [{}, {"tie_word_embeddings": True}, {"num_key_value_heads": 1, "head_dim": 16},
                                    {"num_hidden_layers": 3, "num_key_value_heads": 4}])
def test_parameter_shapes_are_the_models(h, change):
    models = pytest.importorskip("dataflow.models")
    config = pretrained.validate_config({**TINY, **change})
    model = models.Llama(h, models.LlamaConfig.from_dict(config))
    assert pretrained.parameter_shapes(config) == model.shapes()
    params, parts = pretrained.model_memory(config, "bf16", training=True)
    assert params == sum(np.prod(s) for s in model.shapes().values())
    assert parts == {"weights": 2 * params, "gradients": 4 * params, "optimizer": 8 * params}
    assert h.memory_in_use() >= parts["weights"] + parts["gradients"]  # what creation allocated, at least


def test_from_pretrained_checks_files_and_memory_before_allocating(tmp_path, monkeypatch):
    import dataflow as df
    pytest.importorskip("dataflow.models")
    small = df.Handle("host", streams=1, device_memory="1MiB")
    big = {**TINY, "vocab_size": 2**20, "hidden_size": 2**12, "num_attention_heads": 32, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps(big))
    shapes = pretrained.parameter_shapes(pretrained.validate_config(TINY))  # the wrong model's weights
    st.write(tmp_path / "model.safetensors", {n: np.zeros(s, np.float32) for n, s in shapes.items()})
    with pytest.raises(FileFormatError, match=r"the weights do not match the model"):
        pretrained.from_pretrained(tmp_path, small)
    right = pretrained.parameter_shapes(pretrained.validate_config({**big, "num_hidden_layers": 1}))
    big["num_hidden_layers"] = 1
    (tmp_path / "config.json").write_text(json.dumps(big))
    # headers only: the 4 GiB of weights are described, never written
    header = {n: {"dtype": "BF16", "shape": list(s), "data_offsets": [0, 0]} for n, s in right.items()}
    offset = 0
    for n, s in right.items():
        header[n]["data_offsets"] = [offset, offset + 2 * int(np.prod(s))]
        offset += 2 * int(np.prod(s))
    raw = json.dumps(header).encode()
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + offset)  # sparse
    with pytest.raises(df.OutOfMemoryError, match=r"config\.json: the model \(.* parameters, fp32\) needs .* MiB "
                                                  r"of device memory \(weights .*, gradients .*\) before activations, "
                                                  r"but the handle has 1\.0 MiB free"):
        pretrained.from_pretrained(tmp_path, small, placement="device")
    # placement "auto" would hold the weights in host memory: whatever this machine has, 1 GiB is too little
    monkeypatch.setattr("dataflow.models.llama.host_memory_available", lambda: 2**30)
    with pytest.raises(df.OutOfMemoryError, match=r"config\.json: Llama: the weights take [\d,]+ bytes; they fit "
                                                  r"neither the handle's free device memory \(1,048,576 of 1,048,576 "
                                                  r"bytes.*\) nor the host's available 1,073,741,824 bytes"):
        pretrained.from_pretrained(tmp_path, small)
    assert small.memory_in_use() == 0
    small.close()
