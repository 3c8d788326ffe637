"""Does the SND intrinsic signal stay up where RND's decays? Short Mario 1-1 runs per variant.

One short run per intrinsic module (rnd, snd-v, snd-std, snd-vic), same seed, same number of
agent steps, same (reduced) PPO sizes; then the mean raw intrinsic reward per update
(tag intrinsic/raw_reward_mean), divided by each run's first value, is plotted over agent steps.

    python benchmarks/snd_signal.py                                  # run the four variants, then plot
    python benchmarks/snd_signal.py --plot-only runs/evidence/snd_signal
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = ("rnd", "snd-v", "snd-std", "snd-vic")


def train_command(args, variant):
    return [
        sys.executable,
        "mario/train.py",
        "--world",
        "1",
        "--stage",
        "1",
        "--intrinsic",
        variant,
        "--seed",
        str(args.seed),
        "--num-processes",
        str(args.num_processes),
        "--num-local-steps",
        str(args.num_local_steps),
        "--num-epochs",
        str(args.num_epochs),
        "--batch-size",
        str(args.batch_size),
        "--num-global-steps",
        str(args.num_global_steps),
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
        "--log-path",
        args.log_path,
        "--run-name",
        variant,
    ]


def run_variants(group_dir, args):
    os.makedirs(group_dir, exist_ok=True)
    log = {}
    for variant in args.variants:
        cmd = train_command(args, variant)
        print("running:", " ".join(cmd), flush=True)
        start = time.time()
        rc = subprocess.call(cmd, cwd=ROOT)
        log[variant] = {"command": " ".join(cmd), "returncode": rc, "wall_s": time.time() - start}
        print(f"[snd_signal] {variant}: exit {rc} after {log[variant]['wall_s']:.0f} s", flush=True)
        with open(os.path.join(group_dir, "benchmark_runs.json"), "w") as f:
            json.dump(log, f, indent=1)
    return log


def summarise(group_dir):
    from common.logger import read_metrics

    out = {}
    for variant in VARIANTS:
        run_dir = os.path.join(group_dir, variant)
        if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
            continue
        m = read_metrics(run_dir)
        if "intrinsic/raw_reward_mean" not in m:
            continue
        steps, vals = m["intrinsic/raw_reward_mean"]
        out[variant] = {
            "steps": steps.tolist(),
            "raw": vals.tolist(),
            "first": float(vals[0]),
            "last": float(vals[-1]),
            "ratio": float(vals[-1] / vals[0]) if vals[0] else float("nan"),
            "min_ratio": float(vals.min() / vals[0]) if vals[0] else float("nan"),
            "ratio3": float(vals[-3:].mean() / vals[:3].mean()),
            "updates": int(len(vals)),
        }
        if "episode/x_pos" in m:
            out[variant]["x_pos_max"] = float(m["episode/x_pos"][1].max())
            out[variant]["episodes"] = int(len(m["episode/x_pos"][1]))
    return out


def _ratios(summary, variants):
    return ", ".join(f"{v}: {summary[v]['ratio3']:.3f}" for v in variants)


def first_config(group_dir: str, variants) -> dict:
    """The config.json of the first variant run in ``group_dir`` that has one ({} if none)."""
    for variant in variants:
        cfg_file = os.path.join(group_dir, variant, "config.json")
        if os.path.exists(cfg_file):
            with open(cfg_file) as f:
                return json.load(f)
    return {}


def plot(group_dir, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarise(group_dir)
    if not summary:
        raise SystemExit(f"no runs with intrinsic/raw_reward_mean under {group_dir}")
    os.makedirs(args.docs, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, s in summary.items():
        ax.plot(s["steps"], [v / s["first"] for v in s["raw"]], marker=".", label=variant)
    ax.axhline(1.0, color="gray", lw=0.6, ls=":")
    ax.set_xlabel("agent steps")
    ax.set_ylabel("raw intrinsic reward / first update's value")
    ax.set_title("Mario 1-1: mean raw intrinsic reward per update (normalised)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    png = os.path.join(args.docs, "snd_signal.png")
    fig.savefig(png, dpi=120)
    print("wrote", png)

    runs = {}
    runs_file = os.path.join(group_dir, "benchmark_runs.json")
    if os.path.exists(runs_file):
        with open(runs_file) as f:
            runs = json.load(f)
    cfg = first_config(group_dir, summary)
    lines = [
        "# Intrinsic signal of RND vs SND on Mario 1-1",
        "",
        "Short runs, one per intrinsic module, same seed and same number of agent steps. "
        "Tag `intrinsic/raw_reward_mean` (the mean raw intrinsic reward of each rollout, before the "
        "running-std normalisation), divided by each run's first value.",
        "",
        f"Settings: world 1-1, seed {cfg.get('seed')}, {cfg.get('num_processes')} processes x "
        f"{cfg.get('num_local_steps')} local steps, {cfg.get('num_epochs')} epochs x "
        f"{cfg.get('batch_size')} minibatches, lr {cfg.get('lr')}, "
        f"{cfg.get('num_global_steps')} agent steps per run; other flags at their defaults "
        "(int-coef 0.5, update-proportion 0.25, obs-norm-steps 128).",
        "",
        "![normalised raw intrinsic reward](snd_signal.png)",
        "",
        "| variant | updates | first | last | last/first | min/first | mean last 3 / mean first 3 | wall (s) "
        "| max x_pos |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for variant, s in summary.items():
        wall = runs.get(variant, {}).get("wall_s")
        wall = "-" if wall is None else f"{wall:.0f}"
        lines.append(
            f"| {variant} | {s['updates']} | {s['first']:.4g} | {s['last']:.4g} | {s['ratio']:.3f} | "
            f"{s['min_ratio']:.3f} | {s['ratio3']:.3f} | {wall} | {s.get('x_pos_max', float('nan')):.0f} |"
        )
    lines += ["", "## What this shows", ""]
    if "rnd" in summary:
        rnd = summary["rnd"]
        above = [v for v in summary if v != "rnd" and summary[v]["ratio3"] > rnd["ratio3"]]
        below = [v for v in summary if v != "rnd" and summary[v]["ratio3"] <= rnd["ratio3"]]
        lines.append(
            f"- Over these {rnd['updates']} updates RND's raw signal ends at {rnd['ratio']:.3f} of its first "
            f"value ({rnd['ratio3']:.3f} comparing the mean of the last 3 updates with the first 3)."
        )
        if below:
            lines.append(
                f"- {', '.join(below)} end *lower* relative to their start than RND "
                f"({_ratios(summary, below)}): "
                "in this window the SND signal does not stay up while RND's decays."
            )
        if above:
            lines.append(
                f"- {', '.join(above)} stay higher relative to their start than RND ({_ratios(summary, above)})."
            )
    same_first = len({round(s["first"], 6) for s in summary.values()}) == 1
    lines += [
        "- The first value is the rollout collected before any update"
        + (
            " and is identical for all variants (same seed: policy, environments and initial networks coincide)"
            if same_first
            else ""
        )
        + "; the large drop from update 1 to 2 is the predictor's initial fit, so last/first mostly measures that fit."
        " The last-3/first-3 column and the curve from update 2 on are the better guide.",
        "- Raw rewards are squared distances in each module's target feature space. SND trains its target, so its "
        "feature scale moves (e.g. SND-STD/VICReg regularisers shrink or spread the features); a falling SND curve "
        "can reflect a rescaled target as well as a better predictor. The trainer normalises the intrinsic reward by "
        "a running std of intrinsic returns before PPO uses it, so the raw scale is not what the agent sees.",
        "- One seed and a few thousand agent steps: the curves are noisy (they move with which parts of the level the "
        "rollouts reach) and say nothing about the long-run behaviour the SND paper reports (millions of steps).",
    ]
    for extra in args.also:
        other = summarise(extra)
        if not other:
            continue
        ocfg = first_config(extra, other)
        lines += [
            "",
            f"Second set, `{os.path.relpath(extra, ROOT)}`: same settings but "
            f"{ocfg.get('num_global_steps')} agent steps per run:",
            "",
        ]
        if "rnd" in other and "rnd" in summary:
            a, b = summary["rnd"]["raw"], other["rnd"]["raw"]
            same = 0
            while same < min(len(a), len(b)) and abs(a[same] - b[same]) <= 1e-6 * max(1.0, abs(a[same])):
                same += 1
            lines += [
                f"The two rnd runs give identical raw rewards for the first {same} updates"
                + (
                    " and then drift apart (the two sets ran with different working-tree versions of "
                    "common/trainer.py, edited in parallel while they ran)."
                    if same < min(len(a), len(b))
                    else "."
                ),
                "",
            ]
        lines += [
            "| variant | updates | first | last | last/first | min/first | mean last 3 / mean first 3 |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for variant, o in other.items():
            lines.append(
                f"| {variant} | {o['updates']} | {o['first']:.4g} | {o['last']:.4g} | {o['ratio']:.3f} | "
                f"{o['min_ratio']:.3f} | {o['ratio3']:.3f} |"
            )
    lines += [
        "",
        "Driver (runs the four commands below one after the other, then writes this page):",
        "",
        "```bash",
        f"python benchmarks/snd_signal.py --num-processes {cfg.get('num_processes')} --num-local-steps "
        f"{cfg.get('num_local_steps')} --num-epochs {cfg.get('num_epochs')} --batch-size {cfg.get('batch_size')} "
        f"--num-global-steps {cfg.get('num_global_steps')} --seed {cfg.get('seed')} "
        f"--log-path {os.path.relpath(group_dir, ROOT)}",
        "```",
        "",
        "Commands:",
        "",
        "```bash",
    ]
    lines += [runs[v]["command"].replace(sys.executable, "python") for v in summary if v in runs]
    also = "".join(f" {os.path.relpath(a, ROOT)}" for a in args.also)
    lines += [
        "```",
        "",
        "Regenerate this page: `python benchmarks/snd_signal.py --plot-only "
        f"{os.path.relpath(group_dir, ROOT)}" + (f" --also{also}" if also else "") + "`",
        "",
    ]
    md = os.path.join(args.docs, "snd_signal.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("wrote", md)
    with open(os.path.join(group_dir, "summary.json"), "w") as f:
        json.dump(
            {v: {k: x for k, x in s.items() if k not in ("steps", "raw")} for v, s in summary.items()}, f, indent=1
        )
    for variant, s in summary.items():
        print(
            f"{variant:8s} first {s['first']:.4g} last {s['last']:.4g} last/first {s['ratio']:.3f} "
            f"last3/first3 {s['ratio3']:.3f} min/first {s['min_ratio']:.3f}"
        )
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--seed", type=int, default=314)
    ap.add_argument("--num-processes", type=int, default=2)
    ap.add_argument("--num-local-steps", type=int, default=256)
    ap.add_argument("--num-epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=16, help="minibatches per epoch")
    ap.add_argument("--num-global-steps", type=int, default=10240)
    ap.add_argument("--log-path", default="runs/evidence/snd_signal")
    ap.add_argument(
        "--plot-only",
        metavar="GROUP_DIR",
        default="",
        help="folder holding one run folder per variant; only regenerate docs/snd_signal.*",
    )
    ap.add_argument(
        "--also",
        nargs="*",
        default=[],
        metavar="GROUP_DIR",
        help="other finished sets to summarise in a table under the main one",
    )
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"))
    args = ap.parse_args(argv)
    group_dir = args.plot_only or os.path.join(ROOT, args.log_path)
    if not args.plot_only:
        run_variants(group_dir, args)
    plot(group_dir, args)


if __name__ == "__main__":
    main()
