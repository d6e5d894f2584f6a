"""`dataflow serve`'s flags: a missing model names --model, a port already taken names --port,
both as one line with exit 2 before anything listens (the server itself: tests/serve/test_serve.py)."""
import socket

import pytest

from dataflow.cli import main as cli

pytest.importorskip("aiohttp")


def test_a_missing_model_names_the_flag(tmp_path, capsys):
    assert cli.main(["serve", "--model", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dataflow serve: --model: ") and "does not exist" in err


def test_a_port_in_use_names_the_flag(tmp_path, capsys):
    from serve_models import save_model
    directory = save_model(tmp_path / "tiny")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", "--model", str(directory), "--port", str(port), "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert f"dataflow serve: --port: cannot listen on 127.0.0.1:{port}" in err, err
