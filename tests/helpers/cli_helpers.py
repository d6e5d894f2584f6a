"""What the CLI tests share: a numpy bigram model and plain SGD standing in for the Llama and its
Trainer (the command's plumbing, fast), the small run's flags and a micro config, and the two
ways to run the command (in-process, and as the installed entry point does in a subprocess)."""
import os
import subprocess
import sys
import types

import numpy as np

import dataflow
from dataflow.cli import main as cli
from dataflow.cli import train as train_module

SMALL = ["--batch", "2", "--seq-len", "16", "--tokenizer", "bytes"]  # a new run; bytes keep the bigram table small
MICRO = '{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, ' \
        '"num_key_value_heads": 1, "max_position_embeddings": 64}'


class Bigram:
    """logits[b, t] = table[tokens[b, t]]: enough of a model for the command to train and sample."""
    placement = "device"

    def __init__(self, config, seed):
        self.config = types.SimpleNamespace(max_position_embeddings=config["max_position_embeddings"],
                                            vocab_size=config["vocab_size"], tie_word_embeddings=False,
                                            to_dict=lambda: config)
        v = config["vocab_size"]
        self.table = np.random.default_rng(seed).standard_normal((v, v)) * 0.01

    def state_dict(self):
        return {"table": self.table.copy()}

    def load_state_dict(self, state):
        self.table = state["table"].astype(np.float64)

    def forward(self, tokens):
        return self.table[np.asarray(tokens)]

    def _loss_and_grad(self, tokens):
        """Mean next-token loss within each row (HF labels: the model shifts), and its gradient."""
        x, y = tokens[:, :-1], tokens[:, 1:]
        logits = self.forward(x)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        loss = -np.log(np.take_along_axis(p, y[..., None], -1)).mean()
        p[np.arange(y.shape[0])[:, None], np.arange(y.shape[1]), y] -= 1
        grad = np.zeros_like(self.table)
        np.add.at(grad, x, p / y.size)
        return loss, grad

    def loss(self, tokens):
        return self._loss_and_grad(np.asarray(tokens))[0]

    def close(self):
        pass


class PlainSGD:
    calls = []  # (lr) of every step, to check what a resumed run trains with

    plan = None  # always all-resident

    def __init__(self, model, lr, host_memory=None, seq_len=None, batch_size=None):
        self.model, self.lr, self.step_count = model, lr, 0

    def step(self, tokens):
        loss, grad = self.model._loss_and_grad(np.asarray(tokens))
        self.model.table -= self.lr * 100 * grad
        self.step_count += 1
        PlainSGD.calls.append(self.lr)
        return loss

    def state_dict(self):
        return {"step": np.int64(self.step_count), "hyperparameters": {"lr": self.lr}}

    def load_state_dict(self, state):
        self.step_count = int(state["step"])
        self.lr = state["hyperparameters"]["lr"]  # as the real Trainer: restores the saved lr


def install_stand_in(monkeypatch):
    """train/cli build a Bigram and train it with PlainSGD (for speed; the real model runs in subprocesses)."""
    def build(config, handle, dtype, seed=None, where=""):
        return Bigram(config, seed or 0)
    monkeypatch.setattr(train_module, "model_from_config", build)
    monkeypatch.setattr(cli, "model_from_config", build)
    monkeypatch.setattr(dataflow, "Trainer", PlainSGD, raising=False)
    PlainSGD.calls = []



def run_cli(*argv):
    """cli.main's exit code, argparse's included."""
    try:
        return cli.main([str(a) for a in argv])
    except SystemExit as e:
        return e.code


def subprocess_env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(dataflow.__path__[0]),
                                                         os.environ.get("PYTHONPATH", "")])}


def dataflow_subprocess(*args, cwd, timeout=600):
    """`python -m dataflow.cli ARGS` in cwd, as the installed entry point runs it."""
    return subprocess.run([sys.executable, "-m", "dataflow.cli", *args], cwd=cwd, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)
