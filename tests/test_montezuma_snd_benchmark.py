"""benchmarks/montezuma_snd.py on real tiny runs: the plan's scheduler, the summary, packing a run's resume
state small and continuing it on a machine without its folder, the report from the summaries alone."""

import json
import os
import shutil
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import lanes  # noqa: E402
import montezuma_snd as bench  # noqa: E402

from common.run.checkpoint import load_checkpoint  # noqa: E402

pytestmark = pytest.mark.slow  # real emulators and training runs

TINY = ["--num-processes", "2", "--num-workers", "-1", "--num-local-steps", "8", "--batch-size", "2"]
TINY += ["--save-interval", "1", "--eval-interval", "0", "--picture-interval", "0", "--embedding-interval", "0"]


def _bench(tmp_path, steps, *args):
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    shutil.copy(os.path.join(ROOT, "docs", "montezuma.md"), docs / "montezuma.md")
    argv = ["--runs", "snd-vic:0", "--out", str(tmp_path / "out"), "--results", str(tmp_path / "res")]
    argv += ["--state", str(tmp_path / "state"), "--docs", str(docs), *args]
    return bench.main(argv + TINY + ["--num-global-steps", str(steps)])


def test_a_packed_run_continues_on_a_machine_without_its_folder(tmp_path):
    out, res, state = tmp_path / "out", tmp_path / "res", tmp_path / "state"
    name = bench.run_name("snd-vic", 0)
    assert _bench(tmp_path, 32) == 0  # 2 updates of 2 envs x 8 steps
    summary_file = res / f"{name}.json"
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "budget" and summary["agent_steps"] == 32 and summary["recipe"] == "snd-montezuma"
    assert summary["command"][:4] == ["montezuma/train.py", "--recipe", "snd-montezuma", "--intrinsic"]

    # the run as if cut off by the end of a machine's life: packed small, its folder gone
    summary["status"] = "stopped"
    summary_file.write_text(json.dumps(summary))
    newest, update = lanes.newest_checkpoint(str(out / name), bench.PREFIX)
    assert update == 2
    assert _bench(tmp_path, 32, "--pack-state") == 0
    packed = state / name / "models" / os.path.basename(newest)
    assert os.path.getsize(packed) < 0.4 * os.path.getsize(newest)  # float16 weights, no Adam moments
    slim = load_checkpoint(str(packed))
    assert slim["optimizer"] == {} and slim["intrinsic"]["predictor_opt"] == {}
    assert slim["intrinsic"]["target_opt"] == {} and slim["update"] == 2
    assert all(np.asarray(v).dtype == np.float16 for v in slim["policy"].values())
    shutil.rmtree(out)

    assert _bench(tmp_path, 48) == 0  # restored, resumed from update 2, one more update
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "budget" and summary["agent_steps"] == 48
    starts = [e for e in summary["segments"] if e["event"] == "start"]
    assert [e["resume_update"] for e in starts] == [0, 2]
    restored = load_checkpoint(str(out / name / "models" / f"{bench.PREFIX}_3.pdparams"))
    assert restored["update"] == 3 and restored["optimizer"]  # trained on: fresh moments since the resume
    steps = [json.loads(line)["step"] for line in open(out / name / "metrics.jsonl")]
    rates = [s for s, line in zip(steps, open(out / name / "metrics.jsonl")) if "perf/steps_per_sec" in line]
    assert rates == [16, 32, 48]  # each update logged once across the two machines

    # finished: its heatmap is drawn from the final checkpoint (once), the next pack removes its state
    assert _bench(tmp_path, 48, "--report-only", "--heatmaps", "--heatmap-steps", "30") == 0
    heat = np.load(res / f"heatmap_{name}.npz")
    assert heat["visits"].sum() == 30 and heat["rooms"][0] == 1 and (res / f"heatmap_{name}.png").exists()
    assert _bench(tmp_path, 48, "--pack-state") == 0 and not (state / name).exists()
    shutil.rmtree(out)
    # the report is rebuilt from the committed files alone
    assert _bench(tmp_path, 48, "--report-only", "--heatmaps") == 0
    report = (tmp_path / "docs" / "montezuma.md").read_text()
    assert "| SND-VIC | 0 | budget | 48 |" in report and (tmp_path / "docs" / "montezuma.png").exists()
    assert f"| {name} | 1 |" in report and f"](../res/heatmap_{name}.png)" in report


def test_room_summary_reads_rooms_back_from_the_logged_masks(tmp_path):
    run_dir = tmp_path / bench.run_name("rnd", 1)
    run_dir.mkdir()
    records = [{"tag": "perf/steps_per_sec", "step": 70_000, "value": 500.0}]
    records += [
        {"tag": "losses/entropy", "step": st, "value": v} for st, v in [(20_000, 2.8), (60_000, 2.6), (70_000, 2.5)]
    ]
    for step, rooms, score, events in [(10_000, [1], 0, 0), (30_000, [1], 100, 1), (70_000, [0, 1, 4], 400, 2)]:
        records += [
            {"tag": "episode/rooms", "step": step, "value": float(len(rooms))},
            {"tag": "episode/room_mask", "step": step, "value": float(sum(2**r for r in rooms))},
            {"tag": "episode/score", "step": step, "value": float(score)},
            {"tag": "episode/events", "step": step, "value": float(events)},
        ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    s = bench.summarize_run(str(tmp_path), "rnd", 1, "running")
    assert s["rooms_reached"] == [0, 1, 4] and s["room_first_step"] == {"0": 70_000, "1": 10_000, "4": 70_000}
    assert (s["first_step_key"], s["first_step_score_400"], s["first_step_second_room"]) == (30_000, 70_000, 70_000)
    assert s["curve"]["steps"] == [65_536, 131_072] and s["curve"]["episodes"] == [2, 1]
    assert s["curve"]["events"] == [0.5, 2.0] and s["curve"]["second_room_share"] == [0.0, 1.0]
    # what the update did, per bin: the mean of what was logged in it; None for a tag never logged
    assert s["training"]["entropy"] == [2.7, 2.5] and s["training"]["advantage_std"] is None


def test_segments_table_pairs_each_start_with_its_own_end():
    """A process killed outright writes no end event: its start says so, and the later starts keep their
    own ends (pairing by index would move every later end one row up)."""
    seg = [
        {"time": "t0", "event": "start", "commit": "a" * 40, "resume_update": 0},
        {"time": "t1", "event": "start", "commit": "a" * 40, "resume_update": 30},  # the first was killed
        {"time": "t2", "event": "end", "returncode": 130},
        {"time": "t3", "event": "start", "commit": "b" * 40, "resume_update": 38},
        {"time": "t4", "event": "end", "returncode": 0},
        {"time": "t5", "event": "start", "commit": "b" * 40, "resume_update": 0},
    ]
    rows = [r for r in lanes.segments_table([{"segments": seg}], lambda s: "run") if r.startswith("| run | t")]
    assert [r.rsplit("|", 2)[1].strip() for r in rows] == [
        "killed (no exit recorded)",
        "130",
        "0",
        "(running or cut off)",
    ]


CRASHES_ONCE = """
import os, sys
marker = sys.argv[1]
if not os.path.exists(marker):
    open(marker, "w").close()
    os.abort()  # dies of SIGABRT, as a native crash does
"""


def test_a_run_that_dies_of_a_signal_is_restarted_from_its_checkpoint(tmp_path):
    """run_plan restarts a run killed by a signal of its own (here the first start aborts) and the plan
    finishes; a run that exits with an error of its own is not retried."""
    script = tmp_path / "crash_once.py"
    script.write_text(CRASHES_ONCE)
    starts = []

    def make(name, argv):
        return lanes.PlannedRun(
            name=name,
            argv=lambda resume: (starts.append(name), argv)[1],
            prefix="x",
            summarize=lambda out, status: {"status": status},
            summary_path=str(tmp_path / f"{name}.json"),
            resume=lambda run_dir: (None, 0),
        )

    crash = make("crash", [sys.executable, str(script), str(tmp_path / "crashed")])
    error = make("error", [sys.executable, "-c", "raise SystemExit(1)"])
    failed = lanes.run_plan([crash, error], str(tmp_path / "out"), say_todo=False)
    assert starts == ["crash", "crash", "error"] and failed == ["error"]
    assert json.load(open(tmp_path / "crash.json"))["status"] == "budget"
    ends = [e["returncode"] for e in lanes.read_segments(str(tmp_path / "out"), "crash") if e["event"] == "end"]
    assert ends[0] < 0 and ends[1] == 0


def test_segment_facts_time_each_process_from_its_own_start(tmp_path):
    """Wall time sums each start to its own end: a killed process (no end) adds nothing, and the later
    processes are not paired with the wrong start."""
    events = [
        {"time": "2026-12-04T00:00:00Z", "event": "start", "commit": "a" * 40, "resume_update": 0},
        {"time": "2026-12-04T01:00:00Z", "event": "start", "commit": "a" * 40, "resume_update": 30},  # first killed
        {"time": "2026-12-04T01:10:00Z", "event": "end", "returncode": 130},
        {"time": "2026-12-04T02:00:00Z", "event": "start", "commit": "b" * 40, "resume_update": 38},
        {"time": "2026-12-04T02:05:00Z", "event": "end", "returncode": 0},
    ]
    with open(tmp_path / "run.segments.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    seconds, commit, resumed = lanes.segment_facts(str(tmp_path), "run")
    assert seconds == 600 + 300 and commit == "b" * 40 and resumed == [30, 38]


def test_the_authors_network_run_of_the_plan_is_snd_vic_with_their_networks():
    """The amendment's run (``snd-vic-authors``): the recipe's SND-VIC with ``--snd-network authors``, its
    own run name, and flags that parse to that configuration."""
    from common.run.config import parse_config
    from montezuma.train import MontezumaConfig

    assert ("snd-vic-authors", 0) in bench.PLAN and bench.parse_runs("snd-vic-authors:0") == (("snd-vic-authors", 0),)
    argv = bench.command("snd-vic-authors", 0, "runs/x")
    assert (
        bench.run_name("snd-vic-authors", 0) == "montezuma_snd-vic-authors_seed0" == argv[argv.index("--run-name") + 1]
    )
    cfg = parse_config(MontezumaConfig, argv[2:])
    assert (cfg.intrinsic, cfg.snd_network, cfg.int_reward, cfg.int_eta, cfg.seed) == (
        "snd-vic",
        "authors",
        "snd",
        0.25,
        0,
    )
    assert cfg.policy_network == "game"
    plain = parse_config(MontezumaConfig, bench.command("snd-vic", 0, "runs/x")[2:])
    assert plain.snd_network == "game" and plain.policy_network == "game"
    # the second amendment's run: the same, with the authors' policy network too
    both = parse_config(MontezumaConfig, bench.command("snd-vic-authors-policy", 0, "runs/x")[2:])
    settings = (both.intrinsic, both.snd_network, both.policy_network, both.int_eta)
    assert settings == ("snd-vic", "authors", "authors", 0.25)
    assert bench.PLAN.index(("snd-vic-authors-policy", 0)) == bench.PLAN.index(("snd-vic-authors", 0)) + 1


def test_status_line_says_never_where_no_run_scored_400():
    summaries = {s["method"]: s for s in bench.RUNS.load(os.path.join(ROOT, "docs", "results", "montezuma_snd"))}
    assert bench.describe(summaries["snd-vic"]).endswith("first 400 at 917,504 steps")
    assert bench.describe(summaries["none"]).endswith("never 400")
    # an unfinished run also says how far it has to go, at its own median rate
    half = dict(summaries["none"], status="running", agent_steps=bench.BUDGET // 2, median_steps_per_sec=100.0)
    hours = bench.BUDGET / 2 / 100.0 / 3600
    assert bench.describe(half).endswith(f"never 400; 50% of 3,997,696, about {hours:.1f} h to go at 100/s")


def test_resume_steps_are_the_later_starts_of_a_run():
    """The report's curve ticks: each start after the first, at its update's agent step."""
    seg = [
        {"event": "start", "resume_update": 0},
        {"event": "end", "returncode": 130},
        {"event": "start", "resume_update": 40},
        {"event": "start", "resume_update": 90},  # a start without an end (killed)
        {"event": "end", "returncode": 0},
    ]
    assert bench.STEPS_PER_UPDATE == 128 * 128  # the recipe's rollout
    assert bench.resume_steps({"segments": seg}) == [40 * 16384, 90 * 16384]
