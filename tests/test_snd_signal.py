"""benchmarks/snd_signal.py: a real --quick run (Mario 1-1), per-run summaries, the report from them alone,
and --status on the committed summaries (the oldest have no status: every one is a finished run's)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "snd_signal.py")


@pytest.mark.slow
def test_quick_signal_runs_write_summaries_and_the_report(tmp_path):
    cmd = [sys.executable, SCRIPT, "--quick", "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    names = sorted(os.listdir(tmp_path / "results"))
    assert names == ["rnd_seed0.json", "snd-v_seed0.json"]
    s = json.loads((tmp_path / "results" / "snd-v_seed0.json").read_text())
    assert s["updates"] == 3 and len(s["raw"]["mean"]) == 3 and len(s["raw"]["cv"]) == 3 and s["status"] == "budget"
    assert s["early"] > 0 and s["late_over_early"] > 0 and not any(str(ROOT) in a for a in s["command"])
    doc = (tmp_path / "snd_signal.md").read_text()
    assert "| snd-v | 1 |" in doc and "| snd-std | 0 | not run yet |" in doc and "![signal over time]" in doc
    assert (
        doc.split("<!-- snd-signal-table:start -->")[0]
        == open(os.path.join(ROOT, "docs", "snd_signal.md")).read().split("<!-- snd-signal-table:start -->")[0]
    )  # the committed page's text around the block is kept
    (tmp_path / "snd_signal.md").unlink()
    subprocess.run(cmd + ["--report-only"], check=True, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "snd_signal.md").read_text() == doc
    status = subprocess.run(cmd + ["--status"], check=True, capture_output=True, text=True, timeout=300).stdout
    assert "rnd_seed0: budget, late/early" in status and "to do, in order: nothing" in status


def test_status_reads_the_committed_summaries():
    out = subprocess.run([sys.executable, SCRIPT, "--status"], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert sum(line.endswith(tuple("0123456789")) and ": finished, late/early " in line for line in lines) == 10
    assert lines[-1] == "to do, in order: nothing: every planned run has finished"
