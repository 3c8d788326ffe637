"""Trained agents that ship with the repository (``zoo/``): weights-only files and their cards.

A zoo file is a checkpoint cut down to what playing needs: the policy, the intrinsic module's
networks and observation normalizer (so ``play.py --plot`` can draw its curiosity), the config
and the counters. Optimizer states, reward filters and random-generator states are left out, so
it cannot be resumed (``--resume`` names the missing parts). It is read by the same safe loader
as every checkpoint (no code in a file can run) and is a plain ``.pdparams`` file, so each
game's ``play.py --checkpoint zoo/<name>.pdparams`` plays it.

Next to it, ``zoo/<name>.json`` is its card: game, level, settings, the commit and run it came
from, agent steps, hours on the 2-core machine, and what its episode does: greedy (the argmax
of the policy, the training run's evaluation), or sampled from the policy with a seed where a
greedy policy loops (MiniGrid agents break their loops by chance). ``export`` writes both and
plays the episode itself, so the card's result is measured, never typed in; ``tests/test_zoo.py``
plays every agent again and checks the card (an episode with the card's policy and seed is
deterministic on a CPU).

    python -m common.zoo export --game mario --checkpoint runs/.../models/mario_1_1.pdparams \\
        --name mario-1-1-rnd --hours <the run's logged hours> --note "RND seed 0 of benchmarks/mario_flag.py"
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile

from common.run import games

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "zoo")
MAX_BYTES = 25 * 1024 * 1024
#: the checkpoint entries a zoo file keeps (PPO's and DQN's counters both)
KEPT = (
    "game",
    "config",
    "intrinsic_name",
    "agent",
    "update",
    "global_step",
    "env_steps",
    "code_commits",
    "policy",
    "intrinsic",
)
#: the game -> the module whose ``SPEC`` describes it
#: config fields a card lists, where the config has them
CARD_SETTINGS = (
    "recipe",
    "agent",
    "env_id",
    "world",
    "stage",
    "action_type",
    "intrinsic",
    "seed",
    "num_processes",
    "num_local_steps",
    "num_epochs",
    "batch_size",
    "lr",
    "int_coef",
    "ext_coef",
    "int_first_visit",
    "beta",
    "policy_network",
    "snd_network",
)


def weights_only(state: dict, half: bool = False, intrinsic: bool = True) -> dict:
    """The parts of a training checkpoint ``state`` that playing and plotting need (``KEPT``), with the
    intrinsic module's optimizer states emptied (its ``set_state_dict`` then starts fresh optimizers).
    The module's sampling generator state stays: a few hundred bytes that ``set_state_dict`` expects.

    ``half``: the policy's float32 weights stored as float16 (half their bytes; loading widens them back,
    ``common.run.checkpoint.widen``; the rounding stays). ``intrinsic=False``: the intrinsic module left
    out (the agent plays; drawing its novelty then needs the training checkpoint). Both are for agents
    whose networks exceed ``MAX_BYTES`` otherwise (the SND authors' Montezuma policy network: 33 MB)."""
    out = {k: state[k] for k in KEPT if k in state and (intrinsic or k != "intrinsic")}
    if intrinsic:
        from common.run.checkpoint import without_optimizers

        out["intrinsic"] = without_optimizers(out.get("intrinsic") or {})
    if half:
        from common.run.checkpoint import cast

        out["policy"] = {k: cast(v, "float32", "float16") for k, v in out["policy"].items()}
        out["half"] = 1
    out["zoo"] = 1
    return out


def play_once(game: str, path: str, seed: int = 0, output: str = "", policy: str = "greedy") -> dict:
    """Play ``path`` once with the game's own ``<game>/play.py`` (``--policy greedy|sample``); returns its result."""
    games.spec_of(game)  # a known game
    play = importlib.import_module(f"{game}.play").main
    argv = ["--checkpoint", path, "--seed", str(seed), "--policy", policy]
    if output:
        return play(argv + ["--output", output])
    with tempfile.TemporaryDirectory() as tmp:
        return play(argv + ["--output", os.path.join(tmp, "episode.mp4")])


def card_result(result: dict) -> dict:
    """What a card records of a greedy episode: every number ``play`` printed, rounded."""
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items() if isinstance(v, (int, float))}


def export(
    game: str,
    checkpoint: str,
    name: str,
    hours=None,
    note: str = "",
    zoo: str = ZOO,
    seed: int = 0,
    gif: bool = False,
    policy: str = "greedy",
    commit: str = "",
    half: bool = False,
    intrinsic: bool = True,
) -> dict:
    """Write ``zoo/<name>.pdparams`` (weights only) and ``zoo/<name>.json`` (its card) from a training
    checkpoint of ``game``; returns the card. The card's episode (``policy`` greedy or sample, ``seed``)
    is played here; with ``gif`` it is also written as ``zoo/<name>.gif`` (``common.envs.video.gif_from_mp4``).
    ``commit`` is the one the agent was trained from (default: the checkpoint's first ``code_commits``
    entry, the commit its run started from; "unknown" for a checkpoint older than that record; the zoo
    file keeps the whole list). ``half`` and ``intrinsic``: ``weights_only``'s; the card says what the
    file holds (``weights``)."""
    from common.run.checkpoint import check_compatible, load_checkpoint, save_checkpoint
    from common.run.device import set_device
    from common.run.runtime import code_commit

    spec = games.spec_of(game)
    set_device("cpu")  # the weights only pass through: no GPU context for them on a paddlepaddle-gpu machine
    state = load_checkpoint(checkpoint, required=("policy", "config"), game=spec.name)
    check_compatible(state, spec.name, {}, checkpoint)
    path = os.path.join(zoo, name + ".pdparams")
    save_checkpoint(path, weights_only(state, half, intrinsic))
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        os.remove(path)
        raise ValueError(f"{path} would be {size / 2**20:.1f} MB: a zoo file may be at most {MAX_BYTES / 2**20:.0f} MB")
    cfg = spec.config_cls.from_dict(state["config"])
    with tempfile.TemporaryDirectory() as tmp:
        mp4 = os.path.join(tmp, "episode.mp4")
        result = card_result(play_once(game, path, seed, mp4, policy))
        if gif:
            from common.envs.video import gif_from_mp4

            gif_from_mp4(mp4, os.path.join(zoo, name + ".gif"))
    card = {
        "name": name,
        "game": game,
        "level": spec.level_name(cfg),
        "file": os.path.basename(path),
        "megabytes": round(size / 2**20, 2),
        "weights": ("policy in float16" if half else "policy")
        + (", intrinsic module" if intrinsic and "intrinsic" in state else ""),
        "settings": {k: state["config"][k] for k in CARD_SETTINGS if k in state["config"]},
        "agent_steps": int(state.get("global_step", state.get("env_steps", 0))),
        "updates": int(state["update"]) if "update" in state else None,
        "hours_on_2_core_cpu": hours,
        "trained_at_commit": commit or (state.get("code_commits") or ["unknown"])[0],
        "exported_at_commit": code_commit(),
        "episode": {"policy": policy, "seed": seed, **result},
        "play": f"python {game}/play.py --checkpoint zoo/{os.path.basename(path)}"
        + (f" --policy {policy} --seed {seed}" if policy != "greedy" else ""),
        "gif": name + ".gif" if gif else None,
        "note": note,
    }
    with open(os.path.join(zoo, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(card, f, indent=1)
        f.write("\n")
    return card


class CardError(ValueError):
    """A zoo card that is not what ``export`` writes: refused, naming the card and the entry."""


MAX_CARD_BYTES = 64 * 1024


def check_card(card, path: str, zoo: str = ZOO) -> dict:
    """``card`` if it is a card as ``export`` writes one (the types and ranges the notebooks, the table and
    the zoo test rely on, ``file`` a plain name of a file inside ``zoo``); else ``CardError`` naming ``path``."""

    def need(ok, entry, accepted):
        if not ok:
            raise CardError(f"zoo card {path}: entry {entry!r} is invalid: expected {accepted}")

    def number(v, lo=0.0, hi=1e13):
        return type(v) in (int, float) and lo <= v <= hi

    need(isinstance(card, dict), "(the card)", "a JSON object")
    need(card.get("game") in games.names(), "game", f"one of {', '.join(games.names())}")
    for key in ("name", "level", "file", "play", "note"):
        need(isinstance(card.get(key, ""), str) and len(card.get(key, "")) <= 1000, key, "a string")
    name = card.get("file", "")
    need(
        name.endswith(".pdparams") and os.path.basename(name) == name and not name.startswith("."),
        "file",
        "a plain .pdparams file name",
    )
    need(os.path.isfile(os.path.join(zoo, name)), "file", f"a file in {zoo}")
    need(number(card.get("megabytes"), 0, MAX_BYTES / 2**20 + 1), "megabytes", "a size in MB up to the zoo's limit")
    need(type(card.get("agent_steps")) is int and 0 <= card["agent_steps"] < 10**13, "agent_steps", "an int >= 0")
    hours = card.get("hours_on_2_core_cpu")
    need(hours is None or number(hours, 0, 1e5), "hours_on_2_core_cpu", "null or hours >= 0")
    need(isinstance(card.get("settings"), dict), "settings", "an object")
    ep = card.get("episode")
    need(isinstance(ep, dict), "episode", "an object")
    need(ep.get("policy") in ("greedy", "sample"), "episode/policy", "greedy or sample")
    need(type(ep.get("seed")) is int and 0 <= ep["seed"] < 2**31, "episode/seed", "an int seed")
    need(type(ep.get("steps")) is int and 0 <= ep["steps"] <= 10**7, "episode/steps", "an int >= 0")
    for key, value in ep.items():
        need(key in ("policy",) or value is None or number(value, -1e9, 1e9), f"episode/{key}", "a number")
    return card


def cards(zoo: str = ZOO) -> list[dict]:
    """Every card in ``zoo``, by name, each checked (``check_card``)."""
    if not os.path.isdir(zoo):
        return []
    out = []
    for entry in sorted(os.listdir(zoo)):
        if entry.endswith(".json"):
            path = os.path.join(zoo, entry)
            if os.path.getsize(path) > MAX_CARD_BYTES:
                raise CardError(f"zoo card {path} is larger than {MAX_CARD_BYTES // 1024} KB: not a card")
            try:
                with open(path, encoding="utf-8") as f:
                    card = json.load(f, parse_constant=lambda c: None)
            except (ValueError, UnicodeDecodeError) as e:
                raise CardError(f"zoo card {path} is not JSON ({type(e).__name__})") from None
            out.append(check_card(card, path, zoo))
    return out


def agents_of(game: str, zoo: str = ZOO) -> list[dict]:
    """The cards of ``game``'s agents, those trained with curiosity first (the notebooks play the first)."""
    return sorted(
        (c for c in cards(zoo) if c["game"] == game), key=lambda c: c["settings"].get("intrinsic", "none") == "none"
    )


TABLE_START, TABLE_END = "<!-- zoo-table:start -->", "<!-- zoo-table:end -->"


def _episode(card) -> str:
    """What a card's greedy episode does, in a few words."""
    ep = card["episode"]
    if card["game"] == "mario":
        flag = "reaches the flag" if ep.get("flag") else "no flag"
        return f"{flag}, x_pos {ep.get('x_pos', 0):.0f}, {ep['steps']} steps"
    if card["game"] == "pong":
        return f"{ep.get('points_for', 0):.0f}:{ep.get('points_against', 0):.0f}, return {ep['return']:.3g}"
    if card["game"] == "montezuma":
        return f"score {ep.get('score', 0):.0f}, rooms {ep.get('rooms', '?')}, {ep['steps']} steps"
    return f"{'succeeds' if ep.get('success') else 'fails'} in {ep['steps']} steps, return {ep['return']:.3g}"


def markdown_table(zoo: str = ZOO) -> str:
    """The zoo as a markdown table (README and zoo/README.md carry it between ``TABLE_START`` and ``TABLE_END``)."""
    rows = [
        "| agent | game, level | method | agent steps | hours (2-core CPU) | its episode (policy, seed) | MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cards(zoo):
        hours = "-" if c["hours_on_2_core_cpu"] is None else f"{c['hours_on_2_core_cpu']:.2f}"
        method = c["settings"].get("intrinsic", "?")
        method = "PPO" if method == "none" else f"PPO + {method.upper()}"
        authors = [
            part
            for key, part in (("snd_network", "networks"), ("policy_network", "policy"))
            if c["settings"].get(key) == "authors"
        ]
        if authors:
            method += f" (SND authors' {' and '.join(authors)})"
        if c["game"] == "pong":  # the SND article's agents
            method = {"dqn": "Double DQN", "dqn-e0": "Double DQN, epsilon 0", "snd": "Double DQN + SND-V"}.get(
                c["settings"].get("agent"), "Double DQN"
            )
        rows.append(
            f"| `zoo/{c['file']}` | {c['game']} {c['level']} | {method} | {c['agent_steps']:,} | {hours} "
            f"| {_episode(c)} ({c['episode']['policy']}, seed {c['episode']['seed']}) | {c['megabytes']} |"
        )
    return "\n".join(rows)


def replace_table(text: str, table: str) -> str:
    """``text`` with the block between ``TABLE_START`` and ``TABLE_END`` replaced by ``table``."""
    a, b = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    return text[:a] + "\n" + table + "\n" + text[b:]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="write a zoo file and its card from a training checkpoint")
    e.add_argument("--game", required=True, choices=games.names())
    e.add_argument("--checkpoint", required=True, help="a .pdparams checkpoint written by train.py")
    e.add_argument("--name", required=True, help="the zoo entry's name: zoo/<name>.pdparams and zoo/<name>.json")
    e.add_argument("--hours", type=float, default=None, help="wall hours its training took on the 2-core machine")
    e.add_argument("--note", default="", help="where it comes from, in a sentence")
    e.add_argument("--zoo", default=ZOO, help="the zoo folder")
    e.add_argument("--seed", type=int, default=0, help="the greedy episode's seed (Montezuma's sticky actions)")
    e.add_argument("--gif", action="store_true", help="also write the card's episode as zoo/<name>.gif")
    e.add_argument(
        "--commit",
        default="",
        help="the commit the agent was trained from (default: the one its run started from, as its checkpoint records)",
    )
    e.add_argument(
        "--policy",
        default="greedy",
        choices=("greedy", "sample"),
        help="how the card's episode is played (play.py --policy): greedy, or sampled with --seed",
    )
    e.add_argument(
        "--half",
        action="store_true",
        help="store the policy's weights as float16 (half the bytes; the card's episode is played from the file)",
    )
    e.add_argument(
        "--no-intrinsic",
        action="store_true",
        help="leave the intrinsic module out (the agent plays; play.py --plot then needs the training checkpoint)",
    )
    sub.add_parser("table", help="rewrite the zoo table in README.md, README_cn.md and zoo/README.md from the cards")
    args = p.parse_args(argv)
    if args.command == "table":
        for path in ("README.md", "README_cn.md", os.path.join("zoo", "README.md")):
            path = os.path.join(ROOT, path)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(replace_table(text, markdown_table()))
            print("rewrote the zoo table of", path)
        return
    if not all(c.isalnum() or c in "-_." for c in args.name) or args.name.startswith("."):
        p.error(f"--name {args.name!r} is invalid: expected letters, digits, '-', '_' or '.' (a plain file name)")
    from common.run.device import require_paddle

    require_paddle()  # quietly, before anything else imports it (a missing compiler cache is no news here)
    from common.ppo.play import check_play_args
    from common.run.config import check_writable
    from common.run.errors import UsageError

    if args.hours is not None and not 0 <= args.hours < float("inf"):
        p.error(f"--hours {args.hours} is invalid: expected the run's wall hours, a number >= 0")
    check_play_args(p, args, positive=(), paths=())  # the episode's --seed, as play.py checks it
    try:  # all before the weights are written: a refused export leaves nothing behind
        check_writable(args.zoo, "--zoo")
    except UsageError as e:
        p.error(str(e))
    from common.run.checkpoint import CheckpointError

    try:
        card = export(
            args.game,
            args.checkpoint,
            args.name,
            args.hours,
            args.note,
            args.zoo,
            args.seed,
            args.gif,
            args.policy,
            args.commit,
            args.half,
            not args.no_intrinsic,
        )
    except CheckpointError as e:  # one line naming the file, as every loader's refusal
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(card, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
