"""The server's request checks (dataflow.serve.openai_requests) and chat templates
(dataflow.serve.chat_template) without a server: each bad field is named, each good body maps
onto SamplingParams; templates render as transformers renders them (the server test checks
the ids against apply_chat_template) and refuse what they say to refuse."""
import json

import pytest

from dataflow import FileFormatError
from dataflow.models.sampling import SamplingParams

pytest.importorskip("jinja2")
from dataflow.serve import chat_template  # noqa: E402
from dataflow.serve.openai_requests import RequestError, chat_request, completion_request  # noqa: E402


def test_a_completion_body_maps_onto_sampling_params():
    r = completion_request({"model": "m", "prompt": ["The"], "max_tokens": 7, "temperature": 0.5, "top_p": 0.8,
                            "presence_penalty": 1.5, "frequency_penalty": -0.5, "seed": 3, "stop": "\n",
                            "stream": True, "stream_options": {"include_usage": True}, "logprobs": 0,
                            "top_k": 5, "ignore_eos": True, "user": "ignored"})
    assert (r.prompt, r.max_tokens, r.seed, r.stop, r.stream, r.include_usage, r.logprobs, r.ignore_eos) == \
        ("The", 7, 3, ("\n",), True, True, True, True)
    assert r.sampling == SamplingParams(temperature=0.5, top_p=0.8, presence_penalty=1.5, frequency_penalty=-0.5,
                                        top_k=5)
    defaults = completion_request({"prompt": [1, 2, 3]})
    assert (defaults.prompt, defaults.max_tokens, defaults.seed, defaults.logprobs, defaults.ignore_eos) == \
        ([1, 2, 3], 16, None, False, False)
    chat = chat_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                   {"type": "text", "text": "b"}]}],
                         "max_completion_tokens": 4, "logprobs": True})
    assert (chat.prompt, chat.max_tokens, chat.logprobs) == ([{"role": "user", "content": "ab"}], 4, True)
    assert chat_request({"messages": [{"role": "user", "content": "x"}]}).max_tokens is None  # up to the context


@pytest.mark.parametrize("body,param", [
    ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "a", "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": "a", "temperature": -0.1}, "temperature"),
    ({"prompt": "a", "temperature": True}, "temperature"),
    ({"prompt": "a", "top_p": 0}, "top_p"),
    ({"prompt": "a", "frequency_penalty": 2.1}, "frequency_penalty"),
    ({"prompt": "a", "repetition_penalty": 0}, "repetition_penalty"),
    ({"prompt": "a", "seed": -1}, "seed"),
    ({"prompt": "a", "stop": [""]}, "stop"),
    ({"prompt": "a", "stream": "yes"}, "stream"),
    ({"prompt": "a", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "a", "echo": True}, "echo"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({}, "prompt"),
])
def test_bad_completion_fields_are_named(body, param):
    with pytest.raises(RequestError) as e:
        completion_request(body)
    assert e.value.param == param and e.value.status == 400 and param in str(e.value)


@pytest.mark.parametrize("body,param", [
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": 1}, "logprobs"),
])
def test_bad_chat_fields_are_named(body, param):
    with pytest.raises(RequestError) as e:
        chat_request(body)
    assert e.value.param == param


def write_config(tmp_path, config):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_template_renders_with_special_tokens_and_tojson(tmp_path):
    source = ("{{ bos_token }}{% for m in messages %}{{ m.role }}={{ m.content | tojson }}{% endfor %}"
              "{% if add_generation_prompt %}>{% endif %}")
    template = chat_template.load(write_config(tmp_path, {"bos_token": {"content": "<s>"}, "chat_template": source}))
    assert template.render([{"role": "user", "content": "é\n"}]) == '<s>user="é\\n">'
    assert template.render([{"role": "user", "content": "x"}], add_generation_prompt=False) == '<s>user="x"'


def test_template_refusals_and_missing_templates(tmp_path):
    refusing = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    named = [{"name": "tool_use", "template": "x"}, {"name": "default", "template": refusing}]
    template = chat_template.load(write_config(tmp_path, {"chat_template": named}))
    assert template.render([{"role": "user", "content": ""}]) == "ok"
    with pytest.raises(chat_template.ChatTemplateError, match="first must be user"):
        template.render([{"role": "system", "content": ""}])
    assert chat_template.load(write_config(tmp_path, {"bos_token": "<s>"})) is None
    assert chat_template.load(str(tmp_path / "nowhere")) is None
    with pytest.raises(FileFormatError, match="does not compile"):
        chat_template.load(write_config(tmp_path, {"chat_template": "{% for %}"}))
    (tmp_path / "tokenizer_config.json").write_text("{")
    with pytest.raises(FileFormatError, match="not JSON"):
        chat_template.load(str(tmp_path))
