"""The collection policy on each ``--inference`` engine, in one run.

1. Forward pass of each game's policy (uint8 frames in, numpy out) at several batch sizes, one
   thread, with a busy process on another core (as an env worker would be): median ms for the
   dygraph network (``--inference dygraph``), the native engine (``native``, the default:
   oneDNN primitives + numpy, ``common/cpu/native.py``), the fp32 predictor (no flag: measured for comparison) and the
   bf16 predictor (``onednn-bf16``), and each one's speed-up over dygraph.
2. ``Trainer.collect`` with each engine, alternating, in one trainer with the default vector
   env (one worker per core): Montezuma 8 and 128 envs, Mario 6 envs; agent steps/s and the
   ratio against dygraph. (The predictors only take batches of at least
   ``InferenceEngine.min_batch``; smaller ones stay on dygraph, see ``common/cpu/predictor.py``.)
   "dygraph" is the training network, whose convolutions run on oneDNN as well when
   ``common.cpu.onednn`` is available.

    python benchmarks/inference.py                  # ~4 min
    python benchmarks/inference.py --skip collect
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODES = ("dygraph", "native", "fp32", "bf16")  # --inference dygraph, native, onednn-bf16; fp32: unquantised


def _busy(stop):
    x = 0
    while not stop.is_set():
        x += 1


def _median_ms(fn, repeats: int) -> float:
    fn(), fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def forward_table(batches, repeats: int) -> None:
    import numpy as np
    import paddle

    from common.cpu import unit_floats as obs_to_tensor
    from common.cpu.native import NativeEngine
    from common.cpu.predictor import InferenceEngine
    from common.run.device import set_device
    from mario.model import MARIO
    from montezuma.model import RNDPolicy

    set_device("cpu")
    stop = mp.Event()
    busy = mp.Process(target=_busy, args=(stop,), daemon=True)
    busy.start()
    try:
        print(
            f"{'network':<10} {'batch':>5} "
            + " ".join(f"{m + ' ms':>11}" for m in MODES)
            + " "
            + " ".join(f"{m + ' speed-up':>16}" for m in MODES[1:])
        )
        for name, net in (("Mario", MARIO(4, 7)), ("Montezuma", RNDPolicy(4, 18))):
            net.eval()
            engines = {p: InferenceEngine(net, (4, 84, 84), precision=p) for p in ("fp32", "bf16")}
            engines["native"] = NativeEngine(net, (4, 84, 84))
            for b in batches:
                x = np.random.default_rng(b).integers(0, 256, (b, 4, 84, 84), dtype=np.uint8)

                def dygraph():
                    with paddle.no_grad():
                        return [t.numpy() for t in net(obs_to_tensor(x))]

                ms = {"dygraph": _median_ms(dygraph, repeats)}
                for p, e in engines.items():
                    ms[p] = _median_ms(lambda e=e: e(x), repeats)
                print(
                    f"{name:<10} {b:>5} "
                    + " ".join(f"{ms[m]:>11.2f}" for m in MODES)
                    + " "
                    + " ".join(f"{ms['dygraph'] / ms[m]:>15.2f}x" for m in MODES[1:]),
                    flush=True,
                )
            for e in engines.values():
                e.close()
    finally:
        stop.set()
        busy.join()


def collect_table(game: str, num_envs: int, steps: int, rounds: int) -> None:
    import tempfile

    from common.cpu.native import NativeEngine
    from common.cpu.predictor import InferenceEngine
    from common.ppo.actor import Actor
    from common.ppo.trainer import Trainer
    from common.run.config import parse_config

    if game == "mario":
        from mario.train import SPEC

        argv = ["--world", "4", "--stage", "4"]
    else:
        from montezuma.train import SPEC

        argv = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(
            SPEC.config_cls,
            argv
            + [
                "--num-processes",
                str(num_envs),
                "--num-local-steps",
                str(steps),
                "--obs-norm-steps",
                "2",
                "--log-path",
                tmp,
            ],
        )
        tr = Trainer(SPEC, cfg)
        try:
            engines = {
                "dygraph": None,
                "native": NativeEngine(tr.policy, tr.obs_shape),
                "fp32": InferenceEngine(tr.policy, tr.obs_shape, precision="fp32"),
                "bf16": InferenceEngine(tr.policy, tr.obs_shape, precision="bf16"),
            }
            tr.envs = tr._make_envs()
            obs = tr.init_obs_normalizer(tr.envs.reset())
            rates = {m: [] for m in MODES}
            for _ in range(rounds):
                for m in MODES:
                    tr.actor = Actor(tr.policy, engines[m])  # refreshed on first use, inside the timing, as in training
                    with tr.math_threads():
                        t = time.perf_counter()
                        obs, _ = tr.collect(obs)
                        rates[m].append(steps * num_envs / (time.perf_counter() - t))
            med = {m: statistics.median(r) for m, r in rates.items()}
            print(
                f"{game:<10} {num_envs:>4} envs  "
                + "  ".join(f"{m} {med[m]:>7.0f}" for m in MODES)
                + "  "
                + "  ".join(f"{m}/dygraph {med[m] / med['dygraph']:.2f}x" for m in MODES[1:]),
                flush=True,
            )
            tr.actor = Actor(tr.policy)
            for m in ("fp32", "bf16"):
                engines[m].close()
        finally:
            tr.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 32, 64, 128])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3, help="alternating collection rounds per setting")
    p.add_argument("--skip", nargs="*", default=[], choices=("forward", "collect"))
    args = p.parse_args(argv)
    print(f"CPU cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    if "forward" not in args.skip:
        print("\n# policy forward, uint8 frames -> numpy, one thread, another core busy")
        forward_table(args.batches, args.repeats)
    if "collect" not in args.skip:
        print("\n# Trainer.collect, agent steps/s (median of the alternating rounds)")
        collect_table("montezuma", 8, 128, args.rounds)
        collect_table("montezuma", 128, 32, args.rounds)
        collect_table("mario", 6, 64, args.rounds)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
