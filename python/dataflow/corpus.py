"""Training text as token batches: the embedded corpus (data/corpus.txt) or a text file."""
import os

from .errors import BadArgumentError

EMBEDDED = os.path.join(os.path.dirname(__file__), "data", "corpus.txt")


def load_tokens(tokenizer, path=None):
    """Token ids of a UTF-8 text file (the embedded corpus when path is None), ending in eos."""
    path = EMBEDDED if path is None else os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BadArgumentError(f"{path}: cannot read as UTF-8 text: {e}") from None
    return tokenizer.encode(text, eos=True)


class Batches:
    """Consecutive windows of a token stream, llm.c style: a step takes batch*seq_len + 1 tokens from
    `position`, inputs are all but the last, labels all but the first; the stream wraps around.
    `position` is all a resumed run needs to continue with the same batches."""

    def __init__(self, tokens, batch, seq_len, position=0, source="data"):
        self.tokens, self.batch, self.seq_len = tokens, batch, seq_len
        span = batch * seq_len + 1
        if len(tokens) < span:
            raise BadArgumentError(f"{source}: {len(tokens)} tokens, fewer than one batch needs "
                                   f"(batch {batch} x seq_len {seq_len} + 1)")
        if not 0 <= position <= len(tokens) - span:
            raise BadArgumentError(f"{source}: position {position} is outside [0, {len(tokens) - span}]")
        self.position = position

    def next(self):
        n = self.batch * self.seq_len
        window = self.tokens[self.position:self.position + n + 1]
        self.position += n
        if self.position + n + 1 > len(self.tokens):
            self.position = 0
        return window[:-1].reshape(self.batch, self.seq_len), window[1:].reshape(self.batch, self.seq_len)
