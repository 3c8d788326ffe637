"""Does the SND novelty signal persist where RND's fades? Mario 1-1, every module, several seeds.

    python benchmarks/snd_signal.py                  # 5 modules x 2 seeds x 30,720 agent steps (hours)
    python benchmarks/snd_signal.py --quick          # a CI-sized check of the pipeline, in a scratch folder
    python benchmarks/snd_signal.py --runs icm:0     # one run
    python benchmarks/snd_signal.py --report-only    # docs/snd_signal.md + PNG from the committed summaries
    python benchmarks/snd_signal.py --status         # which runs have finished

Each run is ``mario/train.py`` on world 1-1 with the game's defaults except the sizes
below (equal for every module), without evaluation or checkpoints (a run cut short starts
again). A finished run leaves ``docs/results/snd_signal/<module>_seed<k>.json``: the mean raw
intrinsic reward of every rollout (``intrinsic/raw_reward_mean``, before the trainer's
scaling), the spread of the raw rewards inside each rollout (coefficient of variation: how
much the signal tells states apart), and the episodes' x positions. The scheduler and the
command line are ``lanes.suite_main``'s: it skips runs whose summary exists, and the report is
rebuilt from the summaries alone.

The SND paper's claim (Pecháč et al. 2023, arXiv 2302.11563): with a trained target, the
prediction error keeps separating new states from familiar ones, where RND's fixed random
target lets the predictor catch up and the signal fade. Raw magnitudes of different
modules are not comparable (each measures distances in its own feature space, and SND's
moves), so the report compares each run with itself: the signal late in the run relative
to early in the run (after the predictor's first fit), and the within-rollout spread.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import lanes  # noqa: E402
from common.run.logger import read_metrics  # noqa: E402

#: ICM was added with issue 29 (its Mario runs come after the Mario lanes of docs/mario_learning.md)
MODULES = ("rnd", "snd-v", "snd-std", "snd-vic", "icm")
#: the plan, seed by seed: (module, seed)
PLAN = tuple((module, seed) for seed in (0, 1) for module in MODULES)
#: the run's sizes: 2 envs x 128 steps per update, 4 epochs x 4 minibatches, 120 updates
SIZES = {"num_processes": 2, "num_local_steps": 128, "num_epochs": 4, "batch_size": 4, "num_global_steps": 30_720}
#: ``--quick``: these runs, with these trainer flags (3 updates of 2 envs x 16 steps)
QUICK = (
    "rnd:0,snd-v:0",
    ("--num-local-steps", "16", "--num-epochs", "1", "--batch-size", "2", "--num-global-steps", "96"),
)
#: "early" = the mean of updates 2-6 (after the predictor's first fit); "late" = the last 10 updates
EARLY, LATE = slice(1, 6), slice(-10, None)
RESULTS = os.path.join(ROOT, "docs", "results", "snd_signal")
LANE_STATE = None  # nothing to pack: the runs keep no checkpoints
DOCS = os.path.join(ROOT, "docs")
PAGE = "snd_signal.md"  # the report's page in DOCS
OUT = os.path.join(ROOT, "runs", "snd_signal")
RUN_FORMAT = "MODULE:SEED"
TRAINER = "mario/train.py"  # every run's train script (it also checks the flags the suite passes on)
START, END = "<!-- snd-signal-table:start -->", "<!-- snd-signal-table:end -->"


def run_name(module, seed):
    return f"{module}_seed{seed}"


def command(module, seed, out, resume=None, threads=0, extra=()):
    """The run's trainer command line (``resume`` is never given: the runs keep no checkpoints)."""
    argv = [sys.executable, os.path.join(ROOT, TRAINER), "--world", "1", "--stage", "1", "--intrinsic", module]
    argv += ["--seed", str(seed), "--log-path", out, "--run-name", run_name(module, seed)]
    for flag in ("eval", "video", "histogram", "embedding", "save"):
        argv += [f"--{flag}-interval", "0"]
    for k, v in SIZES.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return argv + (["--num-threads", str(threads)] if threads else []) + list(extra)


def summarize_run(out, module, seed, status) -> dict:
    """A finished run's summary from its folder ``out/<run name>``: the raw signal per update, its
    early and late means, the episodes' x positions."""
    name = run_name(module, seed)
    m = read_metrics(os.path.join(out, name))
    steps, raw = m["intrinsic/raw_reward_mean"]
    cv_steps, cv = m.get("intrinsic/raw_reward_cv", (steps, np.full(len(raw), np.nan)))
    xs = m.get("episode/x_pos", (np.zeros(0), np.zeros(0)))[1]
    seconds, commit, _ = lanes.segment_facts(out, name)
    return {
        "module": module,
        "seed": seed,
        "status": status,
        "updates": int(len(raw)),
        "agent_steps": int(steps[-1]),
        "seconds": round(float(seconds), 1),
        "raw": {
            "steps": steps.astype(int).tolist(),
            "mean": [round(float(v), 6) for v in raw],
            "cv": [None if not np.isfinite(v) else round(float(v), 5) for v in cv],
        },
        "early": float(raw[EARLY].mean()),
        "late": float(raw[LATE].mean()),
        "late_over_early": float(raw[LATE].mean() / raw[EARLY].mean()),
        "episodes": int(len(xs)),
        "x_pos_mean": float(xs.mean()) if len(xs) else 0.0,
        "x_pos_max": float(xs.max()) if len(xs) else 0.0,
        "command": [a.replace(ROOT + os.sep, "") for a in command(module, seed, "runs/snd_signal")[1:]],
        "code_commit": commit or "unknown",
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


RUNS = lanes.Runs(
    key=("module", "seed"),
    name=run_name,
    command=command,
    summarize=summarize_run,
    prefix=run_name,  # no numbered checkpoints (--save-interval 0)
    order=lambda s: (MODULES.index(s["module"]), s["seed"]),
    # a run cut short starts again, so only a finished one has a summary; one thread, as the runs had
    options={"partial_summaries": False, "env": {"OMP_NUM_THREADS": "1"}},
)


def describe(summary) -> str:
    return f"late/early {summary['late_over_early']:.3f}"


def parse_runs(text):
    return lanes.parse_keys(text, PLAN, (("MODULE", MODULES), ("SEED", None)))


# ---------------------------------------------------------------------------------- report
def markdown(runs_of) -> str:
    """The report's table from ``{module: [summary, ...]}``."""
    lines = [
        "Generated by `python benchmarks/snd_signal.py --report-only` from `docs/results/snd_signal/*.json`. "
        "late/early = mean raw intrinsic reward of the last 10 updates over that of updates 2-6 (after the "
        "predictor's first fit), per seed; CV = std/mean of the raw rewards inside a rollout, mean over the "
        "last 10 updates.",
        "",
        "| module | seeds | agent steps | late/early per seed | mean | CV late per seed | mean x_pos | wall (min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for module in MODULES:
        runs = runs_of.get(module, [])
        if not runs:
            lines.append(f"| {module} | 0 | not run yet | | | | | |")
            continue
        ratios = [s["late_over_early"] for s in runs]
        cvs = [np.nanmean([np.nan if v is None else v for v in s["raw"]["cv"][-10:]]) for s in runs]
        lines.append(
            f"| {module} | {len(runs)} | {runs[0]['agent_steps']:,} | "
            f"{', '.join(f'{r:.3f}' for r in ratios)} | {np.mean(ratios):.3f} | "
            f"{', '.join(f'{c:.2f}' for c in cvs)} | {np.mean([s['x_pos_mean'] for s in runs]):.0f} | "
            f"{np.mean([s['seconds'] for s in runs]) / 60:.1f} |"
        )
    return "\n".join(lines)


def plot(runs_of, path):
    """Each run's raw signal over its early mean (log scale), and its within-rollout spread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for module, runs in runs_of.items():
        for k, s in enumerate(runs):
            steps, mean = np.array(s["raw"]["steps"]), np.array(s["raw"]["mean"])
            color = f"C{MODULES.index(module)}"
            label = module if k == 0 else None
            axes[0].plot(steps, mean / s["early"], color=color, alpha=0.8, label=label, lw=1)
            cv = np.array([np.nan if v is None else v for v in s["raw"]["cv"]], float)
            axes[1].plot(steps, cv, color=color, alpha=0.8, label=label, lw=1)
    axes[0].axhline(1.0, color="gray", lw=0.6, ls=":")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("raw intrinsic reward / its early mean")
    axes[1].set_ylabel("within-rollout coefficient of variation")
    for ax in axes:
        ax.set_xlabel("agent steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("Mario 1-1: how much of the signal is left", fontsize=10)
    axes[1].set_title("how much it tells states apart", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results, docs):
    """The table and the picture of ``docs/snd_signal.md`` from the summaries in ``results``."""
    summaries, alt = RUNS.grouped(results, "module"), "signal over time"
    return lanes.write_suite_report(docs, PAGE, "snd_signal.png", alt, summaries, markdown, plot, START, END)


def main(argv=None):
    return lanes.suite_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too, as Ctrl-C does
    sys.exit(main())
