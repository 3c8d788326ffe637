"""The Double DQN train step on the CPU: plain Paddle against this project's two speed-ups, alternating.

* **Adam**: Paddle's per-parameter Adam against the merged one (``common.optim.adam``), one
  ``step()`` over the Q network's gradients;
* **dense layer**: the 3136 -> 512 layer, forward + backward at batch 32, through Paddle's
  matmul against numpy's BLAS (``common.cpu.linear``);
* **train step**: ``DoubleDQN.learn`` on one batch of 32 (both target forward passes, the
  forward pass with gradients, the backward pass, the Adam step), plain (both speed-ups
  off) against fast (both on), with the convolutions on oneDNN in 2 batch shards either way;
* **two threads**: the same fast train step on two threads as it ran before
  (numpy's BLAS on two threads, the dense layers whole, the two target passes one after
  the other) against now (BLAS on one thread, the dense products split over the shard
  threads, the target passes side by side: ``cpu.together``), and one thread against now.

Each pair runs in rounds (ABAB...) in one process on the same inputs, so both see the same
machine; the ratio is what counts on a shared machine. Times are wall-clock ms (what sets train
steps per second) and the process' CPU ms (every thread).

    python benchmarks/dqn_step.py              # 5 rounds (~2 min)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import paddle  # noqa: E402

from common import cpu  # noqa: E402
from common.cpu import blas, linear, sharding  # noqa: E402
from common.dqn.learner import KERAS_ADAM_EPSILON, DoubleDQN, DQNConvNet  # noqa: E402

BATCH = 32


def learner(merged_adam: bool) -> DoubleDQN:
    paddle.seed(0)
    d = DoubleDQN(DQNConvNet(4, 6), DQNConvNet(4, 6), lr=5e-4, discount=0.99, target_update_interval=2000)
    if not merged_adam:
        d.optimizer = paddle.optimizer.Adam(
            learning_rate=5e-4, parameters=d.q_net.parameters(), epsilon=KERAS_ADAM_EPSILON
        )
    return d


def batch(seed=0):
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 2, (2, BATCH, 4, 84, 84), dtype=np.uint8) * 255  # binarized, as Pong's
    return (
        frames[0],
        rng.integers(0, 6, BATCH),
        rng.choice([-1.0, 0.0, 1.0], BATCH).astype(np.float32),
        np.zeros(BATCH, np.float32),
        frames[1],
    )


def timed(fn, reps):
    fn()  # warm
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return 1000 * (time.perf_counter() - t0) / reps, 1000 * (time.process_time() - c0) / reps


def alternate(pair: dict, rounds: int, reps: int) -> dict:
    """{name: (median wall ms, median CPU ms)} of the two callables in ``pair``, run in turn."""
    times = {name: ([], []) for name in pair}
    for _ in range(rounds):
        for name, (fn, setup) in pair.items():
            setup()
            wall, cpu_ms = timed(fn, reps)
            times[name][0].append(wall)
            times[name][1].append(cpu_ms)
    return {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in times.items()}


def dense_pair():
    paddle.seed(1)
    layer = paddle.nn.Linear(3136, 512)
    x = paddle.randn([BATCH, 3136])
    x.stop_gradient = False
    g = paddle.randn([BATCH, 512])

    def fwd_bwd(fast):
        y = linear.linear(layer, x) if fast else layer(x)
        y.backward(g)
        layer.clear_gradients()
        x.clear_grad()

    return {
        "Paddle matmul": (lambda: fwd_bwd(False), lambda: None),
        "numpy BLAS": (lambda: fwd_bwd(True), lambda: None),
    }


def adam_pair():
    nets = {}
    for merged in (False, True):
        d = learner(merged)
        x = paddle.rand([BATCH, 4, 84, 84])
        d.q_net(x).sum().backward()  # gradients to step on (kept: step() does not clear them)
        nets[merged] = d.optimizer
    return {"per-parameter": (nets[False].step, lambda: None), "merged": (nets[True].step, lambda: None)}


def step_pair():
    args = batch()
    plain, fast = learner(False), learner(True)
    default_macs = linear.MIN_MACS

    def use(numpy_dense):
        linear.MIN_MACS = default_macs if numpy_dense else 1 << 62

    return {
        "plain": (lambda: plain.learn(*args), lambda: use(False)),
        "fast": (lambda: fast.learn(*args), lambda: use(True)),
    }


def threads_pair():
    """The fast step three ways: on two threads as before this version, on two threads now, on one thread."""
    args = batch()
    d = learner(True)
    default_size, together = linear.MIN_SHARD_SIZE, cpu.together

    def use(threads, before=False):
        sharding.set_count(threads)
        blas.set_threads(2 if before else 1)
        linear.MIN_SHARD_SIZE = 1 << 62 if before else default_size
        cpu.together = (lambda fns: [fn() for fn in fns]) if before else together

    def reset():
        use(2)

    return {
        "2 threads, before": (lambda: d.learn(*args), lambda: use(2, before=True)),
        "2 threads, now": (lambda: d.learn(*args), lambda: use(2)),
        "1 thread": (lambda: d.learn(*args), lambda: use(1)),
    }, reset


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="ABAB rounds per comparison")
    p.add_argument("--reps", type=int, default=20, help="calls per side and round")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.reps < 1:
        p.error(f"--rounds {args.rounds} / --reps {args.reps}: expected positive integers")
    paddle.set_device("cpu")
    cpu.tune_allocator()
    print("| part | baseline | wall ms | CPU ms | fast | wall ms | CPU ms | wall ratio |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
    default_macs = linear.MIN_MACS
    try:
        with cpu.threads(2):
            for part, make in (("Adam step (Q net)", adam_pair), ("dense 3136->512, fwd+bwd", dense_pair)):
                (a, (aw, ac)), (b, (bw, bc)) = alternate(make(), args.rounds, args.reps).items()
                print(f"| {part} | {a} | {aw:.2f} | {ac:.2f} | {b} | {bw:.2f} | {bc:.2f} | {aw / bw:.2f}x |")
            r = alternate(step_pair(), args.rounds, max(1, args.reps // 2))
            (aw, ac), (bw, bc) = r["plain"], r["fast"]
            row = f"| train step (batch {BATCH}) | plain | {aw:.1f} | {ac:.1f} | fast | {bw:.1f} | {bc:.1f} |"
            print(f"{row} {aw / bw:.2f}x |")
            pair, reset = threads_pair()
            try:
                r = alternate(pair, args.rounds, max(1, args.reps // 2))
            finally:
                reset()
            (nw, nc) = r["2 threads, now"]
            for base in ("2 threads, before", "1 thread"):
                (aw, ac) = r[base]
                row = f"| train step (batch {BATCH}) | {base} | {aw:.1f} | {ac:.1f} | 2 threads, now |"
                print(f"{row} {nw:.1f} | {nc:.1f} | {aw / nw:.2f}x |")
    finally:
        linear.MIN_MACS = default_macs


if __name__ == "__main__":
    main()
