"""The byte tokenizer and the embedded corpus's batches."""
import numpy as np
import pytest

from dataflow import BadArgumentError
from dataflow.corpus import EMBEDDED, Batches, load_tokens
from dataflow.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


@pytest.mark.parametrize("text", ["", "hello, world", "naïve café — 日本語 🙂", "<|eos|> stays text", "\x00\n\t"])
def test_round_trip(text):
    ids = TOK.encode(text)
    assert ids.dtype == np.int32 and len(ids) == len(text.encode("utf-8")) and ids.max(initial=0) < 256
    assert TOK.decode(ids) == text


def test_specials_and_partial_characters():
    ids = TOK.encode("hé", bos=True, eos=True)
    assert ids[0] == TOK.bos_id and ids[-1] == TOK.eos_id and TOK.vocab_size == 258
    assert TOK.decode(ids) == "<|bos|>hé<|eos|>"
    assert TOK.decode(TOK.encode("é")[:1]) == "\ufffd"
    with pytest.raises(BadArgumentError, match=r"token ids must lie in \[0, 258\)"):
        TOK.decode([1, 300])
    assert ByteTokenizer.from_dict(TOK.to_dict()).vocab_size == 258
    with pytest.raises(BadArgumentError):
        ByteTokenizer.from_dict({"kind": "bpe"})


def test_embedded_corpus_ships_with_the_package():
    tokens = load_tokens(TOK)
    assert 300_000 < len(tokens) < 1_000_000 and tokens[-1] == TOK.eos_id
    text = TOK.decode(tokens[:-1])
    assert "Return" in text and text == open(EMBEDDED, encoding="utf-8").read()


def test_batches_are_consecutive_and_resumable(tmp_path):
    tokens = np.arange(50, dtype=np.int32)
    batches = Batches(tokens, batch=2, seq_len=4)
    x, y = batches.next()
    np.testing.assert_array_equal(x, [[0, 1, 2, 3], [4, 5, 6, 7]])
    np.testing.assert_array_equal(y, x + 1)
    seen = [batches.next()[0] for _ in range(6)]
    assert seen[4][0, 0] == 40 and seen[5][0, 0] == 0  # windows of 8 (+1) start at 0..40, then wrap
    resumed = Batches(tokens, 2, 4, position=16)
    np.testing.assert_array_equal(resumed.next()[0], seen[1])
    with pytest.raises(BadArgumentError, match=r"small\.txt: 3 tokens, fewer than one batch"):
        Batches(tokens[:3], 2, 4, source="small.txt")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(BadArgumentError, match=r"bad\.txt: cannot read as UTF-8"):
        load_tokens(TOK, tmp_path / "bad.txt")
