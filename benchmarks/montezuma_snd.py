"""Montezuma's Revenge at the SND authors' settings: plain PPO, RND and the SND targets, 4M agent steps each.

    setsid nice -n 10 python benchmarks/montezuma_snd.py    # the plan of docs/montezuma.md, resumable
    python benchmarks/montezuma_snd.py --runs rnd:0          # one run
    python benchmarks/montezuma_snd.py --quick               # the pipeline in seconds, in runs/montezuma_snd-quick
    python benchmarks/montezuma_snd.py --report-only         # rebuild the report from the committed summaries
    python benchmarks/montezuma_snd.py --status              # where each run stands
    python benchmarks/montezuma_snd.py --pack-state          # the unfinished runs' resume state, to commit
    python benchmarks/montezuma_snd.py --report-only --heatmaps   # + where each finished run goes in a room

Every run is ``montezuma/train.py --recipe snd-montezuma --intrinsic <method> --seed <k>`` (128 envs x
128 steps, the authors' reward convention and eta per method; the plan's variants add their flags,
``VARIANTS``), logging into ``<out>/<run name>``, with
a checkpoint every 10 updates or 20 minutes. Runs go one after the other. A run cut short
continues from its newest checkpoint (``lanes.run_plan``). A run longer than one machine's life
continues on the next: ``--pack-state`` copies its newest checkpoint, slimmed (``lanes.slim_checkpoint``:
float16 weights, the large matrices int8, no optimizer moments), with its config,
metrics and segments into ``benchmarks/lane_state/montezuma_snd/`` to be committed; a later invocation
that finds no newer checkpoint of the run restores them and resumes there (fresh Adam moments, rounded weights:
a resumed run's segments show where).

A run's summary ``docs/results/montezuma_snd/<run name>.json`` (curves per 65,536 agent steps, rooms,
first steps with a score of 400 and with a second room, the policy's entropy and KL, the advantages and
the intrinsic reward per bin, hours, segments) is rewritten at every new
checkpoint while it runs (``"status": "running"``) and once more when it ends (``"budget"``).
``--report-only`` rebuilds the results block of ``docs/montezuma.md`` and ``docs/montezuma.png`` from the
summaries alone. ``--heatmaps`` first draws, for every finished run whose final checkpoint is in
``--out`` and that has no picture yet, ``montezuma/play.py --heatmap`` (20,000 agent steps sampled
from the final policy with seed 0: where in each room they go, and what the run's module pays there)
into ``docs/results/montezuma_snd/heatmap_<run name>.png`` and ``.npz`` (a few KB); the report shows
every such picture with its rank correlation of visits and reward.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import lanes  # noqa: E402
from common.run import logger as tags  # noqa: E402
from common.run.config import parse_config  # noqa: E402
from common.run.logger import read_metrics  # noqa: E402
from montezuma.env import rooms_of_mask  # noqa: E402
from montezuma.train import MontezumaConfig  # noqa: E402

RECIPE = "snd-montezuma"
_RECIPE_CONFIG = parse_config(MontezumaConfig, ["--recipe", RECIPE])  # what every run's trainer computes from
STEPS_PER_UPDATE = _RECIPE_CONFIG.rollout_size  # agent steps per update
BUDGET = _RECIPE_CONFIG.num_updates * STEPS_PER_UPDATE  # a run's agent steps: whole updates
#: the plan of docs/montezuma.md, in order: (method, seed)
PLAN = (
    ("none", 0),
    ("snd-std", 0),
    ("snd-vic", 0),
    ("rnd", 0),
    ("snd-vic-authors", 0),  # the amendment of 2026-12-04 (docs/montezuma.md)
    ("snd-vic-authors-policy", 0),  # the second amendment, 2026-12-05
    ("snd-vic-authors-policy", 1),  # the third amendment, 2026-12-05
    ("snd-vic", 1),
    ("rnd", 1),
    ("snd-std", 1),
    ("snd-v", 0),
)
METHODS = {
    "none": "PPO",
    "rnd": "PPO + RND",
    "snd-std": "SND-STD",
    "snd-vic": "SND-VIC",
    "snd-v": "SND-V",
    "snd-vic-authors": "SND-VIC, authors' networks",
    "snd-vic-authors-policy": "SND-VIC, authors' networks and policy",
}
#: the plan's methods that are a module with flags of their own: name -> (--intrinsic, the flags)
VARIANTS = {
    "snd-vic-authors": ("snd-vic", ("--snd-network", "authors")),
    "snd-vic-authors-policy": ("snd-vic", ("--snd-network", "authors", "--policy-network", "authors")),
}
COLORS = {
    "none": "C0",
    "rnd": "C3",
    "snd-std": "C2",
    "snd-vic": "C1",
    "snd-v": "C4",
    "snd-vic-authors": "C5",
    "snd-vic-authors-policy": "C6",
}
#: the SND authors' chart (assets/results_chart.png; their config: 9 runs for PPO and RND, 4 for SND-STD,
#: 8 for SND-VIC and SND-V; y read off the figure to about +-10 %, x far more coarsely, docs/montezuma.md):
#: positive-reward events per episode at the agent steps given
SND_CHART = {
    "none": "0 throughout 128M",
    "rnd": "about 1 at 7M, 2 at 12M",
    "snd-std": "about 2.7 by 2-3M",
    "snd-vic": "about 2.5 by 3-4M",
    "snd-v": "(not read)",
    "snd-vic-authors": "about 2.5 by 3-4M (their SND-VIC)",
    "snd-vic-authors-policy": "about 2.5 by 3-4M (their SND-VIC)",
}
#: a checkpoint every 10 updates or 20 minutes, whichever comes first (a hard stop loses at most 20 minutes and
#: the update in progress), a greedy evaluation every 20 updates
RUN_ARGS = ("--save-interval", "10", "--save-minutes", "20", "--eval-interval", "20", "--video-interval", "100")
CURVE_BIN = 65_536  # agent steps per point of the curves: 4 updates
SCORE_MARK = 400  # the key (100) and a door (300): the score of leaving the first room through a door
RESULTS = os.path.join(ROOT, "docs", "results", "montezuma_snd")
LANE_STATE = os.path.join(ROOT, "benchmarks", "lane_state", "montezuma_snd")
DOCS = os.path.join(ROOT, "docs")
PAGE = "montezuma.md"  # the report's page in DOCS
OUT = os.path.join(ROOT, "runs", "montezuma_snd")
RUN_FORMAT = "METHOD:SEED"
#: ``--quick``: this run with these trainer flags (``lanes.TINY_PPO``)
QUICK = ("snd-vic:0", (*lanes.TINY_PPO, "--picture-interval", "0"))
TRAINER = "montezuma/train.py"  # every run's train script (it also checks the flags the suite passes on)
START, END = "<!-- montezuma-results:start -->", "<!-- montezuma-results:end -->"
PREFIX = "montezuma"  # montezuma_<update>.pdparams
HEATMAP_STEPS = 20_000  # agent steps sampled from a finished run's policy for its heatmap


def run_name(method, seed):
    return f"montezuma_{method}_seed{seed}"


def command(method, seed, out, resume=None, threads=0, extra=()):
    intrinsic, flags = VARIANTS.get(method, (method, ()))
    argv = [
        sys.executable,
        os.path.join(ROOT, TRAINER),
        "--recipe",
        RECIPE,
        "--intrinsic",
        intrinsic,
        *flags,
        "--seed",
        str(seed),
        "--log-path",
        out,
        "--run-name",
        run_name(method, seed),
        *RUN_ARGS,
        *(["--num-threads", str(threads)] if threads else []),
        *extra,
    ]
    return argv + (["--resume", resume] if resume else [])


# ---------------------------------------------------------------------------------- summaries
def _first(steps, hit):
    idx = np.flatnonzero(hit)
    return int(steps[idx[0]]) if len(idx) else None


def summarize_run(out, method, seed, status) -> dict:
    """A run's summary from its folder: per-bin curves, rooms, first marks, hours, segments."""
    name = run_name(method, seed)
    run_dir = os.path.join(out, name)
    m = read_metrics(run_dir)
    empty = (np.zeros(0), np.zeros(0))
    ep_s, ep_score = m.get("episode/score", empty)
    _, ep_events = m.get("episode/events", empty)
    _, ep_rooms = m.get("episode/rooms", empty)
    _, ep_mask = m.get("episode/room_mask", empty)
    ev_s, ev_score = m.get("eval/score", empty)
    _, ev_rooms = m.get("eval/rooms", empty)
    rate_s, rate = m.get(tags.STEPS_PER_SEC, empty)
    steps = int(rate_s[-1]) if len(rate_s) else 0
    edges = np.arange(0, steps + CURVE_BIN, CURVE_BIN)
    first_room = {}
    for s, mask in zip(ep_s, ep_mask):
        for room in rooms_of_mask(mask):
            first_room.setdefault(room, int(s))
    order = np.argsort(ev_s, kind="stable")  # background evals are logged as they arrive
    counts = [int(((ep_s > lo) & (ep_s <= hi)).sum()) for lo, hi in zip(edges[:-1], edges[1:])]
    return {
        "method": method,
        "seed": seed,
        "recipe": RECIPE,
        "status": status,
        "agent_steps": steps,
        "logged_hours": lanes.logged_hours(rate_s, rate),
        "training_episodes": int(len(ep_s)),
        "rooms_reached": sorted(first_room),
        "room_first_step": {str(k): v for k, v in sorted(first_room.items())},
        "max_rooms_in_an_episode": int(ep_rooms.max()) if len(ep_rooms) else 0,
        "max_score": float(ep_score.max()) if len(ep_score) else 0.0,
        "max_events": int(ep_events.max()) if len(ep_events) else 0,
        "first_step_score_400": _first(ep_s, ep_score >= SCORE_MARK),
        "first_step_second_room": _first(ep_s, ep_rooms >= 2),
        "first_step_key": _first(ep_s, ep_events >= 1),
        "median_steps_per_sec": round(float(np.median(rate)), 1) if len(rate) else None,
        "curve": {
            "steps": edges[1:].astype(int).tolist(),
            "episodes": counts,
            "events": lanes.binned(ep_s, ep_events, edges),
            "score": lanes.binned(ep_s, ep_score, edges),
            "rooms": lanes.binned(ep_s, ep_rooms, edges),
            "second_room_share": lanes.binned(ep_s, (ep_rooms >= 2).astype(float), edges),
        },
        "eval": {
            "steps": ev_s[order].astype(int).tolist(),
            "score": ev_score[order].tolist(),
            "rooms": ev_rooms[order].astype(int).tolist() if len(ev_rooms) else [],
        },
        "training": training_facts(m, edges),
        "segments": lanes.read_segments(out, name),
        "command": [a.replace(ROOT + os.sep, "") for a in command(method, seed, "runs/montezuma_snd")[1:]],
        "updated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


#: what the update and the module did, per curve bin: summary key -> logged tag
TRAINING_TAGS = {
    "episode_length": "episode/length",
    "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl",
    "advantage_std": tags.ADV_STD,
    "advantage_int_mean": tags.ADV_INT,
    "raw_intrinsic_mean": "intrinsic/raw_reward_mean",
    "intrinsic_clipped_share": "intrinsic/clipped_share",
}


def training_facts(m, edges) -> dict:
    """The means per curve bin of ``TRAINING_TAGS`` (None where a run did not log one), so what the docs
    say of a run's policy, advantages and intrinsic reward can be checked against its committed summary."""
    return {key: lanes.binned_tag(m, tag, edges) for key, tag in TRAINING_TAGS.items()}


RUNS = lanes.Runs(
    key=("method", "seed"),
    name=run_name,
    command=command,
    summarize=summarize_run,
    prefix=PREFIX,
    order=lambda s: (list(METHODS).index(s["method"]), s["seed"]),
)


def describe(summary) -> str:
    """One line on a run (``--status``, the lane's log); an unfinished run's also says how far it has to go."""
    line = (
        f"{summary['agent_steps']:,} steps, rooms {summary['rooms_reached']}, "
        f"best score {summary['max_score']:g}, "
        + (f"first 400 at {first:,} steps" if (first := summary["first_step_score_400"]) is not None else "never 400")
    )
    rate, left = summary.get("median_steps_per_sec"), BUDGET - summary["agent_steps"]
    if summary.get("status") in ("running", "stopped") and rate and left > 0:
        hours = left / rate / 3600
        line += f"; {summary['agent_steps'] / BUDGET:.0%} of {BUDGET:,}, about {hours:.1f} h to go at {rate:g}/s"
    return line


# ---------------------------------------------------------------------------------- report
def _step(v):
    return "-" if v is None else f"{v / 1e6:.2f}M"


def _last_mean(curve, n=8):
    """Positive-reward events per episode over the episodes of the last ``n`` non-empty bins (the last
    ~0.5M agent steps), each bin weighted by its episodes, or None."""
    bins = [(v, k) for v, k in zip(curve["events"], curve["episodes"]) if v is not None and k][-n:]
    return None if not bins else sum(v * k for v, k in bins) / sum(k for _, k in bins)


def markdown(summaries) -> str:
    if not summaries:
        return "(no run has a summary yet)"
    lines = [
        "Generated by `python benchmarks/montezuma_snd.py --report-only` from "
        "`docs/results/montezuma_snd/*.json`. Training episodes (sticky actions, sampled actions); "
        "'events' are steps with a positive reward (the SND authors' chart: 1 about the key, 2 the key "
        "and a door); 'last 0.5M' is the mean over the episodes of the last 8 bins of 65,536 agent steps. "
        "A 'first' column is the agent step at the end of the update in which that episode ended: the "
        "event itself came earlier, by up to (the episode's length + 127) x 128 agent steps. "
        "Hours are the logged wall time on the shared 2-core machine. A resume (the segments below; "
        "ticks on the curves) of the runs up to the second amendment's seed 0 (code before commit 538fede) "
        "started every env on a new episode and the episodes in flight at the stop were not logged, so "
        "for a while after it only short episodes could end: the bins just after such a resume "
        "under-count events (measured in the prose). Runs started later continue their episodes.",
        "",
        "| method | seed | status | agent steps | hours | rooms reached | most rooms in an episode "
        "| best score | first key | first score >= 400 | first 2nd room | events, last 0.5M "
        "| SND chart (mean of their 4-9 runs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        last = _last_mean(s["curve"])
        hours = "-" if s["logged_hours"] is None else f"{s['logged_hours']:.2f}"
        lines.append(
            f"| {METHODS[s['method']]} | {s['seed']} | {s['status']} | {s['agent_steps']:,} | {hours} "
            f"| {', '.join(map(str, s['rooms_reached'])) or '-'} | {s['max_rooms_in_an_episode']} "
            f"| {s['max_score']:g} | {_step(s['first_step_key'])} | {_step(s['first_step_score_400'])} "
            f"| {_step(s['first_step_second_room'])} | {'-' if last is None else f'{last:.2f}'} "
            f"| {SND_CHART[s['method']]} |"
        )
    lines += ["", *lanes.segments_table(summaries, RUNS.name_of)]
    return "\n".join(lines)


def resume_steps(summary) -> list:
    """The agent steps at which a run was resumed (each later start of its process)."""
    starts = [e for e in summary["segments"] if e.get("event") == "start"]
    return [e["resume_update"] * STEPS_PER_UPDATE for e in starts if e.get("resume_update")]


def plot(summaries, path):
    """Per method: events per episode, score and the share of episodes past room 1, every seed, with the
    band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("events", "positive-reward events per episode"), ("score", "score per episode"))
    panels += (("second_room_share", "share of episodes that reach a second room"),)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.2 * len(panels)), squeeze=False)
    for ax, (key, title) in zip(axes[:, 0], panels):
        for method in METHODS:
            runs = [s for s in summaries if s["method"] == method]
            curves = []
            for s in runs:
                c = s["curve"]
                ys = np.array([np.nan if v is None else v for v in c[key]], float)
                style = dict(color=COLORS[method], ls=lanes.SEED_LINES[s["seed"] % 3], alpha=0.85, lw=1)
                ax.plot(c["steps"], ys, label=f"{METHODS[method]} s{s['seed']}", **style)
                for x in resume_steps(s):  # a resume's new episodes: the bins after it under-count
                    ax.axvline(x, ymax=0.04, color=COLORS[method], lw=1.5)
                curves.append((np.array(c["steps"]), ys))
            if len(curves) > 1:
                n = min(len(x) for x, _ in curves)
                ys = np.array([y[:n] for _, y in curves])
                ax.fill_between(curves[0][0][:n], np.nanmin(ys, 0), np.nanmax(ys, 0), color=COLORS[method], alpha=0.15)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("agent steps")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def heatmap_path(results, summary) -> str:
    return os.path.join(results, f"heatmap_{RUNS.name_of(summary)}.png")


def draw_heatmaps(out, results, steps=HEATMAP_STEPS) -> list:
    """``montezuma/play.py --heatmap`` for every finished run (status "budget") with its final checkpoint
    in ``out`` and no picture in ``results`` yet; returns the pictures drawn."""
    drawn = []
    for s in RUNS.load(results):
        png = heatmap_path(results, s)
        checkpoint, _ = lanes.newest_checkpoint(os.path.join(out, RUNS.name_of(s)), PREFIX)  # a finished run's last
        if s["status"] != "budget" or os.path.exists(png) or checkpoint is None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            argv = ["--checkpoint", checkpoint, "--output", os.path.join(tmp, "greedy.mp4"), "--max-steps", "1"]
            argv += ["--heatmap", png, "--heatmap-steps", str(steps), "--seed", "0"]
            subprocess.run([sys.executable, os.path.join(ROOT, "montezuma", "play.py"), *argv], check=True)
        drawn.append(png)
    return drawn


def heatmap_markdown(summaries, results, docs) -> str:
    """The finished runs' heatmaps (those drawn), each with its rank correlation of visits and reward."""
    from montezuma.pictures import HEAT_MIN_VISITS, place_share, rank_correlation

    shown = [(s, heatmap_path(results, s)) for s in summaries if os.path.exists(heatmap_path(results, s))]
    if not shown:
        return ""
    lines = [
        "",
        "",
        f"Inside the rooms: {HEATMAP_STEPS:,} agent steps sampled from each finished run's final policy "
        "(`python benchmarks/montezuma_snd.py --report-only --heatmaps`, which runs `montezuma/play.py "
        "--heatmap` with seed 0): where they went (visits per 8x8-pixel cell of the screen; 'cells visited' "
        "counts the cells with one visit or more, of 540 per room) and the mean "
        "novelty the run's module gives the states there (its raw error, before `--int-eta` and the clip). "
        "The rank correlation (Spearman, over the cells "
        f"with at least {HEAT_MIN_VISITS} states) is negative when the module pays more where the policy goes less. "
        "'Place share' is the share of the reward's variance over the sampled states that the place (room and "
        "cell) explains: near 1 the reward is a map of the room, near 0 it varies as much at one place as "
        "between places.",
        "",
        "| run | rooms of the sampled steps | episodes ended | cells visited | rank correlation of visits and reward "
        "| place share |",
        "|---|---|---|---|---|---|",
    ]
    for s, png in shown:
        with np.load(os.path.splitext(png)[0] + ".npz", allow_pickle=False) as data:
            table = {k: data[k] for k in data.files if k in ("rooms", "visits", "reward_sum", "reward_sq_sum")}
            episodes = int(data["episodes"])
        module = s["method"] != "none"
        rho = rank_correlation(table) if module else None
        share = place_share(table) if module and "reward_sq_sum" in table else None
        rooms = ", ".join(map(str, table["rooms"].tolist()))
        said = "(no module)" if not module else "-" if rho is None else f"{rho:.2f}"
        shared = "(no module)" if not module else "-" if share is None else f"{share:.2f}"
        cells = int((table["visits"] > 0).sum())
        lines.append(f"| {RUNS.name_of(s)} | {rooms} | {episodes} | {cells} | {said} | {shared} |")
    lines.append("")
    lines += [f"![{RUNS.name_of(s)}: where it goes]({os.path.relpath(png, docs)})" for s, png in shown]
    return "\n".join(lines)


def write_report(results, docs):
    summaries = RUNS.load(results)
    alt = "events, score and second-room share per episode"

    def block(summaries):
        return markdown(summaries) + heatmap_markdown(summaries, results, docs)

    return lanes.write_suite_report(docs, PAGE, "montezuma.png", alt, summaries, block, plot, START, END)


def parse_runs(text):
    return lanes.parse_method_seeds(text, METHODS, PLAN)


def add_heatmap_flags(parser) -> None:
    parser.add_argument(
        "--heatmaps",
        action="store_true",
        help="before the report, draw montezuma/play.py --heatmap for every finished run whose final checkpoint "
        "is in --out and that has no picture in --results yet",
    )
    parser.add_argument("--heatmap-steps", type=int, default=HEATMAP_STEPS, help="agent steps sampled per heatmap")


def main(argv=None):
    def before_report(args):
        if args.heatmaps:
            for png in draw_heatmaps(args.out, args.results, args.heatmap_steps):
                print("heatmap:", png)

    return lanes.suite_main(sys.modules[__name__], argv, add_arguments=add_heatmap_flags, before_report=before_report)


if __name__ == "__main__":
    lanes.interrupt_on_sigterm()  # `kill` stops the runs too (they save), as Ctrl-C does
    sys.exit(main())
