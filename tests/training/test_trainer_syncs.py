"""Trainer.step waits for the device at most twice (it needs once: the loss and the gradient
norm are read together), the batch goes up in ONE inbound transfer, and the numbers it returns
are right: the host syncs are counted by the handle (dataflow_handle_host_syncs), the
transfers in the trainer's trace (start_trace waits for queued work before counting), and the loss and norm are compared with a
fresh computation of the same quantities."""
import numpy as np
import pytest

from dataflow.models import Llama, LlamaConfig
from dataflow.training import Trainer
from conftest import handle_fixture

CONFIG = dict(vocab_size=67, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, rms_norm_eps=1e-5, tie_word_embeddings=False)
MAX_SYNCS_PER_STEP = 2


h = handle_fixture("h", scope="function", streams=2, device_memory="256MiB")


def counted(h, fn, trainer=None):
    """(fn's result, host syncs during it, inbound transfers of batches during it: "batch in"
    spans of the trainer's trace, which records every transfer its executor submits)."""
    if trainer is not None:
        trainer.start_trace()
    before = h.host_syncs()
    result = fn()
    syncs = h.host_syncs() - before
    if trainer is None:
        return result, syncs, 0
    trainer.stop_trace()
    spans, _ = trainer.trace_events()
    return result, syncs, sum(s["what"] == "batch in" for s in spans)


def batches(n, shape=(2, 9)):
    rng = np.random.default_rng(5)
    return [rng.integers(0, CONFIG["vocab_size"], size=shape) for _ in range(n)]


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
@pytest.mark.parametrize("stream", [0, 1])
def test_step_syncs_once_and_uploads_once(h, grad_clip, stream):
    model = Llama(h, LlamaConfig.from_dict(CONFIG), seed=3)
    twin = Llama(h, LlamaConfig.from_dict(CONFIG), seed=3)  # the oracle: same weights, separate calls
    trainer = Trainer(model, lr=1e-2, weight_decay=0.1, grad_clip=grad_clip)
    for step, tokens in enumerate(batches(3)):
        want_loss = twin.loss(tokens)
        loss, syncs, transfers = counted(h, lambda: trainer.step(tokens, stream=stream), trainer)
        assert syncs <= MAX_SYNCS_PER_STEP and syncs == 1, f"step {step}: {syncs} host syncs"
        assert transfers == 1, f"step {step}: the batch went up in {transfers} transfers"
        assert loss == want_loss, f"step {step}"
        norm, syncs, _ = counted(h, lambda: trainer.last_grad_norm)
        assert syncs == 0, "the norm was read with the loss"
        grads = model.gradients()  # AdamW leaves the step's gradients in place
        want_norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
        np.testing.assert_allclose(norm, want_norm, rtol=1e-6)
        twin.load_state_dict(model.state_dict())
    assert trainer.step_count == 3


def test_accumulate_and_apply_syncs(h):
    model = Llama(h, LlamaConfig.from_dict(CONFIG), seed=4)
    trainer = Trainer(model, lr=1e-2, grad_clip=0.5)
    chunks = batches(2)
    for chunk in chunks:
        _, syncs, transfers = counted(h, lambda: trainer.accumulate(chunk), trainer)
        assert (syncs, transfers) == (1, 1)
    loss, syncs, _ = counted(h, trainer.apply)
    assert syncs == 0, "apply waits for nothing; the norm is read when asked for"
    norm, syncs, _ = counted(h, lambda: trainer.last_grad_norm)
    assert syncs == 1 and norm > 0
    assert counted(h, lambda: trainer.last_grad_norm)[1:] == (0, 0)
    # an accumulate-then-apply step costs at most 2 syncs per chunk-step, and its loss is the batch's
    twin = Llama(h, LlamaConfig.from_dict(CONFIG), seed=4)
    np.testing.assert_allclose(loss, twin.loss(np.concatenate(chunks)), rtol=1e-6)


def test_results_stay_on_the_device_until_read(h):
    """Two steps back to back on one stream without reading anything in between, then the
    norm: each step's own values (the read-back buffers are per step)."""
    model = Llama(h, LlamaConfig.from_dict(CONFIG), seed=6)
    trainer = Trainer(model, lr=1e-2)
    first, second = batches(2)
    trainer.step(first)
    norm_first = trainer.last_grad_norm
    trainer.accumulate(second)
    trainer.apply()
    norm_second = trainer.last_grad_norm
    want = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in model.gradients().values()))
    np.testing.assert_allclose(norm_second, want, rtol=1e-6)
    assert norm_first != norm_second


def test_work_on_another_stream_waits_for_apply(h):
    """apply() returns with the AdamW step queued on its stream; a step submitted right after on
    another stream is ordered after it (an event, no host wait): the same losses as a run on
    one stream."""
    chunks = batches(6)
    runs = []
    for apply_stream, step_stream in ((0, 0), (1, 0)):
        model = Llama(h, LlamaConfig.from_dict(CONFIG), seed=8)
        trainer = Trainer(model, lr=1e-2)
        losses = []
        for i in range(2):
            trainer.accumulate(chunks[3 * i], stream=apply_stream)
            trainer.accumulate(chunks[3 * i + 1], stream=apply_stream)
            trainer.apply(stream=apply_stream)
            losses.append(trainer.step(chunks[3 * i + 2], stream=step_stream))
        runs.append(losses)
    assert runs[0] == runs[1]
