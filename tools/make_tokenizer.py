"""Writes the default tokenizer, python/dataflow/data/tokenizer.json: a byte-level BPE (Hugging Face
`tokenizers`) trained on the embedded corpus, with <|bos|> and <|eos|> as ids 0 and 1.

Byte-level means any UTF-8 text encodes (train --data on other text still works, at more tokens per
word); trained on the corpus means its words are a token or two each, so a small model trained for a
couple of minutes predicts whole words instead of letters. Training is deterministic: rerunning this
reproduces the committed file (tests/io/test_tokenizer_corpus.py checks it).

usage: python tools/make_tokenizer.py [OUTPUT]
"""
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "python", "dataflow", "data", "corpus.txt")
OUTPUT = os.path.join(HERE, "..", "python", "dataflow", "data", "tokenizer.json")
VOCAB_SIZE = 2048
SPECIALS = ["<|bos|>", "<|eos|>"]


def train(text, vocab_size=VOCAB_SIZE):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text], trainer=trainer)
    return tokenizer


def main(output=OUTPUT):
    with open(CORPUS, encoding="utf-8") as f:
        tokenizer = train(f.read())
    tokenizer.save(output, pretty=False)
    print(f"{output}: {tokenizer.get_vocab_size()} tokens")


if __name__ == "__main__":
    main(*sys.argv[1:])
