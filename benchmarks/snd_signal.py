"""Does the SND novelty signal persist where RND's fades? Mario 1-1, every module, several seeds.

    python benchmarks/snd_signal.py                  # 5 modules x 2 seeds x 30,720 agent steps (hours)
    python benchmarks/snd_signal.py --quick          # CI-sized check of the pipeline
    python benchmarks/snd_signal.py --report-only    # docs/snd_signal.md + PNG from the committed summaries

Each run is ``mario/train.py`` on world 1-1 with the game's defaults except the sizes
below (equal for every module), without evaluation. A finished run leaves
``docs/results/snd_signal/<module>_seed<k>.json``: the mean raw intrinsic reward of every
rollout (``intrinsic/raw_reward_mean``, before the trainer's scaling), the spread of the
raw rewards inside each rollout (coefficient of variation: how much the signal tells
states apart), and the episodes' x positions. The suite skips runs whose summary exists
and the report is rebuilt from the summaries alone.

The SND paper's claim (Pecháč et al. 2023, arXiv 2302.11563): with a trained target, the
prediction error keeps separating new states from familiar ones, where RND's fixed random
target lets the predictor catch up and the signal fade. Raw magnitudes of different
modules are not comparable (each measures distances in its own feature space, and SND's
moves), so the report compares each run with itself: the signal late in the run relative
to early in the run (after the predictor's first fit), and the within-rollout spread.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from benchmarks import lanes  # noqa: E402
from benchmarks.lanes import carry_nice_into_session, interrupt_on_sigterm  # noqa: E402
from common.run.logger import read_metrics  # noqa: E402

#: ICM was added with issue 29 (its Mario runs come after the Mario lanes of docs/mario_learning.md)
MODULES = ("rnd", "snd-v", "snd-std", "snd-vic", "icm")
SEEDS = 2
#: the run's sizes: 2 envs x 128 steps per update, 4 epochs x 4 minibatches, 120 updates
SIZES = {"num_processes": 2, "num_local_steps": 128, "num_epochs": 4, "batch_size": 4, "num_global_steps": 30_720}
QUICK_SIZES = {"num_processes": 2, "num_local_steps": 16, "num_epochs": 1, "batch_size": 2, "num_global_steps": 96}
#: "early" = the mean of updates 2-6 (after the predictor's first fit); "late" = the last 10 updates
EARLY, LATE = slice(1, 6), slice(-10, None)
RESULTS = os.path.join(ROOT, "docs", "results", "snd_signal")


def run_name(module, seed):
    return f"{module}_seed{seed}"


def command(module, seed, sizes, out):
    argv = [
        sys.executable,
        os.path.join(ROOT, "mario", "train.py"),
        "--world",
        "1",
        "--stage",
        "1",
        "--intrinsic",
        module,
        "--seed",
        str(seed),
        "--log-path",
        out,
        "--run-name",
        run_name(module, seed),
        "--eval-interval",
        "0",
        "--video-interval",
        "0",
        "--histogram-interval",
        "0",
        "--embedding-interval",
        "0",
        "--save-interval",
        "0",
    ]
    for k, v in sizes.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return argv


def summarize_run(run_dir, module, seed, seconds, argv, commit="unknown") -> dict:
    m = read_metrics(run_dir)
    steps, raw = m["intrinsic/raw_reward_mean"]
    cv_steps, cv = m.get("intrinsic/raw_reward_cv", (steps, np.full(len(raw), np.nan)))
    xs = m.get("episode/x_pos", (np.zeros(0), np.zeros(0)))[1]
    root = ROOT + os.sep
    return {
        "module": module,
        "seed": seed,
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
        "command": [a.replace(root, "") for a in argv[1:]],
        "code_commit": commit,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def planned(modules, seeds, sizes, out, results) -> list:
    """The runs as ``lanes.PlannedRun``s (no checkpoints: a run cut short starts again), seed by seed."""
    plan = []
    for seed in range(seeds):
        for module in modules:
            name = run_name(module, seed)

            def summarize(out_, status, module=module, seed=seed, name=name):
                seconds, commit, _ = lanes.segment_facts(out_, name)
                argv = command(module, seed, sizes, out)
                return summarize_run(os.path.join(out_, name), module, seed, seconds, argv, commit or "unknown")

            plan.append(
                lanes.PlannedRun(
                    name=name,
                    argv=lambda resume, m=module, k=seed: command(m, k, sizes, out),
                    prefix=name,  # no numbered checkpoints (--save-interval 0)
                    summarize=summarize,
                    summary_path=os.path.join(results, name + ".json"),
                    partial_summaries=False,
                    env={"OMP_NUM_THREADS": "1"},
                )
            )
    return plan


def load(results):
    out = {}
    for name in sorted(os.listdir(results)) if os.path.isdir(results) else []:
        if name.endswith(".json"):
            with open(os.path.join(results, name)) as f:
                s = json.load(f)
            out.setdefault(s["module"], []).append(s)
    return out


def report(summaries, docs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(docs, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for module in MODULES:
        for k, s in enumerate(summaries.get(module, [])):
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
    fig.savefig(os.path.join(docs, "snd_signal.png"), dpi=110)
    plt.close(fig)
    lines = [
        "<!-- snd-signal-table:start -->",
        "",
        "Generated by `python benchmarks/snd_signal.py --report-only` from `docs/results/snd_signal/*.json`. "
        "late/early = mean raw intrinsic reward of the last 10 updates over that of updates 2-6 (after the "
        "predictor's first fit), per seed; CV = std/mean of the raw rewards inside a rollout, mean over the "
        "last 10 updates.",
        "",
        "| module | seeds | agent steps | late/early per seed | mean | CV late per seed | mean x_pos | wall (min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for module in MODULES:
        runs = summaries.get(module, [])
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
    lines += ["", "![signal over time](snd_signal.png)", "", "<!-- snd-signal-table:end -->"]
    block = "\n".join(lines)
    path = os.path.join(docs, "snd_signal.md")
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# SND's signal on Mario\n\n"
    start, end = "<!-- snd-signal-table:start -->", "<!-- snd-signal-table:end -->"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(block)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="a CI-sized check: tiny runs of rnd and snd-v, 1 seed, results and report in a scratch folder",
    )
    p.add_argument("--out", default=None, help="scratch folder of the run folders (default: runs/snd_signal)")
    p.add_argument("--results", default=None, help="per-run summaries (default: docs/results/snd_signal)")
    p.add_argument("--docs", default=None, help="where snd_signal.md/.png go (default: docs)")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from the summaries")
    args = p.parse_args(argv)
    carry_nice_into_session()  # started as `setsid nice -n N ...`: the whole session yields (autogroup)
    out = args.out or os.path.join(ROOT, "runs", "snd_signal-quick" if args.quick else "snd_signal")
    results = args.results or (os.path.join(out, "results") if args.quick else RESULTS)
    docs = args.docs or (out if args.quick else os.path.join(ROOT, "docs"))
    modules, seeds, sizes = (("rnd", "snd-v"), 1, QUICK_SIZES) if args.quick else (MODULES, SEEDS, SIZES)
    if not args.report_only:
        os.makedirs(results, exist_ok=True)
        late = "late/early {:.3f}".format
        lanes.run_plan(planned(modules, seeds, sizes, out, results), out, describe=lambda s: late(s["late_over_early"]))
    report(load(results), docs)


if __name__ == "__main__":
    interrupt_on_sigterm()  # `kill` stops the run too, as Ctrl-C does
    main()
