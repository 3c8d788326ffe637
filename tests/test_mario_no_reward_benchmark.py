"""benchmarks/mario_no_reward.py: the runs' command lines, the distance summary and its interval, the report
from the summaries alone, and one real episode of the random policy."""

import json
import os
import shutil
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import mario_no_reward as bench  # noqa: E402


def test_commands_of_the_plan():
    curious = bench.command("icm", 1, "out")
    assert curious[1].endswith("mario/train.py") and curious[2:6] == ["--recipe", "no-reward-1-1", "--intrinsic", "icm"]
    assert "--num-global-steps" not in curious  # the recipe's 1M
    ppo = bench.command("none", 0, "out")
    assert ppo[ppo.index("--num-global-steps") + 1] == "200000"
    rnd = bench.command("random", 0, "out")
    assert rnd[1].endswith("mario_no_reward.py") and rnd[rnd.index("--random-episodes") + 1] == "100"
    assert bench.PLAN[0] == ("random", 0) and len(bench.PLAN) == 9
    # the amendment: RND with a tenth of the recipe's entropy bonus, right after the seed-0 runs
    low = bench.command("rnd-beta0.001", 0, "out")
    assert low[low.index("--intrinsic") + 1] == "rnd" and low[low.index("--beta") + 1] == "0.001"
    assert low[low.index("--run-name") + 1] == "mario11_noreward_rnd-beta0.001_seed0"
    assert bench.PLAN.index(("rnd-beta0.001", 0)) == bench.PLAN.index(("snd-vic", 0)) + 1
    assert bench.PLAN[-1] == ("rnd-beta0.001", 1)  # the second amendment: after the planned seed-1 runs
    assert "--beta" not in bench.command("rnd", 0, "out")
    assert bench.parse_runs("rnd-beta0.001:0") == (("rnd-beta0.001", 0),)
    from common.run.config import parse_config
    from mario.train import MarioConfig

    cfg, plain = (parse_config(MarioConfig, bench.command(m, 0, "out")[2:]) for m in ("rnd-beta0.001", "rnd"))
    assert (cfg.intrinsic, cfg.beta, cfg.ext_coef, cfg.action_type) == ("rnd", 0.001, 0.0, "complex")
    assert plain.beta == 0.01 and cfg.num_global_steps == plain.num_global_steps == 1_000_000


def _metrics(run_dir, episodes, evals=()):
    os.makedirs(run_dir)
    records = [{"tag": "perf/steps_per_sec", "step": 1000, "value": 100.0}]
    for step, x in episodes:
        records.append({"tag": "episode/x_pos", "step": step, "value": float(x)})
        records.append({"tag": "episode/flag", "step": step, "value": 0.0})
    records += [{"tag": "eval/x_pos", "step": step, "value": float(x)} for step, x in evals]
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_summary_says_how_far_the_policy_moved_from_uniform(tmp_path):
    run = tmp_path / bench.run_name("rnd", 0)
    _metrics(run, [(250_000, 300)])
    # 250,000 agent steps in updates every 50,000: entropy falls, action 1 takes over at the end
    records = []
    for step, ent, kl, share in (
        (50_000, 2.4, 0.5, 0.5),
        (100_000, 2.2, 0.1, 0.5),
        (150_000, 2.0, 0.2, 0.6),
        (200_000, 1.8, 0.3, 0.7),
        (250_000, 1.6, 0.4, 0.9),
    ):
        records += [
            {"tag": "losses/entropy", "step": step, "value": ent},
            {"tag": "losses/approx_kl", "step": step, "value": kl},
            {"tag": "charts/action_share/1", "step": step, "value": share},
            {"tag": "charts/action_share/0", "step": step, "value": 1 - share},
            {"tag": "charts/action_share/10", "step": step, "value": 0.0},
        ]
    with open(run / "metrics.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    summary = bench.summarize_run(str(tmp_path), "rnd", 0, "budget")
    policy = summary["policy"]
    assert policy["bin"] == 100_000 and policy["entropy"] == [2.3, 1.9, 1.6]  # per (0, 100k], (100k, 200k], ...
    assert policy["advantage_std"] is None  # not logged by this run
    # the updates after 90 % of 250,000 agent steps: the last one only; actions in numeric order
    assert policy["action_share_last_10pct"] == {"0": 0.1, "1": 0.9, "10": 0.0}
    assert list(policy["action_share_last_10pct"]) == ["0", "1", "10"]
    assert policy["approx_kl_median_second_half"] == 0.3  # the updates after 125,000 steps: 0.2, 0.3, 0.4
    assert bench.markdown([summary]).split("\n")[4].endswith("| 0 | 1.60-2.30 |")  # flags, entropy's range


def test_summary_takes_the_last_10_percent_and_the_report_needs_summaries_only(tmp_path):
    out, results, docs = tmp_path / "out", tmp_path / "res", tmp_path / "docs"
    # 1,000 agent steps: the episodes ending after step 900 are the last 10 %
    _metrics(out / bench.run_name("icm", 0), [(100, 300), (500, 400), (950, 1000), (1000, 1200)], [(500, 296)])
    s = bench.summarize_run(str(out), "icm", 0, "budget")
    assert s["last_10pct_episodes"] == 2 and s["last_10pct_mean_x"] == 1100.0 and s["farthest_x"] == 1200
    lo, hi = s["last_10pct_ci95"]
    assert 1000 <= lo < 1100 < hi <= 1200
    assert sum(s["stops_last_10pct"]["counts"]) == 2 and s["stops_last_10pct"]["counts"][1000 // 64] == 1
    assert s["far_episodes"] == [[1000, 1200]]  # past x_pos 1,000, not at it
    assert s["greedy_eval"] == {"steps": [500], "x_pos": [296]}
    _metrics(out / bench.run_name("random", 0), [(100, 300), (200, 500)])
    r = bench.summarize_run(str(out), "random", 0, "budget")
    assert r["last_10pct_episodes"] == 2 and r["last_10pct_mean_x"] == 400.0  # all of a random policy's episodes
    os.makedirs(results)
    for summary in (s, r):
        with open(os.path.join(results, bench.RUNS.name_of(summary) + ".json"), "w") as f:
            json.dump(summary, f)
    os.makedirs(docs)
    shutil.copy(os.path.join(ROOT, "docs", "mario_no_reward.md"), docs)
    shutil.rmtree(out)
    text = open(bench.write_report(str(results), str(docs), with_level=False)).read()
    assert "| random policy | 0 | budget |" in text and "| ICM | 0 | budget | 1,000 |" in text
    assert "| 1100 (" in text and os.path.getsize(docs / "mario_no_reward.png") > 10_000
    from PIL import Image

    plain = Image.open(docs / "mario_no_reward.png").size
    # with the picture of 1-1 (the default), the shares are drawn above the level: a taller figure
    bench.write_report(str(results), str(docs))
    with_level = Image.open(docs / "mario_no_reward.png").size
    assert with_level[0] == plain[0] and with_level[1] > plain[1] + 50


@pytest.mark.slow
def test_the_random_policy_plays_real_episodes(tmp_path):
    # seed 2 loses a life after ~120 steps (most seeds play the 2,005 steps of the clock: ~18 s each here)
    bench.play_random(str(tmp_path / "random"), episodes=1, seed=2)
    records = [json.loads(line) for line in open(tmp_path / "random" / "metrics.jsonl")]
    x = [r["value"] for r in records if r["tag"] == "episode/x_pos"]
    steps = [r["step"] for r in records if r["tag"] == "episode/x_pos"]
    assert len(x) == 1 and 40 <= x[0] <= bench.LEVEL_END and steps[0] > 0
    again = tmp_path / "again"
    bench.play_random(str(again), episodes=1, seed=2)
    same = [json.loads(line) for line in open(again / "metrics.jsonl") if "x_pos" in line]
    assert [r["value"] for r in same] == x  # seeded: the same episode
    assert np.isfinite(x[0])


def test_status_lists_the_planned_runs_still_to_do(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    committed = os.path.join(ROOT, "docs", "results", "mario_no_reward")
    for name in ("mario11_noreward_random_seed0.json", "mario11_noreward_rnd_seed0.json"):
        shutil.copy(os.path.join(committed, name), results / name)
    with open(os.path.join(committed, "mario11_noreward_icm_seed0.json")) as f:  # a lane at work on one
        running = {**json.load(f), "status": "running", "updated": "2026-12-07 04:10:00"}
    (results / "mario11_noreward_icm_seed0.json").write_text(json.dumps(running))
    assert bench.main(["--status", "--results", str(results), "--out", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("mario11_noreward_random_seed0: budget,") and len(lines) == 4
    assert any(
        line.startswith("mario11_noreward_icm_seed0: running (summary of 2026-12-07 04:10:00),") for line in lines
    )
    todo = [bench.run_name(*key) for key in bench.PLAN if key not in (("random", 0), ("rnd", 0))]
    assert lines[-1] == "to do, in order: " + ", ".join(todo)
