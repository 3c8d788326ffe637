"""Mario on a CPU: RND against plain PPO with ``--recipe cpu-1-1``, each run until its first greedy flag.

    nice -n 5 python benchmarks/mario_flag.py            # the plan of docs/mario_learning.md, resumable
    python benchmarks/mario_flag.py --runs 1-1:rnd:0     # one run
    python benchmarks/mario_flag.py --quick              # the pipeline in seconds, in runs/mario_flag-quick
    python benchmarks/mario_flag.py --report-only        # rebuild the report from the committed summaries
    python benchmarks/mario_flag.py --status             # where each run stands
    python benchmarks/mario_flag.py --pack-state         # the unfinished runs' resume state, to commit

Every run is ``mario/train.py --recipe cpu-1-1 --intrinsic <method> --seed <k>`` (``--world 4
--stage 4`` for 4-4), logging into ``<out>/<run name>``; the recipe stops a run at its first
greedy flag (``--stop-when-solved``) or after 4M agent steps. Runs go one after the other
(``--lanes 2``: two at a time, one thread each). A run cut short (a stop, a machine that went
away) continues from its newest numbered checkpoint, its ``metrics.jsonl`` cut back to that
checkpoint first; only the newest two checkpoints are kept. Each start and end of a run's
process is appended to ``<out>/<run name>.segments.jsonl`` (time, commit, steps), so a summary
can say what ran when (the scheduler is ``lanes.run_plan``). A run longer than one machine's life
continues on the next: ``--pack-state`` copies its newest checkpoint, slimmed (``lanes.slim_checkpoint``:
rounded weights, no optimizer moments), config, metrics and segments into
``benchmarks/lane_state/mario_flag/`` to be committed, and a later invocation that finds no newer
checkpoint of the run restores them and resumes from that checkpoint.

A run's summary ``<results>/<run name>.json`` (curves, first flag, hours, segments) is rewritten
at every new checkpoint while it runs (``"status": "running"``) and once more when it ends
(``"flag"``: the greedy policy reached the flag; ``"budget"``: 4M steps without). Finished runs
are skipped. ``--report-only`` rebuilds the results block of ``docs/mario_learning.md`` and
``docs/mario_learning.png`` from the summaries alone.
"""

from __future__ import annotations

import glob
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import lanes  # noqa: E402
from common.run import logger as tags  # noqa: E402
from common.run.logger import read_metrics  # noqa: E402

RECIPE = "cpu-1-1"
#: the plan of docs/mario_learning.md, in order: (level, method, seed)
PLAN = (
    ("1-1", "rnd", 0),
    ("1-1", "none", 0),
    ("1-1", "rnd", 1),
    ("1-1", "none", 1),
    ("4-4", "rnd", 0),
    ("4-4", "none", 0),
)
METHODS = {"rnd": "PPO + RND", "none": "PPO"}
COLORS = {"rnd": "C3", "none": "C0"}
CURVE_BIN = 50_000  # agent steps per point of the training-episode curves
RESULTS = os.path.join(ROOT, "docs", "results", "mario_flag")
#: unfinished runs' resume state, committed so that a run outlives the machine it ran on (``--pack-state``)
LANE_STATE = os.path.join(ROOT, "benchmarks", "lane_state", "mario_flag")
DOCS = os.path.join(ROOT, "docs")
PAGE = "mario_learning.md"  # the report's page in DOCS
OUT = os.path.join(ROOT, "runs", "mario_flag")
RUN_FORMAT = "LEVEL:METHOD:SEED"
#: ``--quick``: these runs with these trainer flags (``lanes.TINY_PPO``)
QUICK = (
    "1-1:rnd:0,1-1:none:0",
    (*lanes.TINY_PPO, "--num-epochs", "1", "--video-interval", "0", "--histogram-interval", "0")
    + ("--embedding-interval", "0"),
)
TRAINER = "mario/train.py"  # every run's train script (it also checks the flags the suite passes on)
START, END = "<!-- mario-flag-results:start -->", "<!-- mario-flag-results:end -->"
FINISHED = ("flag", "budget")


def run_name(level, method, seed):
    return f"mario{level.replace('-', '')}_{method}_seed{seed}"


def checkpoint_prefix(level):
    return f"mario_{level.replace('-', '_')}"  # mario_1_1_<update>.pdparams


def command(level, method, seed, out, resume=None, threads=0, extra=()):
    world, stage = level.split("-")
    argv = [
        sys.executable,
        os.path.join(ROOT, TRAINER),
        "--recipe",
        RECIPE,
        "--world",
        world,
        "--stage",
        stage,
        "--intrinsic",
        method,
        "--seed",
        str(seed),
        "--log-path",
        out,
        "--run-name",
        run_name(level, method, seed),
        *(["--num-threads", str(threads)] if threads else []),
        *extra,
    ]
    return argv + (["--resume", resume] if resume else [])


# ---------------------------------------------------------------------------------- summaries
def summarize_run(out, level, method, seed, status) -> dict:
    """A run's summary from its folder: curves, first greedy flag, hours, segments."""
    name = run_name(level, method, seed)
    run_dir = os.path.join(out, name)
    m = read_metrics(run_dir)
    empty = (np.zeros(0), np.zeros(0))
    ev_s, ev_x = m.get("eval/x_pos", empty)
    _, ev_flag = m.get("eval/flag", empty)
    ep_s, ep_x = m.get("episode/x_pos", empty)
    _, ep_flag = m.get("episode/flag", empty)
    rate_s, rate = m.get(tags.STEPS_PER_SEC, empty)
    order = np.argsort(ev_s, kind="stable")  # background evals are logged as they arrive
    ev_s, ev_x, ev_flag = ev_s[order], ev_x[order], ev_flag[order]
    steps = int(rate_s[-1]) if len(rate_s) else 0
    flags = np.flatnonzero(ev_flag > 0)
    first = int(ev_s[flags[0]]) if len(flags) else None
    edges = np.arange(0, steps + CURVE_BIN, CURVE_BIN)
    return {
        "level": level,
        "method": method,
        "seed": seed,
        "recipe": RECIPE,
        "status": status,
        "agent_steps": steps,
        "logged_hours": lanes.logged_hours(rate_s, rate),
        "first_flag_step": first,
        "first_flag_hours": lanes.logged_hours(rate_s, rate, upto=first) if first is not None else None,
        "best_eval_x_pos": int(ev_x.max()) if len(ev_x) else None,
        "evaluations": int(len(ev_s)),
        "training_episodes": int(len(ep_s)),
        "training_flags": int(ep_flag.sum()),
        "median_steps_per_sec": round(float(np.median(rate)), 1) if len(rate) else None,
        "eval_curve": {
            "steps": ev_s.astype(int).tolist(),
            "x_pos": ev_x.astype(int).tolist(),
            "flag": ev_flag.astype(int).tolist(),
        },
        "episode_curve": {
            "steps": edges[1:].astype(int).tolist(),
            "x_pos": lanes.binned(ep_s, ep_x, edges),
            "flag_rate": lanes.binned(ep_s, ep_flag, edges),
        },
        "segments": lanes.read_segments(out, name),
        "command": [a.replace(ROOT + os.sep, "") for a in command(level, method, seed, "runs/mario_flag")[1:]],
        "updated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


# ---------------------------------------------------------------------------------- running
def status_at_end(returncode, run_dir) -> str:
    """How a run that exited 0 ended: "flag" when it saved its level's solved checkpoint, else "budget"."""
    return "flag" if glob.glob(os.path.join(run_dir, "models", "mario_[1-8]_[1-4].pdparams")) else "budget"


RUNS = lanes.Runs(
    key=("level", "method", "seed"),
    name=run_name,
    command=command,
    summarize=summarize_run,
    prefix=lambda level, method, seed: checkpoint_prefix(level),
    order=lambda s: (s["level"], s["method"] != "rnd", s["seed"]),
    options=dict(status_at_end=status_at_end, finished=FINISHED),
)


def describe(summary) -> str:
    return (
        f"{summary['agent_steps']:,} steps, first flag {summary['first_flag_step']}, "
        f"best greedy x_pos {summary['best_eval_x_pos']}"
    )


# ---------------------------------------------------------------------------------- report
def _hours(h):
    return "-" if h is None else f"{h:.2f}"


def markdown(summaries) -> str:
    if not summaries:
        return "(no run has a summary yet)"
    lines = [
        "Generated by `python benchmarks/mario_flag.py --report-only` from `docs/results/mario_flag/*.json`. "
        "Hours are the run's logged wall time (every segment, evaluations included, start-ups not), on the "
        "2-core machine shared with other work. A greedy evaluation runs every 5,120 agent steps.",
        "",
        "| level | method | seed | status | agent steps | hours | first greedy flag at | hours to it "
        "| best greedy x_pos | training flags | steps/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        first = "-" if s["first_flag_step"] is None else f"{s['first_flag_step']:,}"
        lines.append(
            f"| {s['level']} | {METHODS[s['method']]} | {s['seed']} | {s['status']} | {s['agent_steps']:,} "
            f"| {_hours(s['logged_hours'])} | {first} | {_hours(s['first_flag_hours'])} "
            f"| {s['best_eval_x_pos'] if s['best_eval_x_pos'] is not None else '-'} "
            f"| {s['training_flags']} of {s['training_episodes']} | {s['median_steps_per_sec']} |"
        )
    lines += ["", *lanes.segments_table(summaries, RUNS.name_of)]
    return "\n".join(lines)


def plot(summaries, path):
    """Greedy x_pos over agent steps (every seed, and per method the band from lowest to highest seed),
    and the training episodes' mean x_pos and flag rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({s["level"] for s in summaries})
    fig, axes = plt.subplots(3, len(levels), figsize=(6.5 * len(levels), 10), squeeze=False)
    for col, level in enumerate(levels):
        top, middle, bottom = axes[0, col], axes[1, col], axes[2, col]
        for method in METHODS:
            runs = [s for s in summaries if s["level"] == level and s["method"] == method]
            if not runs:
                continue
            grid = np.arange(0, max(s["agent_steps"] for s in runs) + 1, 5120 * 4)
            curves = []
            for s in runs:
                ev = s["eval_curve"]
                if ev["steps"]:
                    top.plot(
                        ev["steps"], ev["x_pos"], color=COLORS[method], alpha=0.8 if len(runs) == 1 else 0.4, lw=0.9
                    )
                    flags = [(t, x) for t, x, f in zip(ev["steps"], ev["x_pos"], ev["flag"]) if f]
                    if flags:
                        top.scatter(*flags[0], color=COLORS[method], marker="*", s=140, zorder=3)
                    curves.append(np.interp(grid, ev["steps"], ev["x_pos"], right=np.nan))
                epc = s["episode_curve"]
                xs = [np.nan if v is None else v for v in epc["x_pos"]]
                middle.plot(
                    epc["steps"], xs, color=COLORS[method], alpha=0.8, label=f"{METHODS[method]} seed {s['seed']}"
                )
                rate = [np.nan if v is None else v for v in epc["flag_rate"]]
                bottom.plot(
                    epc["steps"], rate, color=COLORS[method], alpha=0.8, label=f"{METHODS[method]} seed {s['seed']}"
                )
            if curves:
                c = np.array(curves)
                top.fill_between(
                    grid,
                    np.nanmin(c, 0),
                    np.nanmax(c, 0),
                    color=COLORS[method],
                    alpha=0.15,
                    label=f"{METHODS[method]} ({len(runs)} seeds: lowest to highest)",
                )
        top.set_title(f"world {level}: greedy evaluation x_pos (star: first flag)")
        top.set_xlabel("agent steps")
        top.set_ylabel("x_pos")
        if top.get_legend_handles_labels()[0]:  # (no greedy evaluation yet: a --quick run)
            top.legend(fontsize=8)
        middle.set_title(f"world {level}: training episodes' mean final x_pos (per {CURVE_BIN:,} steps)")
        middle.set_xlabel("agent steps")
        middle.set_ylabel("x_pos")
        middle.legend(fontsize=8)
        bottom.set_title(f"world {level}: training episodes reaching the flag (per {CURVE_BIN:,} steps)")
        bottom.set_xlabel("agent steps")
        bottom.set_ylabel("flag rate")
        bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(results, docs):
    alt = "greedy x_pos, training x_pos and flag rate"
    summaries = RUNS.load(results)
    return lanes.write_suite_report(docs, PAGE, "mario_learning.png", alt, summaries, markdown, plot, START, END)


def parse_runs(text):
    return lanes.parse_keys(text, PLAN, (("LEVEL", ("1-1", "4-4")), ("METHOD", tuple(METHODS)), ("SEED", None)))


def main(argv=None):
    return lanes.suite_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too (they save), as Ctrl-C does
    sys.exit(main())
