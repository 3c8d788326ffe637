"""SND-STD's score losses, forward + backward: the Paddle ops against ``common.cpu.stdim_losses`` (numpy).

The two paths alternate in rounds (ABAB...) in one process on the same tensors, so both see the
same machine; the ratio is what counts on a shared machine. Sizes are those of a target step:
N consecutive pairs (MiniGrid: a quarter of a 512-sample minibatch, 25 locations of 32 channels;
Atari-like frames: the 512-pair cap of the authors' minibatch, 49 locations of 64 channels).

    python benchmarks/stdim_losses.py              # both sizes, 5 rounds (~1 min of one core)
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
from common.intrinsic.snd import stdim_features, stdim_scores, stdim_terms  # noqa: E402

#: name -> (pairs N, feature size D, map channels C, map side H = W)
SIZES = {"minigrid": (128, 128, 32, 5), "atari": (512, 512, 64, 7)}


def make_inputs(n, d, c, side, seed=0):
    rng = np.random.default_rng(seed)
    paddle.seed(seed)
    arrays = [rng.normal(size=s).astype(np.float32) for s in ((n, d), (n, c, side, side), (n, c, side, side))]
    return arrays, paddle.nn.Linear(d, c), paddle.nn.Linear(c, c)


def step(arrays, gl, ll, fast: bool) -> None:
    """One forward + backward of global_local + local_local + score_sq on fresh leaf tensors."""
    xs = [paddle.to_tensor(a, stop_gradient=False) for a in arrays]
    if fast:
        losses = cpu.stdim_losses(*stdim_features(*xs, gl, ll))
    else:
        terms = stdim_terms(*stdim_scores(*xs, gl, ll), xs[0])
        losses = (terms["global_local"], terms["local_local"], terms["score_sq"])
    (losses[0] + losses[1] + 1e-4 * losses[2]).backward()
    for p in (*gl.parameters(), *ll.parameters()):
        p.clear_gradient()


def measure(size: str, rounds: int, reps: int) -> dict:
    arrays, gl, ll = make_inputs(*SIZES[size])
    times = {"paddle": [], "numpy": []}
    for _ in range(rounds):
        for name, fast in (("paddle", False), ("numpy", True)):
            step(arrays, gl, ll, fast)  # warm
            t0 = time.process_time()
            for _ in range(reps):
                step(arrays, gl, ll, fast)
            times[name].append(1000 * (time.process_time() - t0) / reps)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="ABAB rounds per size")
    p.add_argument("--reps", type=int, default=10, help="forward + backward passes per path and round")
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="which target-step sizes")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.reps < 1:
        p.error(f"--rounds {args.rounds} / --reps {args.reps}: expected positive integers")
    paddle.set_device("cpu")
    print("| size | Paddle ops, CPU ms | numpy, CPU ms | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for size in args.sizes:
        r = measure(size, args.rounds, args.reps)
        print(f"| {size} {SIZES[size]} | {r['paddle']:.2f} | {r['numpy']:.2f} | {r['paddle'] / r['numpy']:.2f}x |")


if __name__ == "__main__":
    main()
