"""MiniGrid env steps per second with MiniGrid's own ``gen_obs`` and with ``gridworld.fast_view``.

One ``GridEnv`` per suite task, random actions, the two views alternating in rounds on the same
env (ABAB...), so both see the same machine; the ratio is what counts on a shared machine.

    python benchmarks/gridworld_view.py                 # 4 tasks x 3 rounds x 2 x 5,000 steps (~1 min)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gridworld import fast_view  # noqa: E402
from gridworld.env import GridEnv  # noqa: E402

TASKS = (
    "MiniGrid-DoorKey-5x5-v0",
    "MiniGrid-DoorKey-8x8-v0",
    "MiniGrid-KeyCorridorS3R2-v0",
    "MiniGrid-KeyCorridorS3R3-v0",
)


def steps_per_second(env: GridEnv, steps: int, rng: np.random.Generator) -> float:
    env.reset(seed=int(rng.integers(1 << 30)))
    t = time.perf_counter()
    for _ in range(steps):
        _, _, done, _ = env.step(int(rng.integers(7)))
        if done:
            env.reset()
    return steps / (time.perf_counter() - t)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5_000, help="env steps per timing")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per task")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'task':32s} {'MiniGrid gen_obs':>17s} {'fast_view':>10s} {'ratio':>6s}   (env steps/s, medians)")
    for task in TASKS:
        env = GridEnv(task)
        own, fast = [], []
        for _ in range(args.rounds):
            env.unwrapped.__dict__.pop("gen_obs")  # MiniGrid's method again
            own.append(steps_per_second(env, args.steps, rng))
            fast_view.install(env.unwrapped)
            fast.append(steps_per_second(env, args.steps, rng))
        a, b = statistics.median(own), statistics.median(fast)
        print(f"{task:32s} {a:17,.0f} {b:10,.0f} {b / a:5.2f}x")
        env.close()


if __name__ == "__main__":
    main()
