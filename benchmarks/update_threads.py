"""Threads for the update: 1 vs N, interleaved in one process.

Times one PPO + RND minibatch step (policy forward + backward + Adam, predictor
distillation on its 25 % share) at the Mario minibatch of the tutorial's settings
(6 x 512 / 16 = 192) and at Montezuma's 8 x 128 / 4 = 256, alternating 1 and N threads
so that a change in the machine's load hits both settings alike. ``--lever shards`` (the
trainer's ``--num-threads``) splits each convolution batch into N shards on N threads
(``common/cpu/fused.py``); ``--lever paddle`` sets Paddle's own math threads
(``paddle.base.core.set_num_threads``), which the trainer does not use. ``--lever dense``
compares, both on N shard threads, the dense layers as before (numpy's BLAS on N threads,
each product whole) against now (BLAS on one thread, the products split over the shard
threads: ``common/cpu/linear.py``). Prints the median and minimum per setting.

    python benchmarks/update_threads.py                  # shards, N = os.cpu_count(), 5 rounds
    python benchmarks/update_threads.py --lever paddle --threads 2 --rounds 8 --steps 3
    python benchmarks/update_threads.py --lever dense
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _batch(rng, n, actions):
    import numpy as np

    obs = rng.integers(0, 256, size=(n + 1, 4, 84, 84), dtype=np.uint8)
    return {
        "obs": obs[:-1],
        "next_obs": obs[1:],
        "actions": rng.integers(0, actions, n).astype(np.int64),
        "log_probs": np.full(n, -np.log(actions), np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "ret_ext": rng.normal(size=n).astype(np.float32),
        "ret_int": rng.normal(size=n).astype(np.float32),
        "dones": np.zeros(n, np.float32),
    }


def build(game: str):
    from common.intrinsic import make_intrinsic
    from common.ppo.update import PPO

    if game == "mario":
        from mario.model import MARIO as Policy
        from mario.rnd_model import make_rnd_networks

        actions = 7
    else:
        from montezuma.model import RNDPolicy as Policy
        from montezuma.rnd_model import make_rnd_networks

        actions = 18
    policy = Policy(4, actions)
    ppo = PPO(policy, lr=1e-5, epsilon=0.2, beta=0.01, vf_coef=1.0, max_grad_norm=0.5)
    rnd = make_intrinsic(
        "rnd",
        lambda c: make_rnd_networks(c),
        (4, 84, 84),
        4,
        lr=1e-5,
        update_proportion=0.25,
        max_grad_norm=0.5,
        seed=1,
    )
    return ppo, rnd, actions


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=5, help="alternations of 1 and N threads")
    p.add_argument("--steps", type=int, default=2, help="minibatch steps timed per round and setting")
    p.add_argument("--games", nargs="*", default=["mario:192", "montezuma:256"])
    p.add_argument("--lever", choices=["shards", "paddle", "dense"], default="shards")
    a = p.parse_args(argv)
    if a.threads < 2:
        p.error(f"--threads {a.threads}: expected at least 2 (the comparison is against 1)")

    import numpy as np
    import paddle

    from common.cpu import blas, linear
    from common.cpu.fused import set_num_shards
    from common.run.device import set_device

    set_device("cpu")  # also the trainer's host-allocator tuning
    paddle.seed(0)
    core = paddle.base.core
    set_threads = set_num_shards if a.lever == "shards" else core.set_num_threads
    labels = {1: "1 thread", a.threads: f"{a.threads} threads"}
    if a.lever == "dense":  # "1" is the dense layers as before, "N" as now; both on N shard threads
        split_size, blas_before = linear.MIN_SHARD_SIZE, blas.get_threads()

        def set_threads(setting):
            set_num_shards(a.threads)
            blas.set_threads(a.threads if setting == 1 else 1)
            linear.MIN_SHARD_SIZE = 1 << 62 if setting == 1 else split_size

        labels = {1: "dense as before", a.threads: "dense now"}
    print(f"load average {os.getloadavg()[0]:.2f} at start, {os.cpu_count()} CPUs")
    for spec in a.games:
        game, n = spec.split(":")
        ppo, rnd, actions = build(game)
        batch = _batch(np.random.default_rng(0), int(n), actions)
        rnd.observe(batch["obs"])
        times = {1: [], a.threads: []}
        for r in range(a.rounds + 1):
            for th in (1, a.threads) if r % 2 == 0 else (a.threads, 1):
                set_threads(th)
                t = time.perf_counter()
                for _ in range(a.steps):
                    ppo.step(batch)
                    rnd.update(batch)
                if r:  # round 0 warms both settings up
                    times[th].append((time.perf_counter() - t) / a.steps * 1e3)
        set_threads(1)
        m1, mn = np.median(times[1]), np.median(times[a.threads])
        print(
            f"{game} batch {n}, {a.lever}: {labels[1]} median {m1:.0f} ms (min {min(times[1]):.0f}), "
            f"{labels[a.threads]} median {mn:.0f} ms (min {min(times[a.threads]):.0f}): {m1 / mn:.2f}x"
        )
    if a.lever == "dense":  # as it was
        set_num_shards(1)
        if blas_before is not None:
            blas.set_threads(blas_before)
        linear.MIN_SHARD_SIZE = split_size
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
