"""Batched generation over the paged KV cache (PagedKVCache, dataflow_llama_forward_paged) and
continuous batching (BatchEngine): the paged cache's logits equal the contiguous KVCache's bit
for bit; ragged batches of prompts, joining and leaving between steps with chunked prefill
mixed with decode, give each prompt's single-sequence greedy tokens and Hugging Face's
generate (fp32); pages come back when sequences finish and the pool's memory when the cache
closes; an exhausted pool is a clear error that changes nothing."""
import numpy as np
import pytest

import dataflow as df
from dataflow.models.batch_engine import BatchEngine, generate_batch
from dataflow.models.sampling import SamplingParams
from hf_llama import CONFIGS, hf_model
from hf_llama import prompt_for, sharp_model
from conftest import handle_fixture

torch = pytest.importorskip("torch")

handle = handle_fixture("handle", streams=2, device_memory="1GiB")

PROMPT_LENGTHS = (1, 7, 13, 3, 20)
# 3 sequences at a time for 5 prompts (later ones join as earlier ones leave), pages of 4
# tokens, prompts read 5 tokens a step alongside the others' decoding
ENGINE = dict(page_size=4, max_seqs=3, max_seq_tokens=40, max_batch_tokens=16, prefill_chunk=5)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_paged_cache_logits_equal_contiguous_cache(handle, name, dtype):
    model, _ = sharp_model(handle, name, dtype)
    a, b = prompt_for(model, 9), prompt_for(model, 5, seed=9)
    contiguous = model.kv_cache(32)
    want = [contiguous.forward(a), contiguous.forward(a[:2]), contiguous.forward(a[2:3])]
    paged = model.paged_kv_cache(num_pages=8, page_size=4, max_seqs=4, max_seq_tokens=32, max_batch_tokens=64)
    s0, s1 = paged.add_sequence(), paged.add_sequence()
    got = [paged.forward([(s1, b), (s0, a)])[1], paged.forward([(s0, a[:2]), (s1, b[:1])])[0],
           paged.forward([(s0, a[2:3])])[0]]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert (paged.length(s0), paged.length(s1)) == (12, 6)


@pytest.mark.slow  # > 1 s on vulkan (lavapipe) / with transformers' import
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_ragged_batch_greedy_equals_single_sequence_and_hugging_face(handle, name):
    model, state = sharp_model(handle, name)
    prompts = [prompt_for(model, n, seed=n) for n in PROMPT_LENGTHS]
    batched = generate_batch(model, prompts, 12, **ENGINE)
    hf = hf_model(model.config, state)
    hf.generation_config.pad_token_id = hf.generation_config.eos_token_id = None
    for prompt, got in zip(prompts, batched):
        np.testing.assert_array_equal(got, model.generate(prompt, 12, temperature=0))
        with torch.no_grad():
            mask = torch.ones(1, prompt.size, dtype=torch.long)
            out = hf.generate(torch.from_numpy(prompt[None]), attention_mask=mask, do_sample=False, max_new_tokens=12,
                              min_new_tokens=12, pad_token_id=0)
        np.testing.assert_array_equal(got, out[0, prompt.size:].numpy())


@pytest.mark.slow  # > 1 s on vulkan (lavapipe) / with transformers' import
def test_output_does_not_depend_on_the_batch_bf16(handle):
    model, _ = sharp_model(handle, "gqa_untied", "bf16")
    prompts = [prompt_for(model, n, seed=n) for n in PROMPT_LENGTHS]
    batched = generate_batch(model, prompts, 10, **ENGINE)
    alone = [generate_batch(model, [p], 10, **ENGINE)[0] for p in prompts]
    for a, b in zip(alone, batched):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # > 1 s on vulkan (lavapipe) / with transformers' import
def test_seeded_sampling_does_not_depend_on_the_batch_and_stops(handle):
    model, _ = sharp_model(handle, "gqa_untied")
    prompts = [prompt_for(model, n, seed=n) for n in PROMPT_LENGTHS]
    sampling = SamplingParams(temperature=1.3, top_k=40, top_p=0.9, repetition_penalty=1.1)
    together = generate_batch(model, prompts, 15, sampling, seed=5, **ENGINE)
    for i, p in enumerate(prompts):
        np.testing.assert_array_equal(together[i], generate_batch(model, [p], 15, sampling, seed=5 + i, **ENGINE)[0])
    assert not np.array_equal(together[0], generate_batch(model, prompts[:1], 15, sampling, seed=6, **ENGINE)[0])
    a = together[1]
    stop = int(a[4])
    first = int(np.flatnonzero(a == stop)[0])
    cut = generate_batch(model, prompts, 15, sampling, seed=5, stop_ids=[stop], **ENGINE)[1]
    np.testing.assert_array_equal(cut, a[:first + 1])
    engine = BatchEngine(model, decode=lambda ids: " ".join(map(str, ids)), **ENGINE)
    rid = engine.add(prompts[1], 15, sampling, seed=6, stop_strings=[f" {a[2]} {a[3]}"])
    done = engine.run()[rid]
    assert done.finish_reason == "stop" and done.stop_string == f" {a[2]} {a[3]}"
    text = engine.decode  # the request stopped at the first token whose text holds the string
    np.testing.assert_array_equal(done.tokens, a[:done.tokens.size])
    assert done.stop_string in text(done.tokens) and done.stop_string not in text(done.tokens[:-1])
    assert done.tokens.size <= 4
    engine.close()


def test_logprobs_are_log_softmax_of_the_sequences_logits(handle):
    model, _ = sharp_model(handle, "mqa_llama3_rope")
    prompt = prompt_for(model, 6)
    engine = BatchEngine(model, **ENGINE)
    rid = engine.add(prompt, 5)
    engine.add(prompt_for(model, 9, seed=4), 5)
    done = engine.run()[rid]
    assert done.finish_reason == "length"
    cache, ids = model.kv_cache(16), prompt
    for token, logprob in zip(done.tokens, done.logprobs):
        logits = torch.from_numpy(cache.forward(ids)).double()
        assert int(torch.argmax(logits)) == token
        np.testing.assert_allclose(logprob, torch.log_softmax(logits, -1)[token].item(), rtol=1e-5, atol=1e-5)
        ids = [token]


def test_pages_return_and_memory_goes_back_to_idle(handle):
    """idle: the model and its workspace (grown once to max_batch_tokens by the first engine)."""
    model, _ = sharp_model(handle, "mha_tied")
    generate_batch(model, [prompt_for(model, 3)], 2, num_pages=12, **ENGINE)
    handle.sync()
    idle = handle.memory_in_use()
    engine = BatchEngine(model, num_pages=12, **ENGINE)
    assert handle.memory_in_use() > idle
    for n in PROMPT_LENGTHS:
        engine.add(prompt_for(model, n, seed=n), 6)
    engine.step()
    assert engine.cache.free_pages < 12
    engine.run()
    assert engine.cache.free_pages == 12 and engine.pending == 0
    engine.close()
    handle.sync()
    assert handle.memory_in_use() == idle


def test_exhausted_pool_is_a_clear_error_that_changes_nothing(handle):
    model, _ = sharp_model(handle, "mha_tied")
    cache = model.paged_kv_cache(num_pages=2, page_size=4, max_seqs=2, max_seq_tokens=16, max_batch_tokens=16)
    s0, s1 = cache.add_sequence(), cache.add_sequence()
    cache.forward([(s0, prompt_for(model, 5))])
    with pytest.raises(df.OutOfMemoryError, match="KV page pool is exhausted: the step needs 1 new pages of 4 "
                                                  "tokens, 0 of 2 are free"):
        cache.forward([(s0, prompt_for(model, 1)), (s1, prompt_for(model, 4))])
    assert (cache.length(s0), cache.length(s1), cache.free_pages) == (5, 0, 0)
    cache.free_sequence(s0)
    assert cache.free_pages == 2
    cache.forward([(s1, prompt_for(model, 8))])
    with pytest.raises(df.BadArgumentError, match=r"num_new\[0\] = 9 must be in \[1, 8\]"):
        cache.forward([(s1, prompt_for(model, 9))])
    with pytest.raises(df.BadArgumentError, match="is not a live sequence"):
        cache.forward([(s0, prompt_for(model, 1))])
    with pytest.raises(df.BadArgumentError, match="are both sequence"):
        cache.forward([(s1, [1]), (s1, [2])])
    with pytest.raises(df.BadArgumentError, match="num_pages must be an integer >= 1, got 0"):
        model.paged_kv_cache(num_pages=0)


def test_engine_rejects_requests_it_cannot_hold(handle):
    model, _ = sharp_model(handle, "mha_tied")
    engine = BatchEngine(model, num_pages=4, **ENGINE)
    with pytest.raises(df.BadArgumentError, match="exceeds max_seq_tokens 40"):
        engine.add(prompt_for(model, 30), 12)
    with pytest.raises(df.BadArgumentError, match="needs 5 pages, the pool has 4"):
        engine.add(prompt_for(model, 10), 10)
    with pytest.raises(df.BadArgumentError, match="sampling must be a SamplingParams"):
        engine.add(prompt_for(model, 3), 2, sampling=0.5)
    with pytest.raises(df.BadArgumentError, match="needs decode"):
        engine.add(prompt_for(model, 3), 2, stop_strings=["x"])
    engine.close()
