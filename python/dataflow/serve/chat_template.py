"""A model's chat template (tokenizer_config.json's "chat_template"), rendered with jinja2 the
way transformers' apply_chat_template renders it: a sandboxed environment with trim_blocks and
lstrip_blocks, the tojson filter, raise_exception and strftime_now, and the special tokens
(bos_token, eos_token, ...) as variables."""
import datetime
import json
import os

from ..errors import BadArgumentError, FileFormatError
from ..io.file_checks import open_regular

CONFIG_NAME = "tokenizer_config.json"
MAX_CONFIG_BYTES = 1 << 24


class ChatTemplateError(BadArgumentError):
    """The template refused the messages (its raise_exception) or could not render them."""


def _raise_exception(message):
    raise ChatTemplateError(f"messages: the chat template says: {message}")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def _token_text(value):
    """tokenizer_config.json writes a special token as its text or as {"content": text, ...}."""
    return value.get("content") if isinstance(value, dict) else value


class ChatTemplate:
    def __init__(self, source, where, special_tokens):
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:
            self._template = env.from_string(source)
        except TemplateError as e:
            raise FileFormatError(f"{where}: chat_template does not compile: {e}") from None
        self.special_tokens = special_tokens

    def render(self, messages, add_generation_prompt=True):
        """The prompt text of a conversation (a list of {"role", "content"} dicts)."""
        from jinja2 import TemplateError
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         **self.special_tokens)
        except TemplateError as e:
            raise ChatTemplateError(f"messages: the chat template cannot render them: {e}") from None


def load(directory):
    """The ChatTemplate of a model directory's tokenizer_config.json, or None where it has none."""
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(path):
        return None
    with open_regular(path, "tokenizer config") as f:
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise FileFormatError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FileFormatError(f"{path}: not JSON: {e}") from None
    if not isinstance(config, dict):
        raise FileFormatError(f"{path}: expected an object, got {type(config).__name__}")
    source = config.get("chat_template")
    if isinstance(source, list):  # named templates: the default one serves chat
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    if source is None:
        return None
    if not isinstance(source, str):
        raise FileFormatError(f"{path}: chat_template must be a string, got {type(source).__name__}")
    special = {name: _token_text(config[name]) for name in ("bos_token", "eos_token", "unk_token", "pad_token")
               if isinstance(_token_text(config.get(name)), str)}
    return ChatTemplate(source, path, special)
