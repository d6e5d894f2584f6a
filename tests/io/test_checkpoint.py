"""Checkpoints: round trip of plain numpy state, validation of damaged files, atomic replacement
under SIGKILL, and (with dataflow.models) resuming to the identical next-step loss."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dataflow import FileFormatError
from dataflow.io import checkpoint

RNG = np.random.default_rng(0)
MODEL = {"model.embed_tokens.weight": RNG.standard_normal((11, 4)).astype(np.float32),
         "model.norm.weight": np.ones(4, np.float32)}
OPTIMIZER = {"step": np.int64(7), "m": {k: v * 0.1 for k, v in MODEL.items()},
             "v": {k: v * v for k, v in MODEL.items()}, "betas": [0.9, 0.95], "lr": 3e-4}
CONFIG = {"model_type": "llama", "vocab_size": 11, "hidden_size": 4}


def _save(path, scale=1.0, step=3):
    checkpoint.save(path, {k: v * scale for k, v in MODEL.items()}, CONFIG, OPTIMIZER,
                    {"step": step, "data": {"position": 1234}, "losses": [5.0, 4.5]})


def test_round_trip(tmp_path):
    _save(tmp_path / "ckpt")
    ck = checkpoint.load(tmp_path / "ckpt")
    assert ck.config == CONFIG and ck.state == {"step": 3, "data": {"position": 1234}, "losses": [5.0, 4.5]}
    for name, value in MODEL.items():
        np.testing.assert_array_equal(ck.model_state[name], value)
    opt = ck.optimizer_state
    assert opt["step"] == 7 and isinstance(opt["step"], np.int64)
    assert opt["betas"] == [0.9, 0.95] and opt["lr"] == 3e-4
    for name in MODEL:
        np.testing.assert_array_equal(opt["m"][name], OPTIMIZER["m"][name])
        np.testing.assert_array_equal(opt["v"][name], OPTIMIZER["v"][name])
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no temp or backup directories left


def test_resave_replaces_and_refuses_bad_state(tmp_path):
    _save(tmp_path / "ckpt")
    _save(tmp_path / "ckpt", scale=2.0, step=9)
    ck = checkpoint.load(tmp_path / "ckpt")
    assert ck.state["step"] == 9
    np.testing.assert_array_equal(ck.model_state["model.norm.weight"], 2 * MODEL["model.norm.weight"])
    with pytest.raises(TypeError):
        checkpoint.save(tmp_path / "ckpt", MODEL, CONFIG, OPTIMIZER, {"bad": object()})
    with pytest.raises(TypeError, match="cannot store object at m"):
        checkpoint.save(tmp_path / "ckpt", MODEL, CONFIG, {"m": object()})
    assert checkpoint.load(tmp_path / "ckpt").state["step"] == 9
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_texts_are_saved_and_checked(tmp_path):
    checkpoint.save(tmp_path / "ckpt", MODEL, CONFIG, OPTIMIZER, {"step": 1}, texts={"tokenizer.json": '{"a": 1}'})
    assert (tmp_path / "ckpt" / "tokenizer.json").read_text() == '{"a": 1}'
    checkpoint.load(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "tokenizer.json").write_text('{"a": 2}')
    with pytest.raises(FileFormatError, match="tokenizer.json: contents differ from the SHA-256"):
        checkpoint.load(tmp_path / "ckpt")
    with pytest.raises(FileFormatError, match="points outside"):
        checkpoint.save(tmp_path / "other", MODEL, CONFIG, texts={"../escape.json": "{}"})
    assert not (tmp_path / "escape.json").exists()


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-5])


def _flip(path):
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x40
    path.write_bytes(bytes(raw))


DAMAGE = {
    "model truncated": ("model.safetensors", _truncate, r"model\.safetensors: \d+ bytes, the checkpoint recorded"),
    "model bit flip": ("model.safetensors", _flip, r"model\.safetensors: contents differ from the SHA-256"),
    "optimizer bit flip": ("optimizer.safetensors", _flip, r"optimizer\.safetensors: contents differ"),
    "config missing": ("config.json", os.remove, r"config\.json: missing from the checkpoint"),
    "manifest truncated": ("trainer_state.json", _truncate,
                           r"trainer_state\.json: trainer_state\.json is not valid JSON"),
    "manifest missing": ("trainer_state.json", os.remove, r"trainer_state\.json: cannot read"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_checkpoint_names_the_file(tmp_path, case):
    name, damage, message = DAMAGE[case]
    _save(tmp_path / "ckpt")
    damage(tmp_path / "ckpt" / name)
    with pytest.raises(FileFormatError, match=message):
        checkpoint.load(tmp_path / "ckpt")


# The child saves a checkpoint with a large tensor; it is SIGKILLed while that tensor is written
# (the hook makes a point in the save wait), or between the two renames of the swap.
CHILD = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from dataflow.io import checkpoint, safetensors as safetensors_io
    path, where, marker = sys.argv[1:4]

    def announce_and_wait():
        open(marker, "w").close()
        time.sleep(60)

    if where == "tensor":
        write = safetensors_io._write_data
        def slow_write(f, bits):
            if bits.size > 1_000_000:
                write(f, bits[: bits.size // 2])
                f.flush()
                announce_and_wait()
            write(f, bits)
        safetensors_io._write_data = slow_write
    else:
        replace = os.replace
        def replace_then_wait(src, dst):
            replace(src, dst)
            if dst.endswith(".old"):
                announce_and_wait()
        os.replace = replace_then_wait
    big = {"model.embed_tokens.weight": np.full((1024, 2048), 7.0, np.float32), "model.norm.weight": np.zeros(4)}
    checkpoint.save(path, big, {"model_type": "llama"}, {}, {"step": 99})
""")


@pytest.mark.parametrize("where", ["tensor", "swap"])
def test_sigkill_mid_save_keeps_previous_checkpoint(tmp_path, where):
    _save(tmp_path / "ckpt")
    marker = tmp_path / "writing"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "ckpt"), where, str(marker)],
                             env=os.environ.copy())
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None, "the child exited before reaching the kill point"
        assert time.monotonic() < deadline, "the child never reached the kill point"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    ck = checkpoint.load(tmp_path / "ckpt")
    assert ck.state["step"] == 3
    np.testing.assert_array_equal(ck.model_state["model.norm.weight"], MODEL["model.norm.weight"])
    _save(tmp_path / "ckpt", step=4)  # the next save clears what the killed one left
    assert checkpoint.load(tmp_path / "ckpt").state["step"] == 4
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "writing"]


def test_resume_gives_the_identical_next_loss(h, tmp_path):
    models = pytest.importorskip("dataflow.models")
    import dataflow as df
    config = models.LlamaConfig.from_dict({"model_type": "llama", "vocab_size": 61, "hidden_size": 32,
                                           "intermediate_size": 48, "num_hidden_layers": 2,
                                           "num_attention_heads": 4, "num_key_value_heads": 2,
                                           "max_position_embeddings": 32})
    batches = np.random.default_rng(0).integers(0, 61, (5, 2, 9))
    model = models.Llama(h, config, dtype="fp32", seed=0)
    trainer = df.Trainer(model, lr=1e-2)
    for b in batches[:3]:
        trainer.step(b[:, :-1], b[:, 1:])
    checkpoint.save_training(tmp_path / "ckpt", model, trainer, {"data": {"position": 3}})
    expected = [trainer.step(b[:, :-1], b[:, 1:]) for b in batches[3:]]

    ck = checkpoint.load(tmp_path / "ckpt")
    resumed = models.Llama(h, models.LlamaConfig.from_dict(ck.config), dtype="fp32", seed=1)
    resumed_trainer = df.Trainer(resumed, lr=1e-2)
    state = checkpoint.restore_training(ck, resumed, resumed_trainer)
    assert state == {"step": 3, "data": {"position": 3}} and resumed_trainer.step_count == 3
    assert [resumed_trainer.step(b[:, :-1], b[:, 1:]) for b in batches[3:]] == expected
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["model_type"] == "llama"


def _edit_manifest(path, edit):
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


MANIFEST_EDITS = {
    "file outside": (lambda m: m["files"].update({"../outside": m["files"]["config.json"]}),
                     r"files: '\.\./outside' points outside"),
    "absolute file": (lambda m: m["files"].update({"/dev/zero": {"bytes": 1, "sha256": "0"}}),
                      r"files: '/dev/zero' points outside"),
    "files dropped": (lambda m: m["files"].pop("model.safetensors"),
                      r"files: expected the size and SHA-256 of config\.json, model\.safetensors"),
    "entry not a dict": (lambda m: m["files"].update({"config.json": 3}), r"files\['config\.json'\]: expected"),
    "state not a dict": (lambda m: m.update({"state": []}), r"state: expected an object"),
    "bad array key": (lambda m: m.update({"optimizer": {"__array__": [1]}}), r"refers to array \[1\]"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_EDITS))
def test_manifest_cannot_name_other_files_or_break_the_loader(tmp_path, case):
    edit, message = MANIFEST_EDITS[case]
    _save(tmp_path / "ckpt")
    (tmp_path / "outside").write_text("{}")
    _edit_manifest(tmp_path / "ckpt" / checkpoint.STATE_NAME, edit)
    with pytest.raises(FileFormatError, match=r"trainer_state\.json: " + message):
        checkpoint.load(tmp_path / "ckpt")
