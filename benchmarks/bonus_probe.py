"""Does a MiniGrid run's intrinsic reward tell a step onto a new cell from a revisit? What does each action earn?

    python benchmarks/bonus_probe.py runs/exploration/<run>/models/<file>.pdparams [--episodes 20]

Plays ``--episodes`` episodes of the checkpoint's task with a fixed random walk (90 % turn or move
forward, 10 % the other actions; the same walk for every checkpoint with the same ``--seed``), scores
each episode with the checkpoint's intrinsic module as ``gridworld/play.py --plot`` does (a fresh
episodic memory per episode, no first-visit gate), and prints the mean raw reward of three kinds of
step: onto a cell the episode had not visited, onto a visited cell (a step into a wall included),
and a turn in place. The walk, not the trained policy, so that every module is probed on the same
episodes. Read it by kind of module: an episodic one (E3B) should pay far more for new cells than
for revisits; a module that scores novelty across all of training (RND, NovelD, ICM) may well pay
less for them, since the cells a random walk reaches near the start are the ones a trained agent
has seen most, while bumping into walls is a transition it rarely makes.

It then prints the same steps by action: how many, the share whose view did not change (a toggle
facing a wall, a pickup with nothing in front), the mean raw reward, and the mean gated reward
(raw x the first-visit gate of training, which pays nothing for a view already seen in the
episode): what each action earns the agent before the reward's scaling.

    python benchmarks/bonus_probe.py CHECKPOINT --along [--episodes 40]

``--along`` asks where in an episode the reward is paid (docs/exploration.md, suite v4, E3B): it plays
the checkpoint's own policy (actions sampled, as in training) and a uniformly random policy, each for
``--episodes`` episodes, scores each episode as above and applies the run's training gate, then prints
for each policy: the share of an episode's paid reward in its first 10 steps, the paid reward per step
in steps 0-9 and after step 100, the raw reward of a view new to the episode after step 100 over one
new in steps 0-9, the paid reward per episode, and how often the key is picked up and a locked door
opened; then for each policy how many directions its episodes' features fill (``spectrum``: an ellipse
in features of fewer dimensions than an episode has places cannot pay every new place; suite v6).
``--part episodic`` or ``--part novelty`` scores the same episodes with one factor of an E3B x RND run
(docs/exploration.md, suite v5).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from common.intrinsic import intrinsic_for_run  # noqa: E402
from common.intrinsic.base import episode_rewards  # noqa: E402
from common.intrinsic.normalize import FirstVisitGate  # noqa: E402
from common.ppo.play import load_policy  # noqa: E402
from gridworld.env import ACTION_NAMES, make_env, state_key  # noqa: E402
from gridworld.train import SPEC  # noqa: E402

KINDS = ("new", "revisit", "turn")
TURNS = (0, 1)  # MiniGrid's left, right
WALK = (0, 1, 2)  # left, right, forward


def walk(checkpoint: str, episodes: int = 20, seed: int = 0, max_steps: int = 0) -> dict:
    """Every step of the random-walk episodes, scored by the checkpoint's intrinsic module.

    Returns arrays over all steps: ``action`` int64, ``kind`` str (new / revisit / turn), ``raw`` float32
    (the module's raw reward), ``gate`` float32 (1 where the step's observation is new to the episode: the
    first-visit gate of training, ``FirstVisitGate``, which counts whole observations), ``same_view`` bool
    (the policy's view did not change)."""
    state, cfg, _ = load_policy(SPEC, checkpoint, "cpu", required=("policy", "intrinsic"))
    module = intrinsic_for_run(SPEC, cfg, SPEC.spaces(cfg)[0])
    module.set_state_dict(state["intrinsic"])  # scoring learns nothing; episode_rewards resets episodic memory
    rng = np.random.default_rng(seed)
    out = {"action": [], "kind": [], "raw": [], "gate": [], "same_view": []}
    for episode in range(episodes):
        env = make_env(cfg.env_id, frame_stack=cfg.frame_stack, observation=cfg.observation)
        try:
            obs = env.reset(seed=seed + episode)
            stacks, actions, kinds = [obs], [], []
            seen = {tuple(int(v) for v in env.unwrapped.agent_pos)}
            for _ in range(max_steps or env.unwrapped.max_steps):
                a = int(rng.choice(WALK)) if rng.random() < 0.9 else int(rng.integers(3, 7))
                obs, _, done, info = env.step(a)
                kinds.append("turn" if a in TURNS else ("revisit" if info["agent_pos"] in seen else "new"))
                seen.add(info["agent_pos"])
                stacks.append(obs)
                actions.append(a)
                if done:
                    break
        finally:
            env.close()
        stacks = np.stack(stacks)
        views = stacks[1:, None]
        gate = FirstVisitGate(1).gate_rollout(stacks[:-1, None], views, np.zeros((len(actions), 1), np.float32))
        out["action"] += actions
        out["kind"] += kinds
        out["raw"] += [float(v) for v in episode_rewards(module, stacks, np.array(actions))]
        out["gate"] += gate[:, 0].tolist()
        views = stacks[:, : 3 * cfg.frame_stack]  # the policy's (view+full: not the grid after them)
        out["same_view"] += [bool(np.array_equal(before, after)) for before, after in zip(views[:-1], views[1:])]
    types = {"action": np.int64, "kind": str, "raw": np.float32, "gate": np.float32, "same_view": bool}
    return {k: np.asarray(v, dtype=types[k]) for k, v in out.items()}


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def by_kind(steps: dict) -> dict:
    """{kind: (mean raw reward, steps)} of ``walk``'s steps, for kind in new / revisit / turn."""
    return {k: (_mean(steps["raw"][steps["kind"] == k]), int(np.sum(steps["kind"] == k))) for k in KINDS}


def probe(checkpoint: str, episodes: int = 20, seed: int = 0, max_steps: int = 0) -> dict:
    """``by_kind`` of a fresh ``walk``."""
    return by_kind(walk(checkpoint, episodes, seed, max_steps))


def by_action(steps: dict) -> dict:
    """{action name: (steps, share whose view did not change, mean raw reward, mean gated reward)} of
    ``walk``'s steps: the gated reward (raw x first-visit gate) is what training pays, before scaling."""
    out = {}
    for a, name in enumerate(ACTION_NAMES):
        sel = steps["action"] == a
        if sel.any():
            gated = steps["raw"][sel] * steps["gate"][sel]
            out[name] = (int(sel.sum()), _mean(steps["same_view"][sel]), _mean(steps["raw"][sel]), _mean(gated))
    return out


def new_views(stacks: np.ndarray, view_channels: int) -> np.ndarray:
    """bool[L]: which steps of an episode's observations uint8[L+1, C, H, W] show a view new to the episode,
    reading its first ``view_channels`` channels (the policy's views; with ``--observation view+full`` the
    grid after them does not count)."""
    views = stacks[:, None, :view_channels]
    zeros = np.zeros((len(stacks) - 1, 1), np.float32)
    return FirstVisitGate(1).gate_rollout(views[:-1], views[1:], zeros)[:, 0] > 0


def play(
    checkpoint: str, episodes: int = 40, seed: int = 0, policy: bool = True, max_steps: int = 0, part: str = ""
) -> list:
    """Episodes of the checkpoint's policy (``policy``; actions sampled) or of a uniformly random one, each
    scored by its intrinsic module: a list of dicts with ``raw`` and ``paid`` float32[L] (raw x the run's
    training gate, before scaling), ``new_view`` bool[L] (the step's view is new to the episode), ``key``
    (the key was picked up), ``door`` (a locked door was opened), ``features`` float32[L+1, D] (the module's
    features of each observation) and ``places`` (distinct cell and direction pairs). ``part``: score with
    that part of a composite module instead (E3B x RND: ``episodic`` or ``novelty``); the episodes are the same."""
    import paddle

    from common.cpu import unit_floats

    state, cfg, net = load_policy(SPEC, checkpoint, "cpu", required=("policy", "intrinsic"))
    module = intrinsic_for_run(SPEC, cfg, SPEC.spaces(cfg)[0])
    module.set_state_dict(state["intrinsic"])
    if part:
        if not hasattr(module, part):
            raise SystemExit(f"--part {part}: the module {module.name!r} has no such part")
        module = getattr(module, part)
    gated = cfg.int_first_visit or module.first_visit_gate
    by_state = cfg.first_visit_key == "state"
    rng, out = np.random.default_rng(seed), []
    for episode in range(episodes):
        env = make_env(cfg.env_id, frame_stack=cfg.frame_stack, state_keys=by_state, observation=cfg.observation)
        try:
            obs = env.reset(seed=seed + episode)
            doors = [d for d in env.unwrapped.grid.grid if d is not None and d.type == "door" and d.is_locked]
            stacks, actions, keys, key = [obs], [], [state_key(env.unwrapped) if by_state else 0], False
            places = {(*env.unwrapped.agent_pos, env.unwrapped.agent_dir)}
            for _ in range(max_steps or env.unwrapped.max_steps):
                if policy:
                    with paddle.no_grad():
                        logits = net(unit_floats(obs[None]))[0].numpy()[0].astype(np.float64)
                    probs = np.exp(logits - logits.max())
                    a = int(rng.choice(len(probs), p=probs / probs.sum()))
                else:
                    a = int(rng.integers(len(ACTION_NAMES)))
                obs, _, done, info = env.step(a)
                stacks.append(obs)
                actions.append(a)
                keys.append(info.get("state_key", 0))
                key = key or info["carrying"] == "key"
                places.add((*env.unwrapped.agent_pos, env.unwrapped.agent_dir))
                if done:
                    break
            door = any(d.is_open for d in doors)
        finally:
            env.close()
        stacks, n = np.stack(stacks), len(actions)
        zeros = np.zeros((n, 1), np.float32)
        new_view = new_views(stacks, 3 * cfg.frame_stack)
        if by_state:
            k = np.asarray(keys, np.int64)[:, None]
            gate = FirstVisitGate(1).gate_rollout(k[:-1], k[1:], zeros)[:, 0]
        elif gated:  # training's gate counts whole observations
            gate = FirstVisitGate(1).gate_rollout(stacks[:-1, None], stacks[1:, None], zeros)[:, 0]
        else:
            gate = np.ones(n, np.float32)
        raw = np.asarray(episode_rewards(module, stacks, np.array(actions)), np.float32)
        features, places = module.features(stacks), len(places)
        out.append(
            {
                "raw": raw,
                "paid": raw * gate,
                "new_view": new_view,
                "key": key,
                "door": door,
                "features": features,
                "places": places,
            }
        )
    return out


def spectrum(episodes: list) -> dict:
    """How many directions the features of ``play``'s episodes fill: ``participation_ratio`` (of an episode's
    second moment M = sum of phi phi^T: (tr M)^2 / tr(M^2)), ``dims_90`` (eigen-directions of M holding 90 %
    of its trace) and ``places`` (distinct cell and direction pairs of the episode), each a mean over episodes."""
    ratios, dims = [], []
    for e in episodes:
        phi = np.asarray(e["features"], np.float64)
        lam = np.clip(np.linalg.eigvalsh(phi.T @ phi), 0.0, None)[::-1]
        if lam.sum() <= 0:  # features all zero: they fill no direction
            ratios.append(0.0)
            dims.append(0)
            continue
        ratios.append(lam.sum() ** 2 / (lam**2).sum())
        dims.append(int(np.searchsorted(np.cumsum(lam) / lam.sum(), 0.9 - 1e-9)) + 1)  # rounding of equal ones
    return {
        "participation_ratio": _mean(ratios),
        "dims_90": _mean(dims),
        "places": _mean([e["places"] for e in episodes]),
    }


def along(episodes: list, early: int = 10, late: int = 100) -> dict:
    """``play``'s episodes summed up: ``early_share`` (of each episode's paid reward, in its first ``early``
    steps; mean over episodes), ``paid_early`` and ``paid_late`` (paid reward per step in steps < ``early``
    and >= ``late``), ``new_view_late_over_early`` (raw reward of new views late over early),
    ``paid_per_episode``, ``key`` and ``door`` (shares of episodes)."""

    def steps(key, lo, hi, only_new=False):
        vals = [e[key][lo:hi][e["new_view"][lo:hi]] if only_new else e[key][lo:hi] for e in episodes]
        return np.concatenate(vals) if vals else np.zeros(0, np.float32)

    shares = [float(e["paid"][:early].sum() / e["paid"].sum()) for e in episodes if e["paid"].sum() > 0]
    new_early, new_late = _mean(steps("raw", 0, early, True)), _mean(steps("raw", late, None, True))
    return {
        "early_share": _mean(shares),
        "paid_early": _mean(steps("paid", 0, early)),
        "paid_late": _mean(steps("paid", late, None)),
        "new_view_late_over_early": new_late / new_early if new_early else float("nan"),
        "paid_per_episode": _mean([float(e["paid"].sum()) for e in episodes]),
        "key": _mean([e["key"] for e in episodes]),
        "door": _mean([e["door"] for e in episodes]),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a gridworld/train.py checkpoint of a run with an intrinsic module")
    p.add_argument("--episodes", type=int, default=20, help="random-walk episodes to score")
    p.add_argument("--seed", type=int, default=0, help="the walk's and the episodes' seed")
    p.add_argument("--along", action="store_true", help="where in an episode the reward is paid: policy vs random")
    p.add_argument(
        "--part",
        default="",
        choices=("", "episodic", "novelty"),
        help="with --along: score with one part of a composite module (e3b-rnd: episodic or novelty)",
    )
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes {args.episodes} is invalid: expected a positive integer")
    if args.along:
        result = {}
        features = {}
        for name, policy in (("policy", True), ("random", False)):
            episodes = play(args.checkpoint, args.episodes, args.seed, policy, part=args.part)
            result[name], features[name] = along(episodes), spectrum(episodes)
            print(name, ", ".join(f"{k} {v:.4g}" for k, v in result[name].items()))
        for name, values in features.items():
            print(f"{name} features:", ", ".join(f"{k} {v:.3g}" for k, v in values.items()))
        ratio = result["random"]["paid_per_episode"] / result["policy"]["paid_per_episode"]
        print(f"random / policy, paid reward per episode: {ratio:.2f}")
        return result
    steps = walk(args.checkpoint, args.episodes, args.seed)
    result = by_kind(steps)
    for kind, (mean, n) in result.items():
        print(f"{kind:8s} mean raw reward {mean:.4g} over {n} steps")
    print(f"new / revisit: {result['new'][0] / result['revisit'][0]:.2f}")
    print("\nby action: steps, share with an unchanged view, mean raw reward, mean gated reward (raw x first visit)")
    for name, (n, same, raw, gated) in by_action(steps).items():
        print(f"{name:8s} {n:6d}  {same:5.2f}  {raw:.4g}  {gated:.4g}")
    return result


if __name__ == "__main__":
    main()
