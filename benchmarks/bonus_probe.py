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
from gridworld.env import ACTION_NAMES, make_env  # noqa: E402
from gridworld.train import SPEC  # noqa: E402

KINDS = ("new", "revisit", "turn")
TURNS = (0, 1)  # MiniGrid's left, right
WALK = (0, 1, 2)  # left, right, forward


def walk(checkpoint: str, episodes: int = 20, seed: int = 0, max_steps: int = 0) -> dict:
    """Every step of the random-walk episodes, scored by the checkpoint's intrinsic module.

    Returns arrays over all steps: ``action`` int64, ``kind`` str (new / revisit / turn), ``raw`` float32
    (the module's raw reward), ``gate`` float32 (1 where the step's view is new to the episode: the
    first-visit gate of training, ``FirstVisitGate``), ``same_view`` bool (the view did not change)."""
    state, cfg, _ = load_policy(SPEC, checkpoint, "cpu", required=("policy", "intrinsic"))
    module = intrinsic_for_run(SPEC, cfg, SPEC.spaces(cfg)[0])
    module.set_state_dict(state["intrinsic"])  # scoring learns nothing; episode_rewards resets episodic memory
    rng = np.random.default_rng(seed)
    out = {"action": [], "kind": [], "raw": [], "gate": [], "same_view": []}
    for episode in range(episodes):
        env = make_env(cfg.env_id, frame_stack=cfg.frame_stack)
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
        out["same_view"] += [bool(np.array_equal(before, after)) for before, after in zip(stacks[:-1], stacks[1:])]
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a gridworld/train.py checkpoint of a run with an intrinsic module")
    p.add_argument("--episodes", type=int, default=20, help="random-walk episodes to score")
    p.add_argument("--seed", type=int, default=0, help="the walk's and the episodes' seed")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes {args.episodes} is invalid: expected a positive integer")
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
