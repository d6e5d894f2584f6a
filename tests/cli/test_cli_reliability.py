"""`dataflow train` never loses a run or a file: a run that has trained saves before it reports a
failure (a failed step, a failed validation), a trace that cannot be written is a warning, the
validation loss is computed in pieces no larger than the training batch it was planned for, and
--trace --overwrite replaces regular files only (never a FIFO or device)."""
import errno
import os
import stat

import pytest

import dataflow as df
from dataflow.io import checkpoint
from dataflow.cli import main as cli
from dataflow import trace as traces

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
MICRO = '{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, ' \
        '"num_key_value_heads": 1, "max_position_embeddings": 64}'


def train(tmp_path, *extra, steps=4):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "micro.json").write_text(MICRO)
    argv = ["train", "--config", str(tmp_path / "micro.json"), "--steps", str(steps), "--batch", "2", "--seq-len",
            "16", "--tokenizer", "bytes", "--out", str(tmp_path / "run"), *extra]
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


def saved(tmp_path):
    return checkpoint.load(tmp_path / "run" / "checkpoint").state


def test_a_failed_step_saves_what_was_trained_and_resumes_with_the_failed_batch(tmp_path, capsys, monkeypatch):
    assert train(tmp_path / "clean", steps=4) == 0
    want = saved(tmp_path / "clean")
    real, calls = df.Trainer.step, []

    def step(self, tokens, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise df.OutOfMemoryError("device memory: injected")
        return real(self, tokens, *args, **kwargs)

    monkeypatch.setattr(df.Trainer, "step", step)
    assert train(tmp_path, steps=4) == 1
    err = capsys.readouterr().err
    assert "step 3 failed: device memory: injected" in err and "holds step 2" in err, err
    state = saved(tmp_path)
    assert state["step"] == 2 and state["data"]["position"] == 2 * 2 * 16
    monkeypatch.setattr(df.Trainer, "step", real)
    resume = ["train", "--resume", str(tmp_path / "run" / "checkpoint"), "--steps", "2", "--out", str(tmp_path / "run")]
    assert cli.main(resume) == 0
    assert saved(tmp_path)["losses"] == want["losses"]


def test_a_failed_validation_saves_the_trained_steps(tmp_path, capsys, monkeypatch):
    def loss(self, *args, **kwargs):
        raise df.OutOfMemoryError("device memory: injected")

    monkeypatch.setattr(df.models.Llama, "loss", loss)
    assert train(tmp_path, "--eval-every", "2", steps=4) == 1
    err = capsys.readouterr().err
    assert "validation after step 2: device memory: injected" in err and "holds step 2" in err, err
    assert saved(tmp_path)["step"] == 2


def test_validation_runs_in_pieces_of_the_training_batch(tmp_path, monkeypatch):
    real, rows = df.models.Llama.loss, []

    def loss(self, tokens, *args, **kwargs):
        rows.append(len(tokens))
        return real(self, tokens, *args, **kwargs)

    monkeypatch.setattr(df.models.Llama, "loss", loss)
    assert train(tmp_path, steps=1) == 0
    assert rows and max(rows) <= 2 and sum(rows) > 2, rows


def test_a_trace_that_cannot_be_written_does_not_stop_training(tmp_path, capsys, monkeypatch):
    def write(path, trace):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(traces, "write", write)
    assert train(tmp_path, "--trace", str(tmp_path / "t.json"), "--trace-steps", "1", steps=3) == 0
    assert "warning: --trace: cannot write" in capsys.readouterr().err
    assert saved(tmp_path)["step"] == 3


def test_overwrite_never_replaces_a_fifo(tmp_path, capsys):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    assert train(tmp_path, "--trace", str(fifo), "--overwrite", steps=1) == 2
    assert "is not a regular file" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not (tmp_path / "run").exists()


def test_the_atomic_writer_replaces_regular_files_only(tmp_path):
    from dataflow.io import atomic
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        with atomic.replaced_file(fifo) as tmp:
            open(tmp, "w").close()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "link"
    os.symlink("/dev/null", link)
    with pytest.raises(OSError, match="not a regular file"):
        with atomic.replaced_file(link) as tmp:
            open(tmp, "w").close()
    assert os.path.islink(link) and not list(tmp_path.glob(".*tmp-*"))


def test_generate_with_a_prompt_that_is_not_utf8_names_the_flag(tmp_path, capsys):
    """Undecodable bytes on a command line reach Python as lone surrogates."""
    cfg = {"vocab_size": 258, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64}
    df.models.Llama(df.Handle("host", device_memory="64MiB"), cfg).save_pretrained(tmp_path / "m")
    argv = ["generate", "--checkpoint", str(tmp_path / "m"), "--tokenizer", "bytes", "--prompt", "ab\udcff"]
    assert cli.main(argv) == 2
    assert "--prompt: encode: the text is not valid UTF-8 at character 2" in capsys.readouterr().err
