"""The Qwen2/2.5, Qwen3 and Mistral families (q/k/v biases, per-head q/k RMSNorm, explicit
head_dim, tied or untied embeddings, a sliding window shorter than the sequence) against Hugging
Face transformers' Qwen2ForCausalLM / Qwen3ForCausalLM / MistralForCausalLM (fp32, eager
attention) built from the same config and weights, on every backend: logits, loss,
every gradient, AdamW with clipping, save levels; save_pretrained loaded by transformers and
dataflow.models.from_pretrained choosing the family by model_type. Tolerances:
tests/helpers/tolerances.py LLAMA_TOLERANCES."""
import dataclasses

import numpy as np
import pytest

import dataflow as df
from dataflow.models import Llama, LlamaConfig
from dataflow.training import loss_backward
from tolerances import LLAMA_TOLERANCES
from conftest import handle_fixture
from hf_llama import (assert_adamw_matches_torch, assert_bf16_close_to_hf_fp32, assert_fp32_matches_hf,
                      hf_loss_and_grads, hf_model, rel, tokens_for)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIGS = {
    # GQA 6/2, head_dim 10 (hidden / heads would be 7), untied: q/k/v biases
    "qwen2_gqa": dict(model_type="qwen2", vocab_size=89, hidden_size=42, intermediate_size=70, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, head_dim=10, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, tie_word_embeddings=False),
    # GQA 4/1 (MQA), tied embeddings, head_dim = hidden / heads
    "qwen2_tied": dict(model_type="qwen2", vocab_size=53, hidden_size=40, intermediate_size=56, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # GQA 4/2, head_dim 24 > hidden / heads (9), untied: q_norm, k_norm
    "qwen3_gqa": dict(model_type="qwen3", vocab_size=97, hidden_size=36, intermediate_size=62, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, tie_word_embeddings=False),
    # attention_bias (q, k, v and o biases) with the per-head norms, GQA 6/3, tied
    "qwen3_bias_tied": dict(model_type="qwen3", vocab_size=71, hidden_size=30, intermediate_size=44,
                            num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3, head_dim=8,
                            rms_norm_eps=1e-5, attention_bias=True, tie_word_embeddings=True),
    # Mistral: a sliding window of 5 keys (shorter than every test's sequence), GQA 4/2, head_dim 12
    # (hidden / heads would be 10), untied
    "mistral_window": dict(model_type="mistral", vocab_size=83, hidden_size=40, intermediate_size=66,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                           rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=5, tie_word_embeddings=False),
    # Mistral v0.3's kind: sliding_window null (no window), MQA 6/1, tied; linear rope scaling
    "mistral_no_window": dict(model_type="mistral", vocab_size=61, hidden_size=36, intermediate_size=50,
                              num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=1, head_dim=8,
                              rms_norm_eps=1e-5, sliding_window=None, tie_word_embeddings=True,
                              rope_scaling={"rope_type": "linear", "factor": 2.5}),
    # yarn rope scaling with its attention factor (mscale on cos and sin: 1.139 at factor 4)
    "qwen3_yarn": dict(model_type="qwen3", vocab_size=79, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                       rope_theta=10000.0, max_position_embeddings=64, tie_word_embeddings=False,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
    # Qwen2 with use_sliding_window on every layer (max_window_layers 0): a window of 4
    "qwen2_window": dict(model_type="qwen2", vocab_size=67, hidden_size=24, intermediate_size=40,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                         use_sliding_window=True, sliding_window=4, max_window_layers=0,
                         tie_word_embeddings=False),
}
HF_CLASSES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}
TOL = LLAMA_TOLERANCES

handle = handle_fixture("handle", streams=2, device_memory="1GiB")


def random_model(handle, name, seed, sharp=False, **kwargs):
    """The model of CONFIGS[name] with every 1-D tensor (biases, norm weights) drawn too, so
    the biases and the per-head norms matter to the comparison. sharp: matrices of std 0.25
    (not 0.02), for peaked next-token distributions whose argmaxes are not near-ties."""
    config = LlamaConfig.from_dict(CONFIGS[name])
    model = Llama(handle, config, seed=seed, **kwargs)
    rng = np.random.default_rng(seed + 100)
    state = model.state_dict()
    for n, v in state.items():
        if v.ndim == 1:
            state[n] = (rng.normal(0.0, 0.1, v.shape) + (0.0 if n.endswith(".bias") else 1.0)).astype(np.float32)
        elif sharp:
            state[n] = v * np.float32(0.25 / 0.02)
    model.load_state_dict(state)
    return config, model


def test_layouts_carry_the_families_tensors(handle):
    """Names, shapes and order are Hugging Face's (named_parameters)."""
    for name in CONFIGS:
        config = LlamaConfig.from_dict(CONFIGS[name])
        ref = hf_model(config)
        assert type(ref).__name__ == HF_CLASSES[config.model_type]
        want = {n: tuple(p.shape) for n, p in ref.named_parameters()}
        model = Llama(handle, config)
        assert list(model.shapes()) == list(want), name
        assert model.shapes() == want, name


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fp32_logits_loss_grads_match_hf(handle, name):
    config, model = random_model(handle, name, seed=3)
    ref = hf_model(config, model.state_dict())
    assert_fp32_matches_hf(model, ref, tokens_for(config, (2, 13)))


@pytest.mark.parametrize("name", ["mistral_window", "qwen2_window"])
def test_the_window_matters(handle, name):
    """The windowed configs' sequences outrun their windows: transformers without the window
    gives other logits (by far more than the tolerance) than ours and its own with it."""
    config, model = random_model(handle, name, seed=3)
    tokens = tokens_for(config, (2, 13))
    unwindowed = dataclasses.replace(config, sliding_window=None)
    with torch.no_grad():
        full = hf_model(unwindowed, model.state_dict())(torch.from_numpy(tokens)).logits.numpy()
    assert np.abs(model.forward(tokens) - full).max() > 100 * TOL["fp32"]["logits_atol"]


@pytest.mark.parametrize("name", ["qwen2_gqa", "qwen3_bias_tied", "mistral_window"])
def test_adamw_three_steps_with_clipping_match_torch(handle, name):
    assert_adamw_matches_torch(random_model(handle, name, seed=7)[1], 3)


@pytest.mark.parametrize("name", ["qwen2_gqa", "qwen3_gqa", "qwen3_bias_tied"])
def test_bf16_matches_hf_fp32_from_rounded_weights(handle, name):
    """bf16 against transformers in fp32 on the bf16-rounded weights: logits and loss within
    LLAMA_TOLERANCES["bf16"]; the worst gradient within grad_rel, or within 1.5x the worst of
    transformers' own bf16 model with fused attention (SDPA) where that is larger. The biases
    make every key share a large component, so the scores' gradient is a difference of nearly
    equal terms, and an attention backward that takes rowsum(dO * O) from the bf16 output (as
    FlashAttention, torch's SDPA and ours do) loses more there than eager softmax's autograd:
    measured on qwen3_bias_tied: worst 0.145 for SDPA, 0.142 for us, 0.053 for eager (per tensor
    the two fused orders trade places, up to 1.7x either way, so the bound is on the worst)."""
    config, model = random_model(handle, name, seed=5, dtype="bf16")
    tokens = tokens_for(config, (2, 16), seed=1)
    fused = hf_model(config, model.state_dict()).to(torch.bfloat16)
    fused.config._attn_implementation = "sdpa"
    t = torch.from_numpy(tokens)
    fused(t, labels=t).loss.backward()
    want = hf_model(config, model.state_dict())
    want_grads = hf_loss_and_grads(want, tokens)[1]
    fused_worst = max(rel(p.grad.float().numpy(), want_grads[n]) for n, p in fused.named_parameters())
    assert_bf16_close_to_hf_fp32(model, tokens, max(TOL["bf16"]["grad_rel"], 1.5 * fused_worst))


@pytest.mark.parametrize("name", ["qwen2_gqa", "qwen3_bias_tied", "mistral_window", "qwen2_window"])
def test_kv_cached_greedy_generation_matches_hf(handle, name):
    """generate (KV cache: the per-head normed keys and the biased values cached; the window
    applied over the cache: 26 tokens past a window of 5 or 4) against
    transformers' greedy generate on the same fp32 weights, token for token, and against
    generation without the cache."""
    config, model = random_model(handle, name, seed=4, sharp=True)
    prompt = tokens_for(config, 6, seed=3)
    ours = model.generate(prompt, 20, temperature=0)
    np.testing.assert_array_equal(ours, model.generate(prompt, 20, temperature=0, use_cache=False))
    ref = hf_model(config, model.state_dict())
    ref.generation_config.pad_token_id = ref.generation_config.eos_token_id = None
    with torch.no_grad():
        out = ref.generate(torch.from_numpy(prompt[None]), attention_mask=torch.ones(1, prompt.size, dtype=torch.long),
                           do_sample=False, max_new_tokens=20, min_new_tokens=20, pad_token_id=0)
    np.testing.assert_array_equal(ours, out[0, prompt.size:].numpy())


@pytest.mark.parametrize("level", ["attention", "input"])
def test_save_levels_give_identical_grads(handle, level):
    """The per-head norms' inputs and the biases' ones column are rebuilt by the recompute."""
    config, model = random_model(handle, "qwen3_bias_tied", seed=11)
    tokens = tokens_for(config, (2, 15), seed=3)
    loss, _ = loss_backward(model, tokens)
    saved = model.gradients()
    model.save_level = level
    assert loss_backward(model, tokens)[0] == loss
    for n, g in model.gradients().items():
        np.testing.assert_array_equal(g, saved[n], err_msg=n)


@pytest.mark.parametrize("name", ["qwen2_gqa", "qwen3_bias_tied", "mistral_window", "mistral_no_window",
                                  "qwen2_window"])
def test_save_pretrained_loads_in_transformers(tmp_path, name):
    h = df.Handle("host", streams=2, device_memory="256MiB")
    try:
        config, model = random_model(h, name, seed=5)
        model.save_pretrained(tmp_path)
        ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").float()
        assert type(ref).__name__ == HF_CLASSES[config.model_type]
        tokens = tokens_for(config, (1, 11), seed=2)
        with torch.no_grad():
            want = ref(torch.from_numpy(tokens)).logits.numpy()
        tol = TOL["fp32"]
        np.testing.assert_allclose(model.forward(tokens), want, rtol=tol["logits_rtol"], atol=tol["logits_atol"])
        # and back: the family from config.json's model_type
        back = df.models.from_pretrained(tmp_path, handle=h)
        assert back.config.model_type == config.model_type
        np.testing.assert_array_equal(back.forward(tokens), model.forward(tokens))
    finally:
        h.close()


def test_transformers_directory_loads(tmp_path):
    """A directory transformers wrote (random init) loads with its logits."""
    config = LlamaConfig.from_dict(CONFIGS["qwen3_gqa"])
    torch.manual_seed(0)
    ref = hf_model(config)
    ref.save_pretrained(tmp_path)
    h = df.Handle("host", streams=2, device_memory="256MiB")
    try:
        model = df.models.from_pretrained(tmp_path, handle=h)
        tokens = tokens_for(config, (1, 9), seed=4)
        with torch.no_grad():
            want = ref(torch.from_numpy(tokens)).logits.numpy()
        tol = TOL["fp32"]
        np.testing.assert_allclose(model.forward(tokens), want, rtol=tol["logits_rtol"], atol=tol["logits_atol"])
    finally:
        h.close()


@pytest.mark.parametrize("change, match", [
    ({"model_type": "deepseek_v3"},
     r"model_type 'deepseek_v3' is not supported; supported: llama, qwen2, qwen3, mistral, mixtral, qwen3_moe"),
    ({"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},
     r"a sliding window on some layers only \(1 of 2: max_window_layers / layer_types\) is not supported"),
    ({"use_sliding_window": 1}, r"use_sliding_window must be true or false"),
    ({"model_type": "mistral", "sliding_window": 0}, r"sliding_window must be a positive integer"),
    ({"model_type": "mistral", "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]},
     r"sliding window on some layers only"),
    ({"model_type": "llama", "layer_types": ["sliding_attention"] * 2}, r"which llama models do not have"),
    ({"mlp_bias": True}, r"mlp_bias"),
])
def test_unsupported_configs_are_named(tmp_path, change, match):
    import json
    (tmp_path / "config.json").write_text(json.dumps({**CONFIGS["qwen3_gqa"], **change}))
    with pytest.raises(df.FileFormatError, match=match):
        df.models.from_pretrained(tmp_path)


# ---- the ring: the block layout carries the new tensors, so ring training needs nothing more ----

RING_CFG = {**CONFIGS["qwen3_bias_tied"], "num_hidden_layers": 6, "tie_word_embeddings": False,
            "max_position_embeddings": 1024}
RING_HOST, RING_PROFILE, RING_KW = "64MiB", "h100-sxm", {"lr": 1e-3, "weight_decay": 0.1}


def ring_and_resident(cfg, seq, rows):
    """A Trainer on a host handle capped at the smallest plan's need (so the ring, in chunks) and
    the all-resident Trainer, both from the same weights (biases and norms drawn)."""
    from dataflow.errors import OutOfMemoryError
    with pytest.raises(OutOfMemoryError) as e:
        df.ring.plan(cfg, seq, 1024, RING_HOST, tokens_per_step=seq * rows, dtype="fp32")
    resident = Llama(df.Handle("host"), cfg, seed=1, placement="device")
    rng = np.random.default_rng(2)
    state = {n: (v + rng.normal(0.0, 0.1, v.shape)).astype(np.float32) if v.ndim == 1 else v
             for n, v in resident.state_dict().items()}
    resident.load_state_dict(state)
    h = df.Handle("host", device_memory=e.value.min_device_bytes + 4096)
    model = Llama(h, cfg, seed=1)
    model.load_state_dict(state)
    ring = df.Trainer(model, **RING_KW, host_memory=RING_HOST, seq_len=seq, batch_size=rows, profile=RING_PROFILE)
    assert model.placement == "host" and ring.plan is not None
    return h, ring, df.Trainer(resident, **RING_KW)


@pytest.mark.parametrize("change, seq, rows, kv_context", [
    ({}, 16, 4, False),
    ({"vocab_size": 256, "num_hidden_layers": 3}, 512, 2, True),  # the smallest plan splits sequences
    # Mistral: a window shorter than the chunks (whole sequences), then over a K/V context of
    # 256-token chunks a window longer than a chunk (reaching into the one before) and shorter
    ({"model_type": "mistral", "sliding_window": 5}, 16, 4, False),
    ({"vocab_size": 256, "num_hidden_layers": 3, "model_type": "mistral", "sliding_window": 300}, 512, 2, True),
    ({"vocab_size": 256, "num_hidden_layers": 3, "model_type": "mistral", "sliding_window": 40}, 512, 2, True),
])
def test_ring_training_equals_all_resident(change, seq, rows, kv_context):
    """Chunks of a step (and, at the long sequence, documents split over a K/V context: the
    per-head norms' keys go into the context) against the all-resident Trainer on the whole
    batch: fp32, only the order of sums differs (losses and the norm within 1e-5, the weights as
    tolerances.assert_trained_weights_close)."""
    from tolerances import TRAINED_WEIGHTS_RTOL, assert_trained_weights_close
    cfg = {**RING_CFG, **change}
    h, ring, ref = ring_and_resident(cfg, seq, rows)
    assert ring.plan.chunk_tokens < seq * rows and bool(ring.plan.kv_context) == kv_context, ring.plan.describe()
    rng = np.random.default_rng(3)
    steps = [rng.integers(0, cfg["vocab_size"], (rows, seq)) for _ in range(3)]
    losses = [(ring.step(b), ref.step(b), ring.last_grad_norm, ref.last_grad_norm) for b in steps]
    ring_l, ref_l, ring_n, ref_n = map(np.array, zip(*losses))
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-5, atol=0)
    np.testing.assert_allclose(ring_n, ref_n, rtol=1e-5, atol=0)
    assert_trained_weights_close(ring.model.state_dict(), ref.model.state_dict(), TRAINED_WEIGHTS_RTOL["fp32"],
                                 RING_KW["lr"], len(steps))
    assert h.memory_peak() <= h.memory_capacity()


@pytest.mark.parametrize("preset", ["qwen2.5-7b", "qwen3-8b", "mistral-7b"])
def test_presets_are_the_published_models(preset):
    """The plan presets hold the published configs: transformers builds the same parameters (on
    the meta device), and the planner places them (24 GiB device, 128 GiB host, 4k sequences)."""
    from dataflow.io import pretrained
    config = df.models.presets.PRESETS[preset]
    with torch.device("meta"):
        ref = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
    assert type(ref).__name__ == HF_CLASSES[config["model_type"]]
    want = {n: tuple(p.shape) for n, p in ref.named_parameters()}
    assert pretrained.parameter_shapes(pretrained.validate_config(config)) == want
    assert LlamaConfig.from_dict(config).sliding_window == getattr(ref.config, "sliding_window", None)
    plan = df.ring.plan(preset, 4096, "24GiB", "128GiB", tokens_per_step=8 * 4096)
    assert plan.predicted_step_seconds > 0
