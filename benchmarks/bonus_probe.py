"""Does a MiniGrid run's intrinsic reward tell a step onto a new cell from a revisit?

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
from common.ppo.play import load_policy  # noqa: E402
from gridworld.env import GridEnv, make_env  # noqa: E402
from gridworld.train import SPEC  # noqa: E402

TURNS = (0, 1)  # MiniGrid's left, right
WALK = (0, 1, 2)  # left, right, forward


def probe(checkpoint: str, episodes: int = 20, seed: int = 0, max_steps: int = 0) -> dict:
    """{kind: (mean raw reward, steps)} for kind in new / revisit / turn."""
    state, cfg, _ = load_policy(SPEC, checkpoint, "cpu", required=("policy", "intrinsic"))
    module = intrinsic_for_run(SPEC, cfg, GridEnv.observation_shape)
    module.set_state_dict(state["intrinsic"])  # scoring learns nothing; episode_rewards resets episodic memory
    rng = np.random.default_rng(seed)
    values = {"new": [], "revisit": [], "turn": []}
    for episode in range(episodes):
        env = make_env(cfg.env_id)
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
        for kind, value in zip(kinds, episode_rewards(module, np.stack(stacks), np.array(actions))):
            values[kind].append(float(value))
    return {k: (float(np.mean(v)) if v else float("nan"), len(v)) for k, v in values.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a gridworld/train.py checkpoint of a run with an intrinsic module")
    p.add_argument("--episodes", type=int, default=20, help="random-walk episodes to score")
    p.add_argument("--seed", type=int, default=0, help="the walk's and the episodes' seed")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes {args.episodes} is invalid: expected a positive integer")
    result = probe(args.checkpoint, args.episodes, args.seed)
    for kind, (mean, n) in result.items():
        print(f"{kind:8s} mean raw reward {mean:.4g} over {n} steps")
    print(f"new / revisit: {result['new'][0] / result['revisit'][0]:.2f}")
    return result


if __name__ == "__main__":
    main()
