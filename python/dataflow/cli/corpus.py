"""Training text as token batches: the embedded corpus (data/corpus.txt) or a text file, split into
a training stream and held-out validation rows spread over it."""
import hashlib
import os

import numpy as np

from ..errors import BadArgumentError, FileFormatError
from ..io.file_checks import open_regular

EMBEDDED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "corpus.txt")
VALIDATION_FRACTION = 0.05   # at most this share of the token stream is held out, never trained on
VALIDATION_ROWS = 32         # sequences scored for each validation loss


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
    """(training tokens, validation rows [n, seq_len]): n windows of seq_len tokens (at most `rows`,
    together at most `fraction` of the stream, at least one) spread evenly over the stream are held
    out, and the rest, in order, is the training stream; a stream too short to spare a row gets no
    validation. Spread, not a tail: a corpus of many documents (the embedded one: one module's
    docstrings after another) would otherwise be validated on its last document alone, whose loss
    measures how unlike the rest that document is more than how well the model generalises."""
    windows = len(tokens) // seq_len
    n = min(rows, max(int(len(tokens) * fraction), seq_len) // seq_len)
    if n == 0 or len(tokens) - n * seq_len < 2 * seq_len:
        return tokens, np.zeros((0, seq_len), tokens.dtype)
    held = [(2 * k + 1) * windows // (2 * n) for k in range(n)]  # the middle window of each n-th of the stream
    keep = np.ones(len(tokens), bool)
    for w in held:
        keep[w * seq_len:(w + 1) * seq_len] = False
    return tokens[keep], np.stack([tokens[w * seq_len:(w + 1) * seq_len] for w in held])


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
