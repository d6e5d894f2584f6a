"""`dataflow train` / `dataflow generate`: the command's safety and plumbing (arguments, overwrite,
resume, Ctrl-C, disk full, checkpoints, plot, streaming) with a numpy bigram stand-in for speed, and
the real Llama through subprocesses (`python -m dataflow.cli`, what the installed entry point runs)."""
import argparse
import errno
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dataflow
from dataflow.io import checkpoint
from dataflow.cli import main as cli
from dataflow.io import safetensors as st
from dataflow.io import tokenizer as tokenizers
from dataflow.cli import train as train_module
from cli_helpers import MICRO, SMALL, PlainSGD, dataflow_subprocess, install_stand_in, run_cli, subprocess_env

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def files_of(directory):
    """{relative path: sha256} of everything under directory (to prove nothing was written)."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, directory)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return out


@pytest.mark.slow
def test_train_resume_generate_plumbing(stand_in, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "6", *SMALL, "--out", str(out), "--schedule-steps", "10") == 0
    ck = checkpoint.load(out / "checkpoint")
    assert ck.state["step"] == 6 and len(ck.state["losses"]) == 6 and ck.state["data"]["position"] == 6 * 32
    assert ck.state["data"]["source"] == "embedded" and ck.config["vocab_size"] == 258
    assert [v[0] for v in ck.state["val_losses"]] == [1, 2, 3, 4, 5, 6]  # --eval-every default: steps // 10
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    captured = capsys.readouterr()
    assert "step 6/6" in captured.err and "tok/s" in captured.err and "ETA" in captured.err and "val " in captured.err
    banner = captured.out.splitlines()[0]
    assert re.match(r"dataflow train: Llama \d+\.\d+M parameters \(4 layers, hidden 192", banner)
    assert "held out for validation" in captured.out and "host matmul:" in captured.out
    assert "loss" in captured.out and "checkpoint" in captured.out

    # resume: same batch settings and lr schedule come from the checkpoint; identical to an uninterrupted run
    assert run_cli("train", "--steps", "4", "--resume", "--out", str(out)) == 0
    straight = tmp_path / "straight"
    assert run_cli("train", "--steps", "10", *SMALL, "--out", str(straight), "--eval-every", "100") == 0
    resumed, uninterrupted = checkpoint.load(out / "checkpoint"), checkpoint.load(straight / "checkpoint")
    assert resumed.state["losses"] == uninterrupted.state["losses"] and resumed.state["step"] == 10
    np.testing.assert_array_equal(resumed.model_state["table"], uninterrupted.model_state["table"])

    capsys.readouterr()
    assert run_cli("generate", "--checkpoint", str(out / "checkpoint"), "--prompt", "Return",
                   "--max-new-tokens", "5", "--seed", "1") == 0
    assert capsys.readouterr().out.startswith("Return")


@pytest.mark.slow
def test_an_existing_run_is_never_replaced_without_being_told(stand_in, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "3", *SMALL, "--out", str(out)) == 0
    before = files_of(out)
    assert run_cli("train", "--steps", "3", *SMALL, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "--out: " in err and "already holds a trained run; continue it with --resume, replace it with " \
                                "--overwrite" in err
    assert files_of(out) == before
    other = tmp_path / "other"
    assert run_cli("train", "--steps", "2", *SMALL, "--out", str(other)) == 0
    assert run_cli("train", "--steps", "1", "--resume", str(other / "checkpoint"), "--out", str(out)) == 2
    assert "already holds another run than --resume" in capsys.readouterr().err
    assert files_of(out) == before
    assert run_cli("train", "--steps", "2", *SMALL, "--out", str(out), "--overwrite") == 0
    assert checkpoint.load(out / "checkpoint").state["step"] == 2


def test_resumed_runs_keep_their_validation_interval_and_plot_title(stand_in, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "20", *SMALL, "--out", str(out)) == 0  # validation every 2 steps
    assert "validation every 2 steps" in capsys.readouterr().out
    assert run_cli("train", "--steps", "3", "--resume", "--lr", "5e-4", "--out", str(out)) == 0
    banner = capsys.readouterr().out
    assert "validation every 2 steps" in banner  # not every step, as 3 // 10 would give
    state = checkpoint.load(out / "checkpoint").state
    assert [v[0] for v in state["val_losses"]][-3:] == [20, 22, 23] and state["run"]["eval_every"] == 2
    assert state["segments"] == [[0, 1e-3], [20, 5e-4]]
    assert run_cli("train", "--steps", "1", "--resume", "--eval-every", "1", "--out", str(out)) == 0
    assert "validation every step" in capsys.readouterr().out
    assert checkpoint.load(out / "checkpoint").state["segments"] == [[0, 1e-3], [20, 5e-4], [23, 5e-4]]


def test_plot_keeps_its_title_and_marks_resumes(monkeypatch, tmp_path):
    install_stand_in(monkeypatch)
    drawn = []
    monkeypatch.setattr(train_module.loss_plot, "save", lambda path, losses, val, title, marks, lrs: drawn.append(
        (title, marks)))
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "4", *SMALL, "--out", str(out)) == 0
    assert run_cli("train", "--steps", "2", "--resume", "--out", str(out)) == 0
    assert run_cli("train", "--steps", "2", "--resume", "--lr", "5e-4", "--out", str(out)) == 0
    titles = {title for title, _ in drawn}
    assert len(titles) == 1 and titles.pop().startswith("run: Llama ")
    assert drawn[-1][1] == [(4, "resumed"), (6, "resumed, lr 0.001 -> 0.0005")]


def test_checkpoint_is_a_whole_hf_directory_with_its_tokenizer(stand_in, tmp_path):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "1", "--batch", "2", "--seq-len", "16", "--out", str(out)) == 0
    ckpt = out / "checkpoint"
    assert checkpoint.load(ckpt).state["tokenizer"]["json"] == (ckpt / "tokenizer.json").read_text()
    tok = tokenizers.load(str(ckpt))
    assert tok.vocab_size == tokenizers.default().vocab_size and tok.decode(tok.encode("Return the")) == "Return the"
    out = tmp_path / "bytes"  # a byte tokenizer has no tokenizer.json to write
    assert run_cli("train", "--steps", "1", *SMALL, "--out", str(out)) == 0
    assert not (out / "checkpoint" / "tokenizer.json").exists()


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "nothere", "--checkpoint: {path} does not exist; expected a checkpoint"),
    (lambda tmp: tmp, "--checkpoint: {path} holds neither trainer_state.json (a checkpoint) nor config.json"),
    (lambda tmp: tmp / "file.txt", "--checkpoint: {path} is not a directory"),
])
def test_generate_names_what_the_checkpoint_is_not(tmp_path, capsys, make, message):
    (tmp_path / "file.txt").write_text("x")
    path = make(tmp_path)
    assert run_cli("generate", "--checkpoint", str(path)) == 2
    err = capsys.readouterr().err
    assert message.format(path=path) in err and "trainer_state.json: cannot read" not in err, err


def test_help_keeps_flag_names_whole(capsys):
    for command in ("train", "generate", "plan", "serve", "demo"):
        assert run_cli(command, "--help") == 0
        lines = capsys.readouterr().out.splitlines()
        assert not [line for line in lines if re.search(r"--[a-z]+(-[a-z]+)*-$", line.rstrip())], command


BAD_ARGUMENTS = {  # argv -> what stderr must say (each names the flag)
    "negative steps": (["--steps", "-5"], "argument --steps: must be >= 1, got -5"),
    "zero steps": (["--steps", "0"], "argument --steps: must be >= 1, got 0"),
    "word steps": (["--steps", "many"], "argument --steps: expected an integer, got 'many'"),
    "zero batch": (["--batch", "0"], "argument --batch: must be >= 1"),
    "short seq-len": (["--seq-len", "1"], "argument --seq-len: must be >= 2"),
    "nan lr": (["--lr", "nan"], "argument --lr: must be in (0, 1], got nan"),
    "negative lr": (["--lr=-1e-3"], "argument --lr: must be in (0, 1]"),
    "zero schedule-steps": (["--schedule-steps", "0"], "argument --schedule-steps: must be >= 1, got 0"),
    "zero threads": (["--threads", "0"], "argument --threads: must be >= 1"),
    "bad memory": (["--device-memory", "5XB"], "argument --device-memory: expected a size like 512MiB"),
    "negative save-every": (["--save-every", "-1"], "argument --save-every: must be >= 0"),
    "fp16": (["--dtype", "fp16"], "argument --dtype: invalid choice: 'fp16'"),
    "master weights of fp32": (["--master-weights"], "--master-weights: fp32 master weights are for bf16 training"),
    "seq-len past context": (["--seq-len", "1000"], "--seq-len: 1000 exceeds the model's max_position_embeddings 256"),
    "unknown preset": (["--config", "nope"], "--config: 'nope' is not a preset (tiny, small, llama3.2-1b, "),
    "data is a device": (["--data", "/dev/zero"], "--data: /dev/zero: training text must be a regular file"),
    "data is missing": (["--data", "/no/such/file.txt"], "--data: /no/such/file.txt: cannot read training text"),
    "data too short": (["--data", "{short}"], "--data: {short}: 3 tokens to train on, fewer than one batch"),
    "tokenizer missing": (["--tokenizer", "/no/tok.json"], "/no/tok.json: cannot read tokenizer file"),
    "init not a directory": (["--init", "{short}"], "--init: "),
    "resume nothing": (["--resume", "{tmp}/nothing"], "--resume: no checkpoint at"),
    "out is a file": (["--out", "{short}"], "--out: "),
    "trace is a directory": (["--trace", "{tmp}"], "--trace: {tmp} is a directory; name a file"),
    "trace in no directory": (["--trace", "/no/such/dir/t.json"], "--trace: cannot write to /no/such/dir"),
    "trace-steps alone": (["--trace-steps", "3"], "--trace-steps: says how many steps --trace covers"),
    "resume in place with overwrite": (["--resume"], "--overwrite: --resume continues"),  # the test adds --overwrite
    "typo'd flag": (["--stpes", "3"], "dataflow train: error: unrecognized arguments: --stpes 3 (did you mean --steps?)"),
    "zero trace-steps": (["--trace", "{tmp}/t.json", "--trace-steps", "0"], "argument --trace-steps: must be >= 1"),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished stand-in run, made once; tests copy it."""
    out = tmp_path_factory.mktemp("trained") / "run"
    with pytest.MonkeyPatch.context() as mp:
        install_stand_in(mp)
        assert run_cli("train", "--steps", "2", *SMALL, "--out", str(out)) == 0
    return out


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_arguments_write_nothing_and_name_the_flag(stand_in, trained, tmp_path, capsys, case):
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    (tmp_path / "short.txt").write_text("hi")
    before, listing = files_of(out), sorted(os.listdir(tmp_path))
    capsys.readouterr()
    argv, message = BAD_ARGUMENTS[case]
    argv = [a.format(short=tmp_path / "short.txt", tmp=tmp_path) for a in argv]
    message = message.format(short=tmp_path / "short.txt", tmp=tmp_path)
    out_flag = [] if "--out" in argv else ["--out", str(out)]
    code = run_cli("train", *argv, *out_flag, "--overwrite")  # even told to replace the run, a bad flag keeps it
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err
    assert files_of(out) == before and sorted(os.listdir(tmp_path)) == listing


@pytest.mark.parametrize("flag", [["--seed", "3"], ["--config", "small"], ["--tokenizer", "bytes"]])
def test_resume_refuses_what_it_cannot_change(stand_in, tmp_path, capsys, flag):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "2", *SMALL, "--out", str(out)) == 0
    capsys.readouterr()
    assert run_cli("train", "--steps", "2", "--resume", "--out", str(out), *flag) == 2
    assert f"{flag[0]}: a resumed run keeps its checkpoint's model, weights and tokenizer" in capsys.readouterr().err


def test_resume_honours_changed_hyperparameters(stand_in, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "2", *SMALL, "--lr", "0.002", "--out", str(out)) == 0
    assert PlainSGD.calls == [0.002, 0.0002]  # the warmup's one step to the peak, then the floor at the horizon
    PlainSGD.calls = []
    assert run_cli("train", "--steps", "3", "--resume", "--out", str(out), "--lr", "0.0005", "--batch", "3") == 0
    # the new lr is the new peak (not the lr restored with the optimizer); training past the horizon (step 2)
    # stretches the cosine to this run's end: steps 3, 4, 5 of a 5-step schedule (1 warmup step)
    np.testing.assert_allclose(PlainSGD.calls, [0.0005 * (0.1 + 0.45 * (1 + math.cos(math.pi * (s - 1) / 4)))
                                                for s in (3, 4, 5)], rtol=1e-12)
    ck = checkpoint.load(out / "checkpoint")
    assert ck.state["run"]["lr"] == 0.0005 and ck.state["run"]["batch"] == 3 and ck.state["run"]["schedule_steps"] == 5
    assert ck.state["data"]["position"] == 2 * 32 + 3 * 48
    assert ck.state["lrs"] == [0.002, 0.0002] + PlainSGD.calls  # the lr of every step, for the plot
    assert "(batch 2 -> 3, lr 0.002 -> 0.0005, schedule_steps 2 -> 5)" in capsys.readouterr().out


def test_resume_needs_the_same_data_named_explicitly(stand_in, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("Return the value of the function. " * 300)
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "2", *SMALL, "--data", str(text), "--out", str(out)) == 0
    capsys.readouterr()
    assert run_cli("train", "--steps", "1", "--resume", "--out", str(out)) == 2
    assert f"--data: this run trained on {text}; pass --data with that file" in capsys.readouterr().err
    other = tmp_path / "other.txt"
    other.write_text("Something else entirely. " * 300)
    assert run_cli("train", "--steps", "1", "--resume", "--out", str(out), "--data", str(other)) == 2
    assert "differs from the text this run trained on" in capsys.readouterr().err
    assert run_cli("train", "--steps", "1", "--resume", "--out", str(out), "--data", str(text)) == 0


def test_disk_full_is_one_line_and_keeps_the_previous_checkpoint(stand_in, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert run_cli("train", "--steps", "2", *SMALL, "--out", str(out)) == 0
    before = files_of(out / "checkpoint")
    write = st.write

    def full_disk(path, tensors, metadata=None):
        write(path, {k: v for k, v in list(tensors.items())[:1]}, metadata)  # some bytes land, then ENOSPC
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr(st, "write", full_disk)
    capsys.readouterr()
    assert run_cli("train", "--steps", "2", "--resume", "--out", str(out)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"dataflow train: cannot save the checkpoint {out / 'checkpoint'}: No space "
                                            "left on device; it keeps the last saved state (step 2)")
    assert files_of(out / "checkpoint") == before and checkpoint.load(out / "checkpoint").state["step"] == 2
    assert sorted(os.listdir(out)) == ["checkpoint", "loss.png"]  # no temp directory left behind


def test_help_version_and_every_flag_documented(capsys):
    assert run_cli() == 0
    assert "train" in capsys.readouterr().out
    assert run_cli("--version") == 0
    assert re.match(r"dataflow \d+\.\d+\.\d+ \(host matmul: ", capsys.readouterr().out)
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in [("dataflow", parser), *subparsers.choices.items()]:
        for action in sub._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.option_strings)


# ---- the real model, through `python -m dataflow.cli` ----

@pytest.mark.slow
def test_bf16_master_weights_resume_like_an_uninterrupted_run(tmp_path):
    """The real model: fp32 master weights are checkpointed and restored, so 3 + 2 steps equal 5."""
    pytest.importorskip("dataflow.models")
    (tmp_path / "micro.json").write_text(MICRO)
    common = ("--config", "micro.json", "--batch", "2", "--seq-len", "16", "--dtype", "bf16", "--master-weights",
              "--schedule-steps", "5")
    assert dataflow_subprocess("train", "--steps", "3", *common, "--out", "a", cwd=tmp_path).returncode == 0
    resumed = dataflow_subprocess("train", "--steps", "2", "--resume", "--out", "a", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert dataflow_subprocess("train", "--steps", "5", *common, "--out", "b", cwd=tmp_path).returncode == 0
    a, b = checkpoint.load(tmp_path / "a" / "checkpoint"), checkpoint.load(tmp_path / "b" / "checkpoint")
    assert a.state["losses"] == b.state["losses"] and len(a.state["losses"]) == 5
    assert "master" in a.optimizer_state and a.state["run"]["master_weights"] is True
    for name, value in b.model_state.items():
        np.testing.assert_array_equal(a.model_state[name], value, err_msg=name)


def test_trace_covers_the_first_steps_and_changes_no_bits(tmp_path, capsys):
    """--trace: the real model's first --trace-steps steps as Chrome JSON (Trainer.trace); the run
    trains as it would untraced (the oracle); an existing trace is kept unless --overwrite."""
    pytest.importorskip("dataflow.models")
    (tmp_path / "micro.json").write_text(MICRO)
    common = ("--config", str(tmp_path / "micro.json"), "--steps", "3", *SMALL)
    trace = tmp_path / "t.json"
    assert run_cli("train", *common, "--out", str(tmp_path / "a"), "--trace", str(trace), "--trace-steps", "2") == 0
    assert f"trace {trace}" in capsys.readouterr().out
    assert run_cli("train", *common, "--out", str(tmp_path / "b")) == 0
    a, b = checkpoint.load(tmp_path / "a" / "checkpoint"), checkpoint.load(tmp_path / "b" / "checkpoint")
    assert a.state["losses"] == b.state["losses"]
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["args"]["step"] for e in spans if e["cat"] == "backward"} == {1, 2}
    assert {"forward layer 0 c0", "head c0", "backward layer 0 c0", "adamw layer 0"} <= {e["name"] for e in spans}
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} == {"compute", "inbound", "outbound",
                                                                                 "optimizer"}  # the executor's roles
    assert {e["name"] for e in events if e["ph"] == "C"} == {"device memory (bytes)", "host memory (bytes)"}
    capsys.readouterr()
    assert run_cli("train", *common, "--out", str(tmp_path / "c"), "--trace", str(trace)) == 2
    assert f"--trace: {trace} exists; remove it, choose another path or pass --overwrite" in capsys.readouterr().err
    assert run_cli("train", *common, "--out", str(tmp_path / "c"), "--trace", "/no/such/dir/t.json") == 2
    assert "--trace: cannot write to /no/such/dir: No such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_sigint_saves_a_resumable_checkpoint_and_prints_the_resume_command(tmp_path):
    pytest.importorskip("dataflow.models")
    (tmp_path / "micro.json").write_text(MICRO)
    child = subprocess.Popen([sys.executable, "-m", "dataflow.cli", "train", "--config", "micro.json", "--steps",
                              "100000", "--batch", "2", "--seq-len", "32", "--out", "run"], cwd=tmp_path, env=subprocess_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in child.stdout:  # the banner ends with the output line, then training starts
        if line.startswith("  output:"):
            break
    time.sleep(2)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "interrupted: finishing this step and saving a checkpoint" in err and "Traceback" not in err
    command = re.search(r"resume with: (dataflow train .*)", err).group(1)
    step = checkpoint.load(tmp_path / "run" / "checkpoint").state["step"]
    assert step >= 1 and command == f"dataflow train --resume run/checkpoint --out run --steps {100000 - step}"
    assert not [p for p in os.listdir(tmp_path / "run") if p.startswith(".")]  # no temp directory left

    argv = command.split()[1:]
    argv[argv.index("--steps") + 1] = "2"
    resumed = dataflow_subprocess(*argv, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert checkpoint.load(tmp_path / "run" / "checkpoint").state["step"] == step + 2


@pytest.mark.slow
def test_generate_streams_and_keeps_to_the_context(tmp_path):
    pytest.importorskip("dataflow.models")
    (tmp_path / "micro.json").write_text(MICRO)
    assert dataflow_subprocess("train", "--config", "micro.json", "--steps", "2", "--batch", "2", "--seq-len", "32",
                     "--out", "run", cwd=tmp_path).returncode == 0
    gen = dataflow_subprocess("generate", "--checkpoint", "run/checkpoint", "--prompt", "Return", "--max-new-tokens", "500",
                    "--seed", "0", cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr
    assert "stopping at the model's context of 64 tokens" in gen.stderr and gen.stdout.startswith("Return")
    long_prompt = dataflow_subprocess("generate", "--checkpoint", "run/checkpoint", "--prompt", "Return the value " * 40,
                            cwd=tmp_path)
    assert long_prompt.returncode == 2
    assert re.search(r"--prompt: 1\d\d tokens, but the model's context is 64 tokens", long_prompt.stderr)


@pytest.mark.parametrize("field,value", [("step", "3"), ("losses", {"a": 1}), ("val_losses", [[1]]),
                                         ("run", {"batch": -2}), ("run", {"lr": "fast"}), ("run", {"schedule_steps": 0}), ("lrs", [1e-3, "x"]),
                                         ("data", {"position": 1.5})])
def test_resume_checks_the_saved_run_state(stand_in, trained, tmp_path, capsys, field, value):
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    ck = checkpoint.load(out / "checkpoint")
    state = {**ck.state, field: value if field != "run" else {**ck.state["run"], **value}}
    checkpoint.save(out / "checkpoint", ck.model_state, ck.config, ck.optimizer_state, state)
    capsys.readouterr()
    assert run_cli("train", "--steps", "1", "--resume", "--out", str(out)) == 2
    assert re.search(rf"trainer_state\.json: state\.{field}(\.\w+)?: unexpected value", capsys.readouterr().err)


@pytest.mark.parametrize("family", [{"model_type": "llama"}, {"model_type": "qwen2"},
                                    {"model_type": "qwen3", "head_dim": 16, "attention_bias": True},
                                    {"model_type": "mistral", "num_key_value_heads": 1, "sliding_window": 6}])
def test_hf_directories_train_from_and_generate_with_their_own_tokenizer(tmp_path, capsys, family):
    """An HF model directory (config.json, model.safetensors, tokenizer.json) of each family:
    `train --init` starts from its weights and tokenizer, `generate --checkpoint DIR` samples from it
    with its tokenizer.json."""
    models = pytest.importorskip("dataflow.models")
    from dataflow.io import tokenizer as tokenizers
    text = tmp_path / "text.txt"
    text.write_text("Return the value of the function. " * 200)
    hf = tmp_path / "hf"
    with dataflow.Handle("host") as h:
        config = {**family, "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64,
                  "eos_token_id": 257}
        model = models.Llama(h, config, seed=5)
        model.save_pretrained(hf)
        weights = model.state_dict()
        model.close()
    byte_level = tokenizers.HFTokenizer.from_str(_byte_level_tokenizer_json(), "bytes")
    byte_level.save(hf)
    assert run_cli("train", "--init", str(hf), "--data", str(text), "--steps", "2", "--batch", "2", "--seq-len", "16",
                   "--out", str(tmp_path / "run"), "--lr", "1e-9") == 0
    assert f"from {hf / 'config.json'}" in capsys.readouterr().out
    ck = checkpoint.load(tmp_path / "run" / "checkpoint")
    assert ck.state["tokenizer"]["kind"] == "hf" and ck.config["vocab_size"] == 300
    assert ck.config["model_type"] == family["model_type"] and set(ck.model_state) == set(weights)
    np.testing.assert_allclose(ck.model_state["model.norm.weight"], weights["model.norm.weight"], atol=1e-6)
    assert run_cli("generate", "--checkpoint", str(hf), "--prompt", "Return", "--max-new-tokens", "8",
                   "--seed", "0") == 0
    assert capsys.readouterr().out.startswith("Return")


def _byte_level_tokenizer_json():
    """A byte-level BPE with no merges: 256 byte tokens and <|bos|>, <|eos|> at 256, 257."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|bos|>", "<|eos|>"])
    return tok.to_str()


def test_a_checkpoint_never_chooses_which_file_to_read(stand_in, trained, tmp_path, capsys):
    """A checkpoint naming /dev/zero (or any file) as its training data: resuming reads nothing the user
    did not name; naming it explicitly still only reads regular files."""
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    ck = checkpoint.load(out / "checkpoint")
    state = {**ck.state, "data": {**ck.state["data"], "source": "/dev/zero"}}
    checkpoint.save(out / "checkpoint", ck.model_state, ck.config, ck.optimizer_state, state)
    capsys.readouterr()
    assert run_cli("train", "--steps", "1", "--resume", "--out", str(out)) == 2
    assert "--data: this run trained on /dev/zero; pass --data with that file" in capsys.readouterr().err
    assert run_cli("train", "--steps", "1", "--resume", "--out", str(out), "--data", "/dev/zero") == 2
    assert "--data: /dev/zero: training text must be a regular file, this is a device" in capsys.readouterr().err
