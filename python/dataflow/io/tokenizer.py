"""Tokenizers: Hugging Face `tokenizers` (tokenizer.json) for real text, and a byte tokenizer.

    tok = tokenizer.default()                   # BPE trained on the embedded corpus (data/tokenizer.json)
    tok = tokenizer.load("path/to/model")       # a tokenizer.json, or a directory holding one
    ids = tok.encode("Return the value", eos=True); tok.decode(ids)

Both kinds share encode/decode/vocab_size/bos_id/eos_id and to_dict()/from_dict() (how a
checkpoint stores its tokenizer, so generation decodes with exactly the tokenizer training used).
"""
import os
import re

import numpy as np

from ..errors import BadArgumentError, FileFormatError
from .file_checks import open_regular

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "tokenizer.json")
TOKENIZER_NAME = "tokenizer.json"
MAX_TOKENIZER_BYTES = 256 * 2**20
# Special tokens' names across common tokenizers, in order of preference.
BOS_NAMES = ("<|bos|>", "<|begin_of_text|>", "<s>", "<bos>")
EOS_NAMES = ("<|eos|>", "<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>")


def _check_ids(ids, vocab_size):
    ids = np.asarray(ids).reshape(-1)
    if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= vocab_size):
        raise BadArgumentError(f"decode: token ids must be integers in [0, {vocab_size}), got "
                               f"{ids.dtype} in [{ids.min()}, {ids.max()}]")
    return ids


def _utf8(text):
    """text as UTF-8 bytes; BadArgumentError for a non-string or text that is not valid Unicode
    (lone surrogates, e.g. undecodable bytes of a command line)."""
    if not isinstance(text, str):
        raise BadArgumentError(f"encode: text must be a string, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadArgumentError(f"encode: the text is not valid UTF-8 at character {e.start} "
                               f"({text[e.start:e.end]!r}); pass text, not raw bytes") from None


class ByteTokenizer:
    """encode(text) -> int32 token ids (one per UTF-8 byte); decode(ids) -> text. Special tokens are
    ids 256.. and never come from encoding text (a literal "<|eos|>" in text stays bytes)."""

    SPECIALS = ("<|bos|>", "<|eos|>")
    kind = "byte"

    def __init__(self):
        self.bos_id, self.eos_id = 256, 257
        self.vocab_size = 256 + len(self.SPECIALS)

    def encode(self, text, bos=False, eos=False):
        ids = np.frombuffer(_utf8(text), dtype=np.uint8).astype(np.int32)
        return np.concatenate([[self.bos_id] * bos, ids, [self.eos_id] * eos]).astype(np.int32)

    def encode_chat(self, text):
        """Ids of a rendered chat template: its special token names ("<|eos|>") are those tokens."""
        parts = re.split("(" + "|".join(map(re.escape, self.SPECIALS)) + ")", text)
        return np.concatenate([[256 + self.SPECIALS.index(p)] if p in self.SPECIALS else self.encode(p)
                               for p in parts]).astype(np.int32)

    def decode(self, ids):
        """Text of the ids; specials by name; a sequence cut inside a character decodes with U+FFFD."""
        text, run = [], []
        for i in _check_ids(ids, self.vocab_size).tolist():
            if i < 256:
                run.append(i)
                continue
            text.append(bytes(run).decode("utf-8", errors="replace"))
            text.append(self.SPECIALS[i - 256])
            run = []
        text.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(text)

    def to_dict(self):
        return {"kind": self.kind, "vocab_size": self.vocab_size, "specials": list(self.SPECIALS)}


class HFTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` (tokenizer.json). bos_id / eos_id: given, else the first
    special token with a usual name (BOS_NAMES, EOS_NAMES), else None. `source` names where it came
    from, for messages. As with the byte tokenizer, special tokens never come from encoding text."""

    kind = "hf"

    def __init__(self, tokenizer, source, bos_id=None, eos_id=None):
        tokenizer.encode_special_tokens = True  # "<|eos|>" in text is text: specials come only from encode()'s flags
        self._tok, self.source = tokenizer, source
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.bos_id = bos_id if bos_id is not None else self._special(BOS_NAMES)
        self.eos_id = eos_id if eos_id is not None else self._special(EOS_NAMES)
        for what, value in (("bos_id", self.bos_id), ("eos_id", self.eos_id)):
            if value is not None and not (isinstance(value, int) and 0 <= value < self.vocab_size):
                raise FileFormatError(f"{source}: {what} {value!r} is outside the vocabulary [0, {self.vocab_size})")

    def _special(self, names):
        ids = [self._tok.token_to_id(name) for name in names]
        return next((i for i in ids if i is not None), None)

    @classmethod
    def from_str(cls, text, source, bos_id=None, eos_id=None):
        from tokenizers import Tokenizer
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as e:  # tokenizers raises plain Exception for every malformed file
            raise FileFormatError(f"{source}: not a Hugging Face tokenizer.json: {str(e)[:300]}") from None
        return cls(tokenizer, source, bos_id, eos_id)

    @classmethod
    def from_file(cls, path, bos_id=None, eos_id=None):
        path = os.fspath(path)
        with open_regular(path, "tokenizer file") as f:
            raw = f.read(min(os.fstat(f.fileno()).st_size, MAX_TOKENIZER_BYTES) + 1)
        if len(raw) > MAX_TOKENIZER_BYTES:
            raise FileFormatError(f"{path}: larger than {MAX_TOKENIZER_BYTES} bytes; not a tokenizer.json?")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FileFormatError(f"{path}: not UTF-8: {e}") from None
        return cls.from_str(text, path, bos_id, eos_id)

    def encode(self, text, bos=False, eos=False):
        _utf8(text)
        try:
            ids = self._tok.encode(text, add_special_tokens=False).ids
        except Exception as e:  # tokenizers raises plain Exception, e.g. an unk token missing from the vocab
            raise FileFormatError(f"{self.source}: the tokenizer cannot encode this text: {str(e)[:300]}") from None
        for flag, special, what in ((bos, self.bos_id, "bos"), (eos, self.eos_id, "eos")):
            if flag and special is None:
                raise BadArgumentError(f"{self.source}: the tokenizer has no {what} token")
        return np.asarray([self.bos_id] * bos + ids + [self.eos_id] * eos, dtype=np.int32)

    def encode_chat(self, text):
        """Ids of a rendered chat template: the special tokens it writes out ("<|im_start|>") are
        those tokens here, as in transformers' apply_chat_template; no bos/eos is added."""
        _utf8(text)
        self._tok.encode_special_tokens = False
        try:
            return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)
        finally:
            self._tok.encode_special_tokens = True

    def decode(self, ids):
        return self._tok.decode(_check_ids(ids, self.vocab_size).tolist(), skip_special_tokens=False)

    def to_dict(self):
        return {"kind": self.kind, "json": self.to_json(), "bos_id": self.bos_id, "eos_id": self.eos_id}

    def to_json(self):
        """The text of its tokenizer.json."""
        return self._tok.to_str()

    def save(self, directory):
        """Writes directory/tokenizer.json (atomically), next to a model's config.json and safetensors."""
        from . import atomic
        os.makedirs(directory, exist_ok=True)
        with atomic.replaced_file(os.path.join(directory, TOKENIZER_NAME)) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(self.to_json())


def default():
    """The BPE tokenizer trained on the embedded corpus (tools/make_tokenizer.py wrote it)."""
    return HFTokenizer.from_file(DEFAULT_PATH)


def load(spec, bos_id=None, eos_id=None):
    """"bytes" (ByteTokenizer), or a tokenizer.json file, or a directory holding one."""
    if spec == "bytes":
        return ByteTokenizer()
    path = os.fspath(spec)
    if os.path.isdir(path):
        path = os.path.join(path, TOKENIZER_NAME)
    return HFTokenizer.from_file(path, bos_id, eos_id)


def from_dict(spec, where):
    """The tokenizer to_dict() described; `where` names the file it was stored in."""
    if not isinstance(spec, dict):
        raise FileFormatError(f"{where}: tokenizer: expected an object, got {spec!r:.60}")
    if spec.get("kind") == ByteTokenizer.kind:
        tokenizer = ByteTokenizer()
        if spec != tokenizer.to_dict():
            raise FileFormatError(f"{where}: tokenizer: {spec!r:.200} is not this byte tokenizer")
        return tokenizer
    if spec.get("kind") == HFTokenizer.kind and isinstance(spec.get("json"), str):
        ids = {k: spec.get(k) for k in ("bos_id", "eos_id")}
        return HFTokenizer.from_str(spec["json"], f"{where}: tokenizer", **ids)
    raise FileFormatError(f"{where}: tokenizer: unknown kind {spec.get('kind')!r:.60}; expected 'hf' or 'byte'")


class StreamDecoder:
    """Text as tokens arrive: push(id) returns what the new token adds. A token that ends inside a
    UTF-8 character (byte-level tokenizers split them) is held until the character completes."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.text = tokenizer, [], ""

    def push(self, token):
        self.ids.append(int(token))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd") or not text.startswith(self.text):
            return ""
        new, self.text = text[len(self.text):], text
        return new

    def flush(self):
        """What push() held back (an incomplete character at the very end, as U+FFFD)."""
        text = self.tokenizer.decode(self.ids)
        new, self.text = text[len(self.text):] if text.startswith(self.text) else "", text
        return new
