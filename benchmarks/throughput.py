"""End-to-end throughput, side by side in one run: the tutorial's loop vs this project's trainer.

Each pipeline runs in its own subprocess (fresh Paddle, its own thread settings), one after
another, so that they see the same machine; on a shared machine the ratios are what count.

1. env-only ceilings: the project's vector env configurations with random actions (the
   trainer's default: one worker process per CPU core, the envs split among them; Mario 6
   envs, Montezuma 8 and 128 envs);
2. the tutorial (``benchmarks/tutorial_baseline.py``) on Mario for ``--updates`` updates;
3. the project's trainer on Mario with the tutorial's settings (6 envs, 10 epochs x 16
   minibatches, eval after every update) for the same number of updates and the same
   ``--num-local-steps``;
4. the project's trainer on Montezuma, 8 envs x 128 steps, 4 epochs x 4 minibatches, then one
   update of its default 128 envs x 128 steps (collection rate and memory; one epoch).

End-to-end rate = agent steps / (collection + update + evaluation time), from the first
rollout to the end of the last update's evaluation (start-up and the observation-normalizer
warm-up are reported apart). The steady-state rate leaves out the wait for the last
update's background eval (in a longer run the next update overlaps it); for the tutorial
and the in-process eval it equals the end-to-end rate. With the default background eval (``--eval-in-background``) the
project's "eval" time is what the training loop spends on evals (snapshot, hand-over, waiting
for the eval process), and "ms per eval step" is the episode's time in the eval process.
``--project-args '--no-eval-in-background --num-threads 1'`` measures the in-process path.
Peak RSS is summed over the trainer and its env workers
(psutil, sampled every 0.2 s).

    python benchmarks/throughput.py                        # defaults: 2 updates of 6 x 128 (docs/performance.md)
    python benchmarks/throughput.py --updates 1 --skip montezuma
    python benchmarks/throughput.py --compare HEAD~1 --updates 1   # this tree against a commit, alternating

``--compare REV`` runs only the project's Mario pipeline, in this tree and in a git worktree of
``REV`` (its own ``benchmarks/throughput.py``, so its own code), ``--rounds`` times each in the
order before, now, now, before, ...; it prints each run's steady-state rate and the ratio of
the medians (a change that should not alter speed, e.g. a restructure, shows about 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.lanes import child_env  # noqa: E402


# ----------------------------------------------------------------------------- children
def child_project(game: str, argv: list[str], out: str) -> None:
    """Run the project's trainer with phase timers; write the timings as JSON to ``out``."""
    from common.ppo.trainer import Trainer
    from common.run.config import parse_config

    if game == "mario":
        from mario.train import SPEC
    else:
        from montezuma.train import SPEC
    cfg = parse_config(SPEC.config_cls, argv)
    t_start = time.perf_counter()
    tr = Trainer(SPEC, cfg)
    phases = {"collect": [], "update": [], "eval": [], "eval_steps": [], "eval_episode": [], "warmup": 0.0}
    marks = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            if "first" not in marks and name == "collect":
                marks["first"] = t
            r = fn(*a, **k)
            phases[name].append(time.perf_counter() - t)
            marks["last"] = marks[f"last_{name}"] = time.perf_counter()
            return r

        return wrapper

    orig_log_eval = tr.log.eval

    def log_eval(ev, *a, **k):  # every eval result, in the trainer or from the eval process
        phases["eval_steps"].append(int(ev["length"]))
        if "seconds" in ev:
            phases["eval_episode"].append(ev["seconds"])
        orig_log_eval(ev, *a, **k)
        marks["last"] = time.perf_counter()

    tr.log.eval = log_eval
    orig_start_eval = tr.evals.start

    def start_eval(*a, **k):  # in the background: returns once the eval is handed over
        orig_start_eval(*a, **k)
        marks["handed_over"] = time.perf_counter()

    tr.evals.start = start_eval

    orig_norm = tr.init_obs_normalizer

    def warm(obs):
        t = time.perf_counter()
        r = orig_norm(obs)
        phases["warmup"] = time.perf_counter() - t
        return r

    tr.init_obs_normalizer = warm
    tr.collect = timed("collect", tr.collect)
    tr.learn = timed("update", tr.learn)
    tr.train()
    # the training loop's time on evals: the whole episode in the trainer, or (eval_in_background) the
    # snapshot, the hand-over and any wait for the eval process
    phases["eval"] = [tr.evals.seconds]
    phases["loop"] = marks["last"] - marks["first"]
    # steady state: without the wait for the last update's eval, which the next update would overlap
    phases["loop_steady"] = max(marks.get("handed_over", marks["last"]), marks["last_update"]) - marks["first"]
    phases["steps"] = tr.global_step
    phases["startup"] = time.perf_counter() - t_start - phases["loop"] - phases["warmup"]
    with open(out, "w") as f:
        json.dump(phases, f)


def child_envonly(game: str, num_envs: int, workers: int, steps: int, out: str) -> None:
    import functools

    import numpy as np

    from common.envs.factory import make_vec_env

    if game == "mario":
        from mario.env import make_env

        fn = functools.partial(make_env, world=4, stage=4, action_type="simple")
    else:
        from montezuma.env import make_env

        fn = functools.partial(make_env)
    venv = make_vec_env([fn] * num_envs, num_workers=workers, seed=0)
    try:
        rng = np.random.default_rng(0)
        venv.reset()
        for _ in range(10):
            venv.step(rng.integers(venv.num_actions, size=num_envs))
        t = time.perf_counter()
        for _ in range(steps):
            venv.step(rng.integers(venv.num_actions, size=num_envs))
        dt = time.perf_counter() - t
    finally:
        venv.close()
    with open(out, "w") as f:
        json.dump({"rate": steps * num_envs / dt}, f)


# ----------------------------------------------------------------------------- parent
def _tree_rss(proc) -> int:
    import psutil

    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_child(args: list[str], label: str, cwd: str = ROOT) -> tuple[dict, float]:
    """Run ``python <args>`` with a JSON output file; returns (result, peak RSS MiB of its process tree)."""
    import psutil

    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    print(f"  running {label} ...", flush=True)
    proc = subprocess.Popen(  # the code of ``cwd`` (this checkout, or the compared commit's worktree)
        [sys.executable, *args, out],
        cwd=cwd,
        env=child_env(cwd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    ps = psutil.Process(proc.pid)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(ps))
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, err = proc.communicate()
    done.set()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed (exit {proc.returncode}):\n{err[-3000:]}")
    with open(out) as f:
        res = json.load(f)
    os.unlink(out)
    return res, peak[0] / 2**20


def project_flags(a) -> list[str]:
    """The trainer flags both Mario pipelines share (no pictures, videos or checkpoints)."""
    return [
        "--video-interval",
        "0",
        "--histogram-interval",
        "0",
        "--embedding-interval",
        "0",
        "--save-interval",
        "0",
        "--log-path",
        tempfile.mkdtemp(prefix="throughput_runs_"),
        *a.project_args.split(),
    ]


def compare(a) -> dict:
    """``--compare REV``: the project's Mario pipeline here and at REV, alternated; returns the rates."""
    tree = tempfile.mkdtemp(prefix="throughput_compare_")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, a.compare], check=True, capture_output=True)
    L, U = a.num_local_steps, a.updates
    flags = ["--num-local-steps", str(L), "--num-global-steps", str(6 * L * U), *project_flags(a)]
    trees = {"before": tree, "now": ROOT}
    rates = {"before": [], "now": []}
    try:
        order = [("before", "now") if r % 2 == 0 else ("now", "before") for r in range(a.rounds)]
        for label in [x for pair in order for x in pair]:
            script = os.path.join(trees[label], "benchmarks", "throughput.py")
            res, _ = run_child([script, "--child", "project", "mario", *flags], f"{label} Mario", cwd=trees[label])
            rates[label].append(res["steps"] / res["loop_steady"])
            print(f"    {label}: {rates[label][-1]:.1f} agent steps/s (load average {os.getloadavg()[0]:.1f})")
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(
        f"Mario steady state ({U} update(s) of 6 envs x {L} steps), median of {a.rounds}: "
        f"{a.compare} {med['before']:.1f}, this tree {med['now']:.1f} agent steps/s, "
        f"ratio {med['now'] / med['before']:.3f}"
    )
    return rates


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=2, help="Mario updates per pipeline (equal for both)")
    p.add_argument(
        "--num-local-steps",
        type=int,
        default=128,
        help="Mario rollout length per env, equal for both (the tutorial's is 512)",
    )
    p.add_argument("--montezuma-updates", type=int, default=3)
    p.add_argument("--env-steps", type=int, default=300, help="vector steps for each env-only ceiling")
    p.add_argument(
        "--project-args",
        default="",
        help="extra trainer flags for the project's runs, e.g. '--no-eval-in-background --num-threads 1'",
    )
    p.add_argument("--skip", nargs="*", default=[], choices=["env", "tutorial", "mario", "montezuma"])
    p.add_argument("--compare", metavar="REV", default="", help="Mario alone: this tree against commit REV, in turn")
    p.add_argument("--rounds", type=int, default=2, help="with --compare: runs of each tree")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "--child":  # internal: one measured pipeline in this subprocess
        kind, *rest = argv[1:]
        if kind == "project":
            game, *flags = rest
            child_project(game, flags[:-1], flags[-1])
        elif kind == "env":
            game, n, w, steps, out = rest
            child_envonly(game, int(n), int(w), int(steps), out)
        return None
    a = p.parse_args(argv)
    if a.compare:
        return compare(a)

    import platform

    me = os.path.abspath(__file__)
    L, U = a.num_local_steps, a.updates
    res, rss = {}, {}
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(
        f"machine: {cpu}, {os.cpu_count()} logical CPUs, {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    cores = os.cpu_count() or 1
    mario_workers, mont_workers = min(6, cores), min(8, cores)  # the trainer's default: one per core
    if "env" not in a.skip:
        res["env_mario"], _ = run_child(
            [me, "--child", "env", "mario", "6", str(mario_workers), str(a.env_steps)],
            f"env-only Mario 6 envs, {mario_workers} workers",
        )
        res["env_mont"], _ = run_child(
            [me, "--child", "env", "montezuma", "8", str(mont_workers), str(a.env_steps * 4)],
            f"env-only Montezuma 8 envs, {mont_workers} workers",
        )
        res["env_mont128"], _ = run_child(
            [me, "--child", "env", "montezuma", "128", str(cores), str(max(10, a.env_steps // 4))],
            f"env-only Montezuma 128 envs, {cores} workers",
        )
    if "tutorial" not in a.skip:
        out, rss["tutorial"] = run_child(
            [
                os.path.join(ROOT, "benchmarks", "tutorial_baseline.py"),
                "--updates",
                str(U),
                "--num-local-steps",
                str(L),
                "--json",
            ],
            "tutorial baseline (Mario)",
        )
        res["tutorial"] = {k: [t[k] for t in out] for k in ("collect", "update", "eval", "eval_steps", "steps")}
    common = project_flags(a)
    if "mario" not in a.skip:
        res["mario"], rss["mario"] = run_child(
            [
                me,
                "--child",
                "project",
                "mario",
                "--num-local-steps",
                str(L),
                "--num-global-steps",
                str(6 * L * U),
                *common,
            ],
            "project Mario",
        )
    if "montezuma" not in a.skip:
        res["mont"], rss["mont"] = run_child(
            [
                me,
                "--child",
                "project",
                "montezuma",
                "--num-processes",
                "8",
                "--num-local-steps",
                "128",
                "--num-global-steps",
                str(1024 * a.montezuma_updates),
                "--obs-norm-steps",
                "32",
                "--eval-interval",
                str(a.montezuma_updates),
                *common,
            ],
            "project Montezuma 8x128",
        )
        # one update of the default rollout (128 envs x 128 steps: a 16-step rollout would count the
        # pipeline's fill and drain 8x over); one epoch of the default 4 minibatches
        res["mont128"], rss["mont128"] = run_child(
            [
                me,
                "--child",
                "project",
                "montezuma",
                "--num-processes",
                "128",
                "--num-local-steps",
                "128",
                "--num-global-steps",
                str(128 * 128),
                "--obs-norm-steps",
                "1",
                "--num-epochs",
                "1",
                "--eval-interval",
                "0",
                *common,
            ],
            "project Montezuma 128 envs x 128 steps (collection, memory)",
        )

    def rate(d, keys=("collect", "update", "eval")):
        return sum(d["steps"] if isinstance(d["steps"], list) else [d["steps"]]) / sum(sum(d[k]) for k in keys)

    print(
        f"\nResults (load average {os.getloadavg()[0]:.1f} at the end; Mario: {U} update(s) of 6 envs x {L} steps, "
        "10 epochs x 16 minibatches; tutorial world 4-4 for both)"
    )
    rows = []
    if "tutorial" in res and "mario" in res:
        t, m = res["tutorial"], res["mario"]
        n = 6 * L * U
        rows.append(("Mario end to end, steps/s", rate(t), n / m["loop"]))
        rows.append(("Mario steady state, steps/s", rate(t), n / m["loop_steady"]))
        rows.append(("Mario collection, steps/s", n / sum(t["collect"]), n / sum(m["collect"])))
        rows.append(("Mario update phase, s per update", sum(t["update"]) / U, sum(m["update"]) / len(m["update"])))
        n_eval = max(1, len(m["eval_steps"]))
        rows.append(("Mario greedy eval, s per update", sum(t["eval"]) / U, sum(m["eval"]) / n_eval))
        rows.append(("Mario eval steps per episode", sum(t["eval_steps"]) / U, sum(m["eval_steps"]) / n_eval))
        episode = m["eval_episode"] or m["eval"]  # in the background: the episode's time in the eval process
        rows.append(
            (
                "Mario eval, ms per eval step",
                1e3 * sum(t["eval"]) / sum(t["eval_steps"]),
                1e3 * sum(episode) / max(1, sum(m["eval_steps"])),
            )
        )
        print(f"{'':38s} {'tutorial':>10s} {'project':>10s} {'ratio':>7s}")
        for name, x, y in rows:
            lower_better = "s per" in name or "ms per" in name
            r = (x / y) if lower_better else (y / x)
            if "eval steps" in name:
                r = float("nan")
            print(f"{name:38s} {x:10.2f} {y:10.2f} {r:6.2f}x")
        print(f"  (Mario project warm-up of the RND normalizer, not in the rates: {m['warmup']:.1f} s)")
    if "mario" in res and "env_mario" in res:
        n = sum([6 * L] * len(res["mario"]["collect"]))
        c = n / sum(res["mario"]["collect"])
        print(
            f"Mario collection vs env-only (6 envs, {mario_workers} workers): {c:.1f} / "
            f"{res['env_mario']['rate']:.1f} = {c / res['env_mario']['rate']:.2f}"
        )
    if "mont" in res:
        mt = res["mont"]
        c = 1024 * len(mt["collect"]) / sum(mt["collect"])
        print(
            f"Montezuma 8x128, 4x4: end to end {mt['steps'] / mt['loop']:.1f} agent steps/s "
            f"(steady state {mt['steps'] / mt['loop_steady']:.1f}) "
            f"(collect {c:.1f} steps/s, update {sum(mt['update']) / len(mt['update']):.2f} s, "
            f"{len(mt['eval_steps'])} eval(s), {sum(mt['eval']):.1f} s of the loop)"
        )
        if "env_mont" in res:
            print(
                f"Montezuma collection vs env-only (8 envs, {mont_workers} workers): {c:.1f} / "
                f"{res['env_mont']['rate']:.1f} = {c / res['env_mont']['rate']:.2f}"
            )
    if "mont128" in res and "env_mont128" in res:
        c = 128 * 128 * len(res["mont128"]["collect"]) / sum(res["mont128"]["collect"])
        print(
            f"Montezuma collection vs env-only (128 envs, {cores} workers, the default): {c:.1f} / "
            f"{res['env_mont128']['rate']:.1f} = {c / res['env_mont128']['rate']:.2f}"
        )
    for k, label in (
        ("tutorial", "tutorial Mario, 6 processes"),
        ("mario", "project Mario, 6 processes"),
        ("mont", "project Montezuma, 8 envs"),
        ("mont128", "project Montezuma, 128 envs"),
    ):
        if k in rss:
            print(f"peak RSS {label}: {rss[k]:.0f} MiB (trainer + workers)")
    return res


if __name__ == "__main__":
    main()
