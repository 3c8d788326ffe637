"""benchmarks/snd_dqn_pong.py: resuming helpers, the scheduler on a fake trainer, the report from summaries
alone, and a real --quick run of DQN and SND."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import snd_dqn_pong as bench  # noqa: E402


def test_newest_checkpoint_and_cut_metrics(tmp_path):
    run = tmp_path / "pong_snd_seed0"
    (run / "models").mkdir(parents=True)
    for name in ("pong_snd_2000.pdparams", "pong_snd_10000.pdparams", "pong_snd.pdparams"):
        (run / "models" / name).write_bytes(b"x")
    assert bench.newest_checkpoint(str(run)) == (str(run / "models" / "pong_snd_10000.pdparams"), 10000)
    assert bench.newest_checkpoint(str(tmp_path / "missing")) == (None, 0)
    lines = [{"tag": "eval/return", "step": s, "value": -5.0} for s in (2000, 10000, 12000)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    bench.cut_metrics(str(run), 10000)
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [2000, 10000]


def test_prune_keeps_the_newest_periodic_checkpoints(tmp_path):
    run = tmp_path / "pong_dqn-e0_seed0"
    (run / "models").mkdir(parents=True)
    names = ["pong_dqn-e0_2500.pdparams", "pong_dqn-e0_5000.pdparams", "pong_dqn-e0_10000.pdparams"]
    for name in [*names, "pong_dqn-e0.pdparams", "pong_dqn-e0_7500.pdparams.tmp"]:
        (run / "models" / name).write_bytes(b"x")
    bench.prune_checkpoints(str(run), keep=2)
    left = sorted(p.name for p in (run / "models").iterdir())
    assert left == [
        "pong_dqn-e0.pdparams",
        "pong_dqn-e0_10000.pdparams",
        "pong_dqn-e0_5000.pdparams",
        "pong_dqn-e0_7500.pdparams.tmp",
    ]
    assert bench.newest_checkpoint(str(run))[1] == 10000
    assert "--save-interval" in (argv := bench.command("dqn", 0, str(tmp_path)))
    assert argv[argv.index("--save-interval") + 1] == "2500" and argv[argv.index("--eval-interval") + 1] == "2000"


def fake_summary(agent, seed, ev):
    steps = [2000 * (i + 1) for i in range(len(ev))]
    return {
        "agent": agent,
        "seed": seed,
        "train_steps": steps[-1],
        "env_steps": steps[-1] + 1000,
        "seconds": 3600.0,
        "train_steps_per_sec": 27.8,
        "cpu_ms_per_train_step": 66.0,
        "median_logged_train_steps_per_sec": 28.0,
        "episodes": 120,
        "eval_return_at_end": ev[-1],
        "episode_return_at_end": ev[-1] - 1,
        "best_eval_return": max(ev),
        "eval_curve": {"steps": steps, "return": ev},
        "episode_curve": {"steps": steps, "return": [None] + ev[1:]},
        "intrinsic_curve": {"steps": steps, "reward": [0.5] * len(ev)} if agent == "snd" else None,
        "command": ["pong/train.py"],
        "code_commit": "x",
        "finished": "now",
    }


def _docs(tmp_path):
    """A docs folder holding a copy of the committed page (the report replaces its marked blocks)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(os.path.join(ROOT, "docs", "snd_dqn_pong.md"), docs / "snd_dqn_pong.md")
    return docs


def test_report_only_rebuilds_doc_and_png_from_summaries(tmp_path):
    results, docs = tmp_path / "results", _docs(tmp_path)
    results.mkdir()
    for agent, ev in (("dqn", [-5.0, -3.0, 1.0]), ("snd", [-5.0, -4.0, 2.0])):
        bench.write_json_atomic(str(results / f"pong_{agent}_seed0.json"), fake_summary(agent, 0, ev))
    bench.write_json_atomic(
        str(results / "speed.json"),
        {
            "measured": "now",
            "cpus": 2,
            "code_commit": "x",
            "note": "",
            "rows": [
                {
                    "agent": "dqn",
                    "padding": "valid",
                    "train_steps": 300,
                    "train_steps_per_sec": 10.0,
                    "cpu_ms_per_train_step": 66.0,
                    "loadavg_1min": [2.0, 2.0],
                    "seconds": 40.0,
                }
            ],
        },
    )
    bench.main(["--report-only", "--results", str(results), "--docs", str(docs)])
    text = (docs / "snd_dqn_pong.md").read_text()
    assert "| DQN (epsilon 0.1) | 1 | 6,000 | +1.00 |" in text and "| DQN_e0 (epsilon 0) | 0 | not run yet" in text
    # 100k steps at 10 steps/s = 2.8 h of wall time; 66 ms x 100k steps = 1.83 CPU hours
    assert "| dqn | valid | 10.0 | 2.8 | 66 | 1.83 | 2.0 / 2.0 |" in text
    # second half (train steps > 3,000): DQN's games -3, +1 and SND's -4, +2, one run each: games resampled
    assert "resampling games of the one run" in text
    assert "| DQN (epsilon 0.1) | 2 | -1.00 [-3.00, +1.00] |  |" in text
    assert "| SND (SND-V, epsilon 0) | 2 | -1.00 [-4.00, +2.00] | +0.00 [" in text
    assert (docs / "snd_dqn_pong.png").stat().st_size > 0
    bench.main(["--report-only", "--results", str(results), "--docs", str(docs)])  # idempotent: blocks replaced
    assert (docs / "snd_dqn_pong.md").read_text() == text


def test_a_summary_without_the_logged_wall_time_shows_none(tmp_path):
    """A resumed run's clock saw only its last segment: without the logged intervals' wall time the report
    shows none, not the segment's."""
    results, docs = tmp_path / "results", _docs(tmp_path)
    old = fake_summary("dqn", 0, [-5.0, -3.0, 1.0])
    old.update(train_steps=72000, seconds=1800.0, resumed_at=36000, train_steps_per_sec=20.0, code_commit="abc")
    old["cpu_ms_per_train_step"] = 66.0
    old.pop("logged_hours", None)
    results.mkdir()
    bench.write_json_atomic(str(results / "pong_dqn_seed0.json"), old)
    bench.main(["--report-only", "--results", str(results), "--docs", str(docs)])
    row = next(x for x in (docs / "snd_dqn_pong.md").read_text().splitlines() if x.startswith("| DQN (epsilon 0.1)"))
    assert row.endswith("| - | 66 | - |")


FAKE_TRAINER = r"""
import json, os, signal, sys, time
agent, run_dir, threads, resume, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
os.makedirs(os.path.join(run_dir, "models"), exist_ok=True)
with open(os.path.join(run_dir, "config.json"), "w") as f:
    json.dump({"train_steps": 600}, f)
with open(os.path.join(run_dir, "starts.jsonl"), "a") as f:
    f.write(json.dumps({"threads": threads, "resume": resume}) + "\n")
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
t0 = time.time()
while time.time() - t0 < seconds and not stop:
    time.sleep(0.05)
steps = 300 if stop else 600
open(os.path.join(run_dir, "models", f"pong_{agent}_{steps}.pdparams"), "wb").close()
with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"tag": "eval/return", "step": steps, "value": 1.0}) + "\n")
sys.exit(143 if stop else 0)
"""


def test_runs_share_the_scheduler_and_resume_from_their_newest_checkpoint(tmp_path, monkeypatch):
    """--lanes 2: one thread each, side by side on lanes.run_plan; a run with a periodic checkpoint continues
    from it (its metrics cut back to that step); both summaries are written, the resumed one says where from;
    a second call runs nothing; --lanes 1 gives a run all cores."""
    fake = tmp_path / "fake_trainer.py"
    fake.write_text(FAKE_TRAINER)
    out, results, docs = tmp_path / "runs", tmp_path / "results", _docs(tmp_path)
    run = out / "pong_snd_seed0"
    (run / "models").mkdir(parents=True)
    (run / "models" / "pong_snd_300.pdparams").write_bytes(b"x")
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"tag": "eval/return", "step": s, "value": -1.0}) + "\n" for s in (300, 450))
    )

    def command(agent, seed, out_dir, resume=None, threads=0, extra=()):
        run_dir = os.path.join(out_dir, bench.run_name(agent, seed))
        return [sys.executable, str(fake), agent, run_dir, str(threads), resume or "", "0.2"]

    monkeypatch.setattr(bench, "RUNS", dataclasses.replace(bench.RUNS, command=command))

    def main(*argv, out=out, results=results):
        return bench.main(["--out", str(out), "--results", str(results), "--docs", str(docs), *argv])

    assert main("--runs", "dqn:0,snd:0", "--lanes", "2") == 0
    assert sorted(p.name for p in results.iterdir()) == ["pong_dqn_seed0.json", "pong_snd_seed0.json"]
    starts = [json.loads(x) for x in (run / "starts.jsonl").read_text().splitlines()]
    assert starts == [{"threads": "1", "resume": str(run / "models" / "pong_snd_300.pdparams")}]
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [300, 600]
    dqn_starts = (out / "pong_dqn_seed0" / "starts.jsonl").read_text().splitlines()
    assert [json.loads(x)["threads"] for x in dqn_starts] == ["1"]
    snd, dqn = (json.loads((results / f"pong_{a}_seed0.json").read_text()) for a in ("snd", "dqn"))
    assert snd["resumed_at"] == 300 and "resumed_at" not in dqn and dqn["eval_return_at_end"] == 1.0
    assert snd["status"] == "budget" and snd["train_steps"] == 600
    assert main("--runs", "dqn:0,snd:0", "--lanes", "2") == 0  # nothing left to run
    assert len((run / "starts.jsonl").read_text().splitlines()) == 1
    assert main("--runs", "dqn:0", out=tmp_path / "runs1", results=tmp_path / "results1") == 0
    lines = (tmp_path / "runs1" / "pong_dqn_seed0" / "starts.jsonl").read_text().splitlines()
    assert [json.loads(x)["threads"] for x in lines] == ["0"]
    with pytest.raises(SystemExit):  # its checkpoints hold the replay memory: never packed into git
        main("--pack-state")


@pytest.mark.slow
def test_quick_runs_dqn_and_snd_for_real_and_reports_them(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "snd_dqn_pong.py"), "--quick", "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    assert sorted(os.listdir(tmp_path / "results")) == ["pong_dqn_seed0.json", "pong_snd_seed0.json"]
    snd = json.loads((tmp_path / "results" / "pong_snd_seed0.json").read_text())
    assert snd["train_steps"] == 40 and snd["status"] == "budget" and snd["eval_curve"]["steps"] == [20, 40]
    assert snd["intrinsic_curve"] is not None and snd["command"][:3] == ["pong/train.py", "--agent", "snd"]
    doc = (tmp_path / "snd_dqn_pong.md").read_text()
    assert "| SND (SND-V, epsilon 0) | 1 | 40 |" in doc and "| DQN_e0 (epsilon 0) | 0 | not run yet" in doc
    assert (tmp_path / "snd_dqn_pong.png").stat().st_size > 0


def test_late_comparison_separates_clearly_different_runs_and_resamples_seeds():
    late = [-5.0] * 10 + [4.0, 5.0, 3.0, 4.0, 5.0, 4.0, 3.0, 5.0, 4.0, 4.0]
    flat = [-5.0] * 10 + [-1.0, -2.0, -1.0, 0.0, -1.0, -2.0, -1.0, -1.0, 0.0, -1.0]
    one = {"dqn": [fake_summary("dqn", 0, flat)], "snd": [fake_summary("snd", 0, late)]}
    row = next(x for x in bench.late_comparison(one, ["dqn", "snd"]) if x.startswith("| SND"))
    delta = row.split("|")[4]  # +5.10 [lo, hi]: the interval excludes 0
    lo = float(delta[delta.index("[") + 1 : delta.index(",")])
    assert delta.strip().startswith("+5.10") and lo > 0
    seeds = {
        "dqn": [fake_summary("dqn", k, flat) for k in (0, 1)],
        "snd": [fake_summary("snd", k, late) for k in (0, 1)],
    }
    text = "\n".join(bench.late_comparison(seeds, ["dqn", "dqn-e0", "snd"]))
    assert "resampling seeds" in text and "| SND (SND-V, epsilon 0) | 20 | +4.10 [+4.10, +4.10] |" in text
    assert "DQN_e0" not in text  # not run: no row
