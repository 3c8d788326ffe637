"""Curiosity alone on Mario 1-1 (the ICM paper's test): no game reward, RND, ICM and SND-VIC against a random policy.

    setsid nice -n 10 python benchmarks/mario_no_reward.py  # the plan of docs/mario_no_reward.md, resumable
    python benchmarks/mario_no_reward.py --runs icm:0        # one run
    python benchmarks/mario_no_reward.py --quick             # the pipeline in seconds, in runs/mario_no_reward-quick
    python benchmarks/mario_no_reward.py --report-only       # rebuild the report from the committed summaries
    python benchmarks/mario_no_reward.py --status            # where each run stands
    python benchmarks/mario_no_reward.py --pack-state        # the unfinished runs' resume state, to commit

Every curious run is ``mario/train.py --recipe no-reward-1-1 --intrinsic <method> --seed <k>`` (no game
reward at all, COMPLEX_MOVEMENT, 1M agent steps; ``VARIANTS`` adds a method's own flags); plain PPO
(``--intrinsic none``) runs 200k steps with nothing to learn but its entropy bonus; ``random`` plays
100 episodes with uniformly random actions of the same set (no training: ``--random-episodes``). The
scheduler, resuming and packing are ``lanes.run_plan``'s (``benchmarks/lanes.py``).

A run's summary ``docs/results/mario_no_reward/<run name>.json`` holds the final x_pos of every
training episode (its distance: an episode ends at Mario's first death, at the flag or when the
level's clock runs out), binned over agent steps, the mean and 95 % interval over the episodes of the
last 10 % of its agent steps, the farthest x_pos and a histogram of where episodes ended.
``--report-only`` rebuilds the results block of ``docs/mario_no_reward.md`` and
``docs/mario_no_reward.png`` from the summaries alone, the shares drawn above the committed picture of
1-1 (``mario/levels/1-1.png``, from ``mario/level_picture.py``).
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
from benchmarks.intervals import bootstrap_mean  # noqa: E402
from common.run import logger as tags  # noqa: E402
from common.run.logger import read_metrics  # noqa: E402

RECIPE = "no-reward-1-1"
#: the plan of docs/mario_no_reward.md, in order: (method, seed)
PLAN = (
    ("random", 0),
    ("none", 0),
    ("rnd", 0),
    ("icm", 0),
    ("snd-vic", 0),
    ("rnd-beta0.001", 0),  # the amendment of 2026-12-05 (docs/mario_no_reward.md)
    ("rnd", 1),
    ("icm", 1),
    ("rnd-beta0.001", 1),  # the second amendment: its repeat (docs/mario_no_reward.md)
)
METHODS = {
    "random": "random policy",
    "none": "PPO, no reward",
    "rnd": "RND",
    "icm": "ICM",
    "snd-vic": "SND-VIC",
    "rnd-beta0.001": "RND, entropy bonus 0.001",
}
#: the plan's methods that are a module with flags of their own: name -> (--intrinsic, the flags)
VARIANTS = {"rnd-beta0.001": ("rnd", ("--beta", "0.001"))}
COLORS = {"random": "0.5", "none": "C0", "rnd": "C3", "icm": "C2", "snd-vic": "C1", "rnd-beta0.001": "C4"}
PPO_STEPS = 200_000  # plain PPO with no reward: entropy only
RANDOM_EPISODES = 100
RUN_ARGS = ("--save-minutes", "5")
CURVE_BIN = 50_000  # agent steps per point of the distance curve
POLICY_BIN = 100_000  # agent steps per point of the policy's entropy and the advantages' spread
STOP_BIN = 64  # x_pos pixels per bar of the stopping-point histogram
LEVEL_END = 3_266  # x_pos past the flag pole of 1-1 (the flag is reached near 3,161)
FAR_X = 1_000  # the plan's mark (about 30 % of 1-1): every episode past it is listed in the summary
#: the ICM paper (Pathak et al. 2017, Table 1): 1-1 from scratch with no reward, mean distance 711 +- 59.3
ICM_PAPER = "711 +- 59 (about 30 % of 1-1; stops at a pit at 38 %)"
RESULTS = os.path.join(ROOT, "docs", "results", "mario_no_reward")
LANE_STATE = os.path.join(ROOT, "benchmarks", "lane_state", "mario_no_reward")
DOCS = os.path.join(ROOT, "docs")
PAGE = "mario_no_reward.md"  # the report's page in DOCS
OUT = os.path.join(ROOT, "runs", "mario_no_reward")
RUN_FORMAT = "METHOD:SEED"
#: ``--quick``: this run with these trainer flags (``lanes.TINY_PPO``)
QUICK = (
    "rnd:0",
    (*lanes.TINY_PPO, "--num-epochs", "1", "--video-interval", "0", "--histogram-interval", "0")
    + ("--embedding-interval", "0"),
)
TRAINER = "mario/train.py"  # every run's train script (it also checks the flags the suite passes on)
START, END = "<!-- mario-no-reward-results:start -->", "<!-- mario-no-reward-results:end -->"
PREFIX = "mario_1_1"  # mario_1_1_<update>.pdparams


def run_name(method, seed):
    return f"mario11_noreward_{method}_seed{seed}"


def command(method, seed, out, resume=None, threads=0, extra=()):
    if method == "random":
        argv = [sys.executable, os.path.abspath(__file__), "--random-episodes", str(RANDOM_EPISODES)]
        return argv + ["--seed", str(seed), "--random-out", os.path.join(out, run_name(method, seed))]
    intrinsic, flags = VARIANTS.get(method, (method, ()))
    argv = [sys.executable, os.path.join(ROOT, TRAINER), "--recipe", RECIPE, "--intrinsic", intrinsic]
    argv += list(flags)
    argv += ["--seed", str(seed), "--log-path", out, "--run-name", run_name(method, seed), *RUN_ARGS]
    argv += ["--num-global-steps", str(PPO_STEPS)] if method == "none" else []
    argv += [*(["--num-threads", str(threads)] if threads else []), *extra]
    return argv + (["--resume", resume] if resume else [])


def play_random(out, episodes, seed) -> None:
    """``episodes`` episodes of 1-1 with uniformly random COMPLEX_MOVEMENT actions; logs each episode's
    x_pos into ``out/metrics.jsonl`` as a trainer would (``episode/x_pos`` at the agent step it ended)."""
    from common.run.logger import Logger
    from mario.env import make_env

    os.makedirs(out, exist_ok=True)
    env, rng, logger = make_env(1, 1, "complex"), np.random.default_rng(seed), Logger(out, comment="random")
    steps, start = 0, time.perf_counter()
    try:
        for _ in range(episodes):
            env.reset()
            done, info = False, {}
            while not done:
                _, _, done, info = env.step(int(rng.integers(env.num_actions)))
                steps += 1
            logger.scalar("episode/x_pos", float(info.get("x_pos", 0)), steps)
            logger.scalar("episode/flag", float(bool(info.get("flag_get", False))), steps)
            logger.scalar(tags.STEPS_PER_SEC, steps / max(time.perf_counter() - start, 1e-9), steps)
    finally:
        env.close()
        logger.close()


# ---------------------------------------------------------------------------------- summaries
def interval95(values):
    """(mean, (low, high)) of ``values``, the 95 % bootstrap interval of the mean (``intervals.py``);
    (None, None) with no values."""
    v = np.asarray(values, float)
    if not len(v):
        return None, None
    return float(v.mean()), bootstrap_mean(v)


def summarize_run(out, method, seed, status) -> dict:
    """A run's summary from its folder: distance per episode over agent steps, the last 10 %, stops,
    the episodes past ``FAR_X`` ([agent step, x_pos] each), the greedy evaluations' x_pos and how far
    the policy moved from uniform (``policy_facts``)."""
    name = run_name(method, seed)
    m = read_metrics(os.path.join(out, name))
    empty = (np.zeros(0), np.zeros(0))
    ep_s, ep_x = m.get("episode/x_pos", empty)
    _, ep_flag = m.get("episode/flag", empty)
    ev_s, ev_x = m.get("eval/x_pos", empty)
    rate_s, rate = m.get(tags.STEPS_PER_SEC, empty)
    steps = int(max(rate_s[-1] if len(rate_s) else 0, ep_s.max() if len(ep_s) else 0))
    edges = np.arange(0, steps + CURVE_BIN, CURVE_BIN)
    last = ep_x[ep_s > 0.9 * steps] if method != "random" else ep_x  # the random policy does not learn
    mean, ci = interval95(last)
    stops = np.histogram(last, bins=np.arange(0, LEVEL_END + STOP_BIN, STOP_BIN))[0]
    return {
        "method": method,
        "seed": seed,
        "recipe": RECIPE if method != "random" else "random actions, COMPLEX_MOVEMENT",
        "status": status,
        "agent_steps": steps,
        "logged_hours": lanes.logged_hours(rate_s, rate) if method != "random" else None,
        "training_episodes": int(len(ep_s)),
        "last_10pct_episodes": int(len(last)),
        "last_10pct_mean_x": None if mean is None else round(mean, 1),
        "last_10pct_ci95": None if ci is None else [round(ci[0], 1), round(ci[1], 1)],
        "farthest_x": int(ep_x.max()) if len(ep_x) else None,
        "flags": int(ep_flag.sum()),
        "stops_last_10pct": {"bin": STOP_BIN, "counts": stops.astype(int).tolist()},
        "far_episodes": [[int(a), int(b)] for a, b in zip(ep_s, ep_x) if b > FAR_X],
        "greedy_eval": {"steps": ev_s.astype(int).tolist(), "x_pos": ev_x.astype(int).tolist()},
        "curve": {"steps": edges[1:].astype(int).tolist(), "x_pos": lanes.binned(ep_s, ep_x, edges)},
        "policy": policy_facts(m, steps) if method != "random" else None,
        "segments": lanes.read_segments(out, name),
        "command": [a.replace(ROOT + os.sep, "") for a in command(method, seed, "runs/mario_no_reward")[1:]],
        "updated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def policy_facts(m, steps) -> dict:
    """How far a run's policy moved from uniform (what docs/mario_no_reward.md cites): the entropy and the
    advantages' spread per ``POLICY_BIN`` agent steps (None where not logged), each action's mean share
    over the updates of the last 10 % of agent steps, and the median approximate KL of the second half."""
    empty = (np.zeros(0), np.zeros(0))
    edges = np.arange(0, steps + POLICY_BIN, POLICY_BIN)

    prefix = tags.ACTION_SHARE + "/"
    late = {}
    for action in sorted((t[len(prefix) :] for t in m if t.startswith(prefix)), key=lambda a: (len(a), a)):
        s, v = m[prefix + action]
        last = s > 0.9 * steps
        late[action] = round(float(v[last].mean()), 4) if last.any() else None
    kl_s, kl = m.get("losses/approx_kl", empty)
    second = kl[kl_s > steps / 2]
    return {
        "bin": POLICY_BIN,
        "entropy": lanes.binned_tag(m, "losses/entropy", edges),
        "advantage_std": lanes.binned_tag(m, tags.ADV_STD, edges),
        "action_share_last_10pct": late,
        "approx_kl_median_second_half": round(float(np.median(second)), 6) if len(second) else None,
    }


RUNS = lanes.Runs(
    key=("method", "seed"),
    name=run_name,
    command=command,
    summarize=summarize_run,
    prefix=PREFIX,
    order=lambda s: (list(METHODS).index(s["method"]), s["seed"]),
)


def describe(summary) -> str:
    return (
        f"{summary['agent_steps']:,} steps, last 10 % x_pos {summary['last_10pct_mean_x']} "
        f"(95 % {summary['last_10pct_ci95']}), farthest {summary['farthest_x']}"
    )


# ---------------------------------------------------------------------------------- report
def markdown(summaries) -> str:
    if not summaries:
        return "(no run has a summary yet)"
    lines = [
        "Generated by `python benchmarks/mario_no_reward.py --report-only` from "
        "`docs/results/mario_no_reward/*.json`. Distance = x_pos where a training episode ended (sampled "
        "actions); the mean and its 95 % bootstrap interval are over the episodes of each run's last 10 % of agent "
        "steps (the random policy: all of its episodes). Hours are the logged wall time on the shared "
        "2-core machine. Entropy: the lowest and highest of the policy's mean entropy per 100,000 agent steps "
        f"(uniform over the 12 actions: {np.log(12):.3f}).",
        "",
        "| method | seed | status | agent steps | hours | episodes | last 10 %: episodes | last 10 %: mean x_pos "
        "| farthest x_pos | flags | entropy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        mean = "-" if s["last_10pct_mean_x"] is None else f"{s['last_10pct_mean_x']:.0f}"
        if s["last_10pct_ci95"] is not None:
            mean += " ({:.0f}-{:.0f})".format(*s["last_10pct_ci95"])
        hours = "-" if s["logged_hours"] is None else f"{s['logged_hours']:.2f}"
        lines.append(
            f"| {METHODS[s['method']]} | {s['seed']} | {s['status']} | {s['agent_steps']:,} | {hours} "
            f"| {s['training_episodes']} | {s['last_10pct_episodes']} | {mean} "
            f"| {'-' if s['farthest_x'] is None else s['farthest_x']} | {s['flags']} | {_entropy_range(s)} |"
        )
    lines += ["", f"The ICM paper, 1-1 from scratch with no reward (A3C, 20 workers): mean distance {ICM_PAPER}."]
    lines += ["", *lanes.segments_table(summaries, RUNS.name_of)]
    return "\n".join(lines)


def _entropy_range(summary) -> str:
    entropy = [v for v in ((summary.get("policy") or {}).get("entropy") or []) if v is not None]
    return f"{min(entropy):.2f}-{max(entropy):.2f}" if entropy else "-"


def plot(summaries, path, level=None):
    """Distance over agent steps per run, and where the last 10 % of each run's episodes ended (shares
    along x_pos), above the level itself when given ``level`` (``mario.pictures.level_strip(1, 1)``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mario.pictures import show_level

    on_level = level is not None
    fig = plt.figure(figsize=(8, 7.8 if on_level else 7))
    grid = fig.add_gridspec(2, 1, height_ratios=[3, 3.9 if on_level else 3])
    lower = grid[1].subgridspec(2, 1, height_ratios=[3, 0.9], hspace=0.04) if on_level else None
    top, bottom = fig.add_subplot(grid[0]), fig.add_subplot(lower[0] if on_level else grid[1])
    for s in summaries:
        label = f"{METHODS[s['method']]} s{s['seed']}"
        style = dict(color=COLORS[s["method"]], ls=lanes.SEED_LINES[s["seed"] % 3], lw=1, alpha=0.85)
        if s["method"] == "random":
            top.axhline(s["last_10pct_mean_x"] or 0, color=COLORS["random"], ls="--", lw=1, label=label)
        else:
            ys = [np.nan if v is None else v for v in s["curve"]["x_pos"]]
            top.plot(s["curve"]["steps"], ys, label=label, **style)
        counts = np.asarray(s["stops_last_10pct"]["counts"], float)
        centres = (np.arange(len(counts)) + 0.5) * s["stops_last_10pct"]["bin"]
        share = counts / max(counts.sum(), 1)
        bottom.step(centres, share, where="mid", label=label, **style)
    top.axhline(1000, color="k", lw=0.5, ls=":")
    top.set_title("mean final x_pos of the training episodes (per 50,000 agent steps); dotted: x_pos 1,000")
    top.set_xlabel("agent steps")
    top.legend(fontsize=7, ncol=2)
    bottom.set_title(f"where the episodes of the last 10 % ended (share per {STOP_BIN} px of x_pos)")
    bottom.set_xlim(0, LEVEL_END)
    bottom.legend(fontsize=7, ncol=2)
    if on_level:  # the level under the shares, x for x: which pipe or pit each peak is
        ax = fig.add_subplot(lower[1], sharex=bottom)
        show_level(ax, level, LEVEL_END)
        bottom.tick_params(labelbottom=False)
        bottom = ax
    bottom.set_xlabel("x_pos")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(results, docs, with_level=True):
    """The report from the summaries in ``results``, the shares drawn above 1-1's committed picture
    (``mario/levels/1-1.png``) unless ``with_level`` is False."""
    from mario.pictures import level_strip

    summaries, alt = RUNS.load(results), "distance over agent steps, and where episodes ended"
    level = level_strip(1, 1) if with_level else None
    return lanes.write_suite_report(
        docs,
        PAGE,
        "mario_no_reward.png",
        alt,
        summaries,
        markdown,
        lambda summaries, path: plot(summaries, path, level),
        START,
        END,
    )


def parse_runs(text):
    return lanes.parse_method_seeds(text, METHODS, PLAN)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--random-episodes" in argv:  # the random policy's run, started by the plan's scheduler
        import argparse

        p = argparse.ArgumentParser()
        p.add_argument("--random-episodes", type=int, required=True)
        p.add_argument("--random-out", required=True)
        p.add_argument("--seed", type=int, default=0)
        args = p.parse_args(argv)
        play_random(args.random_out, args.random_episodes, args.seed)
        return 0
    return lanes.suite_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too (they save), as Ctrl-C does
    sys.exit(main())
