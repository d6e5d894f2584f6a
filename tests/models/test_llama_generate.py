"""Llama.generate with the KV cache (libdataflowmodels' dataflow_llama_forward_cached over
attention_kv) against generation without it, the full forward's logits, and Hugging Face
LlamaForCausalLM.generate (greedy, fp32) on the same weights."""
import numpy as np
import pytest

import dataflow as df
from dataflow.models import Llama
from hf_llama import CONFIGS, hf_model
from tolerances import LLAMA_CACHED_TOLERANCES
from conftest import handle_fixture
from hf_llama import prompt_for, sharp_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


handle = handle_fixture("handle", streams=2, device_memory="1GiB")


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_cached_logits_equal_full_forward(handle, name, dtype):
    """Prefill in chunks (5, then 1, then 3 tokens): every cached row's logits equal the full
    forward's at the same positions; last-position-only output equals the last row."""
    model, _ = sharp_model(handle, name, dtype)
    tokens = prompt_for(model, 9)
    full = model.forward(tokens)[0]
    cache = model.kv_cache(16)
    rows = [cache.forward(tokens[:5], all_logits=True), cache.forward(tokens[5:6], all_logits=True)]
    last = cache.forward(tokens[6:])
    assert cache.length == 9 and cache.capacity == 16
    tol = LLAMA_CACHED_TOLERANCES[dtype]
    np.testing.assert_allclose(np.concatenate(rows), full[:6], **tol)
    np.testing.assert_allclose(last, full[-1], **tol)
    cache.reset()
    np.testing.assert_allclose(cache.forward(tokens), full[-1], **tol)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_with_cache_equals_without(handle, name):
    model, _ = sharp_model(handle, name)
    prompt = prompt_for(model, 7)
    with_cache = model.generate(prompt, 24, temperature=0)
    without = model.generate(prompt, 24, temperature=0, use_cache=False)
    assert with_cache.dtype == np.int64 and with_cache.shape == (24,)
    np.testing.assert_array_equal(with_cache, without)


def test_greedy_with_cache_equals_without_bf16(handle):
    model, _ = sharp_model(handle, "gqa_untied", "bf16")
    prompt = prompt_for(model, 5)
    np.testing.assert_array_equal(model.generate(prompt, 16, temperature=0),
                                  model.generate(prompt, 16, temperature=0, use_cache=False))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_matches_hugging_face(handle, name):
    """LlamaForCausalLM.generate(do_sample=False) on the same fp32 weights, token for token."""
    model, state = sharp_model(handle, name)
    prompt = prompt_for(model, 6, seed=3)
    ours = model.generate(prompt, 20, temperature=0)
    hf = hf_model(model.config, state)
    hf.generation_config.pad_token_id = hf.generation_config.eos_token_id = None
    with torch.no_grad():
        out = hf.generate(torch.from_numpy(prompt[None]), attention_mask=torch.ones(1, prompt.size, dtype=torch.long),
                          do_sample=False, max_new_tokens=20, min_new_tokens=20, pad_token_id=0)
    np.testing.assert_array_equal(ours, out[0, prompt.size:].numpy())


def test_seeded_sampling_is_reproducible_and_eos_stops(handle):
    model, _ = sharp_model(handle, "gqa_untied")
    prompt = prompt_for(model, 4)
    a = model.generate(prompt, 30, temperature=1.3, top_p=0.9, seed=7)
    np.testing.assert_array_equal(a, model.generate(prompt, 30, temperature=1.3, top_p=0.9, seed=7))
    np.testing.assert_array_equal(a, model.generate(prompt, 30, temperature=1.3, top_p=0.9, seed=7,
                                                    use_cache=False))
    assert not np.array_equal(a, model.generate(prompt, 30, temperature=1.3, top_p=0.9, seed=8))
    stop = int(a[3])
    first = int(np.flatnonzero(a == stop)[0])
    np.testing.assert_array_equal(model.generate(prompt, 30, temperature=1.3, top_p=0.9, seed=7,
                                                 eos_token_id=stop), a[:first + 1])
    assert model.generate(prompt, 0).shape == (0,)


def test_cache_overflow_is_a_clear_error(handle):
    model, _ = sharp_model(handle, "mha_tied")
    cache = model.kv_cache(8)
    cache.forward(prompt_for(model, 6))
    with pytest.raises(df.BadArgumentError, match="KV cache overflow: 6 cached \\+ 3 new tokens exceed its "
                                                  "capacity of 8"):
        cache.forward(prompt_for(model, 3))
    assert cache.length == 6
    cache.forward(prompt_for(model, 2))
    with pytest.raises(df.BadArgumentError, match="max_tokens"):
        model.kv_cache(0)


def test_cache_overflow_in_c_is_a_clear_error(handle):
    """The C check itself (Python's pre-check bypassed): nothing submitted, length unchanged."""
    from dataflow._ffi import ffi, modelslib
    from dataflow.errors import check
    model, _ = sharp_model(handle, "mha_tied")
    cache = model.kv_cache(4)
    tokens = handle.from_numpy(np.arange(5, dtype=np.int32))
    with pytest.raises(df.BadArgumentError, match="KV cache overflow: 0 cached \\+ 5 new tokens"):
        check(modelslib.dataflow_llama_forward_cached(model._m, 0, cache._c, ffi.cast("int32_t *", tokens.ptr), 5,
                                                      ffi.NULL, 0))
    assert cache.length == 0


def test_bad_prompt_tokens(handle):
    model, _ = sharp_model(handle, "mha_tied")
    vocab = model.config.vocab_size
    for bad, msg in (([1, vocab], "outside the vocabulary"), ([-1], "outside the vocabulary"),
                     ([], "non-empty 1-D"), ([[1, 2]], "non-empty 1-D"), ([1.5, 2.0], "integer token ids")):
        with pytest.raises(df.BadArgumentError, match=msg):
            model.generate(np.array(bad), 3)
    with pytest.raises(df.BadArgumentError, match="top_p"):
        model.generate([1, 2], 3, top_p=0)
    with pytest.raises(df.BadArgumentError, match="max_new_tokens"):
        model.generate([1, 2], -1)


def test_pretrained_round_trip_generates_the_same(handle, tmp_path):
    model, _ = sharp_model(handle, "gqa_untied")
    model.save_pretrained(str(tmp_path))
    loaded = Llama.from_pretrained(str(tmp_path), handle)
    prompt = prompt_for(model, 5)
    np.testing.assert_array_equal(loaded.generate(prompt, 10, temperature=0), model.generate(prompt, 10, temperature=0))
    own = Llama.from_pretrained(str(tmp_path))  # a new host handle
    np.testing.assert_array_equal(own.generate(prompt, 10, temperature=0), model.generate(prompt, 10, temperature=0))
