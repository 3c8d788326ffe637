"""Environment throughput: agent steps per second with random actions.

For each game: the raw single env (no vector env), the in-process vector env, and
``SubprocVecEnv`` at several workers x envs-per-worker layouts. Each configuration is
built, reset, warmed up, and then timed over ``--steps`` agent steps (summed over its
envs). Start-up time (spawning workers and building the envs) is reported apart.

    python benchmarks/env_throughput.py                       # both games, defaults (~2-3 min on 2 cores)
    python benchmarks/env_throughput.py --games montezuma --steps 20000 --transport both
    python benchmarks/env_throughput.py --games noop --transport both   # the vector env's own cost

``--transport both`` also times each subprocess layout with observations pickled
through pipes instead of shared memory. The last lines compare 2 workers x 16 envs
with 32 one-env processes (Montezuma) - on a machine with few cores, hosting several
envs per worker wins because a step costs one message per worker, not per env.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common.envs.inprocess import InProcessVecEnv  # noqa: E402
from common.envs.subproc import SubprocVecEnv  # noqa: E402

# (label, kind, workers, envs per worker); kind: raw | inproc | subproc
CONFIGS = {
    "mario": [
        ("raw env", "raw", 0, 1),
        ("in-process 1", "inproc", 0, 1),
        ("1x1", "subproc", 1, 1),
        ("2x1", "subproc", 2, 1),
        ("2x3", "subproc", 2, 3),
        ("6x1", "subproc", 6, 1),
    ],
    "montezuma": [
        ("raw env", "raw", 0, 1),
        ("in-process 8", "inproc", 0, 8),
        ("1x8", "subproc", 1, 8),
        ("2x4", "subproc", 2, 4),
        ("8x1", "subproc", 8, 1),
        ("2x16", "subproc", 2, 16),
        ("32x1", "subproc", 32, 1),
    ],
    # a do-nothing env: what the vector env itself costs (IPC, pickling, copies)
    "noop": [
        ("raw env", "raw", 0, 1),
        ("in-process 32", "inproc", 0, 32),
        ("1x1", "subproc", 1, 1),
        ("2x16", "subproc", 2, 16),
        ("32x1", "subproc", 32, 1),
        ("2x64", "subproc", 2, 64),
    ],
}
DEFAULT_STEPS = {"mario": 1500, "montezuma": 8000, "noop": 50000}


class NoopEnv:
    """Returns the same uint8 [4, 84, 84] frame; episodes of 1000 steps."""

    observation_shape = (4, 84, 84)
    num_actions = 18

    def __init__(self):
        self.obs = np.full(self.observation_shape, 7, dtype=np.uint8)
        self.t = 0

    def reset(self, seed=None):
        self.t = 0
        return self.obs.copy()

    def step(self, action):
        self.t += 1
        return self.obs.copy(), 0.0, self.t >= 1000, {"t": self.t}

    def close(self):
        pass


def env_factory(game: str):
    if game == "mario":
        from mario.env import make_env

        return functools.partial(make_env, world=1, stage=1, action_type="simple")
    if game == "montezuma":
        from montezuma.env import make_env

        return functools.partial(make_env)
    if game == "noop":
        return NoopEnv
    raise ValueError(game)


def time_raw(fn, steps: int, warmup: int, rng) -> tuple[float, float]:
    t0 = time.perf_counter()
    env = fn()
    env.reset(seed=0)
    startup = time.perf_counter() - t0
    try:
        actions = rng.integers(env.num_actions, size=steps + warmup)
        for k in range(steps + warmup):
            if k == warmup:
                t0 = time.perf_counter()
            _, _, done, _ = env.step(int(actions[k]))
            if done:
                env.reset()
        return startup, steps / (time.perf_counter() - t0)
    finally:
        env.close()


def time_vec(venv_ctor, steps: int, warmup: int, rng) -> tuple[float, float]:
    t0 = time.perf_counter()
    venv = venv_ctor()
    try:
        venv.reset()
        startup = time.perf_counter() - t0
        n = venv.num_envs
        iters = max(1, -(-steps // n))
        warm_iters = max(1, -(-warmup // n))
        actions = rng.integers(venv.num_actions, size=(iters + warm_iters, n))
        for k in range(iters + warm_iters):
            if k == warm_iters:
                t0 = time.perf_counter()
            venv.step(actions[k])
        return startup, iters * n / (time.perf_counter() - t0)
    finally:
        venv.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--games",
        nargs="+",
        choices=sorted(CONFIGS),
        default=["mario", "montezuma"],
        help="games to measure (default: mario montezuma); 'noop' is a do-nothing env "
        "that measures the vector env's own overhead",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="agent steps timed per configuration, over all its envs (default: mario 1500, montezuma 8000)",
    )
    parser.add_argument(
        "--warmup", type=float, default=0.1, help="untimed warm-up, as a fraction of --steps (default: 0.1)"
    )
    parser.add_argument(
        "--transport",
        choices=["shm", "pipe", "both"],
        default="shm",
        help="how subprocess workers return observations: shared memory (the "
        "default of SubprocVecEnv), pipes, or time both (default: shm)",
    )
    parser.add_argument(
        "--start-method",
        default="spawn",
        choices=["spawn", "forkserver", "fork"],
        help="multiprocessing start method for the workers (default: spawn)",
    )
    parser.add_argument(
        "--configs",
        nargs="+",
        default=None,
        metavar="LABEL",
        help="only these configuration labels, e.g. 2x16 32x1 'raw env'",
    )
    args = parser.parse_args(argv)

    transports = ["shm", "pipe"] if args.transport == "both" else [args.transport]
    rng = np.random.default_rng(0)
    print(
        f"cpus: {os.cpu_count()}  start method: {args.start_method}  "
        f"load average at start: {os.getloadavg()[0]:.1f} (other processes skew the figures)"
    )
    header = f"{'game':<10} {'config':<13} {'workers':>7} {'envs':>5} {'transport':>9} {'start s':>8} {'steps/s':>9}"
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, str, str], float] = {}
    for game in args.games:
        fn = env_factory(game)
        steps = args.steps or DEFAULT_STEPS[game]
        warmup = max(1, int(steps * args.warmup))
        for label, kind, workers, per_worker in CONFIGS[game]:
            if args.configs and label not in args.configs:
                continue
            n = max(1, workers) * per_worker
            for transport in transports if kind == "subproc" else ["-"]:
                if kind == "raw":
                    startup, sps = time_raw(fn, steps, warmup, rng)
                elif kind == "inproc":
                    startup, sps = time_vec(lambda: InProcessVecEnv([fn] * n, seed=0), steps, warmup, rng)
                else:
                    startup, sps = time_vec(
                        lambda: SubprocVecEnv(
                            [fn] * n,
                            num_workers=workers,
                            seed=0,
                            start_method=args.start_method,
                            shared_memory=(transport == "shm"),
                        ),
                        steps,
                        warmup,
                        rng,
                    )
                results[(game, label, transport)] = sps
                print(
                    f"{game:<10} {label:<13} {workers:>7} {n:>5} {transport:>9} {startup:>8.2f} {sps:>9.0f}", flush=True
                )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    for transport in transports:
        a, b = results.get(("montezuma", "2x16", transport)), results.get(("montezuma", "32x1", transport))
        if a and b:
            print(f"montezuma, {transport}: 2 workers x 16 envs / 32 processes x 1 env = {a / b:.2f}x")
    if "pipe" in transports and "shm" in transports:
        for (game, label, transport), sps in results.items():
            if transport == "shm" and (game, label, "pipe") in results:
                print(f"{game} {label}: shm / pipe = {sps / results[(game, label, 'pipe')]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
