"""The bodies of /v1/completions and /v1/chat/completions, checked field by field: a bad field is
a RequestError naming it (the server answers 4xx with OpenAI's error object), a good body becomes
a GenerationRequest for the engine. Fields the API has and this server ignores (user, metadata)
pass; fields whose meaning it cannot honour (n > 1, best_of, echo, top alternatives in logprobs)
are refused rather than answered differently."""
import dataclasses
import math
import numbers

from ..models.sampling import SamplingParams

MAX_STOP_STRINGS = 4  # as the OpenAI API


class RequestError(Exception):
    """A 4xx answer: status, message, the offending field (param) and OpenAI's error code."""

    def __init__(self, message, param=None, status=400, code=None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


@dataclasses.dataclass
class GenerationRequest:
    prompt: object  # text, or token ids (completions only)
    max_tokens: int  # None: up to the context (chat's default)
    sampling: SamplingParams
    seed: int  # None: a fresh one
    stop: tuple
    stream: bool
    include_usage: bool
    logprobs: bool
    ignore_eos: bool


def _number(body, name, default, low, high, low_open=False):
    value = body.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not (low < value if low_open else low <= value) or not value <= high:
        raise RequestError(f"{name} must be a number in {'(' if low_open else '['}{low:g}, {high:g}], got "
                           f"{value!r:.40}", name)
    return float(value)


def _integer(body, name, default, low, high=None):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low or \
            (high is not None and value > high):
        want = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise RequestError(f"{name} must be an integer {want}, got {value!r:.40}", name)
    return int(value)


def _flag(body, name):
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {value!r:.40}", name)
    return value


def _stop(body):
    stop = body.get("stop")
    if stop is None:
        return ()
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or len(stop) > MAX_STOP_STRINGS or not all(isinstance(s, str) and s for s in stop):
        raise RequestError(f"stop must be a non-empty string or a list of at most {MAX_STOP_STRINGS} of them, "
                           f"got {body.get('stop')!r:.60}", "stop")
    return tuple(stop)


def _common(body, prompt, max_tokens_names, default_max_tokens):
    if _integer(body, "n", 1, 1) != 1:
        raise RequestError("n must be 1: this server returns one choice per request", "n")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise RequestError("stream_options must be an object, and only with stream: true", "stream_options")
    include_usage = _flag(options or {}, "include_usage")
    max_tokens = default_max_tokens
    for name in max_tokens_names:
        if body.get(name) is not None:
            max_tokens = _integer(body, name, None, 1)
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 1.0, 0, 2), top_p=_number(body, "top_p", 1.0, 0, 1, low_open=True),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2, 2),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2, 2),
        # beyond OpenAI's fields, as vLLM's server takes them (and ignore_eos below)
        top_k=_integer(body, "top_k", 0, 0), min_p=_number(body, "min_p", 0.0, 0, 1),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0, math.inf, low_open=True))
    seed = _integer(body, "seed", None, 0, 2 ** 64 - 1)
    return GenerationRequest(prompt, max_tokens, sampling, seed, _stop(body), stream, include_usage, False,
                             _flag(body, "ignore_eos"))


def completion_request(body):
    """A GenerationRequest from a /v1/completions body (prompt: text, or a list of token ids)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    ids = isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    if not (isinstance(prompt, str) or ids) or not prompt:
        raise RequestError("prompt must be a non-empty string or a non-empty list of token ids (one prompt per "
                           f"request), got {prompt!r:.60}", "prompt")
    for name, allowed in (("echo", False), ("best_of", 1), ("suffix", None)):
        if body.get(name) not in (None, allowed):
            raise RequestError(f"{name} is not supported by this server (got {body.get(name)!r:.40})", name)
    request = _common(body, prompt, ("max_tokens",), 16)
    logprobs = body.get("logprobs")
    if logprobs not in (None, 0) or isinstance(logprobs, bool):
        raise RequestError(f"logprobs must be 0 (the sampled tokens' logprobs; top alternatives are not computed) "
                           f"or null, got {logprobs!r:.40}", "logprobs")
    request.logprobs = logprobs == 0
    return request


def _content(message, i):
    content = message.get("content")
    if isinstance(content, list):  # parts: only text parts carry meaning for a text model
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):
            raise RequestError(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
        return "".join(p["text"] for p in content)
    if content is not None and not isinstance(content, str):
        raise RequestError(f"messages[{i}].content must be a string or a list of text parts, got "
                           f"{content!r:.40}", f"messages[{i}].content")
    return content


def chat_request(body):
    """A GenerationRequest from a /v1/chat/completions body; its prompt is the list of messages
    ({"role", "content"} with text content) for the chat template."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"messages must be a non-empty list, got {messages!r:.60}", "messages")
    plain = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string role", f"messages[{i}]")
        plain.append({**m, "content": _content(m, i)})
    request = _common(body, plain, ("max_tokens", "max_completion_tokens"), None)
    request.logprobs = _flag(body, "logprobs")
    if _integer(body, "top_logprobs", 0, 0, 20):
        raise RequestError("top_logprobs must be 0: top alternatives are not computed", "top_logprobs")
    return request
