"""Evidence that PPO + RND learns Mario 1-1 with the tutorial's hyperparameters.

Phases (default: all three in order):
  train     python mario/train.py --world 1 --stage 1 --intrinsic rnd (tutorial defaults otherwise)
            run as a subprocess for --minutes of wall clock, then SIGINT (the trainer saves and exits)
  baseline  uniform-random actions in MarioEnv 1-1 for --baseline-episodes episodes or
            --baseline-minutes, whichever comes first; final x_pos per episode -> baseline.json
  plot      docs/mario_tutorial_hour.png and docs/mario_tutorial_hour.md from the run folder

    python benchmarks/mario_learning.py                       # everything, 60 minutes of training
    python benchmarks/mario_learning.py --phase train         # only the training run
    python benchmarks/mario_learning.py --plot-only runs/evidence/mario11_rnd
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import lanes  # noqa: E402


def train_command(args):
    return [
        sys.executable,
        "mario/train.py",
        "--world",
        "1",
        "--stage",
        "1",
        "--intrinsic",
        "rnd",
        "--num-global-steps",
        str(args.num_global_steps),
        "--eval-interval",
        "5",
        "--video-interval",
        "25",
        "--log-path",
        args.log_path,
        "--run-name",
        args.run_name,
        "--seed",
        str(args.seed),
    ]


def train(args):
    cmd = train_command(args)
    print("running:", " ".join(cmd), f"for {args.minutes} minutes", flush=True)
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=lanes.child_env())
    deadline = start + args.minutes * 60
    while proc.poll() is None and time.time() < deadline:
        time.sleep(5)
    if proc.poll() is None:
        print(f"\n[mario_learning] budget of {args.minutes} min over, sending SIGINT", flush=True)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            print("[mario_learning] trainer did not stop within 15 minutes of SIGINT, killing it", flush=True)
            proc.kill()
            proc.wait()
    wall = time.time() - start
    run_dir = os.path.join(ROOT, args.log_path, args.run_name)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "benchmark_train.json"), "w") as f:
        json.dump(
            {"command": " ".join(cmd), "minutes": args.minutes, "wall_s": wall, "returncode": proc.returncode},
            f,
            indent=1,
        )
    print(f"[mario_learning] trainer exited with {proc.returncode} after {wall:.0f} s", flush=True)
    return proc.returncode


def baseline(run_dir, args):
    """Uniform-random actions in MarioEnv 1-1; the final x_pos of each episode (episode = env done)."""
    import numpy as np

    from mario.env import make_env

    rng = np.random.default_rng(args.seed)
    env = make_env(1, 1, "simple")
    start = time.time()
    xs, flags, lengths = [], [], []
    try:
        while len(xs) < args.baseline_episodes and time.time() - start < args.baseline_minutes * 60:
            env.reset()
            done, info, n = False, {}, 0
            while not done:
                _, _, done, info = env.step(int(rng.integers(env.num_actions)))
                n += 1
            xs.append(int(info["x_pos"]))
            flags.append(bool(info["flag_get"]))
            lengths.append(n)
            print(f"[baseline] episode {len(xs)}: x_pos {xs[-1]} flag {flags[-1]} steps {n}", flush=True)
    finally:
        env.close()
    out = {
        "episodes": len(xs),
        "x_pos": xs,
        "flag": flags,
        "length": lengths,
        "x_pos_mean": float(np.mean(xs)),
        "x_pos_std": float(np.std(xs)),
        "x_pos_max": int(np.max(xs)),
        "wall_s": time.time() - start,
        "seed": args.seed,
        "action_type": "simple",
    }
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "random_baseline.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(
        f"[baseline] {out['episodes']} episodes: final x_pos {out['x_pos_mean']:.1f} +- {out['x_pos_std']:.1f}",
        flush=True,
    )
    return out


def _rolling(values, window):
    import numpy as np

    values = np.asarray(values, dtype=float)
    return np.array([values[max(0, i + 1 - window) : i + 1].mean() for i in range(len(values))])


def plot(run_dir, args):
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.run.logger import read_metrics

    m = read_metrics(run_dir)
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    train_info = {}
    if os.path.exists(os.path.join(run_dir, "benchmark_train.json")):
        with open(os.path.join(run_dir, "benchmark_train.json")) as f:
            train_info = json.load(f)
    base = None
    if os.path.exists(os.path.join(run_dir, "random_baseline.json")):
        with open(os.path.join(run_dir, "random_baseline.json")) as f:
            base = json.load(f)

    ep_steps, ep_x = m.get("episode/x_pos", (np.zeros(0), np.zeros(0)))
    ep_flag = m.get("episode/flag", (np.zeros(0), np.zeros(0)))[1]
    window = args.window
    steps_reached = int(max(int(s.max()) for s, _ in m.values() if len(s) and s.max() < 10**12)) if m else 0
    if "perf/steps_per_sec" in m:
        steps_reached = int(m["perf/steps_per_sec"][0].max())
    sps = m.get("perf/steps_per_sec", (None, np.zeros(0)))[1]
    wall = train_info.get("wall_s")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if len(ep_x):
        ax.scatter(ep_steps, ep_x, s=6, alpha=0.25, color="tab:blue", label="episode final x_pos")
        ax.plot(
            ep_steps,
            _rolling(ep_x, window),
            color="tab:blue",
            lw=2,
            label=f"rolling mean over {window} episodes (PPO + RND)",
        )
    if "eval/x_pos" in m:
        ax.plot(*m["eval/x_pos"], "o--", color="tab:green", ms=4, lw=1, label="greedy evaluation x_pos")
    if base:
        mu, sd = base["x_pos_mean"], base["x_pos_std"]
        ax.axhspan(
            mu - sd,
            mu + sd,
            color="tab:red",
            alpha=0.15,
            label=f"random policy, mean +- std ({base['episodes']} episodes)",
        )
        ax.axhline(mu, color="tab:red", lw=1.5)
    ax.axhline(3161, color="black", lw=0.8, ls=":", label="flagpole (x_pos ~3160)")
    ax.set_xlabel("agent steps (summed over environments)")
    ax.set_ylabel("x_pos at episode end")
    ax.set_title(f"Super Mario Bros 1-1, PPO + RND, tutorial hyperparameters ({cfg.get('num_processes')} envs)")
    ax.set_ylim(0, 3400)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    os.makedirs(args.docs, exist_ok=True)
    png = os.path.join(args.docs, "mario_tutorial_hour.png")
    fig.savefig(png, dpi=120)
    print("wrote", png)

    last = ep_x[-20:] if len(ep_x) else np.zeros(0)
    first = ep_x[:20] if len(ep_x) else np.zeros(0)
    r = {
        "steps_reached": steps_reached,
        "updates": int(len(sps)),
        "wall_s": wall,
        "steps_per_sec_wall": steps_reached / wall if wall else None,
        "steps_per_sec_logged_mean": float(sps.mean()) if len(sps) else None,
        "episodes": int(len(ep_x)),
        "x_pos_first20_mean": float(first.mean()) if len(first) else None,
        "x_pos_last20_mean": float(last.mean()) if len(last) else None,
        "x_pos_last20_std": float(last.std()) if len(last) else None,
        "x_pos_max": float(ep_x.max()) if len(ep_x) else None,
        "flags": int(ep_flag.sum()),
        "eval_x_pos": m["eval/x_pos"][1].tolist() if "eval/x_pos" in m else None,
        "random": None if base is None else {k: base[k] for k in ("episodes", "x_pos_mean", "x_pos_std", "x_pos_max")},
    }
    with open(os.path.join(run_dir, "benchmark_summary.json"), "w") as f:
        json.dump(r, f, indent=1)

    def fmt(v, spec=".0f"):
        return "-" if v is None else format(v, spec)

    cmd = train_info.get("command", " ".join(train_command(args))).replace(sys.executable, "python")
    lines = [
        "# Mario 1-1: does PPO + RND learn? (tutorial hyperparameters, CPU)",
        "",
        f"One run of `mario/train.py` on world 1-1 with the tutorial's hyperparameters "
        f"({cfg.get('num_processes')} processes, {cfg.get('num_local_steps')} local steps, "
        f"{cfg.get('num_epochs')} epochs, {cfg.get('batch_size')} minibatches, lr {cfg.get('lr')}, "
        f"gamma {cfg.get('gamma')}, tau {cfg.get('tau')}, beta {cfg.get('beta')}, epsilon {cfg.get('epsilon')}; "
        f"intrinsic {cfg.get('intrinsic')}, int-coef {cfg.get('int_coef')}, seed {cfg.get('seed')}), stopped by "
        f"SIGINT after a wall-clock budget of {fmt(train_info.get('minutes'), 'g')} minutes, on a shared 2-core "
        "CPU machine (other jobs were running). An episode ends when Mario loses a life or reaches the flag "
        "(single-stage env), so `x_pos` is how far he got on that life.",
        "",
        "![episode x_pos over agent steps](mario_tutorial_hour.png)",
        "",
        "| quantity | value |",
        "| --- | --- |",
        f"| agent steps reached | {steps_reached} ({r['updates']} updates) |",
        f"| wall time of the training run | {fmt(wall)} s |",
        f"| steps/s (steps / wall time, incl. start-up and evaluations) | {fmt(r['steps_per_sec_wall'], '.1f')} |",
        f"| steps/s (mean of perf/steps_per_sec, collect + learn only) | "
        f"{fmt(r['steps_per_sec_logged_mean'], '.1f')} |",
        f"| training episodes finished | {r['episodes']} |",
        f"| final x_pos, mean of first 20 episodes | {fmt(r['x_pos_first20_mean'])} |",
        f"| final x_pos, mean +- std of last 20 episodes | {fmt(r['x_pos_last20_mean'])} +- "
        f"{fmt(r['x_pos_last20_std'])} |",
        f"| max x_pos (training episodes) | {fmt(r['x_pos_max'])} |",
        f"| flags reached (training episodes) | {r['flags']} |",
    ]
    if r["eval_x_pos"]:
        lines.append(
            f"| greedy evaluation x_pos (every 5 updates) | {', '.join(str(int(v)) for v in r['eval_x_pos'])} |"
        )
    if base:
        lines.append(
            f"| random policy (uniform over the {base.get('action_type')} action set, seed {base.get('seed')}): "
            f"final x_pos mean +- std ({base['episodes']} episodes, max) | "
            f"{base['x_pos_mean']:.0f} +- {base['x_pos_std']:.0f} (max {base['x_pos_max']}) |"
        )
    if len(ep_x):
        half = len(ep_x) // 2
        lines += [
            "",
            f"Episodes in the first half of the run: mean final x_pos {ep_x[:half].mean():.0f} "
            f"({half} episodes); second half: {ep_x[half:].mean():.0f} ({len(ep_x) - half} episodes)."
            + (
                f" Standard error of the random baseline's mean: {base['x_pos_std'] / np.sqrt(base['episodes']):.0f}."
                if base
                else ""
            ),
            "",
            "Per update (episodes finished during that update's rollout, logged at the step after it):",
            "",
            "| update | agent steps | episodes | mean x_pos | max x_pos | flags |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for u, step in enumerate(np.unique(ep_steps)):
            sel = ep_steps == step
            lines.append(
                f"| {int(step) // int(cfg.get('num_processes', 1) * cfg.get('num_local_steps', 1))} | {int(step)} | "
                f"{int(sel.sum())} | {ep_x[sel].mean():.0f} | {ep_x[sel].max():.0f} | "
                f"{int(ep_flag[sel].sum()) if len(ep_flag) == len(ep_x) else '-'} |"
            )
    if len(ep_x) and base:
        half = len(ep_x) // 2
        se = base["x_pos_std"] / np.sqrt(base["episodes"])
        diff = ep_x[half:].mean() - base["x_pos_mean"]
        lines += [
            "",
            "Reading: the run reached "
            f"{steps_reached} agent steps, {100 * steps_reached / 5_000_000:.1f}% of the trainer's default "
            f"--num-global-steps (5M). The second half of its episodes ends {diff:+.0f} x_pos from the random "
            f"policy's mean ({diff / se:+.1f} standard errors of that mean); max x_pos {r['x_pos_max']:.0f} vs "
            f"{base['x_pos_max']} for random; {r['flags']} flags. "
            + (
                "Greedy evaluation episodes end at x_pos " + "/".join(str(int(v)) for v in r["eval_x_pos"]) + ". "
                if r["eval_x_pos"]
                else ""
            )
            + "A one-hour CPU budget on this machine is far too short to show Mario 1-1 being solved; "
            "read this as a throughput measurement plus an early trend, not as a learning curve to convergence.",
        ]
    lines += [
        "",
        "Command (run by `benchmarks/mario_learning.py`, which sends SIGINT when the budget is over):",
        "",
        "```bash",
        cmd,
        "```",
        "",
        "Reproduce everything (training, random baseline, plot): `python benchmarks/mario_learning.py "
        "--minutes 60`; regenerate this page from the run folder: `python benchmarks/mario_learning.py "
        f"--plot-only {os.path.relpath(run_dir, ROOT)}`.",
        "",
    ]
    md = os.path.join(args.docs, "mario_tutorial_hour.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("wrote", md)
    print(json.dumps(r, indent=1))
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget")
    ap.add_argument("--num-global-steps", type=int, default=100_000_000, help="far beyond the budget")
    ap.add_argument("--log-path", default="runs/evidence")
    ap.add_argument("--run-name", default="mario11_rnd")
    ap.add_argument("--seed", type=int, default=314)
    ap.add_argument("--baseline-episodes", type=int, default=30)
    ap.add_argument("--baseline-minutes", type=float, default=10.0)
    ap.add_argument("--phase", choices=["all", "train", "baseline", "plot"], default="all")
    ap.add_argument(
        "--plot-only",
        metavar="RUN_DIR",
        default="",
        help="only regenerate docs/mario_learning.{png,md} from this run folder",
    )
    ap.add_argument("--window", type=int, default=20, help="rolling-mean window, in episodes")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"))
    args = ap.parse_args(argv)
    run_dir = args.plot_only or os.path.join(ROOT, args.log_path, args.run_name)
    if args.plot_only:
        return plot(run_dir, args)
    if args.phase in ("all", "train"):
        train(args)
    if args.phase in ("all", "baseline"):
        baseline(run_dir, args)
    if args.phase in ("all", "plot"):
        plot(run_dir, args)


if __name__ == "__main__":
    main()
