"""`dataflow serve` through the `openai` client, against a server in a subprocess on a small
model saved as an HF directory (sharp random weights: clear argmaxes): completions equal the
BatchEngine's greedy tokens and `dataflow generate`'s text; 8 concurrent requests equal 8 single ones; chat streams the
template transformers renders; bad requests are 4xx naming the field with the server alive
after them; a full queue is 429; dropped streams give their pages back; SIGTERM finishes the
request in flight and exits 0."""
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import dataflow as df
from dataflow.io import tokenizer as tokenizers
from dataflow.models.batch_engine import generate_batch
from dataflow.models import Llama
from serve_models import CONTEXT, TEMPLATE, save_model

openai = pytest.importorskip("openai")
pytest.importorskip("aiohttp")
pytestmark = pytest.mark.slow  # a server process per module (seconds); tests/serve/test_serve_requests.py is the fast part

SERVER_FLAGS = ["--max-batch", "8", "--queue", "4", "--threads", "2", "--max-batch-tokens", "128"]


def server_env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(df.__path__[0]),
                                                         os.environ.get("PYTHONPATH", "")])}


def start_server(directory, *flags):
    child = subprocess.Popen([sys.executable, "-m", "dataflow.cli", "serve", "--model", str(directory), "--port", "0",
                              *flags], env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    if " on http://" not in line:
        child.kill()
        raise AssertionError(f"the server did not start: {line}{child.stderr.read()}")
    return child, line.split(" on ")[1].split()[0]


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, json.loads(r.read())


def post_raw(url, data):
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("served") / "tiny")


@pytest.fixture(scope="module")
def server(model_dir):
    child, url = start_server(model_dir, *SERVER_FLAGS)
    yield url
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def oracle(model_dir):
    """(greedy new tokens of each prompt from a BatchEngine in this process, the tokenizer)."""
    tok = tokenizers.load(model_dir)
    with df.Handle("host") as h:
        model = Llama.from_pretrained(str(model_dir), h)

        def greedy(prompts, n):
            return [t.tolist() for t in generate_batch(model, prompts, n, stop_ids=[tok.eos_id], max_seqs=8,
                                                       max_seq_tokens=CONTEXT)]
        yield greedy, tok
        model.close()


def idle(server, timeout=30):
    """/health once no request holds pages (or the last one seen after the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        _, health = get(server + "/health")
        if (health["free_pages"] == health["num_pages"] and health["running"] == health["waiting"] == 0) \
                or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def prompts(tok):
    return [tok.encode(text, bos=True).tolist() for text in
            ("The", "If the answer is", "Return the", "This model", "a b c d e f", "Once", "When we", "Why not")]


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    status, health = get(server + "/health")
    assert status == 200 and health["status"] == "ok" and health["free_pages"] == health["num_pages"] > 0


def test_completion_equals_engine_greedy_tokens(client, oracle):
    greedy, tok = oracle
    ids = tok.encode("If the answer is", bos=True)
    (want,) = greedy([ids], 20)
    by_text = client.completions.create(model="tiny", prompt="If the answer is", max_tokens=20, temperature=0,
                                        logprobs=0)
    by_ids = client.completions.create(model="tiny", prompt=ids.tolist(), max_tokens=20, temperature=0)
    text = tok.decode([t for t in want if t != tok.eos_id])
    assert by_text.choices[0].text == by_ids.choices[0].text == text
    assert by_text.choices[0].finish_reason == ("stop" if want[-1] == tok.eos_id else "length")
    assert (by_text.usage.prompt_tokens, by_text.usage.completion_tokens) == (ids.size, len(want))
    assert by_text.usage.total_tokens == ids.size + len(want)
    assert by_text.choices[0].logprobs.tokens == [tok.decode([t]) for t in want]
    lp = by_text.choices[0].logprobs.token_logprobs
    assert len(lp) == len(want) and all(v <= 0 for v in lp)


def test_completion_equals_dataflow_generate(client, model_dir):
    out = subprocess.run([sys.executable, "-m", "dataflow.cli", "generate", "--checkpoint", str(model_dir), "--prompt",
                          "Return the", "--temperature", "0", "--max-new-tokens", "24", "--threads", "2"],
                         env=server_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = client.completions.create(model="tiny", prompt="Return the", max_tokens=24, temperature=0)
    assert out.stdout == "Return the" + got.choices[0].text + "\n"


def test_logprobs_are_the_engine_logprobs(client, model_dir, oracle):
    _, tok = oracle
    ids = tok.encode("The", bos=True)
    got = client.completions.create(model="tiny", prompt=ids.tolist(), max_tokens=6, temperature=0, logprobs=0)
    with df.Handle("host") as h:
        model = Llama.from_pretrained(str(model_dir), h)
        cache, feed = model.kv_cache(CONTEXT), ids
        for token, logprob in zip(got.choices[0].logprobs.tokens, got.choices[0].logprobs.token_logprobs):
            logits = cache.forward(feed).astype(np.float64)
            want = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
            best = int(np.argmax(logits))
            assert tok.decode([best]) == token
            np.testing.assert_allclose(logprob, want[best], rtol=1e-5, atol=1e-5)
            feed = [best]
        model.close()


def test_eight_concurrent_requests_equal_eight_single_ones(client, oracle, server):
    greedy, tok = oracle
    ps = prompts(tok)
    single = [client.completions.create(model="tiny", prompt=p, max_tokens=24, temperature=0).choices[0].text
              for p in ps]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: client.completions.create(model="tiny", prompt=p, max_tokens=24,
                                                                     temperature=0).choices[0].text, ps))
    assert together == single
    assert single == [tok.decode([t for t in g if t != tok.eos_id]) for g in greedy(ps, 24)]
    assert idle(server)["free_pages"] == idle(server)["num_pages"]


def test_seeded_sampling_repeats_and_stop_strings_cut(client):
    ask = dict(model="tiny", prompt="The", max_tokens=30, temperature=1.2, top_p=0.9, presence_penalty=0.5,
               frequency_penalty=0.3)
    a = client.completions.create(seed=7, **ask).choices[0].text
    assert client.completions.create(seed=7, **ask).choices[0].text == a
    assert client.completions.create(seed=8, **ask).choices[0].text != a
    stop = a[5:8]
    cut = client.completions.create(seed=7, stop=[stop], **ask).choices[0]
    assert cut.finish_reason == "stop" and cut.text == a[:a.index(stop)]
    streamed = client.completions.create(seed=7, stop=stop, stream=True, **ask)
    assert "".join(c.choices[0].text for c in streamed) == cut.text


def test_streaming_chat_renders_the_template_as_transformers(client, oracle):
    transformers = pytest.importorskip("transformers")
    greedy, tok = oracle
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the answer?"}]
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok._tok, bos_token="<|bos|>", eos_token="<|eos|>")
    hf.chat_template = TEMPLATE
    ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    (want,) = greedy([np.asarray(ids)], 16)
    text = tok.decode([t for t in want if t != tok.eos_id])
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (len(ids), len(want))
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=16, temperature=0,
                                           logprobs=True)
    assert whole.choices[0].message.content == text and whole.choices[0].message.role == "assistant"
    assert [c.token for c in whole.choices[0].logprobs.content] == [tok.decode([t]) for t in want]


@pytest.mark.parametrize("ask,status,param", [
    (dict(max_tokens=-1), 400, "max_tokens"),
    (dict(max_tokens=CONTEXT), 400, "max_tokens"),
    (dict(prompt="the " * CONTEXT), 400, "prompt"),
    (dict(temperature=2.5), 400, "temperature"),
    (dict(top_p=0), 400, "top_p"),
    (dict(presence_penalty=-3), 400, "presence_penalty"),
    (dict(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    (dict(n=2), 400, "n"),
    (dict(logprobs=3), 400, "logprobs"),
    (dict(prompt=[5, 100000]), 400, "prompt"),
    (dict(prompt=""), 400, "prompt"),
    (dict(model="gpt-4"), 404, "model"),
])
def test_bad_completion_requests_name_the_field(client, server, ask, status, param):
    with pytest.raises(openai.APIStatusError) as e:
        client.completions.create(**{"model": "tiny", "prompt": "The", "max_tokens": 4, **ask})
    assert e.value.status_code == status
    assert e.value.body["param"] == param and param.split("_")[0] in e.value.body["message"]
    assert client.completions.create(model="tiny", prompt="The", max_tokens=2).usage.completion_tokens >= 1


def test_bad_bodies_and_chat_fields(client, server):
    status, body = post_raw(server + "/v1/completions", b'{"model": "tiny", "prompt": ')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = post_raw(server + "/v1/chat/completions", b'["not", "an", "object"]')
    assert status == 400 and "JSON object" in body["error"]["message"]
    for ask, param in ((dict(messages=[]), "messages"), (dict(messages=[{"content": "hi"}]), "messages[0]"),
                       (dict(top_logprobs=2, logprobs=True), "top_logprobs"), (dict(temperature="hot"), "temperature"),
                       (dict(messages=[{"role": "user", "content": "the " * CONTEXT}]), "messages")):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(**{"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                              **ask})
        assert e.value.body["param"] == param
    assert get(server + "/health")[1]["status"] == "ok"


def test_full_queue_is_429_and_dropped_streams_free_their_pages(client, server):
    before = idle(server)
    streams = [client.completions.create(model="tiny", prompt="The", max_tokens=CONTEXT - 2, temperature=1.0,
                                         seed=i, stream=True, extra_body={"ignore_eos": True})
               for i in range(12)]  # 8 running + 4 queued, each far from its end
    for s in streams[:8]:
        next(iter(s))  # the running ones have produced a token
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model="tiny", prompt="The", max_tokens=2)
    assert e.value.status_code == 429
    _, busy = get(server + "/health")
    assert busy["free_pages"] < before["free_pages"] and busy["active"] == 12
    for s in streams:
        s.close()  # the client drops the connection mid-stream
    after = idle(server)
    assert (after["free_pages"], after["running"], after["waiting"], after["active"], after["memory_in_use"]) == \
        (before["free_pages"], 0, 0, 0, before["memory_in_use"])
    assert after["cancelled"] == before["cancelled"] + 12  # none ran to its end
    assert client.completions.create(model="tiny", prompt="The", max_tokens=3).usage.completion_tokens >= 1


def test_sigterm_finishes_the_request_in_flight_and_exits_0(tmp_path):
    directory = save_model(tmp_path / "plain", chat_template=None)
    child, url = start_server(directory, "--threads", "2")
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        with pytest.raises(openai.BadRequestError, match="no chat template") as e:
            client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}])
        assert e.value.body["param"] == "messages"
        stream = iter(client.completions.create(model="plain", prompt="The", max_tokens=60, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
        first = next(stream)
        child.send_signal(signal.SIGTERM)
        rest = list(stream)
        assert rest[-1].usage.completion_tokens == 60 or rest[-2].choices[0].finish_reason == "stop"
        assert first.choices[0].text + "".join(c.choices[0].text for c in rest if c.choices)
        assert child.wait(timeout=60) == 0
        assert "shutting down" in child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
    shutil.rmtree(directory)
