"""Tokenizers (the corpus BPE through Hugging Face `tokenizers`, the byte tokenizer, tokenizer.json
files), streaming decode, and the embedded corpus's batches and validation split."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dataflow import BadArgumentError, FileFormatError
from dataflow.io import tokenizer as tokenizers
from dataflow.cli.corpus import EMBEDDED, Batches, load_tokens, read_text, split
from dataflow.io.tokenizer import ByteTokenizer, StreamDecoder
from paths import ROOT

TOK = ByteTokenizer()
BPE = tokenizers.default()
TEXTS = ["", "hello, world", "naïve café — 日本語 🙂", "<|eos|> stays text", "\x00\n\t", "def f(x):\n    return x"]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(text):
    ids = TOK.encode(text)
    assert ids.dtype == np.int32 and len(ids) == len(text.encode("utf-8")) and ids.max(initial=0) < 256
    assert TOK.decode(ids) == text
    ids = BPE.encode(text)
    assert ids.dtype == np.int32 and BPE.decode(ids) == text
    assert BPE.eos_id not in ids  # text never produces a special token


def test_specials_and_partial_characters():
    ids = TOK.encode("hé", bos=True, eos=True)
    assert ids[0] == TOK.bos_id and ids[-1] == TOK.eos_id and TOK.vocab_size == 258
    assert TOK.decode(ids) == "<|bos|>hé<|eos|>"
    assert TOK.decode(TOK.encode("é")[:1]) == "\ufffd"
    with pytest.raises(BadArgumentError, match=r"token ids must be integers in \[0, 258\)"):
        TOK.decode([1, 300])
    assert (BPE.bos_id, BPE.eos_id, BPE.vocab_size) == (0, 1, 2048)
    assert BPE.decode(BPE.encode("hé", bos=True, eos=True)) == "<|bos|>hé<|eos|>"


def test_the_corpus_bpe_makes_words_single_tokens():
    text = read_text()[0]
    words = "Return the value of the function".split()
    assert all(len(BPE.encode(" " + w)) == 1 for w in words[1:])
    assert len(text) / len(BPE.encode(text)) > 3  # bytes per token: ~3.1 vs 1 for the byte tokenizer


def test_shipped_tokenizer_is_what_the_tool_trains(tmp_path):
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_tokenizer.py"), str(tmp_path / "t.json")],
                   check=True, capture_output=True)
    assert (tmp_path / "t.json").read_bytes() == open(tokenizers.DEFAULT_PATH, "rb").read()


def test_to_dict_round_trips_and_bad_specs_are_file_errors(tmp_path):
    for tok in (TOK, BPE):
        back = tokenizers.from_dict(json.loads(json.dumps(tok.to_dict())), "state.json")
        assert type(back) is type(tok) and back.vocab_size == tok.vocab_size and back.eos_id == tok.eos_id
        assert back.decode(back.encode("Return x")) == "Return x"
    for spec, message in ((None, "expected an object"), ({"kind": "bpe"}, "unknown kind 'bpe'"),
                          ({"kind": "byte", "vocab_size": 9}, "is not this byte tokenizer"),
                          ({"kind": "hf", "json": "{oops"}, "not a Hugging Face tokenizer.json"),
                          ({"kind": "hf", "json": BPE.to_dict()["json"], "eos_id": 99999}, "eos_id 99999 is outside")):
        with pytest.raises(FileFormatError, match=r"state\.json: .*" + message):
            tokenizers.from_dict(spec, "state.json")


def test_load_files_and_directories(tmp_path):
    (tmp_path / "tokenizer.json").write_text(BPE.to_dict()["json"])
    assert tokenizers.load(tmp_path).vocab_size == 2048
    assert tokenizers.load(tmp_path / "tokenizer.json", eos_id=5).eos_id == 5
    assert isinstance(tokenizers.load("bytes"), ByteTokenizer)
    with pytest.raises(FileFormatError, match=r"nothere: cannot read tokenizer file"):
        tokenizers.load(tmp_path / "nothere")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(FileFormatError, match=r"fifo\.json: tokenizer file must be a regular file"):
        tokenizers.load(tmp_path / "fifo.json")
    (tmp_path / "bad.json").write_text('{"model": 3}')
    with pytest.raises(FileFormatError, match=r"bad\.json: not a Hugging Face tokenizer\.json"):
        tokenizers.load(tmp_path / "bad.json")


@pytest.mark.parametrize("tok", [TOK, BPE], ids=["bytes", "bpe"])
def test_stream_decoder_emits_each_token_once_and_holds_split_characters(tok):
    text = "Return the café 🙂 value"
    decoder = StreamDecoder(tok)
    pieces = [decoder.push(t) for t in tok.encode(text)]
    assert "".join(pieces) + decoder.flush() == text
    assert all("\ufffd" not in p for p in pieces)
    assert sum(1 for p in pieces if p) > 3  # streamed, not all at the end
    cut = StreamDecoder(tok)
    partial = "".join(cut.push(t) for t in TOK.encode("é")[:1]) if tok is TOK else ""
    assert partial == "" and (tok is not TOK or cut.flush() == "\ufffd")


def test_embedded_corpus_ships_with_the_package():
    tokens = load_tokens(BPE)
    assert 150_000 < len(tokens) < 250_000 and tokens[-1] == BPE.eos_id
    text = BPE.decode(tokens[:-1])
    assert "Return" in text and text == open(EMBEDDED, encoding="utf-8").read()


def test_batches_are_consecutive_and_resumable():
    tokens = np.arange(50, dtype=np.int32)
    batches = Batches(tokens, batch=2, seq_len=4)
    np.testing.assert_array_equal(batches.next(), [[0, 1, 2, 3], [4, 5, 6, 7]])
    seen = [batches.next() for _ in range(6)]
    assert seen[4][0, 0] == 40 and seen[5][0, 0] == 0  # windows of 8 start at 0..40, then wrap
    np.testing.assert_array_equal(Batches(tokens, 2, 4, position=16).next(), seen[1])
    with pytest.raises(BadArgumentError, match=r"small\.txt: 3 tokens to train on, fewer than one batch needs "
                                                r"\(--batch 2 x --seq-len 4\)"):
        Batches(tokens[:3], 2, 4, source="small.txt")


def test_validation_rows_are_held_out_evenly_over_the_stream():
    tokens = np.arange(10_000, dtype=np.int32)
    train, val = split(tokens, seq_len=64)
    assert val.shape == (7, 64) and train.size + val.size == tokens.size  # 5% of 10,000 tokens: 7 rows
    assert not np.isin(val, train).any()  # held out: never trained on
    np.testing.assert_array_equal(train, np.setdiff1d(tokens, val))  # the rest, in order
    assert val[0, 0] < tokens.size / 7 and val[-1, -1] >= tokens.size * 6 / 7  # spread: one in each 7th
    assert (np.diff(val[:, 0]) > 64).all()
    assert split(tokens, seq_len=64, rows=3)[1].shape == (3, 64)
    assert split(tokens[:100], seq_len=64)[1].shape == (0, 64)  # too short to hold any out


def test_only_regular_utf8_files_are_read(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(BadArgumentError, match=r"--data: .*bad\.txt: cannot read as UTF-8"):
        read_text(tmp_path / "bad.txt")
    with pytest.raises(BadArgumentError, match=r"--data: /dev/zero: training text must be a regular file"):
        read_text("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadArgumentError, match=r"this is a FIFO"):
        read_text(tmp_path / "fifo")
