"""Hugging Face's Llama as the oracle of our models: small odd configs, the HF model built from
the same weights, its loss and gradients, and the comparisons the model tests share."""
import numpy as np
import pytest
from dataflow.models import Llama, LlamaConfig
from dataflow.training import Trainer, loss_backward
from tolerances import LLAMA_TOLERANCES, TRAINED_WEIGHTS_RTOL, assert_trained_weights_close


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


CONFIGS = {
    # GQA 4/2, explicit head_dim 16 (hidden / heads would be 12), odd sizes, untied
    "gqa_untied": dict(vocab_size=97, hidden_size=48, intermediate_size=100, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                       tie_word_embeddings=False),
    # MHA, tied embeddings, head_dim = hidden / heads
    "mha_tied": dict(vocab_size=61, hidden_size=40, intermediate_size=72, num_hidden_layers=2,
                     num_attention_heads=5, num_key_value_heads=5, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # MQA with Llama-3 rope scaling (original context 16, so the test's positions cross every band)
    "mqa_llama3_rope": dict(vocab_size=83, hidden_size=64, intermediate_size=88, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-5, rope_theta=500000.0,
                            max_position_embeddings=64, tie_word_embeddings=False,
                            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                              high_freq_factor=4.0, original_max_position_embeddings=16)),
}


TOL = LLAMA_TOLERANCES


def hf_model(config, state=None):
    """The transformers model of config's family (LlamaForCausalLM, Qwen2ForCausalLM, ...) in fp32
    (eager attention) with our weights (None: its own random init)."""
    hf_config = transformers.AutoConfig.for_model(**config.to_dict())
    hf_config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(hf_config).float()
    if state is None:
        return model
    result = model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    assert not result.unexpected_keys
    assert set(result.missing_keys) <= {"lm_head.weight"} and (config.tie_word_embeddings or not result.missing_keys)
    return model


def tokens_for(config, shape, seed=0):
    return np.random.default_rng(seed).integers(0, config.vocab_size, size=shape)


def hf_loss_and_grads(model, tokens, labels=None):
    model.zero_grad()
    t = torch.from_numpy(tokens)
    out = model(t, labels=torch.from_numpy(labels) if labels is not None else t)
    out.loss.backward()
    return out, {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


def rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def assert_bf16_close_to_hf_fp32(model, tokens, grad_rel=TOL["bf16"]["grad_rel"]):
    """A bf16 model against transformers in fp32 on its bf16-rounded weights: logits and loss
    within LLAMA_TOLERANCES["bf16"], the worst gradient's relative error under grad_rel; returns
    the fp32 reference's gradients."""
    tol = TOL["bf16"]
    ref = hf_model(model.config, model.state_dict())
    with torch.no_grad():
        want = ref(torch.from_numpy(tokens)).logits.numpy()
    assert rel(model.forward(tokens), want) < tol["logits_rel"]
    out, want_grads = hf_loss_and_grads(ref, tokens)
    loss, _ = loss_backward(model, tokens)
    assert abs(loss - out.loss.item()) / out.loss.item() < tol["loss_rel"]
    got = model.gradients()
    worst = max((rel(got[n], want_grads[n]), n) for n in want_grads)
    assert worst[0] < grad_rel, worst
    return want_grads


def assert_adamw_matches_torch(model, steps, ref=None, checkpoint_names=None):
    """`steps` Trainer steps (AdamW, weight decay, clipping) of `model` against torch.optim.AdamW on
    transformers' model from the same weights (`ref`, else one built from `model`'s): each step's
    loss, then the weights. checkpoint_names: HF's {name: tensor} as {checkpoint name: array}
    (default: the same names)."""
    config = model.config
    ref = hf_model(config, model.state_dict()) if ref is None else ref
    lr, betas, eps, wd, clip = 1e-2, (0.9, 0.95), 1e-8, 0.1, 0.5
    trainer = Trainer(model, lr=lr, weight_decay=wd, betas=betas, eps=eps, grad_clip=clip)
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    tol = TOL["adamw"]
    for step in range(steps):
        tokens = tokens_for(config, (2, 12), seed=10 + step)
        opt.zero_grad()
        t = torch.from_numpy(tokens)
        want = ref(t, labels=t).loss
        want.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        opt.step()
        got = trainer.step(tokens)
        np.testing.assert_allclose(got, want.item(), rtol=tol["loss_rtol"], err_msg=f"step {step}")
    assert trainer.step_count == steps
    trained = dict(ref.named_parameters())
    want = checkpoint_names(trained) if checkpoint_names else {n: p.detach().numpy() for n, p in trained.items()}
    assert_trained_weights_close(model.state_dict(), want, TRAINED_WEIGHTS_RTOL["fp32"], lr, trainer.step_count)



def sharp_model(handle, name, dtype="fp32", seed=0):
    """A model whose weights (std 0.25 instead of 0.02) give peaked next-token distributions,
    so greedy decoding has clear argmaxes rather than near-ties at rounding level."""
    config = LlamaConfig(**CONFIGS[name])
    model = Llama(handle, config, dtype=dtype)
    rng = np.random.default_rng(seed)
    state = {n: (np.ones(s, np.float32) if len(s) == 1 else rng.normal(0, 0.25, size=s).astype(np.float32))
             for n, s in model.shapes().items()}
    model.load_state_dict(state)
    return model, state


def prompt_for(model, n, seed=1):
    return np.random.default_rng(seed).integers(0, model.config.vocab_size, size=n)


def assert_fp32_matches_hf(model, ref, tokens, hf_grads=lambda grads: {n: g.numpy() for n, g in grads.items()}):
    """model against HF's ref (fp32) on tokens: the logits, then the loss with two targets ignored
    and every gradient (hf_grads: HF's {name: grad tensor} under our names), at TOL["fp32"]."""
    tol = TOL["fp32"]
    with torch.no_grad():
        want = ref(torch.from_numpy(tokens)).logits.numpy()
    np.testing.assert_allclose(model.forward(tokens), want, rtol=tol["logits_rtol"], atol=tol["logits_atol"])
    labels = tokens.copy()
    labels[0, 4] = labels[1, 9] = -100
    ref.zero_grad()
    out = ref(torch.from_numpy(tokens), labels=torch.from_numpy(labels))
    out.loss.backward()
    loss, _ = loss_backward(model, tokens, labels)
    np.testing.assert_allclose(loss, out.loss.item(), rtol=tol["loss_rtol"])
    got, want_grads = model.gradients(), hf_grads({n: p.grad for n, p in ref.named_parameters()})
    assert set(got) == set(want_grads)
    for n, g in want_grads.items():
        np.testing.assert_allclose(got[n], g, rtol=tol["grad_rtol"], atol=tol["grad_atol"] * np.abs(g).max(),
                                   err_msg=n)
