"""The SND article's comparison on Pong: DQN (epsilon 0.1) vs DQN_e0 (epsilon 0) vs SND (SND-V, epsilon 0).

    python benchmarks/snd_dqn_pong.py                     # 3 agents x 100,000 train steps (hours on a CPU), resumable
    python benchmarks/snd_dqn_pong.py --quick             # tiny runs of DQN and SND end to end, in a scratch folder
    python benchmarks/snd_dqn_pong.py --runs snd:1        # one run (AGENT:SEED,...)
    python benchmarks/snd_dqn_pong.py --report-only       # rebuild docs/snd_dqn_pong.md's tables and the PNG
                                                          # from the committed summaries alone
    python benchmarks/snd_dqn_pong.py --status            # which runs have finished
    python benchmarks/snd_dqn_pong.py --speed             # train steps/s of each agent (a few hundred steps)

Every run is ``pong/train.py --agent <agent> --seed <k>`` with the article's settings
(``pong/train.py --help``) and ``EVALS`` greedy evaluations spread over the run (the
article's chart: the evaluation reward against the train count). A finished run leaves
a small summary ``<results>/pong_<agent>_seed<k>.json`` (curves, final numbers, speed, the
command, the code's commit); the scheduler and the command line are ``lanes.suite_main``'s:
runs whose summary exists are skipped, a run cut short continues from its newest checkpoint
(its ``metrics.jsonl`` is cut back to that checkpoint's step first), ``--report-only``
rebuilds the report from the summaries alone, and flags the suite does not know go to every
run's ``pong/train.py`` (with an ``--out`` and ``--results`` of their own). The
runs are not packed into git (``--pack-state``): their checkpoints hold the replay memory.

The runs log into one parent folder, ``<out>/pong_<agent>_seed<k>``: ``visualdl
--logdir <out>`` overlays their ``eval/return`` and ``episode/return`` curves (x axis:
train steps) in one chart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import lanes  # noqa: E402
from benchmarks.intervals import bootstrap_diff, bootstrap_mean  # noqa: E402
from benchmarks.lanes import binned, code_commit, logged_hours, write_json_atomic  # noqa: E402
from common.run.logger import read_metrics  # noqa: E402

AGENTS = {"dqn": "DQN (epsilon 0.1)", "dqn-e0": "DQN_e0 (epsilon 0)", "snd": "SND (SND-V, epsilon 0)"}
COLORS = {"dqn": "C0", "dqn-e0": "C1", "snd": "C2"}
#: the plan: (agent, seed); the article ran one seed
PLAN = (("dqn", 0), ("dqn-e0", 0), ("snd", 0))
ARTICLE_STEPS = 100_000
EVALS = 50  # greedy evaluations per run, evenly spaced
#: ``--quick``: these runs, with these trainer flags (40 train steps after a 100-step warm-up, a tiny memory)
QUICK = (
    "dqn:0,snd:0",
    ("--train-steps", "40", "--memory-warmup-size", "100", "--memory-capacity", "300", "--batch-size", "8")
    + ("--eval-interval", "20", "--max-eval-steps", "100", "--save-interval", "20", "--log-interval", "10"),
)
CURVE_POINTS = 50
FINAL_WINDOW = 0.1  # "at the end": the last 10 % of the train steps
LATE_WINDOW = 0.5  # the comparison's window: the evaluations in the second half of the train steps
RESULTS = os.path.join(ROOT, "docs", "results", "snd_dqn_pong")
LANE_STATE = None  # not packed: a checkpoint holds the replay memory (71 MB)
DOCS = os.path.join(ROOT, "docs")
PAGE = "snd_dqn_pong.md"  # the report's page in DOCS
OUT = os.path.join(ROOT, "runs", "snd_dqn_pong")
RUN_FORMAT = "AGENT:SEED"
TRAINER = "pong/train.py"  # every run's train script (it also checks the flags the suite passes on)
START, END = "<!-- snd-dqn-pong-results:start -->", "<!-- snd-dqn-pong-results:end -->"
SPEED_START, SPEED_END = "<!-- snd-dqn-pong-speed:start -->", "<!-- snd-dqn-pong-speed:end -->"
SPEED_STEPS = 300
# a run checkpoints every 1/40 of its train steps (2,500 of 100,000, ~5 min of DQN), so a machine that stops
# mid-run loses minutes, and the benchmark keeps only the newest two of those checkpoints per run
SAVES_PER_RUN = 40


def run_name(agent, seed):
    return f"pong_{agent}_seed{seed}"


def command(agent, seed, out, resume=None, threads=0, extra=()):
    """The run's ``pong/train.py`` command line; ``extra`` flags come last, so they win."""
    argv = [sys.executable, os.path.join(ROOT, TRAINER), "--agent", agent, "--seed", str(seed)]
    argv += ["--train-steps", str(ARTICLE_STEPS), "--eval-interval", str(ARTICLE_STEPS // EVALS)]
    argv += ["--save-interval", str(ARTICLE_STEPS // SAVES_PER_RUN)]
    argv += ["--log-path", out, "--run-name", run_name(agent, seed)]
    argv += [*(["--num-threads", str(threads)] if threads else []), *extra]
    return argv + (["--resume", resume] if resume else [])


# ---------------------------------------------------------------------------------- resuming
CHECKPOINTS = "pong_*"  # the numbered checkpoints: pong_<agent>_<train steps>.pdparams


def newest_checkpoint(run_dir):
    """(path, train steps) of the newest periodic checkpoint in a run folder, or (None, 0)."""
    return lanes.newest_checkpoint(run_dir, CHECKPOINTS)


def prune_checkpoints(run_dir, keep=2):
    """Delete all but the ``keep`` newest periodic checkpoints of a run (each holds the 71 MB replay memory)."""
    lanes.prune_checkpoints(run_dir, CHECKPOINTS, keep)


def cut_metrics(run_dir, step):
    """Drop the metrics logged after train step ``step`` (they are logged again by the resumed run)."""
    lanes.cut_metrics(run_dir, lambda record: record["step"] <= step)


def resume_run(run_dir):
    """(newest periodic checkpoint, its train steps) of a run folder, its metrics cut back to it; (None, 0)."""
    ckpt, done_steps = newest_checkpoint(run_dir)
    if ckpt is not None:
        cut_metrics(run_dir, done_steps)
    return ckpt, done_steps


# ---------------------------------------------------------------------------------- summaries
def summarize_run(out, agent, seed, status) -> dict:
    """A finished run's summary from its folder ``out/<run name>`` (its budget from its ``config.json``):
    evaluation and training-episode curves, the returns at the end, speed, where it was resumed."""
    name = run_name(agent, seed)
    run_dir = os.path.join(out, name)
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        steps = json.load(f)["train_steps"]
    m = read_metrics(run_dir)
    empty = (np.zeros(0), np.zeros(0))
    ev_s, ev_v = m.get("eval/return", empty)
    ep_s, ep_v = m.get("episode/return", empty)
    int_s, int_v = m.get("intrinsic/reward_mean", empty)
    rate_s, rate = m.get("perf/train_steps_per_sec", empty)
    _, cpu = m.get("perf/cpu_ms_per_train_step", empty)
    _, env_steps = m.get("charts/env_steps", empty)
    seconds, commit, resumed = lanes.segment_facts(out, name)  # every process of the run, start to end
    edges = np.linspace(0, steps, CURVE_POINTS + 1)
    last = steps * (1 - FINAL_WINDOW)
    summary = {
        "agent": agent,
        "seed": seed,
        "status": status,
        "train_steps": int(steps),
        "env_steps": int(env_steps[-1]) if len(env_steps) else None,
        "seconds": round(float(seconds), 1),
        "logged_hours": logged_hours(rate_s, rate),
        "train_steps_per_sec": round(steps / max(seconds, 1e-9), 2),
        "cpu_ms_per_train_step": round(float(np.median(cpu[1:] if len(cpu) > 1 else cpu)), 1) if len(cpu) else None,
        "median_logged_train_steps_per_sec": round(float(np.median(rate[1:] if len(rate) > 1 else rate)), 2)
        if len(rate)
        else None,
        "episodes": int(len(ep_s)),
        "eval_return_at_end": round(float(ev_v[ev_s > last].mean()), 3) if (ev_s > last).any() else None,
        "episode_return_at_end": round(float(ep_v[ep_s > last].mean()), 3) if (ep_s > last).any() else None,
        "best_eval_return": float(ev_v.max()) if len(ev_v) else None,
        "eval_curve": {"steps": ev_s.astype(int).tolist(), "return": [round(float(v), 3) for v in ev_v]},
        "episode_curve": {"steps": edges[1:].round().astype(int).tolist(), "return": binned(ep_s, ep_v, edges)},
        "intrinsic_curve": {"steps": edges[1:].round().astype(int).tolist(), "reward": binned(int_s, int_v, edges)}
        if len(int_s)
        else None,
        "command": [a.replace(ROOT + os.sep, "") for a in command(agent, seed, "runs/snd_dqn_pong")[1:]],
        "code_commit": commit or "unknown",
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if resumed:
        summary["resumed_at"] = resumed[-1]
    return summary


RUNS = lanes.Runs(
    key=("agent", "seed"),
    name=run_name,
    command=command,
    summarize=summarize_run,
    prefix=CHECKPOINTS,
    order=lambda s: (list(AGENTS).index(s["agent"]), s["seed"]),
    # the report reads every summary as a finished run's
    options={"partial_summaries": False, "resume": resume_run},
)


def describe(summary) -> str:
    return f"eval return at the end {summary['eval_return_at_end']}"


def parse_runs(text):
    return lanes.parse_keys(text, PLAN, (("AGENT", tuple(AGENTS)), ("SEED", None)))


# ---------------------------------------------------------------------------------- speed
def measure_speed(agents, paddings, out, results, steps=SPEED_STEPS):
    """Train steps/s of each agent over ``steps`` train steps after the warm-up (no evaluation, no checkpoints)."""
    env = lanes.child_env(PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    rows = []
    for padding in paddings:
        for agent in agents:
            name = f"speed_{agent}_{padding}"
            run_dir = os.path.join(out, name)
            shutil.rmtree(run_dir, ignore_errors=True)
            argv = [
                sys.executable,
                os.path.join(ROOT, "pong", "train.py"),
                "--agent",
                agent,
                "--conv-padding",
                padding,
                "--train-steps",
                str(steps),
                "--eval-interval",
                "0",
                "--save-interval",
                "0",
                "--log-interval",
                "100",
                "--log-path",
                out,
                "--run-name",
                name,
            ]
            load0 = os.getloadavg()[0]
            t0 = time.time()
            res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
            if res.returncode != 0:
                raise RuntimeError(f"{name} failed:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
            m = read_metrics(run_dir)
            rate, cpu = m["perf/train_steps_per_sec"][1][1:], m["perf/cpu_ms_per_train_step"][1][1:]  # after warm-up
            rows.append(
                {
                    "agent": agent,
                    "padding": padding,
                    "train_steps": steps,
                    "train_steps_per_sec": round(float(np.mean(rate)), 2),
                    "cpu_ms_per_train_step": round(float(np.mean(cpu)), 1),
                    "loadavg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
                    "seconds": round(time.time() - t0, 1),
                }
            )
            print(rows[-1], flush=True)
    speed = {
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "code_commit": code_commit(),
        "note": "train steps/s after the 1,000-step warm-up, averaged over the log intervals; CPU ms = the "
        "process' CPU time (all threads) per train step, env steps and acting included",
        "rows": rows,
    }
    write_json_atomic(os.path.join(results, "speed.json"), speed)
    return speed


# ---------------------------------------------------------------------------------- report
def _mean_std(values):
    v = np.array([x for x in values if x is not None], float)
    return "-" if not len(v) else f"{v.mean():+.2f} ± {v.std():.2f}" if len(v) > 1 else f"{v[0]:+.2f}"


def _hours(summary) -> float:
    """A run's wall hours: logged (every segment), or the benchmark's clock for an unresumed older summary."""
    if summary.get("logged_hours"):
        return summary["logged_hours"]
    if summary.get("resumed_at"):  # the clock saw only the last segment
        return float("nan")
    return summary["seconds"] / 3600


def _num(value: float, digits: int) -> str:
    return "-" if not np.isfinite(value) else f"{value:.{digits}f}"


def markdown(summaries, agents) -> str:
    """The results block (between ``START`` and ``END``) from ``{agent: [summary, ...]}``."""
    lines = [
        "",
        "Generated by `python benchmarks/snd_dqn_pong.py --report-only` from "
        "`docs/results/snd_dqn_pong/*.json` (or the `--results` folder). Eval return = mean return of the greedy "
        "evaluation episodes (5-point games, so in [-5, +5]) in the last 10 % of the train steps; training "
        "return = the same for the training episodes (with the agent's epsilon); wall = hours per run, summed "
        "over its logged intervals (every segment of a resumed run, warm-up and evaluations included, start-ups "
        "not); train steps/s = train steps over that wall time; CPU ms/step = median of the logged intervals.",
        "",
        "| agent | n | train steps | eval return at end | per seed | training return at end | best eval | "
        "episodes | train steps/s | CPU ms/step | wall (h) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for agent in agents:
        runs = summaries.get(agent, [])
        if not runs:
            lines.append(f"| {AGENTS[agent]} | 0 | not run yet | | | | | | | | |")
            continue
        ev = [s["eval_return_at_end"] for s in runs]
        best = max((s["best_eval_return"] for s in runs if s["best_eval_return"] is not None), default=float("nan"))
        lines.append(
            f"| {AGENTS[agent]} | {len(runs)} | {runs[0]['train_steps']:,} | {_mean_std(ev)} | "
            f"{', '.join('-' if v is None else f'{v:+.2f}' for v in ev)} | "
            f"{_mean_std([s['episode_return_at_end'] for s in runs])} | "
            f"{best:+.1f}"
            f" | {np.mean([s['episodes'] for s in runs]):.0f} | "
            f"{_num(np.mean([s['train_steps'] / 3600 / _hours(s) for s in runs]), 1)} | "
            f"{_num(np.mean([s['cpu_ms_per_train_step'] or np.nan for s in runs]), 0)} | "
            f"{_num(np.mean([_hours(s) for s in runs]), 2)} |"
        )
    lines += late_comparison(summaries, agents)
    return "\n".join(lines + [""])


def late_evals(summary) -> np.ndarray:
    """float[k]: the greedy evaluation returns of the run's second half (train steps > LATE_WINDOW x its length)."""
    steps, ret = np.array(summary["eval_curve"]["steps"]), np.array(summary["eval_curve"]["return"], float)
    return ret[steps > summary["train_steps"] * (1 - LATE_WINDOW)]


def late_comparison(summaries, agents) -> list:
    """The second half's mean eval return per agent with 95 % bootstrap intervals, and its difference to DQN's.

    With one run per agent the games of that run are resampled: the interval says how much the mean of that
    many 5-point games moves, not how much another seed would. With several seeds per agent, seeds are."""
    have = [a for a in agents if summaries.get(a)]
    if not have:
        return []
    late = {a: [late_evals(s) for s in summaries[a]] for a in have}  # per agent, per seed
    one_run = all(len(runs) == 1 for runs in late.values())
    unit = "games of the one run" if one_run else "seeds (each seed's mean over its games)"

    def sample(agent):
        return late[agent][0] if one_run else np.array([v.mean() for v in late[agent]])

    lines = [
        "",
        f"Second half of each run (greedy evaluations after {1 - LATE_WINDOW:.0%} of the train steps): mean eval "
        f"return with a 95 % bootstrap interval, resampling {unit}, and its difference to DQN's.",
        "",
        "| agent | evaluations | eval return, 2nd half [95% CI] | Δ vs DQN [95% CI] |",
        "|---|---|---|---|",
    ]
    base = sample("dqn") if "dqn" in have else None
    for agent in have:
        v = sample(agent)
        if not len(v):
            lines.append(f"| {AGENTS[agent]} | 0 | - | |")
            continue
        lo, hi = bootstrap_mean(v)
        delta = ""
        if agent != "dqn" and base is not None and len(base):
            dlo, dhi = bootstrap_diff(v, base)
            delta = f"{v.mean() - base.mean():+.2f} [{dlo:+.2f}, {dhi:+.2f}]"
        count = sum(len(v) for v in late[agent])
        lines.append(f"| {AGENTS[agent]} | {count} | {v.mean():+.2f} [{lo:+.2f}, {hi:+.2f}] | {delta} |")
    return lines


def speed_markdown(speed) -> str:
    """The speed block (between ``SPEED_START`` and ``SPEED_END``) from ``speed.json``'s content or None."""
    lines = [""]
    if not speed:
        return "\n".join(lines + ["Not measured yet: `python benchmarks/snd_dqn_pong.py --speed`.", ""])
    lines += [
        f"Measured {speed['measured']} on {speed['cpus']} CPUs by `python benchmarks/snd_dqn_pong.py --speed` "
        f"(`{os.path.relpath(RESULTS, ROOT)}/speed.json`): {speed['rows'][0]['train_steps']} train steps per "
        "agent after the 1,000-step warm-up, batch 32, the article's settings otherwise; the 1-minute load "
        "average before/after each measurement shows how busy the machine was. Wall time for 100,000 train "
        "steps = 100,000 / the measured train steps/s (what a run at that load takes; on a busier machine it "
        "is longer). CPU ms per train step counts every thread (acting and env steps included; threads that "
        "wait for work count too, so it is larger on an idle machine).",
        "",
        "| agent | padding | train steps/s (measured) | 100k steps: wall (h) | CPU ms / train step | "
        "100k steps: CPU hours | 1-min load avg |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in speed["rows"]:
        cpu_h = r["cpu_ms_per_train_step"] * ARTICLE_STEPS / 1000 / 3600
        wall_h = ARTICLE_STEPS / r["train_steps_per_sec"] / 3600
        lines.append(
            f"| {r['agent']} | {r['padding']} | {r['train_steps_per_sec']:.1f} | {wall_h:.1f} | "
            f"{r['cpu_ms_per_train_step']:.0f} | {cpu_h:.2f} | "
            f"{r['loadavg_1min'][0]:.1f} / {r['loadavg_1min'][1]:.1f} |"
        )
    return "\n".join(lines + [""])


def _nanmean(a):
    """Column means ignoring NaN (NaN, quietly, where a column has none)."""
    a = np.asarray(a, float)
    n = np.isfinite(a).sum(0)
    return np.where(n > 0, np.nansum(a, 0) / np.maximum(n, 1), np.nan)


def _plot_finite(ax, x, y, **kw):
    """A line through the finite points (bins without data are skipped, not gaps); markers when few."""
    ok = np.isfinite(y)
    ax.plot(x[ok], y[ok], marker="." if ok.sum() < 20 else None, **kw)


def plot(summaries, agents, path):
    """Eval return and training-episode return against train steps (mean over seeds), SND's intrinsic reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    have = [a for a in agents if summaries.get(a)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    if not have:  # a placeholder, so that the page's figure exists before the runs
        for ax in axes:
            ax.text(
                0.5,
                0.5,
                "not run yet:\npython benchmarks/snd_dqn_pong.py",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=10,
                color="0.4",
            )
    for agent in have:
        runs = summaries[agent]
        # eval: every run's points, mean over seeds at each eval step (runs share the eval schedule)
        steps = np.asarray(runs[0]["eval_curve"]["steps"], float)
        ev = np.array(
            [r["eval_curve"]["return"][: len(steps)] for r in runs if len(r["eval_curve"]["return"]) >= len(steps)],
            float,
        )
        if len(ev):
            k = max(1, len(steps) // 10)  # a moving average over ~10 % of the evaluations, as the article's
            smooth = np.convolve(ev.mean(0), np.ones(k) / k, mode="valid")  # aggregation over 20 points
            axes[0].plot(steps, ev.mean(0), color=COLORS[agent], alpha=0.25)
            axes[0].plot(steps[k - 1 :], smooth, color=COLORS[agent], label=f"{AGENTS[agent]} (n={len(runs)})")
        x = np.asarray(runs[0]["episode_curve"]["steps"], float)
        ep = np.array([[np.nan if v is None else v for v in r["episode_curve"]["return"]] for r in runs], float)
        _plot_finite(axes[1], x, _nanmean(ep), color=COLORS[agent], label=AGENTS[agent])
        if runs[0].get("intrinsic_curve"):
            ic = np.array([[np.nan if v is None else v for v in r["intrinsic_curve"]["reward"]] for r in runs], float)
            _plot_finite(
                axes[2],
                np.asarray(runs[0]["intrinsic_curve"]["steps"], float),
                _nanmean(ic),
                color=COLORS[agent],
                label=AGENTS[agent],
            )
    axes[0].set_title("greedy evaluation return (5-point games)", fontsize=10)
    axes[1].set_title("training episode return", fontsize=10)
    axes[2].set_title("SND: mean intrinsic reward per env step", fontsize=10)
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("train steps")
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.set_ylim(-5.3, 5.3)
    if have:
        axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results, docs):
    """The results and speed blocks of ``docs/snd_dqn_pong.md`` and its PNG, from the files in ``results``."""
    summaries = RUNS.grouped(results, "agent")
    speed_path = os.path.join(results, "speed.json")
    speed = None
    if os.path.exists(speed_path):
        with open(speed_path, encoding="utf-8") as f:
            speed = json.load(f)
    page = os.path.join(docs, PAGE)
    lanes.replace_block(page, START, END, markdown(summaries, list(AGENTS)))
    lanes.replace_block(page, SPEED_START, SPEED_END, speed_markdown(speed))
    plot(summaries, list(AGENTS), os.path.join(docs, "snd_dqn_pong.png"))
    return page


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--speed" in argv:  # not the plan: a few hundred train steps of each agent, then the report
        import argparse

        p = argparse.ArgumentParser(description=f"train steps/s of DQN and SND over {SPEED_STEPS} train steps")
        p.add_argument("--speed", action="store_true", help="measure (valid and same padding), then report")
        p.add_argument("--out", default=OUT, help="parent folder of the measuring runs (in <out>/speed)")
        p.add_argument("--results", default=RESULTS, help="where speed.json goes")
        p.add_argument("--docs", default=DOCS, help="folder of the report")
        args = p.parse_args(argv)
        lanes.carry_nice_into_session()
        # dqn-e0 computes exactly what dqn does (only epsilon differs)
        measure_speed(("dqn", "snd"), ("valid", "same"), os.path.join(args.out, "speed"), args.results)
        argv = ["--report-only", "--out", args.out, "--results", args.results, "--docs", args.docs]
    return lanes.suite_main(sys.modules[__name__], argv, add_arguments=_speed_flag)


def _speed_flag(parser):  # listed in --help; main() acts on it before the suite's command line
    parser.add_argument(
        "--speed",
        action="store_true",
        help=f"instead of the plan: train steps/s of DQN and SND over {SPEED_STEPS} train steps (valid and same "
        "padding) into <results>/speed.json, then the report (takes only --out, --results, --docs)",
    )


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too (they save), as Ctrl-C does
    sys.exit(main())
