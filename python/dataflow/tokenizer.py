"""A tokenizer that needs no download or training: UTF-8 bytes are tokens 0..255, specials follow."""
import numpy as np

from .errors import BadArgumentError


class ByteTokenizer:
    """encode(text) -> int32 token ids (one per UTF-8 byte); decode(ids) -> text. Special tokens are
    ids 256.. and never come from encoding text (a literal "<|eos|>" in text stays bytes)."""

    SPECIALS = ("<|bos|>", "<|eos|>")
    kind = "byte"

    def __init__(self):
        self.bos_id, self.eos_id = 256, 257
        self.vocab_size = 256 + len(self.SPECIALS)

    def encode(self, text, bos=False, eos=False):
        ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)
        return np.concatenate([[self.bos_id] * bos, ids, [self.eos_id] * eos]).astype(np.int32)

    def decode(self, ids):
        """Text of the ids; specials by name; a sequence cut inside a character decodes with U+FFFD."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise BadArgumentError(f"decode: token ids must lie in [0, {self.vocab_size}), got "
                                   f"[{ids.min()}, {ids.max()}]")
        text, run = [], []
        for i in ids.tolist():
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

    @classmethod
    def from_dict(cls, spec):
        tokenizer = cls()
        if spec != tokenizer.to_dict():
            raise BadArgumentError(f"tokenizer: {spec!r} is not this byte tokenizer ({tokenizer.to_dict()!r})")
        return tokenizer
