"""fp32 master weights for bf16 training (Llama/Trainer master_weights=True) against a torch
reference: torch.optim.AdamW + clip_grad_norm_ on fp32 master tensors fed the gradients our
model computed, the bf16 weights being the masters rounded (RNE); the losses against Hugging
Face in fp32 on those bf16 weights. Then: updates below half a bf16 step are kept by the
masters and lost without them; checkpoints save and restore the masters."""
import numpy as np
import pytest

import dataflow as df
from dataflow.io import checkpoint
from dataflow import dtypes
from dataflow.models import Llama, LlamaConfig
from dataflow.training import Trainer
from conftest import handle_fixture
from hf_llama import CONFIGS, hf_model, tokens_for
from tolerances import ADAMW_TOLERANCES, LLAMA_TOLERANCES

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def bf16(x):
    return dtypes.decode(dtypes.encode(np.asarray(x, np.float32), "bf16"), "bf16")


handle = handle_fixture("handle", streams=2, device_memory="1GiB")


@pytest.mark.parametrize("name", ["gqa_untied", "mha_tied"])
def test_master_weights_follow_torch_adamw(handle, name):
    config = LlamaConfig.from_dict(CONFIGS[name])
    model = Llama(handle, config, dtype="bf16", seed=7, master_weights=True)
    masters = {n: a.numpy() for n, a in model.named_master_weights().items()}
    for n, p in model.state_dict().items():  # the masters start unrounded; the weights are their rounding
        np.testing.assert_array_equal(p, bf16(masters[n]), err_msg=n)
    assert not all(np.array_equal(masters[n], p) for n, p in model.state_dict().items())

    lr, betas, eps, wd, clip = 1e-2, (0.9, 0.95), 1e-8, 0.1, 0.5
    trainer = Trainer(model, lr=lr, weight_decay=wd, betas=betas, eps=eps, grad_clip=clip)
    ref = {n: torch.tensor(v, requires_grad=True) for n, v in masters.items()}
    opt = torch.optim.AdamW(ref.values(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for step in range(4):
        tokens = tokens_for(config, (2, 12), seed=30 + step)
        hf = hf_model(config, {n: bf16(t.detach().numpy()) for n, t in ref.items()})
        t = torch.from_numpy(tokens)
        want_loss = hf(t, labels=t).loss.item()
        loss = trainer.step(tokens)
        assert abs(loss - want_loss) / want_loss < LLAMA_TOLERANCES["bf16"]["loss_rel"], f"step {step}"
        for n, g in model.gradients().items():  # the step's gradients, which AdamW leaves in place
            ref[n].grad = torch.from_numpy(g)
        torch.nn.utils.clip_grad_norm_(ref.values(), clip)
        opt.step()
        got_masters = {n: a.numpy() for n, a in model.named_master_weights().items()}
        weights = model.state_dict()
        for n, want in ref.items():
            want = want.detach().numpy()
            np.testing.assert_allclose(got_masters[n], want, **ADAMW_TOLERANCES["fp32"], err_msg=f"{n} step {step}")
            np.testing.assert_array_equal(weights[n], bf16(got_masters[n]), err_msg=f"{n} step {step}")


def test_small_updates_survive_only_with_master_weights(handle):
    """lr 1e-3 moves a weight of 1 (the norms) by about 1e-3 a step (Adam's normalized step, the
    same batch every time), under half the bf16 spacing (2^-8 below 1): without masters every
    step rounds back to 1, with them the steps add up."""
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    norm = "model.layers.0.input_layernorm.weight"
    moved = {}
    for master in (False, True):
        model = Llama(handle, config, dtype="bf16", seed=2, master_weights=master)
        trainer = Trainer(model, lr=1e-3, weight_decay=0.0, grad_clip=0.0)
        tokens = tokens_for(config, (2, 12), seed=50)
        for _ in range(10):
            trainer.step(tokens)
        moved[master] = model.state_dict()[norm]
        if master:
            drift = 1.0 - model.named_master_weights()[norm].numpy()
            # past half the spacing below 1 (2^-9), where rounding leaves 1
            assert np.mean(np.abs(drift) > 2.0**-9) > 0.5, "the masters accumulated the small steps"
    assert np.all(moved[False] == 1.0), "without masters, each sub-half-ulp update is rounded away"
    assert np.mean(moved[True] != 1.0) > 0.5, "with masters, the weights moved"


def test_master_weights_need_bf16(handle):
    config = LlamaConfig.from_dict(CONFIGS["gqa_untied"])
    with pytest.raises(df.BadArgumentError, match="master weights are for bf16 models"):
        Llama(handle, config, dtype="fp32", master_weights=True)
    model = Llama(handle, config, dtype="bf16")
    assert not model.master_weights and model.named_master_weights() is None
    Trainer(model, master_weights=True)
    assert model.master_weights
    with pytest.raises(df.BadArgumentError, match="already keeps master weights"):
        Trainer(model, master_weights=False)


def test_checkpoint_restores_master_weights(handle, tmp_path):
    config = LlamaConfig.from_dict(CONFIGS["mha_tied"])
    batches = [tokens_for(config, (2, 10), seed=70 + i) for i in range(5)]
    model = Llama(handle, config, dtype="bf16", seed=0)
    trainer = Trainer(model, lr=1e-2, master_weights=True)
    for b in batches[:3]:
        trainer.step(b)
    checkpoint.save_training(tmp_path / "ckpt", model, trainer)
    masters = {n: a.numpy() for n, a in model.named_master_weights().items()}
    expected = [trainer.step(b) for b in batches[3:]]

    ck = checkpoint.load(tmp_path / "ckpt")
    assert set(ck.optimizer_state["master"]) == set(masters)
    resumed = Llama(handle, LlamaConfig.from_dict(ck.config), dtype="bf16", seed=1, master_weights=True)
    resumed_trainer = Trainer(resumed, lr=1e-2)
    checkpoint.restore_training(ck, resumed, resumed_trainer)
    for n, a in resumed.named_master_weights().items():
        np.testing.assert_array_equal(a.numpy(), masters[n], err_msg=n)
    assert [resumed_trainer.step(b) for b in batches[3:]] == expected

    plain = Llama(handle, LlamaConfig.from_dict(ck.config), dtype="bf16")
    with pytest.raises(df.BadArgumentError, match="the model keeps none"):
        checkpoint.restore_training(ck, plain, Trainer(plain))
