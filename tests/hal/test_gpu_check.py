"""tools/gpu-check's planning without a GPU: the phase budgets fit the first call's plan,
--resume continues after the last phase an earlier call reached (setup and probe always run),
a phase's status follows its result, and the summaries are written after a phase."""
import argparse
import importlib.machinery
import importlib.util
import json
import os

import pytest
from paths import ROOT



@pytest.fixture(scope="module")
def gc():
    loader = importlib.machinery.SourceFileLoader("gpu_check", os.path.join(ROOT, "tools", "gpu-check"))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_budgets_fit_the_first_call(gc):
    assert sum(gc.PHASES.values()) == gc.DEADLINE_S <= 500  # the device tool's 600 s, less start and transfer
    assert list(gc.PHASES)[:2] == list(gc.ALWAYS) and set(gc.LOGS) == set(gc.PHASES)
    assert len(set(gc.LOGS.values())) + 3 <= 8  # + junit.xml, summary.json, summary.txt: the 8 files that come back


def test_resume_runs_what_the_earlier_call_did_not_reach(gc, tmp_path):
    earlier = tmp_path / "summary.json"
    earlier.write_text(json.dumps({"status": {"setup": "done", "probe": "done", "smoke": "done", "tests": "cut"},
                                   "done_before": []}))
    order, before = gc.phases_to_run(argparse.Namespace(resume=str(earlier), phases=[]))
    assert order == ["setup", "probe", "bench-train", "bench-ops", "bench-matmul", "sanitizer"]
    assert before == ["smoke", "tests"]
    order, _ = gc.phases_to_run(argparse.Namespace(resume=None, phases=["sanitizer"]))
    assert order == ["setup", "probe", "sanitizer"]
    with pytest.raises(SystemExit, match="unknown phase"):
        gc.phases_to_run(argparse.Namespace(resume=None, phases=["bench"]))


def test_status_and_summaries(gc, tmp_path):
    assert gc.status_of({"exit": 0}) == "done" and gc.status_of({"ok": True}) == "done"
    assert gc.status_of({"exit": "timeout"}) == "cut" and gc.status_of({"exit": 1}) == "failed"
    assert gc.status_of({"ok": False, "error": "ninja: exit 1"}) == "failed"
    assert gc.status_of({"error": "Traceback ..."}) == "broken"
    run = gc.Run(str(tmp_path))
    run.results = {"setup": {"ok": True, "build": "carried"}, "probe": {"exit": 0, "gpu": "H200"},
                   "smoke": {"exit": "timeout", "seconds": 60.0, "ops": 3, "no_test": [], "passed": 2,
                             "verbose": {"PASSED": 2}, "problems": [], "skip_reasons": []}}
    gc.write_summary(run, ["setup", "probe", "smoke", "tests"], [])
    state = json.loads((tmp_path / "summary.json").read_text())
    assert state["status"] == {"setup": "done", "probe": "done", "smoke": "cut"} and state["not_reached"] == ["tests"]
    text = (tmp_path / "summary.txt").read_text()
    assert "smoke: cut" in text and "not reached: tests" in text and "--resume" in text
