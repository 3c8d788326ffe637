"""What each intrinsic module costs per frame on MiniGrid, against RND, measured in one invocation.

    python benchmarks/intrinsic_cost.py              # KeyCorridorS3R2, 2 rounds (~13 min of one core)
    python benchmarks/intrinsic_cost.py --quick      # a CI-sized check of the pipeline
    python benchmarks/intrinsic_cost.py --report-only

Each method runs ``gridworld/train.py`` with the exploration suite's own command (the game's
defaults, one CPU thread, no evaluation or pictures) twice: a short run of ``--short`` updates and a
long one of ``--long`` updates. The difference of their CPU times (the process and its env workers,
from ``getrusage``) divided by the difference of their frames is the cost of one more frame, with the
start-up (imports, observation-normalizer warm-up) cancelled out. CPU time, not wall-clock, because
the machine is shared: another process slows a run's wall-clock but barely its CPU time. The methods
run in a different order each round (forward, then backward), and the ratio to RND is taken within
each round, then the median over rounds.

The result goes to ``docs/results/intrinsic_cost.json``; ``benchmarks/exploration.py --report-only``
puts its table into ``docs/exploration.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import exploration  # noqa: E402  (the suite's tasks, methods and command line)
import lanes  # noqa: E402

METHODS = exploration.COST_METHODS
RESULT = exploration.COST_RESULT


def cpu_seconds_of(argv, env) -> float:
    """Run ``argv`` to the end; the CPU seconds (user + system) it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(task, methods, rounds, short, long, out) -> dict:
    """{method: [CPU ms per frame, one per round]} and the per-round ratios to RND."""
    env = lanes.child_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    per_frame = {m: [] for m in methods}
    for r in range(rounds):
        order = methods if r % 2 == 0 else methods[::-1]
        for method in order:
            cpu = {}
            for updates in (short, long):
                frames = updates * exploration.ROLLOUT
                run_out = os.path.join(out, f"r{r}_{method}_{updates}")
                argv = exploration.command(task, method, 0, run_out, extra=("--num-global-steps", str(frames)))
                cpu[updates] = cpu_seconds_of(argv, env)
            ms = 1000 * (cpu[long] - cpu[short]) / ((long - short) * exploration.ROLLOUT)
            per_frame[method].append(ms)
            print(f"[{time.strftime('%H:%M:%S')}] round {r} {method}: {ms:.3f} CPU ms per frame", flush=True)
    return per_frame


def summarize(per_frame, task, rounds, short, long) -> dict:
    ratios = {}
    if "rnd" in per_frame:
        for m, v in per_frame.items():
            ratios[m] = float(np.median(np.asarray(v) / np.asarray(per_frame["rnd"])))
    return {
        "task": exploration.TASKS[task][0],
        "rounds": rounds,
        "updates": [short, long],
        "cpu_ms_per_frame": {m: [round(x, 4) for x in v] for m, v in per_frame.items()},
        "ratio_to_rnd": {m: round(x, 3) for m, x in ratios.items()},
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        "code_commit": lanes.code_commit(),
    }


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--task", default="keycorridor", choices=sorted(exploration.TASKS), help="the suite's task key")
    p.add_argument("--rounds", type=int, default=2, help="passes over the methods (alternating order)")
    p.add_argument("--short", type=int, default=4, help="updates of the short run")
    p.add_argument(
        "--long",
        type=int,
        default=40,
        help="updates of the long run (40: 36 updates of signal against the start-up's noise; it was 16 up to "
        "2026-12-01 17:30, when RND's own cost varied 0.35-0.49 ms per frame between the rounds of one run)",
    )
    p.add_argument("--quick", action="store_true", help="CI-sized: RND and SND-V, 1 round, 1 vs 3 updates")
    p.add_argument("--result", default=None, help=f"where the JSON goes (default {RESULT}; --quick: a temp folder)")
    p.add_argument("--report-only", action="store_true", help="print the table of the saved result")
    args = p.parse_args(argv)
    for name in ("rounds", "short", "long"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)} is invalid: expected a positive integer")
    if args.long <= args.short:
        p.error(f"--long {args.long} must be larger than --short {args.short}")
    methods, rounds, short, long = METHODS, args.rounds, args.short, args.long
    if args.quick:
        methods, rounds, short, long = ("rnd", "snd-v"), 1, 1, 3
    result_path = args.result or (os.path.join(tempfile.mkdtemp(), "intrinsic_cost.json") if args.quick else RESULT)
    if not args.report_only:
        with tempfile.TemporaryDirectory() as out:
            per_frame = measure(args.task, methods, rounds, short, long, out)
        lanes.write_json_atomic(result_path, summarize(per_frame, args.task, rounds, short, long))
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    print("\n".join(exploration.cost_markdown(result)))
    return result


if __name__ == "__main__":
    main()
