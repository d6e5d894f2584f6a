"""Training text as token batches: the embedded corpus (data/corpus.txt) or a text file, split into
a training stream and a held-out validation tail."""
import hashlib
import os

import numpy as np

from .errors import BadArgumentError, FileFormatError
from .file_checks import open_regular

EMBEDDED = os.path.join(os.path.dirname(__file__), "data", "corpus.txt")
VALIDATION_FRACTION = 0.05   # the tail of the token stream, never trained on
VALIDATION_ROWS = 16         # sequences scored for each validation loss


def read_text(path=None, flag="--data"):
    """(text, sha256 of its bytes) of a UTF-8 file, the embedded corpus when path is None. Only a
    regular file is read (not a FIFO or a device); errors name the flag and the file."""
    path = EMBEDDED if path is None else os.fspath(path)
    try:
        with open_regular(path, "training text") as f:
            raw = f.read()
    except FileFormatError as e:
        raise BadArgumentError(f"{flag}: {e}") from None
    try:
        return raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError as e:
        raise BadArgumentError(f"{flag}: {path}: cannot read as UTF-8 text: {e}") from None


def load_tokens(tokenizer, path=None):
    """Token ids of a UTF-8 text file (the embedded corpus when path is None), ending in eos."""
    return tokenizer.encode(read_text(path)[0], eos=tokenizer.eos_id is not None)


def split(tokens, seq_len, fraction=VALIDATION_FRACTION, rows=VALIDATION_ROWS):
    """(training tokens, validation rows [n, seq_len]): the last `fraction` of the stream (at least one
    row, at most `rows`) is held out; a stream too short to spare a row gets no validation."""
    held = max(int(len(tokens) * fraction), seq_len)
    n = min(rows, held // seq_len)
    if n == 0 or len(tokens) - n * seq_len < 2 * seq_len:
        return tokens, np.zeros((0, seq_len), tokens.dtype)
    return tokens[:-n * seq_len], tokens[-n * seq_len:].reshape(n, seq_len)


class Batches:
    """Consecutive windows of a token stream, llm.c style: a step takes batch rows of seq_len tokens
    from `position` (each row is a document for the model, which predicts each next token within
    it); the stream wraps around. `position` is all a resumed run needs to continue with the same
    batches."""

    def __init__(self, tokens, batch, seq_len, position=0, source="data"):
        self.tokens, self.batch, self.seq_len = tokens, batch, seq_len
        span = batch * seq_len
        if len(tokens) < span:
            raise BadArgumentError(f"{source}: {len(tokens)} tokens to train on, fewer than one batch needs "
                                   f"(--batch {batch} x --seq-len {seq_len})")
        if not 0 <= position <= len(tokens) - span:
            position = 0  # a resumed run with a larger batch: start the stream again
        self.position = position

    def next(self):
        n = self.batch * self.seq_len
        window = self.tokens[self.position:self.position + n]
        self.position += n
        if self.position + n > len(self.tokens):
            self.position = 0
        return window.reshape(self.batch, self.seq_len)
