"""Mario on a CPU: RND against plain PPO with ``--recipe cpu-1-1``, each run until its first greedy flag.

    nice -n 5 python benchmarks/mario_flag.py            # the plan of docs/mario_learning.md, resumable
    python benchmarks/mario_flag.py --runs 1-1:rnd:0     # one run
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
can say what ran when. A run longer than one machine's life continues on the next: ``--pack-state``
copies its newest checkpoint (if at most 12 MB: plain PPO's; RND's 41 MB with ``--pack-max-mb 48``), config,
metrics and segments into ``benchmarks/lane_state/mario_flag/`` to be committed, and a later
invocation that finds no folder for the run restores them and resumes from that checkpoint.

A run's summary ``<results>/<run name>.json`` (curves, first flag, hours, segments) is rewritten
at every new checkpoint while it runs (``"status": "running"``) and once more when it ends
(``"flag"``: the greedy policy reached the flag; ``"budget"``: 4M steps without). Finished runs
are skipped. ``--report-only`` rebuilds the results block of ``docs/mario_learning.md`` and
``docs/mario_learning.png`` from the summaries alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
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
from common.run import logger as tags  # noqa: E402
from common.run.launch import SIGNAL_EXIT  # noqa: E402
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
KEEP_CHECKPOINTS = 2
CURVE_BIN = 50_000  # agent steps per point of the training-episode curves
RESULTS = os.path.join(ROOT, "docs", "results", "mario_flag")
#: unfinished runs' resume state, committed so that a run outlives the machine it ran on (``--pack-state``)
LANE_STATE = os.path.join(ROOT, "benchmarks", "lane_state", "mario_flag")
PACK_MAX_MB = 12.0  # a plain PPO checkpoint (policy + Adam) is ~7.5 MB; an RND one (~41 MB) only with --pack-max-mb
PACKED_FILES = ("config.json", "metrics.jsonl")
DOCS = os.path.join(ROOT, "docs")
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
        os.path.join(ROOT, "mario", "train.py"),
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


# ---------------------------------------------------------------------------------- resuming
def resume_point(run_dir, level):
    """(newest numbered checkpoint, its update), or (None, 0); the metrics after it are cut."""
    return lanes.resume_ppo_run(run_dir, checkpoint_prefix(level))


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


def summary_path(results, level, method, seed):
    return os.path.join(results, run_name(level, method, seed) + ".json")


def load_summaries(results) -> list:
    out = []
    for path in sorted(glob.glob(os.path.join(results, "mario*_seed*.json"))):
        with open(path, encoding="utf-8") as f:
            out.append(json.load(f))
    return sorted(out, key=lambda s: (s["level"], s["method"] != "rnd", s["seed"]))


def finished(results, level, method, seed) -> bool:
    path = summary_path(results, level, method, seed)
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("status") in FINISHED


# ---------------------------------------------------------------------------------- running
@dataclasses.dataclass
class _Running:
    level: str
    method: str
    seed: int
    proc: subprocess.Popen
    log: object
    newest: int  # the update of the newest checkpoint seen

    @property
    def name(self):
        return run_name(self.level, self.method, self.seed)


def pack_state(out, results, state=LANE_STATE, max_mb=PACK_MAX_MB) -> list:
    """Copy each unfinished run's resume state (newest checkpoint, config, metrics, segments) from ``out``
    into ``state`` (replacing what was packed before), for runs whose checkpoint is at most ``max_mb``;
    finished runs' packed state is removed. Returns the names packed."""
    packed = []
    for level, method, seed in PLAN:
        name = run_name(level, method, seed)
        run_dir, dest = os.path.join(out, name), os.path.join(state, name)
        ckpt, _ = lanes.newest_checkpoint(run_dir, checkpoint_prefix(level))
        if finished(results, level, method, seed):
            shutil.rmtree(dest, ignore_errors=True)
            continue
        if ckpt is None:
            continue
        mb = os.path.getsize(ckpt) / 2**20
        if mb > max_mb:
            print(f"{name}: checkpoint of {mb:.1f} MB > {max_mb} MB, not packed (it resumes only on this machine)")
            continue
        tmp = dest + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(os.path.join(tmp, "models"))
        shutil.copy2(ckpt, os.path.join(tmp, "models", os.path.basename(ckpt)))
        for f in PACKED_FILES:
            if os.path.exists(os.path.join(run_dir, f)):
                shutil.copy2(os.path.join(run_dir, f), os.path.join(tmp, f))
        segments = os.path.join(out, name + ".segments.jsonl")
        if os.path.exists(segments):
            shutil.copy2(segments, os.path.join(tmp, "segments.jsonl"))
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        packed.append(name)
        print(f"{name}: packed {os.path.basename(ckpt)} ({mb:.1f} MB) into {dest}")
    return packed


def restore_state(out, state=LANE_STATE) -> list:
    """Put each packed run whose folder ``out`` lacks back into ``out`` (a fresh machine); returns the names."""
    restored = []
    for name in sorted(os.listdir(state)) if os.path.isdir(state) else []:
        src, run_dir = os.path.join(state, name), os.path.join(out, name)
        if name.endswith(".tmp") or os.path.exists(run_dir):
            continue
        shutil.copytree(src, run_dir, ignore=shutil.ignore_patterns("segments.jsonl"))
        if os.path.exists(os.path.join(src, "segments.jsonl")):
            shutil.copy2(os.path.join(src, "segments.jsonl"), os.path.join(out, name + ".segments.jsonl"))
        restored.append(name)
        print(f"{name}: restored from {src}")
    return restored


def run_all(plan, out, results, lanes_at_once=1, extra=(), state=LANE_STATE):
    """Run the plan's unfinished runs, ``lanes_at_once`` at a time (first restoring packed runs that
    ``out`` lacks); returns the names that failed."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    pending = [r for r in plan if not finished(results, *r)]
    print(f"{len(pending)} runs to do; summaries in {results}", flush=True)
    running, failed = [], []
    os.makedirs(out, exist_ok=True)
    restore_state(out, state)
    try:
        while pending or running:
            while pending and len(running) < lanes_at_once:
                level, method, seed = pending.pop(0)
                name = run_name(level, method, seed)
                run_dir = os.path.join(out, name)
                ckpt, update = resume_point(run_dir, level)
                if ckpt is None and os.path.isdir(run_dir):
                    shutil.rmtree(run_dir)  # cut short before its first checkpoint: start again
                threads = 1 if lanes_at_once > 1 else 0
                argv = command(level, method, seed, out, ckpt, threads, extra)
                lanes.segment_event(out, name, event="start", commit=lanes.code_commit(), resume_update=update)
                log = open(os.path.join(out, name + ".log"), "a")
                # a session of its own: a Ctrl-C (or a SIGINT sent to this process alone) reaches the run once,
                # from here, not a second time from the terminal (a second SIGINT would abort it unsaved)
                proc = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
                )
                lanes.carry_nice_into_session(proc.pid)  # a new session would otherwise ignore `nice` (autogroup)
                running.append(_Running(level, method, seed, proc, log, update))
                print(f"[{time.strftime('%H:%M:%S')}] start {name}" + (f" from update {update}" if ckpt else ""))
            time.sleep(2)
            for r in list(running):
                run_dir = os.path.join(out, r.name)
                _, newest = lanes.newest_checkpoint(run_dir, checkpoint_prefix(r.level))
                if r.proc.poll() is None:
                    if newest > r.newest:  # a new checkpoint: keep two, refresh the summary
                        r.newest = newest
                        lanes.prune_checkpoints(run_dir, checkpoint_prefix(r.level), KEEP_CHECKPOINTS)
                        summary = summarize_run(out, r.level, r.method, r.seed, "running")
                        lanes.write_json_atomic(summary_path(results, r.level, r.method, r.seed), summary)
                    continue
                running.remove(r)
                r.log.close()
                rc = r.proc.returncode
                lanes.segment_event(out, r.name, event="end", returncode=rc)
                lanes.prune_checkpoints(run_dir, checkpoint_prefix(r.level), KEEP_CHECKPOINTS)
                solved = os.path.exists(os.path.join(run_dir, "models", checkpoint_prefix(r.level) + ".pdparams"))
                status = ("flag" if solved else "budget") if rc == 0 else "stopped"
                summary = summarize_run(out, r.level, r.method, r.seed, status)
                lanes.write_json_atomic(summary_path(results, r.level, r.method, r.seed), summary)
                if rc not in (0, *SIGNAL_EXIT.values()):
                    failed.append(r.name)
                print(
                    f"[{time.strftime('%H:%M:%S')}] {r.name} ended (rc {rc}): {status}, "
                    f"{summary['agent_steps']:,} steps, first flag {summary['first_flag_step']}",
                    flush=True,
                )
                if rc in SIGNAL_EXIT.values():  # stopped from outside: the benchmark stops too
                    pending.clear()
    except BaseException:  # Ctrl-C, SIGTERM or an error here: each run finishes its step and saves; waited for
        lanes.stop_runs([r.proc for r in running])
        for r in running:
            lanes.segment_event(out, r.name, event="end", returncode=r.proc.returncode)
            lanes.write_json_atomic(
                summary_path(results, r.level, r.method, r.seed),
                summarize_run(out, r.level, r.method, r.seed, "stopped"),
            )
        raise
    return failed


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
    lines += ["", "Segments (each start of a run's process):", ""]
    lines += ["| run | started (UTC) | from update | commit | ended with |", "|---|---|---|---|---|"]
    for s in summaries:
        starts = [e for e in s["segments"] if e.get("event") == "start"]
        ends = [e for e in s["segments"] if e.get("event") == "end"]
        for k, e in enumerate(starts):
            end = ends[k]["returncode"] if k < len(ends) else "(running or cut off)"
            lines.append(
                f"| {run_name(s['level'], s['method'], s['seed'])} | {e['time']} | {e.get('resume_update', 0)} "
                f"| {e['commit'][:7]} | {end} |"
            )
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
    summaries = load_summaries(results)
    md = os.path.join(docs, "mario_learning.md")
    with open(md, encoding="utf-8") as f:
        text = f.read()
    a, b = text.index(START) + len(START), text.index(END)
    block = markdown(summaries)
    if summaries:
        plot(summaries, os.path.join(docs, "mario_learning.png"))
        block = "![greedy x_pos, training x_pos and flag rate](mario_learning.png)\n\n" + block
    with open(md, "w", encoding="utf-8") as f:
        f.write(text[:a] + "\n" + block + "\n" + text[b:])
    return md


def parse_runs(text):
    out = []
    for item in text.split(","):
        level, method, seed = item.split(":")
        if level not in ("1-1", "4-4") or method not in METHODS:
            raise SystemExit(
                f"--runs {item!r} is invalid: expected LEVEL:METHOD:SEED with LEVEL 1-1 or 4-4, METHOD rnd or none"
            )
        out.append((level, method, int(seed)))
    return tuple(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="", help="comma-separated LEVEL:METHOD:SEED (default: the whole plan)")
    p.add_argument("--lanes", type=int, default=1, choices=(1, 2), help="runs at a time (2: one thread each)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "mario_flag"), help="parent folder of the runs")
    p.add_argument("--results", default=RESULTS, help="folder of the runs' summaries")
    p.add_argument("--docs", default=DOCS, help="folder of mario_learning.md (the report)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the summaries alone")
    p.add_argument("--status", action="store_true", help="print each summary's status and stop")
    p.add_argument(
        "--pack-state",
        action="store_true",
        help="copy the unfinished runs' resume state (checkpoints up to --pack-max-mb) into --state, to commit",
    )
    p.add_argument(
        "--state", default=LANE_STATE, help="folder of the packed resume state (restored when a run is missing)"
    )
    p.add_argument(
        "--pack-max-mb",
        type=float,
        default=PACK_MAX_MB,
        help="with --pack-state: the largest checkpoint packed. An RND run's (~41 MB) needs 48; every commit of "
        "one adds that much to the repository's history for good, so pack an RND run only when its sitting "
        "ends before it does (a 4M-step run is ~12 hours here: longer than any sitting so far)",
    )
    args, extra = p.parse_known_args(argv)  # anything else goes to mario/train.py (checks, e.g. a small budget)
    lanes.carry_nice_into_session()  # started as `setsid nice -n N ...`: the whole session yields (autogroup)
    if args.pack_max_mb <= 0:
        p.error(f"--pack-max-mb {args.pack_max_mb:g} is invalid: expected a positive size in MB")
    if args.pack_state:
        pack_state(args.out, args.results, args.state, args.pack_max_mb)
        return 0
    if args.status:
        for s in load_summaries(args.results):
            print(
                f"{run_name(s['level'], s['method'], s['seed'])}: {s['status']}, {s['agent_steps']:,} steps, "
                f"first flag {s['first_flag_step']}, best greedy x_pos {s['best_eval_x_pos']}"
            )
        return 0
    if not args.report_only:
        plan = parse_runs(args.runs) if args.runs else PLAN
        failed = run_all(plan, args.out, args.results, args.lanes, extra, args.state)
        if failed:
            print("failed:", ", ".join(failed), file=sys.stderr)
    print("report:", write_report(args.results, args.docs))
    return 0


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too (they save), as Ctrl-C does
    sys.exit(main())
