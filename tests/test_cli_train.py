"""`dataflow train` / `dataflow generate`: the command's plumbing (data, checkpoints, resume, PNG)
with a numpy bigram stand-in for the Llama now, and the real thing through subprocesses once
dataflow.models exists."""
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import dataflow
from dataflow import checkpoint, cli
from dataflow import train as train_module
from test_loss_plot import parse


class Bigram:
    """logits[b, t] = table[tokens[b, t]]: enough of a model for the command to train and sample."""

    def __init__(self, config, seed):
        self.config = types.SimpleNamespace(max_position_embeddings=config["max_position_embeddings"],
                                            tie_word_embeddings=False, to_dict=lambda: config)
        v = config["vocab_size"]
        self.table = np.random.default_rng(seed).standard_normal((v, v)) * 0.01

    def named_parameters(self):
        return {"table": self.table}

    def state_dict(self):
        return {"table": self.table.copy()}

    def load_state_dict(self, state):
        self.table = state["table"].astype(np.float64)

    def forward(self, tokens):
        return self.table[np.asarray(tokens)]


class PlainSGD:
    def __init__(self, model, lr):
        self.model, self.lr, self.step_count = model, lr * 100, 0

    def step(self, tokens, labels):
        logits = self.model.forward(tokens)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        loss = -np.log(np.take_along_axis(p, labels[..., None], -1)).mean()
        p[np.arange(labels.shape[0])[:, None], np.arange(labels.shape[1]), labels] -= 1
        grad = np.zeros_like(self.model.table)
        np.add.at(grad, tokens, p / labels.size)
        self.model.table -= self.lr * grad
        self.step_count += 1
        return loss

    def state_dict(self):
        return {"step": np.int64(self.step_count)}

    def load_state_dict(self, state):
        self.step_count = int(state["step"])


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(train_module, "model_from_config", lambda config, handle, dtype, seed=None, where="":
                        Bigram(config, seed or 0))
    monkeypatch.setattr(cli, "model_from_config", lambda config, handle, dtype, seed=None, where="":
                        Bigram(config, seed or 0))
    monkeypatch.setattr(dataflow, "Trainer", PlainSGD, raising=False)


def test_train_resume_generate_plumbing(stand_in, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", "--steps", "6", "--batch", "2", "--seq-len", "16", "--out", str(out)]) == 0
    ck = checkpoint.load(out / "checkpoint")
    assert ck.state["step"] == 6 and len(ck.state["losses"]) == 6 and ck.state["data"]["position"] == 6 * 32
    assert ck.state["data"]["source"] == "embedded" and ck.config["vocab_size"] == 258
    assert parse((out / "loss.png").read_bytes())[:2] == (640, 400)
    captured = capsys.readouterr()
    assert "step 6/6" in captured.err and "tok/s" in captured.err and "device memory" in captured.err
    assert "loss" in captured.out and "checkpoint" in captured.out

    # resume: same batch settings come from the checkpoint; identical to an uninterrupted run
    assert cli.main(["train", "--steps", "4", "--resume", str(out / "checkpoint"), "--out", str(out)]) == 0
    straight = tmp_path / "straight"
    assert cli.main(["train", "--steps", "10", "--batch", "2", "--seq-len", "16", "--out", str(straight)]) == 0
    resumed, uninterrupted = checkpoint.load(out / "checkpoint"), checkpoint.load(straight / "checkpoint")
    assert resumed.state["losses"] == uninterrupted.state["losses"] and resumed.state["step"] == 10
    np.testing.assert_array_equal(resumed.model_state["table"], uninterrupted.model_state["table"])

    capsys.readouterr()
    assert cli.main(["generate", "--checkpoint", str(out / "checkpoint"), "--prompt", "Return",
                     "--max-new-tokens", "5", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("Return")


def test_train_errors_are_messages(stand_in, tmp_path, capsys):
    (tmp_path / "short.txt").write_text("tiny")
    assert cli.main(["train", "--data", str(tmp_path / "short.txt"), "--out", str(tmp_path / "o")]) == 2
    assert "short.txt: 5 tokens, fewer than one batch" in capsys.readouterr().err
    assert cli.main(["train", "--config", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "neither a preset (tiny, small) nor a readable JSON file" in capsys.readouterr().err
    assert cli.main(["train", "--seq-len", "1000", "--out", str(tmp_path / "o")]) == 2
    assert "exceeds the model's max_position_embeddings 256" in capsys.readouterr().err
    assert cli.main(["train", "--master-weights", "--out", str(tmp_path / "o")]) == 2
    assert "--master-weights: fp32 master weights are for bf16 training" in capsys.readouterr().err
    assert cli.main(["generate", "--checkpoint", str(tmp_path / "none")]) == 2
    assert "trainer_state.json: cannot read" in capsys.readouterr().err


# ---- the real model, through the installed entry point's module (needs dataflow.models) ----

def _dataflow(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(dataflow.__path__[0]),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "dataflow.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_train_then_generate(tmp_path):
    pytest.importorskip("dataflow.models")
    run = _dataflow("train", "--steps", "30", "--batch", "4", "--seq-len", "64", "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "step 30/30" in run.stderr and "tok/s" in run.stderr
    losses = checkpoint.load(tmp_path / "run" / "checkpoint").state["losses"]
    assert len(losses) == 30 and np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
    assert parse((tmp_path / "run" / "loss.png").read_bytes())[:2] == (640, 400)
    gen = _dataflow("generate", "--checkpoint", "run/checkpoint", "--prompt", "The ", "--max-new-tokens", "20",
                    "--seed", "0", cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.startswith("The ") and len(gen.stdout) > len("The \n")


@pytest.mark.parametrize("precision", [(), ("--dtype", "bf16", "--master-weights")], ids=["fp32", "bf16-master"])
def test_resumed_run_matches_an_uninterrupted_one(tmp_path, precision):
    pytest.importorskip("dataflow.models")
    common = ("--batch", "2", "--seq-len", "32", *precision)
    assert _dataflow("train", "--steps", "3", *common, "--out", "a", cwd=tmp_path).returncode == 0
    resumed = _dataflow("train", "--steps", "2", "--resume", "a/checkpoint", "--out", "a", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _dataflow("train", "--steps", "5", *common, "--out", "b", cwd=tmp_path).returncode == 0
    a, b = checkpoint.load(tmp_path / "a" / "checkpoint"), checkpoint.load(tmp_path / "b" / "checkpoint")
    assert a.state["losses"] == b.state["losses"]
    assert ("master" in a.optimizer_state) == bool(precision) and a.state["run"]["master_weights"] == bool(precision)
