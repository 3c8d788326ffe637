"""benchmarks/exploration.py: a real --quick suite, per-run summaries, and a report rebuilt from them alone."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import exploration  # noqa: E402


@pytest.mark.slow
def test_quick_suite_writes_summaries_and_the_report_rebuilds_from_them(tmp_path):
    out = tmp_path / "suite"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "exploration.py"), "--quick", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    results = out / "results"
    names = sorted(os.listdir(results))
    assert names == ["doorkey5_none_seed0.json", "doorkey5_rnd_seed0.json"]
    s = json.loads((results / "doorkey5_rnd_seed0.json").read_text())
    assert s["frames"] == exploration.QUICK_UPDATES * exploration.ROLLOUT and s["episodes"] >= 0
    assert len(s["curve"]["frames"]) == exploration.CURVE_POINTS and s["curve"]["frames"][-1] == s["frames"]
    assert set(s["action_share_at_budget"]) == {"left", "right", "forward", "pickup", "drop", "toggle", "done"}
    assert abs(sum(s["action_share_at_budget"].values()) - 1.0) < 1e-3
    assert "--intrinsic" in s["command"] and not any(ROOT in str(a) for a in s["command"])
    doc = (out / "exploration.md").read_text()
    assert (out / "exploration.png").stat().st_size > 0
    # the report needs nothing but the summaries: drop the run folders and rebuild
    for p in out.iterdir():
        if p.name not in ("results", "exploration.md", "exploration.png"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    (out / "exploration.md").unlink()
    subprocess.run(cmd + ["--report-only"], check=True, capture_output=True, text=True, timeout=300)
    assert (out / "exploration.md").read_text() == doc
    assert "| PPO+RND | 1 |" in doc and "| PPO | 1 |" in doc
    # a second (non report-only) invocation finds every run done
    again = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    assert "0 runs to do" in again.stdout


def test_windowed_success_and_bootstrap_by_hand():
    steps = np.array([10, 20, 30, 40])
    succ = np.array([0.0, 1.0, 1.0, 0.0])
    got = exploration.windowed_success(steps, succ, [20, 40, 5], window=20)
    np.testing.assert_allclose(got[:2], [0.5, 0.5])  # (0, 20]: 10, 20 ; (20, 40]: 30, 40
    assert np.isnan(got[2])
    lo, hi = exploration.bootstrap_diff([1.0, 1.0, 1.0], [0.0, 0.0])
    assert lo == hi == 1.0  # no spread: the interval is the difference itself
    lo, hi = exploration.bootstrap_diff([0.0, 1.0, 0.5, 0.2], [0.1, 0.3, 0.0])
    assert lo < np.mean([0.0, 1.0, 0.5, 0.2]) - np.mean([0.1, 0.3, 0.0]) < hi


def test_plan_order_and_budgets():
    runs = exploration.PLAN
    assert runs == exploration.planned(exploration.CELLS) and runs[:2] == (
        ("keycorridor", "none", 0),
        ("keycorridor", "rnd", 0),
    )
    assert exploration.TASKS["keycorridor"][1] >= 1_500_000 and exploration.TASKS["doorkey8"][1] >= 1_000_000
    assert all(v[1] % exploration.ROLLOUT == 0 for v in exploration.TASKS.values())
    cells = {}
    for task, method, seed in runs:
        cells.setdefault((task, method), set()).add(seed)
    for task in ("keycorridor", "doorkey8", "keycorridor3"):
        assert len(cells[(task, "none")]) == len(cells[(task, "rnd")]) == 5
        assert all(len(cells[(task, m)]) >= 3 for m in ("snd-v", "snd-std", "snd-vic"))
    assert len(runs) == len(set(runs))
    # a pilot counts as seed 0 of its task's cell: it runs once, before the cell
    pilot = runs.index(("obstructed1", "rnd", 0))
    assert runs[pilot + 1] == ("obstructed1", "none", 0)
    argv = exploration.command("keycorridor", "rnd", 0, "runs/x")
    assert argv[argv.index("--num-global-steps") + 1] == str(exploration.TASKS["keycorridor"][1])
    # --runs: a * part picks the plan's runs (every seed of a cell); a misspelt item is refused by name
    assert exploration.parse_runs("keycorridor3:e3b:*,doorkey5:count:1") == (
        ("keycorridor3", "e3b", 0),
        ("keycorridor3", "e3b", 1),
        ("keycorridor3", "e3b", 2),
        ("doorkey5", "count", 1),
    )
    with pytest.raises(SystemExit, match="'keycoridor3:e3b:0' is invalid"):
        exploration.parse_runs("keycoridor3:e3b:0")
    with pytest.raises(SystemExit, match="matches no run of the plan"):
        exploration.parse_runs("doorkey5:e3b:*")


@pytest.mark.slow
def test_intrinsic_cost_benchmark_measures_and_reports(tmp_path):
    """benchmarks/intrinsic_cost.py --quick: real runs of RND and SND-V, CPU ms per frame, the report's table."""
    result = tmp_path / "cost.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "intrinsic_cost.py"), "--quick", "--result", str(result)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    r = json.loads(result.read_text())
    assert set(r["cpu_ms_per_frame"]) == {"rnd", "snd-v"} and r["ratio_to_rnd"]["rnd"] == 1.0
    # One round: one value each. Its sign is not asserted: --quick's window is two updates, within the noise of
    # a run's start-up CPU time on a loaded machine (CI once measured one below zero); the real numbers come from
    # the full benchmark's 4 against 40 updates.
    assert all(len(v) == 1 and math.isfinite(v[0]) for v in r["cpu_ms_per_frame"].values())
    assert "| PPO+SND-V |" in out and "Goal, each SND variant, NovelD, ICM and E3B at or below 1.5" in out
    lines = exploration.cost_markdown(r)
    assert any(line.startswith("| PPO+RND | ") and line.endswith("| 1.00 |") for line in lines)


def test_committed_report_matches_the_committed_summaries():
    """docs/exploration.md's tables are what --report-only makes of the committed summaries (a summary committed
    without its report fails here: run benchmarks/exploration.py --report-only). The READMEs carry no generated
    table: their results table is written by hand and links to docs/exploration.md."""
    summaries = exploration.load_summaries(exploration.RESULTS)
    doc = open(os.path.join(ROOT, "docs", "exploration.md"), encoding="utf-8").read()
    assert exploration.markdown(summaries) in doc


def test_snd_versus_rnd_verdict_is_read_at_the_precision_shown():
    """0.997 against 0.998 prints as 1.00 against 1.00: a tie ("level with RND"), not "below"."""

    def runs(*success):
        return [{"success_at_budget": s, "auc": 0.5} for s in success]

    summaries = {
        ("keycorridor", "none"): runs(0.0, 0.01, 0.0),
        ("keycorridor", "rnd"): runs(0.9996, 0.9973, 0.9991),
        ("keycorridor", "snd-vic"): runs(0.9959, 0.9998, 0.9954),
        ("keycorridor", "snd-v"): runs(0.90, 0.95, 0.93),
        ("keycorridor", "snd-std"): runs(1.0, 1.0, 1.0),
    }
    line = next(x for x in exploration.goals(summaries, ["keycorridor"]) if x.startswith("* SND vs RND"))
    assert "PPO+SND-VIC 1.00 (n=3, level with RND" in line
    assert "PPO+SND-V 0.93 (n=3, below" in line
    assert "PPO+SND-STD 1.00 (n=3, level with RND" in line  # 1.000 vs 0.999: equal at 2 decimals


@pytest.mark.slow
def test_kill_stops_the_suite_and_its_run_together_and_the_run_resumes(tmp_path):
    """SIGTERM to the benchmark alone (``kill <pid>``, not a terminal's Ctrl-C to the whole group): the
    run it started stops too, instead of going on as an orphan, and no summary is written for it. Started
    again, the suite continues that run from its newest checkpoint, logging nothing twice."""
    import signal
    import time

    out = tmp_path / "suite"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "exploration.py"), "--quick", "--out", str(out)]
    # one run at a time (the default): the plan's second run starts only after the first (and then from scratch)
    suite = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    run_dir = out / "doorkey5_none_seed0"
    first = run_dir / "models" / (exploration.checkpoint_prefix("doorkey5") + "_1.pdparams")
    deadline = time.time() + 180
    while not first.exists() and time.time() < deadline:  # --quick saves every update
        time.sleep(0.05)
    assert first.exists(), "the suite's first run never wrote its first checkpoint"
    children = [int(p) for p in open(f"/proc/{suite.pid}/task/{suite.pid}/children").read().split()]
    assert children, "the suite's run is not its child"
    suite.send_signal(signal.SIGTERM)
    output = suite.communicate(timeout=120)[0]
    assert suite.returncode != 0 and "run(s) cut short" in output, output
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"run {pid} outlived the suite"
    summary = out / "results" / "doorkey5_none_seed0.json"
    assert not summary.exists()
    saved = exploration.resume_ppo_run(str(run_dir), exploration.checkpoint_prefix("doorkey5"))[1]
    assert 1 <= saved < exploration.QUICK_UPDATES  # the stopped run saved where it was

    again = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    assert f"start doorkey5_none_seed0 from update {saved}" in again.stdout, again.stdout
    s = json.loads(summary.read_text())
    assert s["resumed_at_updates"] == [saved] and s["seconds"] > 0
    assert "--resume" not in s["command"]  # the command to repeat the run is the unbroken one
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["step"] for r in records if r["tag"] == "Training Reward"]
    assert rewards == list(range(1, exploration.QUICK_UPDATES + 1))  # each update logged once
    fresh = json.loads((out / "results" / "doorkey5_rnd_seed0.json").read_text())
    assert "resumed_at_updates" not in fresh  # the next run of the plan started from scratch


@pytest.mark.slow
def test_an_error_in_the_suite_stops_its_runs(tmp_path):
    """Not only Ctrl-C and SIGTERM: the suite's stdout closing under it (`exploration.py | head -1`) raises
    BrokenPipeError in the suite, and the run it started must not go on as an orphan."""
    import time

    out = tmp_path / "suite"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "exploration.py"), "--quick", "--out", str(out)]
    suite = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    suite.stdout.readline()  # its first line (the page's copy, then "2 runs to do")
    deadline = time.time() + 120
    children = []
    while not children and time.time() < deadline:
        children = [int(p) for p in open(f"/proc/{suite.pid}/task/{suite.pid}/children").read().split()]
        time.sleep(0.05)
    assert children, "the suite never started a run"
    suite.stdout.close()  # its next line ("start ...") meets a closed pipe
    assert suite.wait(timeout=120) != 0
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"run {pid} outlived the suite"


@pytest.mark.slow
def test_bonus_probe_sorts_the_steps_of_a_real_e3b_run(tmp_path):
    import bonus_probe
    from short_runs import tiny_grid_run

    checkpoint = tiny_grid_run(tmp_path, intrinsic="e3b", num_processes=2, num_global_steps=64)["checkpoint"]
    result = bonus_probe.probe(checkpoint, episodes=3, max_steps=60)
    assert sum(n for _, n in result.values()) == 3 * 60  # DoorKey-5x5 is not solved by this walk in 60 steps
    assert result["new"][1] > 0 and result["revisit"][1] > 0 and result["turn"][1] > 0
    # E3B is episodic: a step onto a cell new to the episode shows features outside the episode's ellipse
    assert result["new"][0] > result["revisit"][0]
    # by action, with the first-visit gate of training: an unchanged view is never paid
    steps = bonus_probe.walk(checkpoint, episodes=3, max_steps=60)
    assert len(steps["raw"]) == 3 * 60 and not steps["gate"][steps["same_view"]].any()
    table = bonus_probe.by_action(steps)
    assert sum(n for n, *_ in table.values()) == 3 * 60
    n_done, same_done, _, gated_done = table["done"]  # MiniGrid's `done` changes nothing
    assert n_done > 0 and same_done == 1.0 and gated_done == 0.0
    assert table["forward"][3] > 0  # the walk's steps forward do show new views
    with pytest.raises(SystemExit):
        bonus_probe.main([checkpoint, "--episodes", "0"])
    # --along: the run's own policy and a random one, episode by episode (E3B: gated by first visits)
    episodes = bonus_probe.play(checkpoint, episodes=2, max_steps=40)
    assert len(episodes) == 2 and all(len(e["raw"]) == len(e["paid"]) == len(e["new_view"]) <= 40 for e in episodes)
    for e in episodes:  # the gate of training: only views new to the episode are paid
        assert not e["paid"][~e["new_view"]].any() and np.array_equal(e["paid"][e["new_view"]], e["raw"][e["new_view"]])
    summary = bonus_probe.along(episodes + bonus_probe.play(checkpoint, 2, policy=False, max_steps=40), late=20)
    assert 0 <= summary["early_share"] <= 1 and 0 <= summary["key"] <= 1 and summary["paid_per_episode"] > 0
    hand = np.mean([e["paid"][:10].sum() / e["paid"].sum() for e in episodes[:1]])
    assert np.isclose(bonus_probe.along(episodes[:1])["early_share"], hand)


@pytest.mark.slow
def test_bonus_probe_scores_an_e3b_rnd_run_by_each_factor_on_the_same_episodes(tmp_path):
    import bonus_probe
    from short_runs import tiny_grid_run

    checkpoint = tiny_grid_run(tmp_path, intrinsic="e3b-rnd", num_processes=2, num_global_steps=64)["checkpoint"]
    whole, episodic, novelty = (
        bonus_probe.play(checkpoint, 2, max_steps=30, part=p) for p in ("", "episodic", "novelty")
    )
    for w, e, n in zip(whole, episodic, novelty):  # the same steps, and the module pays the factors' product
        assert np.array_equal(w["new_view"], e["new_view"]) and np.array_equal(w["new_view"], n["new_view"])
        np.testing.assert_allclose(w["raw"], e["raw"] * n["raw"], rtol=1e-5)
    with pytest.raises(SystemExit):
        bonus_probe.main([checkpoint, "--along", "--part", "target"])
    rnd = tiny_grid_run(tmp_path / "rnd", intrinsic="rnd", num_processes=2, num_global_steps=64)["checkpoint"]
    with pytest.raises(SystemExit, match="no such part"):
        bonus_probe.play(rnd, 1, max_steps=5, part="episodic")


@pytest.mark.slow
def test_a_view_and_full_grid_e3b_run_trains_and_the_probe_keys_new_views_on_the_view(tmp_path):
    """Suite v6's run in small: E3B's encoder reads the full grid, the policy the view; the probe's 'new
    view' reads the policy's view, not the grid after it; its gate, as training's, the whole observation."""
    import bonus_probe
    from short_runs import tiny_grid_run

    # spectrum by hand: k one-hot features fill k directions equally; one feature repeated fills one
    one_hot = {"features": np.eye(8, 16, dtype=np.float32), "places": 8}
    repeated = {"features": np.ones((8, 16), np.float32), "places": 2}
    assert bonus_probe.spectrum([one_hot]) == {"participation_ratio": 8.0, "dims_90": 8.0, "places": 8.0}
    assert bonus_probe.spectrum([one_hot, repeated]) == {"participation_ratio": 4.5, "dims_90": 4.5, "places": 5.0}
    ten = {"features": np.eye(10, 16, dtype=np.float32) * 0.1, "places": 10}  # 0.9 of the trace in exactly 9
    zero = {"features": np.zeros((4, 16), np.float32), "places": 1}
    assert bonus_probe.spectrum([ten])["dims_90"] == 9 and bonus_probe.spectrum([zero])["participation_ratio"] == 0

    stacks = np.zeros((4, 6, 7, 7), np.uint8)  # views A, A, B, A; grids 0, 1, 2, 3
    stacks[2, :3] = 1
    stacks[:, 3] = np.arange(4)[:, None, None]
    assert bonus_probe.new_views(stacks, 3).tolist() == [False, True, False]
    assert bonus_probe.new_views(stacks, 6).tolist() == [True, True, True]

    run = tiny_grid_run(tmp_path, intrinsic="e3b", observation="view+full", num_processes=2, num_global_steps=64)
    assert run["update"] == 2
    for e in bonus_probe.play(run["checkpoint"], 2, max_steps=30):
        assert e["raw"].shape == e["new_view"].shape and np.isfinite(e["raw"]).all() and (e["raw"] > 0).any()
        assert np.array_equal(e["paid"] > 0, (e["raw"] > 0) & (e["paid"] == e["raw"]))  # gated: raw or nothing
        assert e["features"].shape == (len(e["raw"]) + 1, 128) and 1 <= e["places"] <= len(e["raw"]) + 1
    assert len(bonus_probe.walk(run["checkpoint"], episodes=1, max_steps=20)["raw"]) == 20
