"""libdataflowmodels' Llama against Hugging Face transformers' LlamaForCausalLM (fp32 on CPU)
built from the same config and weights: logits, loss, every gradient, AdamW training, bf16,
packed sequences, gradient accumulation, activation recompute, bad input. Tolerances:
tests/helpers/tolerances.py LLAMA_TOLERANCES."""
import numpy as np
import pytest

import dataflow as df
from dataflow.models import Llama, LlamaConfig
from dataflow.training import Trainer, loss_backward
from tolerances import TRAINED_WEIGHTS_RTOL, assert_trained_weights_close
from conftest import handle_fixture
from hf_llama import (CONFIGS, TOL, assert_adamw_matches_torch, assert_bf16_close_to_hf_fp32, hf_loss_and_grads, hf_model,
                      tokens_for)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


handle = handle_fixture("handle", streams=2, device_memory="1GiB")


def assert_grads_close(got, want, rtol, atol_frac):
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol_frac * np.abs(want[name]).max(),
                                   err_msg=name)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fp32_logits_loss_grads_match_hf(handle, name):
    config = LlamaConfig.from_dict(CONFIGS[name])
    model = Llama(handle, config, seed=3)
    ref = hf_model(config, model.state_dict())
    tokens = tokens_for(config, (2, 13))
    tol = TOL["fp32"]

    logits = model.forward(tokens)
    with torch.no_grad():
        want = ref(torch.from_numpy(tokens)).logits.numpy()
    assert logits.shape == (2, 13, config.vocab_size)
    np.testing.assert_allclose(logits, want, rtol=tol["logits_rtol"], atol=tol["logits_atol"])

    labels = tokens.copy()
    labels[0, 4] = labels[1, 9] = -100
    out, want_grads = hf_loss_and_grads(ref, tokens, labels)
    np.testing.assert_allclose(model.loss(tokens, labels), out.loss.item(), rtol=tol["loss_rtol"])
    loss, _ = loss_backward(model, tokens, labels)
    np.testing.assert_allclose(loss, out.loss.item(), rtol=tol["loss_rtol"])
    assert_grads_close(model.gradients(), want_grads, tol["grad_rtol"], tol["grad_atol"])


def test_llama3_rope_scaling_is_applied(handle):
    config = LlamaConfig.from_dict(CONFIGS["mqa_llama3_rope"])
    unscaled = LlamaConfig.from_dict({**CONFIGS["mqa_llama3_rope"], "rope_scaling": None})
    tokens = tokens_for(config, (1, 24))
    a = Llama(handle, config, seed=1).forward(tokens)
    b = Llama(handle, unscaled, seed=1).forward(tokens)
    assert np.abs(a - b).max() > 1e-4


def test_bf16_matches_hf_fp32_from_rounded_weights(handle):
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    assert_bf16_close_to_hf_fp32(Llama(handle, config, dtype="bf16", seed=5), tokens_for(config, (2, 16), seed=1))


@pytest.mark.parametrize("name", ["gqa_untied", "mha_tied"])
def test_adamw_five_steps_match_torch(handle, name):
    assert_adamw_matches_torch(Llama(handle, LlamaConfig.from_dict(CONFIGS[name]), seed=7), 5)


def test_packed_documents_equal_separate(handle):
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    model = Llama(handle, config, seed=2)
    rng = np.random.default_rng(4)
    docs = [rng.integers(0, config.vocab_size, size=n) for n in (9, 14)]
    n_labels = sum(d.size - 1 for d in docs)
    tol = TOL["same_math"]

    packed, _ = loss_backward(model, np.concatenate(docs), documents=[9, 14])
    packed_grads = model.gradients()
    model.zero_grads()
    separate = sum(loss_backward(model, d, accumulate=True, loss_scale=1.0 / n_labels)[0] for d in docs)
    np.testing.assert_allclose(packed, separate, rtol=tol["rtol"])
    assert_grads_close(model.gradients(), packed_grads, tol["rtol"], tol["grad_atol"])
    # a list of 1-D arrays is the same packing
    as_list, _ = loss_backward(model, None, documents=docs)
    np.testing.assert_allclose(as_list, packed, rtol=tol["rtol"])

    # and both match HF on each document separately
    ref = hf_model(config, model.state_dict())
    want = sum(hf_loss_and_grads(ref, d[None])[0].loss.item() * (d.size - 1) for d in docs) / n_labels
    np.testing.assert_allclose(packed, want, rtol=TOL["fp32"]["loss_rtol"])
    # packed logits = each document's logits alone
    logits = model.forward(np.concatenate(docs), documents=[9, 14])[0]
    np.testing.assert_allclose(logits[9:], model.forward(docs[1])[0], rtol=tol["rtol"], atol=tol["atol"])


def test_gradient_accumulation_equals_one_batch(handle):
    config = LlamaConfig.from_dict(CONFIGS["mha_tied"])
    a, b = Llama(handle, config, seed=9), Llama(handle, config, seed=9)
    ta, tb = Trainer(a, lr=1e-2, weight_decay=0.1), Trainer(b, lr=1e-2, weight_decay=0.1)
    chunks = [tokens_for(config, (2, 10), seed=20), tokens_for(config, (3, 10), seed=21)]
    tol = TOL["same_math"]
    one = ta.step(np.concatenate(chunks))
    for c in chunks:
        tb.accumulate(c)
    acc = tb.apply()
    np.testing.assert_allclose(acc, one, rtol=tol["rtol"])
    # the gradients the step used (AdamW leaves them in place), then the weights
    assert_grads_close(b.gradients(), a.gradients(), tol["rtol"], tol["grad_atol"])
    assert_trained_weights_close(b.state_dict(), a.state_dict(), TRAINED_WEIGHTS_RTOL["fp32"], ta.lr)
    assert ta.step_count == tb.step_count == 1


def test_recompute_gives_identical_grads(handle):
    config = LlamaConfig.from_dict(CONFIGS["mqa_llama3_rope"])
    model = Llama(handle, config, seed=11)
    tokens = tokens_for(config, (2, 15), seed=3)
    loss, _ = loss_backward(model, tokens)
    saved = model.gradients()
    model.recompute = True
    loss_rc, _ = loss_backward(model, tokens)
    assert loss_rc == loss
    for n, g in model.gradients().items():
        np.testing.assert_array_equal(g, saved[n], err_msg=n)
    assert model.recompute


def test_blocks_are_contiguous_per_layer(handle):
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    model = Llama(handle, config)
    params = model.named_parameters()
    layer0 = [a for n, a in params.items() if n.startswith("model.layers.0.")]
    start = min(a.ptr for a in layer0)
    end = max(a.ptr + a.nbytes for a in layer0)
    others = [a for n, a in params.items() if not n.startswith("model.layers.0.")]
    assert all(a.ptr + a.nbytes <= start or a.ptr >= end for a in others)
    assert list(params)[:3] == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                "model.layers.0.self_attn.k_proj.weight"]
    assert params["model.layers.1.mlp.down_proj.weight"].shape == (48, 100)
    assert params["lm_head.weight"].shape == (97, 48)


def test_trainer_state_round_trip(handle):
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    a = Llama(handle, config, seed=1)
    ta = Trainer(a, lr=1e-2)
    assert ta.state_dict()["exp_avg"] == {}
    for s in range(2):
        ta.step(tokens_for(config, (2, 8), seed=s))
    weights, opt_state = a.state_dict(), ta.state_dict()
    b = Llama(handle, config, seed=99)
    b.load_state_dict(weights)
    tb = Trainer(b)
    tb.load_state_dict(opt_state)
    assert tb.step_count == 2 and tb.lr == 1e-2
    nxt = tokens_for(config, (2, 8), seed=5)
    assert ta.step(nxt) == tb.step(nxt)
    sa, sb = a.state_dict(), b.state_dict()
    for n in sa:
        np.testing.assert_array_equal(sa[n], sb[n], err_msg=n)


def test_config_round_trip_through_transformers():
    for d in CONFIGS.values():
        config = LlamaConfig.from_dict(d)
        hf = transformers.LlamaConfig(**config.to_dict())
        back = LlamaConfig.from_dict(hf.to_dict())
        for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings"):
            assert getattr(back, k) == getattr(config, k), k
        if config.rope_scaling:
            assert back.rope_scaling["factor"] == config.rope_scaling["factor"]


def test_bad_input(handle):
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    model = Llama(handle, config)
    with pytest.raises(df.BadArgumentError, match="outside the vocabulary"):
        model.forward(np.array([[1, 2, 97]]))
    with pytest.raises(df.BadArgumentError, match="outside the vocabulary"):
        Trainer(model).step(np.array([-1, 2, 3]))
    state = model.state_dict()
    bad = dict(state)
    bad["model.layers.1.mlp.up_proj.weight"] = np.zeros((100, 47), np.float32)
    with pytest.raises(df.BadArgumentError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*shape"):
        model.load_state_dict(bad)
    missing = dict(state)
    del missing["model.norm.weight"]
    with pytest.raises(df.BadArgumentError, match=r"missing.*model\.norm\.weight"):
        model.load_state_dict(missing)
    with pytest.raises(df.BadArgumentError, match="unexpected.*extra.weight"):
        model.load_state_dict({**state, "extra.weight": np.zeros(3, np.float32)})
    with pytest.raises(df.BadArgumentError, match="model.norm.weight: expected floating"):
        model.load_state_dict({**state, "model.norm.weight": np.ones(48, np.int64)})
    with pytest.raises(df.BadArgumentError, match="labels"):
        model.loss(np.array([1, 2, 3]), labels=np.array([1, 200, 3]))
    with pytest.raises(df.BadArgumentError, match="documents"):
        model.loss(np.arange(10), documents=[3, 4])
    with pytest.raises(df.BadArgumentError, match="num_key_value_heads"):
        Llama(handle, LlamaConfig.from_dict({**CONFIGS["gqa_untied"], "num_key_value_heads": 3}))
    np.testing.assert_array_equal(model.state_dict()["model.norm.weight"], state["model.norm.weight"])
