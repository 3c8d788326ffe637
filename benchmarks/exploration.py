"""Exploration on a CPU budget: MiniGrid tasks x {PPO, RND, SND-V, SND-STD, SND-VIC} x seeds.

    python benchmarks/exploration.py                      # the whole suite (sized for ~80 min on 2 cores)
    python benchmarks/exploration.py --budget-scale 0.25 --seeds 1 --tasks doorkey5
    python benchmarks/exploration.py --report-only        # rebuild the table and plot from finished runs

Every run is ``gridworld/train.py`` with the game's defaults (same PPO settings for
every method) and a per-task frame budget, without evaluation, videos, embeddings,
histograms or intermediate checkpoints. Runs go to ``--out`` (one folder per task,
method and seed, skipped when already finished, so an interrupted suite resumes),
``--jobs`` of them at a time, seed-major (all tasks and methods of seed 0 first, so
a suite cut short still covers everything with fewer seeds).

"At the budget" = the training episodes (stochastic policy) that ended in the last
``--final-window`` share of the frames: success rate and mean return per run, then
mean +- std over seeds. "AUC" is the success rate averaged over all training
episodes of a run (how early it learned). The table goes between the markers of
``docs/exploration.md`` (the rest of the file, the findings, is kept); the learning
curves (success rate of the training episodes that ended in a trailing window of 15% of
the budget, vs frames) to ``docs/exploration.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from common.logger import read_metrics  # noqa: E402

#: key -> (env id, frame budget at --budget-scale 1, what makes it hard)
TASKS = {
    "multiroom2": ("MiniGrid-MultiRoom-N2-S4-v0", 40_960, "two small rooms: open one door, 40-step limit"),
    "doorkey5": ("MiniGrid-DoorKey-5x5-v0", 61_440, "pick up the key, open the door, reach the goal; 250 steps"),
    "doorkey6": ("MiniGrid-DoorKey-6x6-v0", 61_440, "the same in a bigger room, 360 steps"),
}
METHODS = ("none", "rnd", "snd-v", "snd-std", "snd-vic")
LABELS = {"none": "PPO", "rnd": "PPO+RND", "snd-v": "PPO+SND-V", "snd-std": "PPO+SND-STD", "snd-vic": "PPO+SND-VIC"}
START, END = "<!-- exploration-table:start -->", "<!-- exploration-table:end -->"
ROLLOUT = 16 * 128  # gridworld default samples per update: budgets are rounded to whole updates
#: a curve point is the success rate of the episodes that ended in the trailing CURVE_WINDOW share of the budget
#: (narrow bins hold a handful of episodes, and the first ones to end are the lucky short successes)
CURVE_WINDOW = 0.15


def curve_points(frames):
    return np.linspace(CURVE_WINDOW * frames, frames, 18)


def run_name(task, method, seed):
    return f"{task}_{method}_seed{seed}"


def budget_of(task, scale):
    frames = int(TASKS[task][1] * scale)
    return max(ROLLOUT, frames // ROLLOUT * ROLLOUT)


def command(task, method, seed, frames, out):
    return [sys.executable, os.path.join(ROOT, "gridworld", "train.py"),
            "--env-id", TASKS[task][0], "--intrinsic", method, "--seed", str(seed),
            "--num-global-steps", str(frames), "--log-path", out, "--run-name", run_name(task, method, seed),
            "--eval-interval", "0", "--video-interval", "0", "--save-interval", "0", "--embedding-interval", "0",
            "--histogram-interval", "0"]


def finished(out, name):
    return os.path.exists(os.path.join(out, name, "done.json"))


def run_suite(jobs_list, out, jobs):
    """Run (name, argv, frames) entries, ``jobs`` at a time; each writes done.json when it succeeded."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    pending, running = list(jobs_list), []
    t_start = time.time()
    while pending or running:
        while pending and len(running) < jobs:
            name, argv, frames = pending.pop(0)
            os.makedirs(os.path.join(out, name), exist_ok=True)
            log = open(os.path.join(out, name + ".log"), "w")
            running.append((name, frames, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                           cwd=ROOT), log, time.time()))
            print(f"[{time.strftime('%H:%M:%S')}] start {name} ({frames} frames)", flush=True)
        time.sleep(2)
        for item in list(running):
            name, frames, proc, log, t0 = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            secs = time.time() - t0
            if proc.returncode == 0:
                with open(os.path.join(out, name, "done.json"), "w") as f:
                    json.dump({"frames": frames, "seconds": secs}, f)
            print(f"[{time.strftime('%H:%M:%S')}] {'done' if proc.returncode == 0 else 'FAILED'} {name} "
                  f"rc={proc.returncode} {secs:.0f}s ({frames / max(secs, 1e-9):.0f} frames/s); "
                  f"{len(pending)} pending, {time.time() - t_start:.0f}s elapsed", flush=True)


# ---------------------------------------------------------------------------------- report
def episodes(run_dir):
    """(steps, success, return) arrays of the run's finished training episodes."""
    m = read_metrics(run_dir)
    if "episode/success" not in m:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    steps, succ = m["episode/success"]
    _, ret = m["episode/return"]
    return steps, succ, ret


def summarize(out, tasks, methods, seeds, scale, window):
    """{task: {method: {"n": seeds done, "success": (mean, std), "return": ..., "auc": ...}}} and curves."""
    table, curves = {}, {}
    for task in tasks:
        frames = budget_of(task, scale)
        for method in methods:
            rows, curve = [], []
            for seed in seeds:
                rd = os.path.join(out, run_name(task, method, seed))
                if not finished(out, run_name(task, method, seed)):
                    continue
                steps, succ, ret = episodes(rd)
                last = steps >= (1.0 - window) * frames
                if not last.any() and len(steps):
                    last = steps == steps.max()
                rows.append((succ[last].mean() if last.any() else 0.0, ret[last].mean() if last.any() else 0.0,
                             succ.mean() if len(succ) else 0.0))
                curve.append([succ[(steps > x - CURVE_WINDOW * frames) & (steps <= x)].mean()
                              if ((steps > x - CURVE_WINDOW * frames) & (steps <= x)).any() else np.nan
                              for x in curve_points(frames)])
            if rows:
                a = np.asarray(rows)
                table.setdefault(task, {})[method] = {
                    "n": len(rows), "success": (a[:, 0].mean(), a[:, 0].std()),
                    "return": (a[:, 1].mean(), a[:, 1].std()), "auc": (a[:, 2].mean(), a[:, 2].std())}
                curves.setdefault(task, {})[method] = (curve_points(frames), np.asarray(curve))
    return table, curves


def markdown(table, tasks, methods, seeds, scale, window):
    lines = [START, "",
             f"Budget scale {scale:g}; seeds {', '.join(map(str, seeds))}; success and return of the training "
             f"episodes that ended in the last {window:.0%} of each run's frames, mean ± std over the seeds that "
             "finished (n); AUC = success rate over all training episodes of the run.", ""]
    for task in tasks:
        env_id, _, hard = TASKS[task]
        lines += [f"**{env_id}** ({budget_of(task, scale):,} frames; {hard})", "",
                  "| method | n | success at budget | return at budget | success AUC |", "|---|---|---|---|---|"]
        for method in methods:
            r = table.get(task, {}).get(method)
            if r is None:
                lines.append(f"| {LABELS[method]} | 0 | not run | | |")
                continue
            lines.append(f"| {LABELS[method]} | {r['n']} | {r['success'][0]:.2f} ± {r['success'][1]:.2f} | "
                         f"{r['return'][0]:.3f} ± {r['return'][1]:.3f} | {r['auc'][0]:.3f} ± {r['auc'][1]:.3f} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def write_doc(path, block):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Exploration benchmark\n\n"
    if START in text and END in text:
        text = text[:text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def plot(curves, tasks, methods, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in tasks if t in curves]
    if not tasks:
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for method in methods:
            if method not in curves[task]:
                continue
            x, c = curves[task][method]
            with np.errstate(all="ignore"):
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean, std = np.nanmean(c, axis=0), np.nanstd(c, axis=0)
            ax.plot(x, mean, label=f"{LABELS[method]} (n={len(c)})")
            ax.fill_between(x, mean - std, mean + std, alpha=0.15)
        ax.set_title(TASKS[task][0].removeprefix("MiniGrid-"), fontsize=10)
        ax.set_xlabel("frames")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training success rate")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated intrinsic modules")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    p.add_argument("--budget-scale", type=float, default=1.0, help="multiply every task's frame budget")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one CPU thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "exploration"), help="folder of the runs")
    p.add_argument("--docs", default=os.path.join(ROOT, "docs"), help="where exploration.md/.png go")
    p.add_argument("--final-window", type=float, default=0.1, help="share of the budget that counts as 'at the budget'")
    p.add_argument("--report-only", action="store_true", help="only rebuild the table and plot")
    args = p.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    methods = [m for m in args.methods.split(",") if m]
    for t in tasks:
        if t not in TASKS:
            p.error(f"unknown task {t!r}; choose from {', '.join(TASKS)}")
    for m in methods:
        if m not in METHODS:
            p.error(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if args.seeds < 1 or args.budget_scale <= 0 or args.jobs < 1 or not 0 < args.final_window <= 1:
        p.error("--seeds and --jobs must be >= 1, --budget-scale > 0, --final-window in (0, 1]")
    seeds = list(range(args.seeds))
    if not args.report_only:
        todo = [(run_name(t, m, s), command(t, m, s, budget_of(t, args.budget_scale), args.out),
                 budget_of(t, args.budget_scale))
                for s in seeds for t in tasks for m in methods if not finished(args.out, run_name(t, m, s))]
        total = sum(f for _, _, f in todo)
        print(f"{len(todo)} runs to do, {total:,} frames in all; runs in {args.out}", flush=True)
        run_suite(todo, args.out, args.jobs)
    table, curves = summarize(args.out, tasks, methods, seeds, args.budget_scale, args.final_window)
    write_doc(os.path.join(args.docs, "exploration.md"),
              markdown(table, tasks, methods, seeds, args.budget_scale, args.final_window))
    plot(curves, tasks, methods, os.path.join(args.docs, "exploration.png"))
    print(markdown(table, tasks, methods, seeds, args.budget_scale, args.final_window))
    return table


if __name__ == "__main__":
    main()
