"""Scaling out, measured side by side in one run: env workers as Ray actors vs subprocesses, and 1 vs 2
data-parallel ranks (``paddle.distributed.launch``). Results: docs/distributed.md.

    python benchmarks/scaling.py                    # both parts (~5 min on 2 cores)
    python benchmarks/scaling.py --part envs        # subprocess vs Ray vec env only
    python benchmarks/scaling.py --part ranks --updates 4

Part 1, env workers (Montezuma, ``--envs`` envs on ``--workers`` workers, the same layout for both):

* env-only: agent steps/s of ``venv.step`` on the whole vector with random actions, blocks of
  ``--env-steps`` steps;
* collection: agent steps/s of ``Trainer.collect`` (the policy on the native engine, pipelined over
  each worker's two halves), rollouts of ``--steps`` steps.

Both vec envs are alive at once (idle workers cost nothing) and are timed in alternation, ABBA, for
``--repeats`` rounds: on a shared machine the load drifts, so the ratio is taken within each round
and the median reported. A local Ray instance (started here; start-up reported apart) hosts the actors.

Part 2, data-parallel ranks (Montezuma, RND, ``--rank-envs`` envs x 128 steps per rank, 4 epochs x 4
minibatches): one rank (no launcher: the single-process path) against ``paddle.distributed.launch
--nproc_per_node 2`` on this machine (gloo on loopback). Agent steps/s of every rank together over
``--updates`` updates after a first one, and the share of the update phase spent in the gradient
all-reduces: the transfer alone (the same all-reduces timed back to back after training, ranks in
step) and the time inside the policy's all-reduces during training (``GradientSync.seconds``), which
includes waiting for the slower rank. Two ranks on one machine share its cores (each gets half:
``World.cores``), so they show the cost of data parallelism, not its gain.

The last lines project, from these measurements, what 8, 64 and 1,024 envs would give (the model is
printed with the numbers; docs/distributed.md discusses it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


# ----------------------------------------------------------------------------- part 1: vec envs
def make_trainer(kind: str, envs: int, workers: int, steps: int, log_path: str):
    """A Montezuma trainer (no intrinsic module: collection only) whose envs run on ``kind`` workers."""
    from common.ppo.trainer import Trainer
    from montezuma.train import SPEC, MontezumaConfig

    cfg = MontezumaConfig(
        num_processes=envs,
        num_workers=workers,
        vec_env=kind,
        num_local_steps=steps,
        intrinsic="none",
        eval_interval=0,
        video_interval=0,
        picture_interval=0,
        log_path=log_path,
        run_name=f"collect_{kind}",
    )
    tr = Trainer(SPEC, cfg)
    tr.envs = tr._make_envs()
    return tr


def part_envs(args) -> dict:
    """Both vec envs alive side by side, measured in alternation (ABBA) so that both see the same load."""
    import ray

    from common.envs.ray_actors import connect

    kinds = ("subproc", "ray")
    t = time.perf_counter()
    connect("")
    out = {"ray_start_seconds": time.perf_counter() - t, "rounds": []}
    trainers = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for kind in kinds:
                t = time.perf_counter()
                trainers[kind] = make_trainer(kind, args.envs, args.workers, args.steps, tmp)
                out[f"{kind}_start_seconds" if kind == "subproc" else "ray_start_seconds_actors"] = (
                    time.perf_counter() - t
                )
            rng = np.random.default_rng(0)
            obs = {kind: tr.envs.reset() for kind, tr in trainers.items()}
            for kind, tr in trainers.items():  # warm-up: one short env-only block and one rollout each
                for _ in range(10):
                    tr.envs.step(rng.integers(tr.num_actions, size=args.envs))
                with tr.math_threads():
                    obs[kind], _ = tr.collect(obs[kind])
            tr = trainers["subproc"]  # the policy's forward pass at the pipeline's batch (half a worker's envs)
            half = obs["subproc"][: max(1, args.envs // args.workers // 2)]
            t = time.perf_counter()
            with tr.math_threads():
                for _ in range(20):
                    tr.actor.act(half, rng)
            out["policy_seconds_per_sample"] = (time.perf_counter() - t) / (20 * len(half))
            for r in range(args.repeats):
                rnd = {}
                for kind in kinds if r % 2 == 0 else kinds[::-1]:
                    venv = trainers[kind].envs
                    t = time.perf_counter()
                    for _ in range(args.env_steps):
                        venv.step(rng.integers(venv.num_actions, size=args.envs))
                    rnd[f"{kind}_env_only"] = args.env_steps * args.envs / (time.perf_counter() - t)
                for kind in kinds if r % 2 else kinds[::-1]:
                    tr = trainers[kind]
                    t = time.perf_counter()
                    with tr.math_threads():
                        obs[kind], _ = tr.collect(obs[kind])
                    rnd[f"{kind}_collect"] = args.steps * args.envs / (time.perf_counter() - t)
                print(f"  round {r + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in rnd.items()))
                out["rounds"].append(rnd)
    finally:
        for tr in trainers.values():
            tr.close()
        ray.shutdown()
    return out


# ----------------------------------------------------------------------------- part 2: ranks
def _transfer_seconds(world, sizes, repeats: int = 10) -> float:
    """Seconds of one all-reduce of each float32 buffer size in ``sizes`` back to back, ranks in step
    (a barrier first): the transfer alone, without waiting for a slower rank."""
    import paddle
    import paddle.distributed as dist

    buffers = [paddle.zeros([n], "float32") for n in sizes]
    dist.barrier()
    t = time.perf_counter()
    for _ in range(repeats):
        for b in buffers:
            dist.all_reduce(b)
    return (time.perf_counter() - t) / repeats


def rank_child(argv: list[str]) -> None:
    """One rank of the ranks part (alone, or under paddle.distributed.launch); rank 0 writes JSON."""
    out = argv[argv.index("--out") + 1]
    argv = argv[: argv.index("--out")] + argv[argv.index("--out") + 2 :]
    from common.ppo.trainer import Trainer
    from common.run.config import parse_config
    from montezuma.train import SPEC

    cfg = parse_config(SPEC.config_cls, argv)
    tr = Trainer(SPEC, cfg)
    marks = {"updates": [], "policy_sync": [], "intrinsic_sync": [], "ends": []}
    original = tr._update

    def synced():
        return [getattr(tr.ppo.grad_sync, "seconds", 0.0), getattr(tr.intrinsic.grad_sync, "seconds", 0.0)]

    def timed_update(snapshot):
        before, t = synced(), time.perf_counter()
        losses = original(snapshot)
        marks["updates"].append(time.perf_counter() - t)
        after = synced()
        marks["policy_sync"].append(after[0] - before[0])
        marks["intrinsic_sync"].append(after[1] - before[1])
        marks["ends"].append(time.perf_counter())
        return losses

    tr._update = timed_update
    tr.train()
    sizes = [sum(int(np.prod(p.shape)) for p in net.parameters()) + 2 for net in (tr.policy, tr.intrinsic.predictor)]
    transfer = _transfer_seconds(tr.world, sizes) if tr.world.distributed else 0.0
    if tr.world.is_main:
        ends, n = marks["ends"], len(marks["ends"])
        minibatches = cfg.num_epochs * cfg.batch_size
        result = {
            "world": tr.world.size,
            "steps_per_second": tr.steps_per_update * (n - 1) / (ends[-1] - ends[0]),  # after the first update
            "update_seconds": float(np.mean(marks["updates"][1:])),
            # in the policy's all-reduces (the update's critical path), waiting for the slower rank included
            "policy_sync_seconds": float(np.mean(marks["policy_sync"][1:])),
            "intrinsic_sync_seconds": float(np.mean(marks["intrinsic_sync"][1:])),  # on the side thread
            "transfer_seconds": transfer * minibatches,  # the all-reduces of one update, transfer alone
            "minibatches": minibatches,
            "params": sizes[0] - 2,
            "predictor_params": sizes[1] - 2,
        }
        with open(out, "w") as f:
            json.dump(result, f)


def part_ranks(args) -> dict:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        flags = [
            "--num-envs",
            str(args.rank_envs),
            "--num-workers",
            "1",
            "--num-local-steps",
            "128",
            "--num-epochs",
            "4",
            "--batch-size",
            "4",
            "--obs-norm-steps",
            "4",
            "--eval-interval",
            "0",
            "--video-interval",
            "0",
            "--save-interval",
            "0",
            "--picture-interval",
            "0",
            "--embedding-interval",
            "0",
            "--log-path",
            tmp,
        ]
        env = {**os.environ, "PYTHONPATH": ROOT}
        for world in (1, 2):
            out = os.path.join(tmp, f"world{world}.json")
            steps = ["--num-global-steps", str(args.rank_envs * 128 * world * (args.updates + 1))]
            child = [__file__, "--rank-child", *flags, *steps, "--run-name", f"w{world}", "--out", out]
            if world == 1:
                cmd = [sys.executable, *child]
            else:
                launch = ["-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir", tmp + "/launch"]
                cmd = [sys.executable, *launch, *child]
            t = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                logs = (
                    "".join(
                        open(os.path.join(tmp, "launch", f)).read()[-2000:]
                        for f in sorted(os.listdir(os.path.join(tmp, "launch")))
                        if f.startswith("workerlog")
                    )
                    if world > 1
                    else ""
                )
                raise SystemExit(f"{world} rank(s) failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}{logs}")
            with open(out) as f:
                results[world] = json.load(f)
            results[world]["wall_seconds"] = time.perf_counter() - t
            r = results[world]
            print(
                f"  {world} rank(s): {r['steps_per_second']:.0f} agent steps/s, update {r['update_seconds']:.2f} s, "
                f"in the policy's all-reduces {r['policy_sync_seconds']:.3f} s, "
                f"transfer alone {r['transfer_seconds']:.3f} s"
            )
    return results


# ----------------------------------------------------------------------------- report
def report(res: dict, args) -> None:
    print("\n== results")
    if "envs" in res:
        reps = res["envs"]["rounds"]
        for key, label in (("env_only", "env-only"), ("collect", "collection")):
            ratios = [r[f"ray_{key}"] / r[f"subproc_{key}"] for r in reps]
            sub = np.mean([r[f"subproc_{key}"] for r in reps])
            ray_ = np.mean([r[f"ray_{key}"] for r in reps])
            print(
                f"{label:>11} ({args.envs} envs, {args.workers} workers): subprocess {sub:,.0f} steps/s, "
                f"Ray {ray_:,.0f} steps/s, Ray / subprocess {np.median(ratios):.2f} (median of the rounds: "
                f"{', '.join(f'{x:.2f}' for x in ratios)})"
            )
        e = res["envs"]
        print(
            f"start-up: local Ray instance {e['ray_start_seconds']:.1f} s; trainer with its workers: subprocess "
            f"{e['subproc_start_seconds']:.1f} s, Ray actors {e['ray_start_seconds_actors']:.1f} s"
        )
    if "ranks" in res:
        one, two = res["ranks"][1], res["ranks"][2]
        gain = two["steps_per_second"] / one["steps_per_second"]
        print(
            f"data-parallel, {args.rank_envs} envs x 128 steps per rank: 1 rank {one['steps_per_second']:,.0f} agent "
            f"steps/s, 2 ranks {two['steps_per_second']:,.0f} (x{gain:.2f}; weak scaling: each rank its own envs)"
        )
        print(
            f"all-reduce share of a 2-rank update: {two['transfer_seconds'] / two['update_seconds']:.1%} transfer "
            f"({two['transfer_seconds']:.3f} of {two['update_seconds']:.2f} s: {two['minibatches']} minibatches, each "
            f"all-reducing {one['params']:,} policy and {one['predictor_params']:,} predictor gradients); "
            "time inside the policy's "
            f"all-reduces, waiting for the slower rank included: {two['policy_sync_seconds']:.3f} s "
            f"({two['policy_sync_seconds'] / two['update_seconds']:.1%})"
        )
    project(res, args)


def project(res: dict, args) -> None:
    """What 8, 64 and 1,024 envs would give, from this run's numbers (docs/distributed.md explains the model).

    A, data-parallel ranks with 8 envs each (the measured per-rank load), each on a machine like this one:
    every rank collects and learns on its own cores, in lockstep; the ranks add up, less the all-reduce
    transfer (ring all-reduce: 2 (R - 1) / R times the gradient bytes per rank; measured at R = 2).
    B, one learner fed by Ray env workers (16 envs per CPU core): the learner acts for every env (policy
    forward pass) and learns from every sample; the env workers cost it nothing while they keep up.
    Both ignore the network between machines (measured here on loopback).
    """
    if "envs" not in res or "ranks" not in res:
        return
    rounds = res["envs"]["rounds"]
    env_core = np.mean([r["subproc_env_only"] for r in rounds]) / args.workers  # one core's Montezuma steps/s
    ray_env = np.median([r["ray_env_only"] / r["subproc_env_only"] for r in rounds])
    t_policy = res["envs"]["policy_seconds_per_sample"]
    one, two = res["ranks"][1], res["ranks"][2]
    samples = args.rank_envs * 128
    t_update = one["update_seconds"] / samples  # the learner's update, per sample
    print(
        f"\nprojection (model in the docstring of project(); measured inputs: one core steps {env_core:,.0f} envs/s, "
        f"Ray env-only keeps {ray_env:.2f} of that, policy forward {t_policy * 1e3:.2f} ms and update "
        f"{t_update * 1e3:.2f} ms per sample on this machine's cores, all-reduce transfer "
        f"{two['transfer_seconds']:.3f} s per 2-rank update):"
    )
    head_a = f"{'A: ranks':>8} {'steps/s':>9} {'all-reduce':>10}"
    head_b = f"{'B: env cores':>12} {'env capacity':>12} {'steps/s':>8} {'bound':>7}"
    print(f"{'envs':>6} | {head_a} | {head_b}")
    for n in (8, 64, 1024):
        ranks = max(1, n // args.rank_envs)
        comm = two["transfer_seconds"] * (2 * (ranks - 1) / ranks) if ranks > 1 else 0.0
        per_update = samples / one["steps_per_second"] + comm  # lockstep: one rank's update, plus the transfer
        rate_a = ranks * samples / per_update
        share = comm / (one["update_seconds"] + comm)
        cores = max(1, n // 16)
        env_rate = cores * env_core * ray_env
        learner_rate = 1.0 / (t_policy + t_update)
        rate_b = min(env_rate, learner_rate)
        bound = "envs" if env_rate < learner_rate else "learner"
        row_b = f"{cores:>12} {env_rate:>12,.0f} {rate_b:>8,.0f} {bound:>7}"
        print(f"{n:>6} | {ranks:>8} {rate_a:>9,.0f} {share:>10.1%} | {row_b}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--rank-child":
        return rank_child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "envs", "ranks"), default="all")
    p.add_argument("--envs", type=int, default=32, help="envs of the vec env comparison")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="env workers (processes or actors)")
    p.add_argument("--env-steps", type=int, default=50, help="whole-vector steps of one env-only block")
    p.add_argument("--steps", type=int, default=64, help="steps per env of a timed rollout")
    p.add_argument("--repeats", type=int, default=6, help="rounds: one env-only block and one rollout of each kind")
    p.add_argument("--rank-envs", type=int, default=8, help="envs per rank of the data-parallel comparison")
    p.add_argument("--updates", type=int, default=3, help="timed updates of the data-parallel comparison")
    p.add_argument("--json", default="", help="also write the raw results here")
    p.add_argument("--report-only", default="", metavar="JSON", help="print the report of results saved by --json")
    args = p.parse_args(argv)
    if args.report_only:
        with open(args.report_only) as f:
            res = json.load(f)
        saved = res.pop("args", {})  # the settings of the measured run, not this machine's defaults
        for key, value in saved.items():
            if key not in ("report_only", "json"):
                setattr(args, key, value)
        res["ranks"] = {int(k): v for k, v in res.get("ranks", {}).items()}
        return report(res, args)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (shared: see the ratios)")
    res = {}
    if args.part in ("all", "envs"):
        print(f"== env workers: subprocess vs Ray, Montezuma, {args.envs} envs on {args.workers} workers")
        res["envs"] = part_envs(args)
    if args.part in ("all", "ranks"):
        print(f"== data-parallel ranks: 1 vs 2, Montezuma RND, {args.rank_envs} envs per rank")
        res["ranks"] = part_ranks(args)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    report(res, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**res, "args": vars(args)}, f, indent=2)


if __name__ == "__main__":
    main()
