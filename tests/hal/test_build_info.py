"""The host matmul's engine is never a silent choice: the build records oneDNN's version and source
(pip's wheel or the system), meson warns without it, and so do `import dataflow`, `dataflow --version`
and `dataflow demo`."""
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from dataflow import build_info
from dataflow.cli import main as cli
import paths

ROOT = Path(paths.ROOT)


@pytest.fixture
def build(monkeypatch, tmp_path):
    """Points build_info at a _build_info.json of our making."""
    def make(onednn, source):
        (tmp_path / "_build_info.json").write_text(json.dumps({"version": "0.1.0", "onednn": onednn,
                                                               "onednn_source": source}))
        monkeypatch.setattr(build_info, "LIB_DIR", str(tmp_path))
        build_info.info.cache_clear()
    yield make
    build_info.info.cache_clear()


def test_this_build_names_its_engine():
    info = build_info.info()
    assert set(info) == {"version", "onednn", "onednn_source"}
    engine = build_info.matmul_engine()
    assert engine.startswith("oneDNN ") if info["onednn"] else "no oneDNN" in engine


def test_without_onednn_every_surface_says_so(build, monkeypatch, capsys):
    monkeypatch.delenv("DATAFLOW_HOST_MATMUL", raising=False)
    build("", "")
    assert build_info.matmul_engine() == "built-in fallback (no oneDNN in this build: about half speed)"
    with pytest.warns(RuntimeWarning, match="this build has no oneDNN, so matmuls .* run at about half speed"):
        build_info.warn_if_slow()
    assert cli.main(["demo", "--size", "32", "--repeats", "1"]) == 0
    out, err = capsys.readouterr()
    assert "on built-in fallback (no oneDNN" in out and err.startswith("WARNING: the host matmul uses the built-in")
    monkeypatch.setenv("DATAFLOW_HOST_MATMUL", "fallback")  # chosen explicitly: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_info.warn_if_slow()


def test_with_onednn_the_source_is_named(build, monkeypatch):
    monkeypatch.delenv("DATAFLOW_HOST_MATMUL", raising=False)
    build("3.2.0", "PyPI onednn-cpu-gomp 2023.2.0")
    assert build_info.matmul_engine() == "oneDNN 3.2.0 (PyPI onednn-cpu-gomp 2023.2.0)"
    monkeypatch.setenv("DATAFLOW_HOST_MATMUL", "fallback")
    assert build_info.matmul_engine() == "built-in fallback (DATAFLOW_HOST_MATMUL=fallback)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_info.warn_if_slow()


@pytest.mark.slow
def test_meson_warns_when_building_without_onednn(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mesonbuild.mesonmain", "setup", str(tmp_path / "b"), str(ROOT),
                          "-Donednn=disabled"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "oneDNN: NOT FOUND: built-in fallback matmul, about half the speed" in out.stdout
    assert "WARNING: oneDNN not found: the host matmul will use the built-in fallback" in out.stdout
    assert json.loads((tmp_path / "b" / "_build_info.json").read_text())["onednn"] == ""
