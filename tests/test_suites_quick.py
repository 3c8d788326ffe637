"""Every long-run suite's --quick (lanes.suite_main): its tiny runs train for real, each leaves a finished
summary, and the report is written onto a copy of its page in the scratch folder, the committed files untouched."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

# exploration, snd_signal and snd_dqn_pong have tests of their --quick of their own
SUITES = ("montezuma_snd", "mario_flag", "mario_no_reward")


@pytest.mark.slow
@pytest.mark.parametrize("name", SUITES)
def test_quick_runs_the_suites_pipeline_in_a_scratch_folder(name, tmp_path):
    import importlib

    suite = importlib.import_module(name)
    committed = open(os.path.join(suite.DOCS, suite.PAGE), encoding="utf-8").read()
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", f"{name}.py"), "--quick", "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    runs = suite.parse_runs(suite.QUICK[0])
    names = sorted(f"{suite.RUNS.name(*key)}.json" for key in runs)
    assert sorted(os.listdir(tmp_path / "results")) == names
    for file in names:
        summary = json.loads((tmp_path / "results" / file).read_text())
        assert summary["status"] == "budget" and summary["agent_steps"] == 32
    page = (tmp_path / suite.PAGE).read_text()
    assert page != committed and page.split(suite.START)[0] == committed.split(suite.START)[0]
    assert open(os.path.join(suite.DOCS, suite.PAGE), encoding="utf-8").read() == committed
    status = subprocess.run(cmd + ["--status"], check=True, capture_output=True, text=True, timeout=300).stdout
    assert status.splitlines()[-1] == "to do, in order: nothing: every planned run has finished"
