"""benchmarks/snd_signal.py: a real --quick run (Mario 1-1), per-run summaries, the report from them alone."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_quick_signal_runs_write_summaries_and_the_report(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "snd_signal.py"), "--quick", "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    names = sorted(os.listdir(tmp_path / "results"))
    assert names == ["rnd_seed0.json", "snd-v_seed0.json"]
    s = json.loads((tmp_path / "results" / "snd-v_seed0.json").read_text())
    assert s["updates"] == 3 and len(s["raw"]["mean"]) == 3 and len(s["raw"]["cv"]) == 3
    assert s["early"] > 0 and s["late_over_early"] > 0 and not any(str(ROOT) in a for a in s["command"])
    doc = (tmp_path / "snd_signal.md").read_text()
    assert "| snd-v | 1 |" in doc and "| snd-std | 0 | not run yet |" in doc
    (tmp_path / "snd_signal.md").unlink()
    subprocess.run(cmd + ["--report-only"], check=True, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "snd_signal.md").read_text() == doc
