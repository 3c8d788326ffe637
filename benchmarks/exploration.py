"""Does curiosity explore where plain PPO does not? MiniGrid tasks x methods x seeds, on a CPU.

    python benchmarks/exploration.py --lanes 2         # the whole plan, two runs at a time: days on 2 cores
    python benchmarks/exploration.py --runs 'keycorridor3:e3b:*'   # the plan's runs of one cell (TASK:METHOD:SEED)
    python benchmarks/exploration.py --quick           # a CI-sized check of the whole pipeline (~1 min)
    python benchmarks/exploration.py --report-only     # rebuild docs/exploration.md's tables and the PNG
                                                       # from the committed summaries alone
    python benchmarks/exploration.py --status          # which runs have finished, what is left

Every run is ``gridworld/train.py`` with the game's defaults (the same PPO settings
for every method) and the task's frame budget, without evaluation, videos,
embeddings or histograms, on one CPU thread (``--lanes 2``: two at a time). A run
saves a checkpoint every ``SAVE_INTERVAL`` updates (the newest two are kept), and a
run that was stopped (Ctrl-C, ``kill``, the machine going away) continues from its
newest one when the suite is started again, its ``metrics.jsonl`` cut back to that
checkpoint first. A resumed run is not the run its seed would have given unbroken
(its envs start new episodes at the resume): its summary lists the updates it
resumed at (``resumed_at_updates``), and its ``seconds`` are its logged wall time.
The suite's settings (tasks, budgets, methods, seeds, metrics) are the constants
below; they were fixed and written into ``docs/exploration.md`` before the suite
ran (the checkpoints came later: they change no setting of a run).

A finished run leaves a small summary, ``<results>/<task>_<method>_seed<k>.json``
(curve points, the numbers of the tables, wall-clock, action shares, the command
and the code's commit). Those files are committed: the suite skips every run whose
summary exists, so it continues where it stopped, on any machine, and the report is
rebuilt from them alone (the run folders under ``--out`` are scratch). The scheduler
and the command line are ``lanes.suite_main``'s, as every long suite's.

Metrics, per run (training episodes, stochastic policy):

* success at budget: the success rate of the episodes that ended in the last 10 %
  of the run's frames;
* frames to 50 %: the first point at which the success rate of the episodes that
  ended in the trailing 10 % of the budget reached 0.5, counting only points where
  that window is full (from 10 % of the budget on; not reached: "-"). The report
  reads it off the summary's curve (40 points, a resolution of 2.5 % of the budget)
  so every summary is judged by the same rule;
* AUC: the success rate over all of the run's episodes (how early it learned).

Per cell: mean +- std over seeds and every seed's value; for each method against
PPO on the same task, the difference of the mean success at budget with a 95 %
bootstrap interval (seeds resampled with replacement within each method, 10,000
resamples, fixed generator).
"""

from __future__ import annotations

import json
import os
import sys
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import lanes  # noqa: E402
from benchmarks.intervals import bootstrap_diff  # noqa: E402
from benchmarks.lanes import logged_seconds, resume_ppo_run, segment_facts  # noqa: E402, F401  (tests ask here)
from common.run.logger import read_metrics  # noqa: E402

ROLLOUT = 16 * 128  # gridworld's default samples per update: budgets are whole updates
SAVE_INTERVAL = 100  # updates between a run's checkpoints (1-3 minutes of one core): a stop loses minutes

#: key -> (env id, frame budget, what makes it hard)
TASKS = {
    "keycorridor": (
        "MiniGrid-KeyCorridorS3R2-v0",
        733 * ROLLOUT,
        "open doors to find a key in a side room, unlock the locked room, pick up the ball; 270 steps",
    ),
    "doorkey8": (
        "MiniGrid-DoorKey-8x8-v0",
        489 * ROLLOUT,
        "pick up the key, unlock the door, reach the goal, in an 8x8 room; 640 steps. A known trap for "
        "curiosity: novelty can be farmed by dropping the key and toggling the door",
    ),
    "keycorridor3": (
        "MiniGrid-KeyCorridorS3R3-v0",
        978 * ROLLOUT,
        "KeyCorridor with three rows of side rooms: more doors to open before the key is found; 270 steps "
        "(added after plain PPO solved DoorKey-8x8 in some seeds)",
    ),
    "keycorridor4": (
        "MiniGrid-KeyCorridorS4R3-v0",
        1465 * ROLLOUT,
        "KeyCorridor with 4x4 side rooms in three rows: a larger search for the key; 480 steps "
        "(suite v3's candidate for a task RND does not solve at a CPU budget)",
    ),
    "obstructed1": (
        "MiniGrid-ObstructedMaze-1Dlhb-v0",
        1465 * ROLLOUT,
        "a locked door whose key hides in a box and whose way is blocked by a ball: move the ball, open "
        "the box, unlock the door, pick up the target ball; 288 steps (suite v3's second candidate)",
    ),
    "doorkey5": (
        "MiniGrid-DoorKey-5x5-v0",
        147 * ROLLOUT,
        "the same in 5x5, 250 steps: plain PPO learns it too (continuity with suite v1)",
    ),
}

#: key -> (label, gridworld/train.py flags). Curiosity methods run with the game's defaults
#: (first-visit gate on, SND target on a quarter of each minibatch); the last two are ablations (NovelD,
#: ICM and E3B were added with issue 29, after the suite v2 runs).
METHODS = {
    "none": ("PPO", ["--intrinsic", "none"]),
    "rnd": ("PPO+RND", ["--intrinsic", "rnd"]),
    "snd-v": ("PPO+SND-V", ["--intrinsic", "snd-v"]),
    "snd-std": ("PPO+SND-STD", ["--intrinsic", "snd-std"]),
    "snd-vic": ("PPO+SND-VIC", ["--intrinsic", "snd-vic"]),
    "noveld": ("PPO+NovelD (N = half squared error, to efbc167)", ["--intrinsic", "noveld"]),
    "icm": ("PPO+ICM", ["--intrinsic", "icm"]),
    "e3b": ("PPO+E3B", ["--intrinsic", "e3b"]),
    "count": ("PPO+SimHash counts", ["--intrinsic", "count"]),
    "rnd-ungated": ("RND, no first-visit gate", ["--intrinsic", "rnd", "--no-int-first-visit"]),
    "snd-v-fulltarget": (
        "SND-V, target on all of each minibatch",
        ["--intrinsic", "snd-v", "--target-proportion", "1"],
    ),
    # suite v4 (issue 41): the gate's key and NovelD's norm as the NovelD authors', and why E3B fails
    "noveld-l2": ("NovelD, N = L2 norm (the authors')", ["--intrinsic", "noveld"]),
    "rnd-stategate": ("RND, gate on the full grid", ["--intrinsic", "rnd", "--first-visit-key", "state"]),
    "noveld-stategate": (
        "NovelD (L2), gate on the full grid",
        ["--intrinsic", "noveld", "--first-visit-key", "state"],
    ),
    "e3b-ungated": ("E3B, no first-visit gate", ["--intrinsic", "e3b", "--no-int-first-visit"]),
    "e3b-episodic": ("E3B, intrinsic return cut at episode ends", ["--intrinsic", "e3b", "--int-episodic"]),
    "e3b-coef0.1": ("E3B, --int-coef 0.1", ["--intrinsic", "e3b", "--int-coef", "0.1"]),
    "e3b-coef0.01": ("E3B, --int-coef 0.01", ["--intrinsic", "e3b", "--int-coef", "0.01"]),
    "e3b-memory": ("E3B, policy sees the last 4 views", ["--intrinsic", "e3b", "--frame-stack", "4"]),
    # suite v5: E3B's episodic bonus times RND's global one (Henaff et al. 2023)
    "e3b-rnd": ("PPO+E3B x RND", ["--intrinsic", "e3b-rnd"]),
    # suite v6: E3B's encoder reads the whole grid, the policy still the view
    "e3b-places": (
        "E3B on the whole grid, no gate",
        ["--intrinsic", "e3b", "--observation", "view+full", "--no-int-first-visit"],
    ),
    # suite v7: a feature direction for every view, i.e. an episodic count (Henaff et al. 2023's baseline)
    "episodic-count": ("Episodic count of views, no gate", ["--intrinsic", "episodic-count", "--no-int-first-visit"]),
    # suite v8: E3B on its encoder's initial random weights (never trained)
    "e3b-fixed": ("E3B on a fixed random encoder, no gate", ["--intrinsic", "e3b-fixed", "--no-int-first-visit"]),
}

#: (task, methods, seeds) in the order the suite runs them: the decisive cells first
CELLS = (
    ("keycorridor", ("none", "rnd"), 5),
    ("doorkey8", ("none", "rnd"), 5),
    # added while the suite ran, once plain PPO had solved DoorKey-8x8 in 2 of its first 4 seeds
    # (docs/exploration.md, "Addendum"); nothing else in the plan changed
    ("keycorridor3", ("none", "rnd"), 5),
    ("keycorridor", ("snd-v", "snd-std", "snd-vic"), 3),
    ("doorkey8", ("snd-v", "snd-std", "snd-vic"), 3),
    ("keycorridor3", ("snd-v", "snd-std", "snd-vic"), 3),
    ("keycorridor", ("rnd-ungated", "snd-v-fulltarget"), 3),
    ("doorkey8", ("rnd-ungated",), 3),
    ("doorkey5", ("none", "rnd", "snd-v", "snd-std", "snd-vic"), 3),
    # suite v3 (issue 29; docs/exploration.md, "Suite v3"), fixed 2026-12-02 before any of its runs
    ("doorkey5", ("count",), 3),  # the worked example of docs/intrinsic_modules.md
    ("keycorridor3", ("noveld", "icm", "e3b"), 3),
    # the pilot that picks suite v3's harder task: RND seed 0 on each candidate (the second only if
    # RND reaches 0.5 on the first); the chosen task's cell (5 methods x 3 seeds) is added after it
    ("keycorridor4", ("rnd",), 1),
    # RND reached 0.83 on KeyCorridorS4R3 (2026-12-03), so the plan's second candidate gets its pilot
    ("obstructed1", ("rnd",), 1),
    # and its cell: whatever that pilot gives, the plan runs the five methods there (below 0.5 it is the
    # task; at 0.5 or more on both candidates, the new methods run on it anyway, RND the bar to beat)
    ("obstructed1", ("none", "rnd", "noveld", "icm", "e3b"), 3),
    # suite v4 (issue 41; docs/exploration.md, "Suite v4"), fixed 2026-12-03 before any of its runs
    ("keycorridor3", ("e3b-ungated", "e3b-episodic", "e3b-coef0.1", "e3b-coef0.01", "e3b-memory"), 3),
    ("keycorridor3", ("noveld-l2", "rnd-stategate", "noveld-stategate"), 3),
    # suite v5 (docs/exploration.md, "Suite v5"), fixed 2026-12-07 before any of its runs
    ("keycorridor3", ("e3b-rnd",), 3),
    # suite v6 (docs/exploration.md, "Suite v6"), fixed 2026-12-07 before any of its runs
    ("keycorridor3", ("e3b-places",), 3),
    # suite v7 (docs/exploration.md, "Suite v7"), fixed 2026-12-07 before any of its runs
    ("keycorridor3", ("episodic-count",), 3),
    # suite v8 (docs/exploration.md, "Suite v8"), fixed 2026-12-07 before any of its runs
    ("keycorridor3", ("e3b-fixed",), 3),
)

FINAL_WINDOW = 0.1  # "at the budget": episodes that ended in the last 10 % of the frames
CURVE_POINTS = 40  # curve points per run in its summary
HALF = 0.5  # the success rate of "frames to 50 %"
START, END = "<!-- exploration-table:start -->", "<!-- exploration-table:end -->"
RESULTS = os.path.join(ROOT, "docs", "results", "exploration")
#: benchmarks/intrinsic_cost.py: the methods it times and where its result goes (the report shows it)
COST_METHODS = ("none", "rnd", "snd-v", "snd-std", "snd-vic", "snd-v-fulltarget", "noveld", "icm", "e3b")
#: the methods whose goal is a cost per frame of at most 1.5x RND's
COST_GOAL_METHODS = ("snd-v", "snd-std", "snd-vic", "noveld", "icm", "e3b")
COST_RESULT = os.path.join(ROOT, "docs", "results", "intrinsic_cost.json")

#: --quick: the whole pipeline at CI size (a checkpoint every update, so a stopped quick run resumes too: tested)
QUICK_UPDATES = 3
QUICK = ("doorkey5:none:0,doorkey5:rnd:0", ("--num-global-steps", str(QUICK_UPDATES * ROLLOUT), "--save-interval", "1"))
LANE_STATE = None  # not packed: a run takes hours, not days
DOCS = os.path.join(ROOT, "docs")
PAGE = "exploration.md"  # the report's page in DOCS
OUT = os.path.join(ROOT, "runs", "exploration")
RUN_FORMAT = "TASK:METHOD:SEED"
TRAINER = "gridworld/train.py"  # every run's train script (it also checks the flags the suite passes on)


def run_name(task, method, seed):
    return f"{task}_{method}_seed{seed}"


def checkpoint_prefix(task):
    """A run's numbered checkpoints are ``models/<prefix>_<update>.pdparams`` (gridworld/train.py's names)."""
    from gridworld.train import checkpoint_name

    return checkpoint_name(types.SimpleNamespace(env_id=TASKS[task][0]), None).removesuffix(".pdparams")


def command(task, method, seed, out, resume=None, threads=0, extra=()):
    """gridworld/train.py's argv for one run (the task's budget, one CPU thread: ``threads`` is ignored),
    continuing checkpoint ``resume`` if given; ``extra`` flags come last, so they win."""
    return [
        sys.executable,
        os.path.join(ROOT, TRAINER),
        "--env-id",
        TASKS[task][0],
        *METHODS[method][1],
        "--seed",
        str(seed),
        "--num-global-steps",
        str(TASKS[task][1]),
        "--log-path",
        out,
        "--run-name",
        run_name(task, method, seed),
        "--eval-interval",
        "0",
        "--video-interval",
        "0",
        "--save-interval",
        str(SAVE_INTERVAL),
        "--embedding-interval",
        "0",
        "--histogram-interval",
        "0",
        "--num-threads",
        "1",
        *extra,
        *(["--resume", resume] if resume else []),
    ]


# ---------------------------------------------------------------------------------- one run's summary
def windowed_success(steps, succ, at, window):
    """Success rate of the episodes that ended in (at - window, at], NaN where none ended."""
    out = []
    for x in at:
        sel = (steps > x - window) & (steps <= x)
        out.append(float(succ[sel].mean()) if sel.any() else float("nan"))
    return np.asarray(out)


def summarize_run(out, task, method, seed, status) -> dict:
    """The small JSON a finished run leaves in the results folder (everything the report needs), from its
    folder ``out/<run name>`` (its frame budget from its ``config.json``). Its wall time: every process
    of it, start to end; a resumed run's (``resumed_at_updates``), its logged wall time."""
    name = run_name(task, method, seed)
    run_dir = os.path.join(out, name)
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        frames = json.load(f)["num_global_steps"]
    seconds, commit, resumed_at = segment_facts(out, name)
    m = read_metrics(run_dir)
    steps, succ = m.get("episode/success", (np.zeros(0), np.zeros(0)))
    _, ret = m.get("episode/return", (np.zeros(0), np.zeros(0)))
    window = FINAL_WINDOW * frames
    last = steps > frames - window
    updates = np.arange(ROLLOUT, frames + 1, ROLLOUT)
    per_update = windowed_success(steps, succ, updates, window)
    # only full windows count: early on, a window of a handful of episodes can read 1.0 by luck
    reached = np.flatnonzero((updates >= window) & (np.nan_to_num(per_update) >= HALF))
    points = np.linspace(frames / CURVE_POINTS, frames, CURVE_POINTS).round().astype(int)
    shares = {
        k.rsplit("/", 1)[1]: float(v[-max(1, int(FINAL_WINDOW * len(v))) :].mean())
        for k, (_, v) in m.items()
        if k.startswith("charts/action_share/")
    }
    raw_steps, raw = m.get("intrinsic/raw_reward_mean", (np.zeros(0), np.zeros(0)))
    raw_pick = np.unique(np.linspace(0, len(raw) - 1, min(len(raw), 20)).round().astype(int)) if len(raw) else []
    if resumed_at:
        seconds = logged_seconds(*m.get("perf/steps_per_sec", ([], []))) or 0.0
    return {
        "task": task,
        "env_id": TASKS[task][0],
        "method": method,
        "seed": seed,
        "frames": int(frames),
        "seconds": round(float(seconds), 1),
        "frames_per_second": round(frames / max(seconds, 1e-9), 1),
        "episodes": int(len(steps)),
        "success_at_budget": float(succ[last].mean()) if last.any() else 0.0,
        "return_at_budget": float(ret[last].mean()) if last.any() else 0.0,
        "auc": float(succ.mean()) if len(succ) else 0.0,
        "frames_to_half": int(updates[reached[0]]) if len(reached) else None,
        "curve": {
            "frames": points.tolist(),
            "success": [
                None if np.isnan(v) else round(float(v), 4) for v in windowed_success(steps, succ, points, window)
            ],
        },
        "action_share_at_budget": {k: round(v, 4) for k, v in sorted(shares.items())},
        "intrinsic_raw_reward": {
            "frames": [int(raw_steps[i]) for i in raw_pick],
            "value": [round(float(raw[i]), 5) for i in raw_pick],
        },
        "command": [a.replace(ROOT + os.sep, "") for a in command(task, method, seed, "runs/exploration")[1:]],
        "code_commit": commit or "unknown",  # the checkout's commit when the run (last) started
        **({"resumed_at_updates": [int(u) for u in resumed_at]} if resumed_at else {}),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


# ---------------------------------------------------------------------------------- the plan
def planned(cells=CELLS) -> tuple:
    """Every (task, method, seed) of ``cells``, seed-major inside each group; a run planned twice (a pilot
    that counts as seed 0 of its task's cell) runs once, where it comes first."""
    out = []
    for task, methods, seeds in cells:
        for seed in range(seeds):
            for method in methods:
                if (task, method, seed) not in out:
                    out.append((task, method, seed))
    return tuple(out)


PLAN = planned()


def task_methods(cells, task) -> list:
    """The methods ``cells`` run on ``task``, in ``METHODS``' order (PPO first, whatever ran first)."""
    planned_here = {m for t, ms, _ in cells if t == task for m in ms}
    return [m for m in METHODS if m in planned_here]


RUNS = lanes.Runs(
    key=("task", "method", "seed"),
    name=run_name,
    command=command,
    summarize=summarize_run,
    prefix=lambda task, method, seed: checkpoint_prefix(task),
    order=lambda s: (list(TASKS).index(s["task"]), list(METHODS).index(s["method"]), s["seed"]),
    # only a run that ended well has a summary: the report reads every summary as a finished run's
    options={"partial_summaries": False, "env": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}},
)


def describe(summary) -> str:
    return f"success at budget {summary['success_at_budget']:.2f}, {summary['seconds']:.0f}s"


def parse_runs(text) -> tuple:
    """``--runs`` as ``TASK:METHOD:SEED,...``; a ``*`` part matches the plan's runs (``keycorridor3:e3b:*``)."""
    return lanes.parse_keys(text, PLAN, (("TASK", tuple(TASKS)), ("METHOD", tuple(METHODS)), ("SEED", None)))


# ---------------------------------------------------------------------------------- report
def load_summaries(results) -> dict:
    """{(task, method): [summary, ...]} in seed order, from the summaries in ``results``."""
    return RUNS.grouped(results, "task", "method")


def frames_to_half(summary) -> int | None:
    """Frames to 50 % success off a summary's curve, full trailing windows only (None: not reached).

    Summaries written before 2026-12-01 09:00 computed their own ``frames_to_half`` with partial windows
    counted (two runs read 2-4k frames from one lucky early episode); the curve gives every summary the
    same rule.
    """
    frames = summary["frames"]
    for x, y in zip(summary["curve"]["frames"], summary["curve"]["success"]):
        if x >= FINAL_WINDOW * frames and y is not None and y >= HALF:
            return int(x)
    return None


def _fmt_frames(x):
    return "-" if x is None else f"{x / 1000:.0f}k"


def cost_markdown(result) -> list[str]:
    """The cost table (the result of benchmarks/intrinsic_cost.py) as docs/exploration.md shows it."""
    per = result["cpu_ms_per_frame"]
    lines = [
        f"Cost per frame on {result['task']} (`python benchmarks/intrinsic_cost.py`, "
        f"{result['rounds']} rounds, CPU time of {result['updates'][1]} minus {result['updates'][0]} updates, "
        f"measured {result['measured']}):",
        "",
        "| method | CPU ms per frame, per round | × RND (median of the rounds' ratios) |",
        "|---|---|---|",
    ]
    for m in COST_METHODS:
        if m in per:
            ratio = result["ratio_to_rnd"].get(m)
            lines.append(
                f"| {METHODS[m][0]} | {', '.join(f'{x:.3f}' for x in per[m])} | "
                f"{'' if ratio is None else f'{ratio:.2f}'} |"
            )
    goal = {m: r for m, r in result["ratio_to_rnd"].items() if m in COST_GOAL_METHODS}
    if goal:
        verdict = "; ".join(f"{METHODS[m][0]} {r:.2f} ({'yes' if r <= 1.5 else 'no'})" for m, r in goal.items())
        lines += ["", f"Goal, each SND variant, NovelD, ICM and E3B at or below 1.5 × RND's cost per frame: {verdict}."]
    return lines


def goals(summaries, tasks) -> list[str]:
    """The suite's goals (docs/exploration.md) checked against the committed summaries, one line each."""
    hard = [t for t in tasks if t != "doorkey5"]
    lines = ["**Goals, checked against the summaries above** (cells with fewer than 3 seeds say so):", ""]

    def cell(task, method):
        return np.array([s["success_at_budget"] for s in summaries.get((task, method), [])])

    hard_ok = []
    for task in hard:
        ppo, rnd = cell(task, "none"), cell(task, "rnd")
        if not len(ppo) or not len(rnd):
            lines.append(f"* {TASKS[task][0]}: PPO n={len(ppo)}, RND n={len(rnd)}: not enough runs yet.")
            continue
        ppo_fails = ppo.mean() <= 0.1
        rnd_wins = (rnd >= HALF).sum() >= 2
        if ppo_fails and rnd_wins and len(rnd) >= 3 and len(ppo) >= 3:
            hard_ok.append(task)
        lines.append(
            f"* {TASKS[task][0]}: PPO mean success {ppo.mean():.2f} (n={len(ppo)}, max {ppo.max():.2f}): "
            f"{'at or below' if ppo_fails else 'above'} 0.1; RND at 0.5 or more in {(rnd >= HALF).sum()} of "
            f"{len(rnd)} seeds" + ("" if len(rnd) >= 3 and len(ppo) >= 3 else " (fewer than 3 seeds)") + "."
        )
    lines.append(
        f"* Tasks where PPO stays at or below 0.1 and RND reaches 0.5 in at least 2 of 3+ seeds: "
        f"{len(hard_ok)} ({', '.join(TASKS[t][0] for t in hard_ok) or 'none'}); the goal is 2."
    )
    for task in hard:
        rnd = cell(task, "rnd")
        snd = {m: cell(task, m) for m in ("snd-v", "snd-std", "snd-vic") if len(cell(task, m))}
        if len(rnd) and snd:

            def auc(method):
                return np.mean([s["auc"] for s in summaries[(task, method)]])

            def versus(v):
                # at the precision shown: 0.997 vs 0.998 (one failed episode in a thousand) prints as 1.00 vs
                # 1.00 and is a tie, not "below"
                a, b = round(float(v.mean()), 2), round(float(rnd.mean()), 2)
                return "above" if a > b else "level with RND" if a == b else "below"

            parts = [
                f"{METHODS[m][0]} {v.mean():.2f} (n={len(v)}, {versus(v)}; AUC {auc(m):.3f})" for m, v in snd.items()
            ]
            lines.append(
                f"* SND vs RND (success {rnd.mean():.2f}, n={len(rnd)}, AUC {auc('rnd'):.3f}: how early it learned) "
                f"on {TASKS[task][0]}: {'; '.join(parts)}."
            )
    for task in tasks:
        ppo = cell(task, "none")
        for m in ("rnd", "snd-v", "snd-std", "snd-vic"):
            v = cell(task, m)
            if len(ppo) >= 2 and len(v) >= 2:
                lo, hi = bootstrap_diff(v, ppo)
                if hi < 0:
                    lines.append(
                        f"* {METHODS[m][0]} loses clearly to PPO on {TASKS[task][0]}: "
                        f"{v.mean() - ppo.mean():+.2f} [{lo:+.2f}, {hi:+.2f}]."
                    )
    lines.append("")
    return lines


def markdown(summaries, cells=CELLS) -> str:
    """The report's block (between ``START`` and ``END``) from ``{(task, method): [summary, ...]}``."""
    tasks = list(dict.fromkeys(t for t, _, _ in cells))
    lines = [
        "",
        "Generated by `python benchmarks/exploration.py --report-only` from "
        "`docs/results/exploration/*.json`. Success = success rate of the training episodes that ended in the "
        "last 10 % of a run's frames; per-seed values in seed order; Δ vs PPO = difference of the mean success "
        "with its 95 % bootstrap interval; ≥ 0.5 = seeds whose success at budget reached 0.5; frames to 50 % per "
        "seed, full trailing windows only, read off the 40-point curve (- = not reached); wall = minutes per run "
        "(2 runs at a time on 2 cores, one thread each, on a machine shared with other work).",
        "",
    ]
    for task in tasks:
        env_id, frames, hard = TASKS[task]
        methods = task_methods(cells, task)
        lines += [
            f"**{env_id}**, {frames:,} frames: {hard}.",
            "",
            "| method | n | success at budget | per seed | ≥ 0.5 | Δ vs PPO [95% CI] | frames to 50 % | AUC "
            "| wall (min) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        base = [s["success_at_budget"] for s in summaries.get((task, "none"), [])]
        for method in methods:
            runs = summaries.get((task, method), [])
            label = METHODS[method][0]
            if not runs:
                lines.append(f"| {label} | 0 | not run yet | | | | | | |")
                continue
            succ = np.array([s["success_at_budget"] for s in runs])
            auc = np.array([s["auc"] for s in runs])
            wall = np.mean([s["seconds"] for s in runs]) / 60
            if method == "none" or not base:
                delta = ""
            else:
                lo, hi = bootstrap_diff(succ, base)
                delta = f"{succ.mean() - np.mean(base):+.2f} [{lo:+.2f}, {hi:+.2f}]"
            lines.append(
                f"| {label} | {len(runs)} | {succ.mean():.2f} ± {succ.std():.2f} | "
                f"{', '.join(f'{v:.2f}' for v in succ)} | {(succ >= HALF).sum()}/{len(runs)} | {delta} | "
                f"{', '.join(_fmt_frames(frames_to_half(s)) for s in runs)} | "
                f"{auc.mean():.3f} ± {auc.std():.3f} | {wall:.1f} |"
            )
        lines.append("")
        shares = [(m, summaries[(task, m)]) for m in methods if (task, m) in summaries]
        names = sorted(
            {k for _, runs in shares for s in runs for k in s["action_share_at_budget"]},
            key=("left", "right", "forward", "pickup", "drop", "toggle", "done").index,
        )
        if names:
            lines += [
                "Action shares in the last 10 % of the frames (mean over seeds):",
                "",
                "| method | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names),
            ]
            for m, runs in shares:
                vals = [np.mean([s["action_share_at_budget"].get(k, 0.0) for s in runs]) for k in names]
                lines.append(f"| {METHODS[m][0]} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
            lines.append("")
    lines += goals(summaries, tasks)
    if os.path.exists(COST_RESULT):
        with open(COST_RESULT, encoding="utf-8") as f:
            lines += cost_markdown(json.load(f)) + [""]
    return "\n".join(lines)


def plot(summaries, path, cells=CELLS):
    """Success-rate curves (mean over seeds, band = min..max over seeds), one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in dict.fromkeys(t for t, _, _ in cells) if any(k[0] == t for k in summaries)]
    if not tasks:
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for method in task_methods(cells, task):
            runs = summaries.get((task, method))
            if not runs:
                continue
            x = np.asarray(runs[0]["curve"]["frames"], float)
            c = np.array([[np.nan if v is None else v for v in s["curve"]["success"]] for s in runs], float)
            c = np.where(np.isnan(c), 0.0, c)  # no episode ended in the window: nothing succeeded there
            style = "--" if method in ("rnd-ungated", "snd-v-fulltarget") else "-"
            color = f"C{list(METHODS).index(method)}"  # one colour per method on every panel
            ax.plot(x, c.mean(0), style, color=color, label=f"{METHODS[method][0]} (n={len(runs)})")
            ax.fill_between(x, c.min(0), c.max(0), color=color, alpha=0.12)
        ax.set_title(TASKS[task][0].removeprefix("MiniGrid-").removesuffix("-v0"), fontsize=10)
        ax.set_xlabel("frames")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training success rate (trailing 10 %)")
    for ax in axes[0]:
        ax.legend(fontsize=6.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results, docs):
    """docs/exploration.md's tables and exploration.png from the summaries in ``results``."""
    summaries = load_summaries(results)
    page = lanes.replace_block(os.path.join(docs, PAGE), START, END, markdown(summaries))
    plot(summaries, os.path.join(docs, "exploration.png"))
    return page


def main(argv=None):
    return lanes.suite_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too, as Ctrl-C does
    sys.exit(main())
