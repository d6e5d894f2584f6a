"""The OpenAI-compatible HTTP API (aiohttp) over an EngineLoop: /v1/models, /v1/completions,
/v1/chat/completions (whole answers or server-sent events), /health. Each request waits on an
asyncio queue that the engine thread feeds; a request whose client goes away (the handler is
cancelled, or a write fails) cancels its sequence, so its pages go back to the pool."""
import asyncio
import json
import time
import types
import uuid

from aiohttp import web

from .openai_requests import RequestError, chat_request, completion_request
from ..errors import BadArgumentError
from ..io.tokenizer import StreamDecoder

SERVER = web.AppKey("server", object)


def _error(status, message, param=None, code=None):
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}},
                             status=status)


def visible_text(tokenizer, ids):
    """Text of generated ids. Ids past the tokenizer's vocabulary (rows a model pads its embedding
    with, never trained to be chosen) have no text."""
    return tokenizer.decode([i for i in ids if i < tokenizer.vocab_size])


class Server:
    """What the handlers share: the model's name and context, its tokenizer and chat template,
    the engine loop, and the bound on unfinished requests (running + queued)."""

    def __init__(self, loop, tokenizer, name, context, vocab_size, bos=False, chat_template=None, max_requests=64):
        self.loop, self.tokenizer, self.name, self.context = loop, tokenizer, name, context
        self.vocab_size, self.bos, self.chat_template, self.max_requests = vocab_size, bos, chat_template, max_requests
        self.active = 0
        self.created = int(time.time())

    def decode(self, ids):
        return visible_text(self.tokenizer, ids)

    def prompt_ids(self, request, chat):
        if chat:
            if self.chat_template is None:
                raise RequestError(f"the model {self.name} has no chat template (tokenizer_config.json's "
                                   "chat_template); use /v1/completions", "messages")
            try:
                return self.tokenizer.encode_chat(self.chat_template.render(request.prompt))
            except BadArgumentError as e:  # the template's raise_exception, text that is not UTF-8
                raise RequestError(str(e), "messages") from None
        if isinstance(request.prompt, str):
            try:
                return self.tokenizer.encode(request.prompt, bos=self.bos and self.tokenizer.bos_id is not None)
            except BadArgumentError as e:
                raise RequestError(f"prompt: {e}", "prompt") from None
        bad = next((t for t in request.prompt if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise RequestError(f"prompt: token id {bad} is outside the vocabulary [0, {self.vocab_size})", "prompt")
        return request.prompt

    def fit_context(self, request, prompt, chat):
        """max_tokens within the context (None: all of it that is left)."""
        n, field = len(prompt), "messages" if chat else "prompt"
        if n >= self.context:
            raise RequestError(f"{field}: {n} tokens, but the model's context is {self.context} tokens", field,
                               code="context_length_exceeded")
        if request.max_tokens is None:
            return self.context - n
        if n + request.max_tokens > self.context:
            raise RequestError(f"max_tokens: {n} prompt tokens + max_tokens {request.max_tokens} exceed the model's "
                               f"context of {self.context} tokens", "max_tokens", code="context_length_exceeded")
        return request.max_tokens


def _sink(queue):
    loop = asyncio.get_running_loop()

    def post(event):
        try:
            loop.call_soon_threadsafe(queue.put_nowait, event)
        except RuntimeError:  # the event loop has closed: nobody waits any more
            pass
    return post


async def _body(request):
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _check_model(server, body):
    model = body.get("model")
    if not isinstance(model, str):
        raise RequestError(f"model must be a string (this server serves {server.name!r}), got {model!r:.40}", "model")
    if model != server.name:
        raise RequestError(f"model {model!r:.60} does not exist; this server serves {server.name!r}", "model",
                           status=404, code="model_not_found")


class _Answer:
    """The text of one request as its tokens arrive: stop strings cut it (the text before the
    first stop string is the answer), and a stream holds back a tail that could begin one."""

    def __init__(self, server, stop):
        self.stop, self.eos = stop, server.tokenizer.eos_id
        self.decoder = StreamDecoder(types.SimpleNamespace(decode=server.decode))
        self.hold = max(map(len, stop), default=1) - 1
        self.sent = 0
        self.tokens, self.logprobs = [], []

    def push(self, token, logprob):
        self.tokens.append(token)
        self.logprobs.append(logprob)
        if token != self.eos:  # the end of the answer, not part of its text
            self.decoder.push(token)

    def text(self, final):
        text = self.decoder.text if not final else self.decoder.text + self.decoder.flush()
        cut = min((i for i in (text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            return text[:cut]
        return text if final else text[:max(len(text) - self.hold, self.sent)]

    def delta(self, final=False):
        text = self.text(final)
        new, self.sent = text[self.sent:], max(len(text), self.sent)
        return new


def _usage(prompt_tokens, completion_tokens):
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _logprobs(server, chat, tokens, logprobs, offset):
    pieces = [server.decode([t]) for t in tokens]
    if chat:
        return {"content": [{"token": p, "logprob": lp, "bytes": list(p.encode("utf-8")), "top_logprobs": []}
                            for p, lp in zip(pieces, logprobs)]}
    offsets = []
    for p in pieces:
        offsets.append(offset)
        offset += len(p)
    return {"tokens": pieces, "token_logprobs": logprobs, "top_logprobs": None, "text_offset": offsets}


async def _generate(request, chat):
    server = request.app[SERVER]
    try:
        body = await _body(request)
        _check_model(server, body)
        gen = chat_request(body) if chat else completion_request(body)
        prompt = server.prompt_ids(gen, chat)
        max_tokens = server.fit_context(gen, prompt, chat)
    except RequestError as e:
        return _error(e.status, str(e), e.param, e.code)
    if server.active >= server.max_requests:
        return _error(429, f"the server is full ({server.max_requests} requests running or queued); retry later",
                      code="queue_full")
    server.active += 1
    queue = asyncio.Queue()
    sink = _sink(queue)
    seed = gen.seed if gen.seed is not None else uuid.uuid4().int >> 64
    finished = False
    try:
        server.loop.submit(sink, prompt_ids=prompt, max_new_tokens=max_tokens, sampling=gen.sampling, seed=seed,
                           stop_ids=() if server.tokenizer.eos_id is None or gen.ignore_eos else
                           (server.tokenizer.eos_id,),
                           stop_strings=gen.stop)
        event = await queue.get()
        if event[0] == "error":
            finished = True
            if isinstance(event[1], BadArgumentError):
                return _error(400, str(event[1]))
            return _error(503, f"the engine failed: {event[1]}")
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        answer = _Answer(server, gen.stop)
        respond = _stream if gen.stream else _whole
        try:
            response = await respond(request, server, chat, gen, queue, answer, ident, len(prompt))
        except EngineFailed as e:  # the engine dropped every request
            response = _error(503, str(e))
        finished = True
        return response
    finally:
        server.active -= 1
        if not finished:  # the client left (cancelled handler, failed write): free its sequence
            server.loop.cancel(sink)


class EngineFailed(Exception):
    """The engine thread failed while the request ran."""


async def _next_tokens(queue, answer):
    """Waits for the next event, takes in every token already queued; returns the Completion
    when the request is done, else None."""
    event = await queue.get()
    while True:
        if event[0] == "done":
            return event[1]
        if event[0] == "error":
            raise EngineFailed(f"the engine failed: {event[1]}")
        answer.push(event[1], event[2])
        if queue.empty():
            return None
        event = queue.get_nowait()


async def _whole(request, server, chat, gen, queue, answer, ident, prompt_tokens):
    while (done := await _next_tokens(queue, answer)) is None:
        pass
    text = answer.text(final=True)
    logprobs = _logprobs(server, chat, answer.tokens, answer.logprobs, 0) if gen.logprobs else None
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text})
    choice.update(logprobs=logprobs, finish_reason=done.finish_reason)
    return web.json_response({"id": ident, "object": "chat.completion" if chat else "text_completion",
                              "created": int(time.time()), "model": server.name, "choices": [choice],
                              "usage": _usage(prompt_tokens, len(answer.tokens))})


async def _stream(request, server, chat, gen, queue, answer, ident, prompt_tokens):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    created, kind = int(time.time()), "chat.completion.chunk" if chat else "text_completion"

    async def send(choices, **extra):
        chunk = {"id": ident, "object": kind, "created": created, "model": server.name, "choices": choices, **extra}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    def choice(text, tokens, offset, finish_reason):
        logprobs = None
        if gen.logprobs:
            logprobs = _logprobs(server, chat, answer.tokens[tokens:], answer.logprobs[tokens:], offset)
        body = {"delta": {"content": text}} if chat else {"text": text}
        return {"index": 0, **body, "logprobs": logprobs, "finish_reason": finish_reason}

    if chat:
        await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                     "finish_reason": None}])
    done = None
    while done is None:
        seen, offset = len(answer.tokens), answer.sent
        try:
            done = await _next_tokens(queue, answer)
        except EngineFailed as e:  # the status is sent already: the stream ends with an error event
            error = {"message": str(e), "type": "server_error", "param": None, "code": None}
            await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
            await response.write_eof()
            return response
        text = answer.delta(final=done is not None)
        if text or done is not None or (gen.logprobs and len(answer.tokens) > seen):
            await send([choice(text, seen, offset, None if done is None else done.finish_reason)])
    if gen.include_usage:
        await send([], usage=_usage(prompt_tokens, len(answer.tokens)))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def completions(request):
    return await _generate(request, chat=False)


async def chat_completions(request):
    return await _generate(request, chat=True)


async def models(request):
    server = request.app[SERVER]
    return web.json_response({"object": "list", "data": [{"id": server.name, "object": "model",
                                                          "created": server.created, "owned_by": "dataflow",
                                                          "max_model_len": server.context}]})


async def health(request):
    server = request.app[SERVER]
    alive = server.loop.failure is None
    return web.json_response({"status": "ok" if alive else "failed", "active": server.active, **server.loop.stats},
                             status=200 if alive else 503)


def make_app(server):
    app = web.Application(client_max_size=1 << 24)
    app[SERVER] = server
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app
