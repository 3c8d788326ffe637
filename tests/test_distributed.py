"""Data-parallel training (common/run/distributed.py): no-ops in one process, and a real 2-rank CPU launch
(``paddle.distributed.launch --nproc_per_node 2``, gloo on loopback) of a tiny gridworld run:
bit-identical replicas after every update, a NaN on one rank rolled back on both, only rank 0 writes,
a killed rank ends the others."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from common.intrinsic.normalize import RunningMeanStd
from common.run.checkpoint import CheckpointError
from common.run.distributed import NO_SYNC, Agreement, SilentLogger, World, combine_moments

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPER = os.path.join(ROOT, "tests", "distributed_run.py")
TINY = [
    "--num-processes",
    "4",
    "--num-local-steps",
    "16",
    "--batch-size",
    "2",
    "--num-epochs",
    "1",
    "--obs-norm-steps",
    "2",
    "--histogram-interval",
    "1",
    "--embedding-interval",
    "1",
    "--num-threads",
    "2",
]
DIGEST = re.compile(r"DIGEST rank=(\d) update=(\d+) params=(\w+) stats=(\w+) rollout=(\w+) kept=(\w+)")


# ------------------------------------------------------------------ one process: nothing changes
def test_one_process_is_rank_0_of_1_and_every_hook_is_a_no_op():
    world = World()
    assert (world.size, world.rank, world.is_main, world.distributed) == (1, 0, True, False)
    assert world.cores() == (os.cpu_count() or 1)  # two ranks on one machine: half the cores each
    assert World(2, 1, local_size=2).cores() == max(1, (os.cpu_count() or 1) // 2)
    assert world.any(True) and not world.any(False) and world.all(True) and not world.all(False)
    episodes = [{"episode": {"r": 1.0}, "final_observation": np.zeros(3)}]
    assert world.gather_episodes(episodes) is episodes
    rng = np.random.default_rng(3)
    assert world.own_stream(rng) is rng
    assert world.gradient_sync("policy") is NO_SYNC
    assert NO_SYNC([], True) == Agreement(step=True, finite=True)
    assert NO_SYNC([], False) == Agreement(step=False, finite=False)
    assert NO_SYNC([], True, has_data=False) == Agreement(step=False, finite=True)
    mean, var = np.ones(3), np.full(3, 2.0)
    assert world.pooled_moments(mean, var, 5) == (mean, var, 5)
    silent = SilentLogger()
    assert silent.scalar("a", 1.0, 2) is None and silent.any_new_method(1) is None and silent.last == {}


def test_other_ranks_draw_their_own_random_numbers():
    first, second = World(2, 0).own_stream(np.random.default_rng(5)), World(2, 1).own_stream(np.random.default_rng(5))
    assert first.random() == np.random.default_rng(5).random()  # rank 0: the single-process stream
    assert first.random() != second.random()


def test_pooled_moments_are_those_of_the_batches_together():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=k, size=(n, 3)) for k, n in enumerate((5, 11, 2))]
    mean, var, count = combine_moments([(b.mean(0), b.var(0), len(b)) for b in batches])
    together = np.concatenate(batches)
    np.testing.assert_allclose(mean, together.mean(0), rtol=1e-12)
    np.testing.assert_allclose(var, together.var(0), rtol=1e-12)
    assert count == len(together)
    # a synced RunningMeanStd sees every rank's batch: as if it had been fed all of them
    synced, plain = RunningMeanStd((3,)), RunningMeanStd((3,))
    synced.sync = lambda m, v, n: combine_moments([(m, v, n), (batches[1].mean(0), batches[1].var(0), 11)])
    synced.update(batches[0])
    plain.update(np.concatenate(batches[:2]))
    np.testing.assert_allclose(synced.mean, plain.mean, rtol=1e-12)
    np.testing.assert_allclose(synced.var, plain.var, rtol=1e-12)


def test_gradient_sync_averages_over_the_ranks_that_had_a_loss():
    """GradientSync with the all-reduce replaced by the sum with another rank's buffer."""
    import paddle

    from common.run.distributed import GradientSync

    class TwoRanks(World):
        other = None  # the other rank's (gradient, finite, has_data)

        def _all_reduce(self, tensor, what, op=None, group=None):
            grad, finite, has_data = self.other
            weight = 1.0 if finite and has_data else 0.0
            tensor.set_value(tensor + paddle.to_tensor([*(grad * weight), weight, 0.0 if finite else 1.0]))
            return tensor

    layer = paddle.nn.Linear(2, 1, bias_attr=False)
    world = TwoRanks(2, 0)
    sync = GradientSync(world, None, "policy")

    def step(mine, other, finite=True, has_data=True, other_finite=True, other_data=True):
        layer.clear_gradients()
        if mine is not None:
            (layer.weight * paddle.to_tensor(np.reshape(mine, (2, 1)).astype("float32"))).sum().backward()
        world.other = (np.asarray(other, np.float32), other_finite, other_data)
        agreed = sync(layer.parameters(), finite, has_data)
        return agreed, layer.weight.grad.numpy().ravel().tolist() if layer.weight.grad is not None else None

    assert step([1.0, 2.0], [3.0, 6.0]) == (Agreement(True, True), [2.0, 4.0])  # the mean
    assert step([1.0, 2.0], [3.0, 6.0], other_data=False) == (Agreement(True, True), [1.0, 2.0])  # mine alone
    assert step(None, [3.0, 6.0], has_data=False)[0] == Agreement(True, True)  # the other rank's step
    assert step(None, [3.0, 6.0], has_data=False)[1] == [3.0, 6.0]
    assert step([1.0, 2.0], [3.0, 6.0], other_finite=False)[0] == Agreement(False, False)  # nobody steps
    assert step(None, [0.0, 0.0], has_data=False, other_data=False)[0] == Agreement(False, True)
    fresh = paddle.nn.Linear(2, 1, bias_attr=False)  # no gradient yet at all (before its first step)
    world.other = (np.asarray([3.0, 6.0], np.float32), True, True)
    assert sync(fresh.parameters(), True, has_data=False) == Agreement(True, True)
    assert fresh.weight.grad.numpy().ravel().tolist() == [3.0, 6.0]
    assert sync.seconds > 0


def test_checkpoints_of_another_world_size_are_refused_unless_allowed():
    world = World()
    world.check_checkpoint({"world_size": 1}, "a.pdparams", allow_change=False)
    world.check_checkpoint({}, "old.pdparams", allow_change=False)  # before world sizes were recorded: 1
    with pytest.raises(CheckpointError, match="a run of 2 data-parallel ranks; this run has 1.*--allow-world-size"):
        world.check_checkpoint({"world_size": 2}, "b.pdparams", allow_change=False)
    world.check_checkpoint({"world_size": 2}, "b.pdparams", allow_change=True)


# ------------------------------------------------------------------ two ranks on loopback
# One xdist worker runs every launch in turn: two launches never share the machine (or a port search)
TWO_RANKS = pytest.mark.xdist_group("two_ranks")


def launch(tmp_path, flags, name="r", **env):
    """Start ``paddle.distributed.launch --nproc_per_node 2`` on tests/distributed_run.py."""
    cmd = [
        sys.executable,
        "-m",
        "paddle.distributed.launch",
        "--nproc_per_node",
        "2",
        "--log_dir",
        str(tmp_path / "launch"),
        HELPER,
        *TINY,
        *flags,
        "--log-path",
        str(tmp_path / "runs"),
        "--run-name",
        name,
    ]
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", **env}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def rank_log(tmp_path, rank: int) -> str:
    path = tmp_path / "launch" / f"workerlog.{rank}"
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.mark.slow
@TWO_RANKS
def test_two_ranks_stay_bit_identical_and_only_rank_0_writes(tmp_path):
    proc = launch(
        tmp_path,
        [
            "--intrinsic",
            "snd-v",  # the policy's, the predictor's and the SND target's gradients are averaged
            "--num-global-steps",
            "384",  # 3 updates of 2 ranks x 4 envs x 16 steps
            "--eval-interval",
            "1",
            "--no-eval-in-background",
            "--video-interval",
            "2",
            "--save-interval",
            "1",
        ],
        DIST_TEST_NAN_UPDATE="2",  # rank 1 alone has a NaN loss in update 2: both ranks roll it back
    )
    out, _ = proc.communicate(timeout=300)
    logs = [rank_log(tmp_path, r) for r in (0, 1)]
    assert proc.returncode == 0, out[-3000:] + logs[0][-2000:] + logs[1][-2000:]
    digests = [{int(m[1]): m[2:] for m in DIGEST.findall(log)} for log in logs]
    assert sorted(digests[0]) == sorted(digests[1]) == [1, 2, 3], logs
    for update in (1, 2, 3):
        params0, stats0, rollout0, kept0 = digests[0][update]
        params1, stats1, rollout1, kept1 = digests[1][update]
        assert (params0, stats0, kept0) == (params1, stats1, kept1), update
        assert kept0 == ("False" if update == 2 else "True"), update
        assert rollout0 != rollout1, "both ranks collected the same observations: their envs share seeds"
    assert digests[0][2][0] == digests[0][1][0]  # update 2 rolled back: the state after update 1
    assert digests[0][3][0] != digests[0][2][0]
    writes = [re.search(r"WRITES rank=\d count=(\d+)", log) for log in logs]
    assert int(writes[0][1]) > 0 and int(writes[1][1]) == 0, logs[1][-2000:]
    run = tmp_path / "runs" / "r"
    assert (run / "videos" / "eval_000002.mp4").exists() and (run / "metrics.jsonl").exists()

    # the checkpoint records the world size; one rank refuses it unless asked
    from common.ppo.trainer import Trainer
    from common.run.checkpoint import load_checkpoint
    from gridworld.train import SPEC, GridConfig

    ckpt = str(run / "models" / "gridworld_DoorKey-5x5_3.pdparams")
    state = load_checkpoint(ckpt)
    assert state["world_size"] == 2 and state["global_step"] == 384
    # every rank's episodes and first-visit gate memory (4 envs each, rank order) and its own filter and streams
    assert len(state["env_state"]) == len(state["gate_memory"]) == 8 and len(state["rank_state"]) == 2
    filters = [r["filter"] for r in state["rank_state"]]
    np.testing.assert_array_equal(filters[0], state["int_filter"]["rewems"])
    assert not np.array_equal(filters[0], filters[1]) and state["rank_state"][1]["rngs"][0] != state["rng"]
    cfg = dict(num_processes=4, num_local_steps=16, batch_size=2, intrinsic="snd-v", resume=ckpt)
    cfg.update(log_path=str(tmp_path / "one"))
    with pytest.raises(CheckpointError, match="written by a run of 2 data-parallel ranks; this run has 1"):
        Trainer(SPEC, GridConfig(**cfg))
    trainer = Trainer(SPEC, GridConfig(**cfg, allow_world_size_change=True, num_global_steps=512))
    # 384 of 512 steps done; one rank steps 64 per update: 2 updates left, not 512 // 64 - 3 = 5
    assert trainer.update == 3 and trainer.num_updates == 5
    trainer.close()


@pytest.mark.slow
@TWO_RANKS
def test_inverse_dynamics_modules_stay_identical_over_two_ranks(tmp_path):
    """ICM's encoder and heads (one layer, ``networks()``) start from rank 0's weights and their
    gradients are averaged: after every update both ranks hold the same parameters."""
    proc = launch(tmp_path, ["--intrinsic", "icm", "--num-global-steps", "256", "--eval-interval", "0"])
    out, _ = proc.communicate(timeout=300)
    logs = [rank_log(tmp_path, r) for r in (0, 1)]
    assert proc.returncode == 0, out[-3000:] + logs[0][-2000:] + logs[1][-2000:]
    digests = [{int(m[1]): m[2:] for m in DIGEST.findall(log)} for log in logs]
    assert sorted(digests[0]) == sorted(digests[1]) == [1, 2], logs
    for update in (1, 2):
        assert digests[0][update][:2] == digests[1][update][:2], update  # parameters and statistics
    assert digests[0][2][0] != digests[0][1][0]  # and they trained


@pytest.mark.slow
@TWO_RANKS
def test_a_killed_rank_ends_the_others_with_a_clear_error(tmp_path):
    proc = launch(tmp_path, ["--num-global-steps", "100000", "--eval-interval", "0", "--save-interval", "0"], "k")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "update=2 " not in rank_log(tmp_path, 1):
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.5)
        pid = int(re.search(r"PID rank=1 pid=(\d+)", rank_log(tmp_path, 1))[1])
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out, _ = proc.communicate(timeout=90)  # no hang: the launcher and rank 0 end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert time.monotonic() - killed < 60
    assert proc.returncode != 0
    log = rank_log(tmp_path, 0)
    assert "RankLostError" in log and "another rank stopped" in log, log[-3000:]
    assert "was saved to" in log and "continue with --resume" in log, log[-3000:]  # rank 0 kept the last update


def test_the_scaling_benchmark_reports_saved_results(tmp_path, capsys):
    """benchmarks/scaling.py --report-only: the report and the projection from a saved run."""
    import json

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import scaling

    rounds = [{"subproc_env_only": 1600.0, "ray_env_only": 1100.0, "subproc_collect": 850.0, "ray_collect": 740.0}]
    ranks = {
        "1": {"steps_per_second": 145.0, "update_seconds": 4.8, "policy_sync_seconds": 0.0, "transfer_seconds": 0.0},
        "2": {"steps_per_second": 204.0, "update_seconds": 7.1, "policy_sync_seconds": 1.0, "transfer_seconds": 0.33},
    }
    for r in ranks.values():
        r.update(minibatches=16, params=1_407_476, predictor_params=2_203_296)
    envs = {"rounds": rounds, "ray_start_seconds": 7.8, "subproc_start_seconds": 8.2, "ray_start_seconds_actors": 6.3}
    envs["policy_seconds_per_sample"] = 3.4e-4
    saved = tmp_path / "scaling.json"
    settings = {"workers": 4, "envs": 32, "rank_envs": 8, "report_only": "", "json": "x.json"}  # measured on 4 workers
    saved.write_text(json.dumps({"envs": envs, "ranks": ranks, "args": settings}))
    scaling.main(["--report-only", str(saved)])
    out = capsys.readouterr().out
    assert "one core steps 400 envs/s" in out  # 1,600 steps/s over the run's 4 workers, not this machine's cores
    assert "Ray / subprocess 0.87" in out and "2 ranks 204 (x1.41" in out and "4.6% transfer" in out
    assert [line.split()[0] for line in out.splitlines() if line.strip()[:1].isdigit()] == ["8", "64", "1024"]


@pytest.mark.slow
@TWO_RANKS
def test_mario_runs_on_two_ranks_and_resumes_on_two(tmp_path):
    """``paddle.distributed.launch --nproc_per_node 2 mario/train.py``: docs/distributed.md's command, twice (the
    second resumes the first's update-2 checkpoint on the same world size and matches its update 4)."""
    from common.run.checkpoint import load_checkpoint

    flags = ["--world", "1", "--stage", "1", "--num-processes", "1", "--num-workers", "-1", "--num-local-steps"]
    flags += ["8", "--batch-size", "2", "--num-epochs", "1", "--obs-norm-steps", "1", "--eval-interval", "0"]
    flags += ["--video-interval", "0", "--histogram-interval", "0", "--embedding-interval", "0", "--save-interval"]
    flags += ["1", "--log-path", str(tmp_path / "runs")]

    def mario(run_name, steps, *extra):
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir"]
        cmd += [str(tmp_path / f"launch_{run_name}"), os.path.join(ROOT, "mario", "train.py"), *flags]
        cmd += ["--num-global-steps", str(steps), "--run-name", run_name, *extra]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        logs = [(tmp_path / f"launch_{run_name}" / f"workerlog.{r}").read_text() for r in (0, 1)]
        assert res.returncode == 0, res.stdout[-2000:] + "".join(logs)[-4000:]
        return tmp_path / "runs" / run_name / "models", logs

    unbroken, _ = mario("a", 64)  # 4 updates of 2 ranks x 1 env x 8 steps, a checkpoint after each
    state = load_checkpoint(str(unbroken / "mario_1_1_2.pdparams"))
    assert state["world_size"] == 2 and state["global_step"] == 32 and state["update"] == 2
    assert [len(s["env"]["actions"]) >= 16 for s in state["env_state"]] == [True, True]  # each rank's, in rank order
    resumed, logs = mario("b", 64, "--resume", str(unbroken / "mario_1_1_2.pdparams"))
    assert all("continuing the checkpoint's 1 episodes in progress" in log for log in logs)  # each its own
    state = load_checkpoint(str(resumed / "mario_1_1_4.pdparams"))
    assert state["world_size"] == 2 and state["global_step"] == 64 and state["update"] == 4
    # the resumed run is the unbroken one: the same episodes, the same weights
    other = load_checkpoint(str(unbroken / "mario_1_1_4.pdparams"))
    assert [s["length"] for s in state["env_state"]] == [s["length"] for s in other["env_state"]]
    for name, weight in state["policy"].items():
        np.testing.assert_array_equal(np.asarray(weight), np.asarray(other["policy"][name]), err_msg=name)


def test_pong_refuses_to_run_under_the_launcher(tmp_path):
    """Pong's DQN trainer is one process: started as 2 ranks it says so (exit 2) instead of two copies
    writing one run folder."""
    env = {**os.environ, "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": "0"}
    cmd = [sys.executable, os.path.join(ROOT, "pong", "train.py"), "--log-path", str(tmp_path / "runs")]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "runs in one process" in res.stderr and "2 ranks" in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()
