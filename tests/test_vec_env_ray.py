"""RayVecEnv (common/envs/ray_actors.py): the VecEnv contract with env workers as Ray actors, on a local Ray
instance that this module starts and stops. Skipped when Ray is not installed (CI installs it)."""

from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest

ray = pytest.importorskip(
    "ray", reason='Ray is not installed: pip install -e ".[distributed]" to run the Ray vec env tests'
)

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)

import vec_env_helpers as H  # noqa: E402

from common.envs.contract import EnvWorkerError  # noqa: E402
from common.envs.factory import make_vec_env  # noqa: E402
from common.envs.inprocess import InProcessVecEnv  # noqa: E402
from common.envs.ray_actors import RayVecEnv  # noqa: E402

# a Ray instance and actor processes; one xdist worker runs every Ray test (tests/test_ray_connect.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A local Ray instance for this module (the actors import tests/vec_env_helpers.py)."""
    path = os.pathsep.join([ROOT, TESTS])
    ray.init(
        address="local",  # a new instance even where the machine runs a cluster (Ray would join it)
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}},
    )
    yield
    ray.shutdown()


def counting(n, episode_len=7):
    return [functools.partial(H.CountingEnv, i, episode_len) for i in range(n)]


def test_same_rollout_as_in_process_whole_and_pipelined():
    """Same seed and actions: identical observations, rewards, dones and infos (auto-resets with
    final_observation and episode), stepping the whole vector or the actors' halves in flight."""
    n, actions = 5, np.random.default_rng(0).integers(3, size=(9, 5))
    with InProcessVecEnv(counting(n, episode_len=3), seed=4) as venv:
        ref = [venv.reset()] + [venv.step(a) for a in actions]
    with make_vec_env(counting(n, episode_len=3), num_workers=2, seed=4, kind="ray") as venv:
        assert isinstance(venv, RayVecEnv) and venv.num_envs == n
        assert venv.observation_shape == H.SHAPE and venv.num_actions == 3
        assert venv.pipeline_groups == [(0, 2), (2, 3), (3, 4), (4, 5)]  # each actor's envs in halves
        got = [venv.reset()]
        for t, a in enumerate(actions):
            if t % 2:
                got.append(venv.step(a))
                continue
            for s, e in venv.pipeline_groups:  # every group in flight at once, then collected
                venv.step_async(a[s:e], s, e)
            parts = [venv.step_wait(s, e) for s, e in venv.pipeline_groups]
            got.append(
                tuple(np.concatenate([p[k] for p in parts]) for k in range(3)) + ([i for p in parts for i in p[3]],)
            )
    np.testing.assert_array_equal(got[0], ref[0])
    assert got[0].dtype == np.uint8
    for (o, r, d, i), (o2, r2, d2, i2) in zip(got[1:], ref[1:]):
        assert o.dtype == np.uint8 and r.dtype == np.float32 and d.dtype == np.bool_
        np.testing.assert_array_equal(o, o2)
        np.testing.assert_array_equal(r, r2)
        np.testing.assert_array_equal(d, d2)
        for x, y in zip(i, i2):
            assert x.keys() == y.keys()
            assert x.get("episode") == y.get("episode")
            if "final_observation" in x:
                np.testing.assert_array_equal(x["final_observation"], y["final_observation"])
    assert any(d.any() for _, _, d, _ in ref[1:])  # auto-reset was exercised


def test_an_env_exception_names_the_env_and_carries_its_traceback():
    fns = counting(3) + [functools.partial(H.FaultyEnv, 3, fail_at=2, mode="raise")]
    with RayVecEnv(fns, num_workers=2, seed=0, max_restarts=3) as venv:  # an env's own error is not retried
        venv.reset()
        venv.step([0] * 4)
        with pytest.raises(EnvWorkerError, match="Environment 3 .*Ray actor.*during step") as ei:
            venv.step([0] * 4)
        assert ei.value.env_index == 3 and "deliberate failure" in ei.value.worker_traceback
        with pytest.raises(EnvWorkerError, match="unusable"):
            venv.step([0] * 4)


def test_a_dead_actor_is_reported_then_with_a_budget_replaced():
    fns = counting(2) + [functools.partial(H.FaultyEnv, 2, fail_at=2, mode="sigkill")]
    with RayVecEnv(fns, num_workers=2, seed=0) as venv:
        venv.reset()
        venv.step([0] * 3)
        with pytest.raises(EnvWorkerError, match="actor died during step.*hosting env 2") as ei:
            venv.step([0] * 3)
        assert ei.value.env_index == 2
    with RayVecEnv(fns, num_workers=2, seed=0, max_restarts=1) as venv:
        venv.reset()
        venv.step([0] * 3)
        groups = venv.pipeline_groups
        for a, b in groups:
            venv.step_async([1] * (b - a), a, b)
        out = [venv.step_wait(a, b) for a, b in groups]
        obs, rew, done, infos = out[-1]  # the actor hosting env 2 died and was replaced
        assert venv.restarts == 1 and "actor died" in venv.restart_log[0]
        assert obs.dtype == np.uint8 and rew.tolist() == [0.0] and done.tolist() == [True]
        assert "worker_restart" in infos[0] and "episode" not in infos[0] and "final_observation" not in infos[0]
        assert not any(d.any() for _, _, d, _ in out[:-1])  # the other actor's envs stepped on
        obs, rew, done, infos = venv.step([0] * 3)  # and the new actor steps on
        assert not done.any() and obs[2, 2, 0, 0] == 1  # its env's first step of a fresh episode


def test_a_hung_actor_times_out_and_is_replaced():
    fns = counting(1) + [functools.partial(H.FaultyEnv, 1, fail_at=2, mode="hang")]
    with RayVecEnv(fns, num_workers=2, seed=0, timeout=2.0, max_restarts=1) as venv:
        venv.reset()
        venv.step([0, 0])
        obs, rew, done, infos = venv.step([0, 0])
        assert done.tolist() == [False, True] and "did not answer within 2 s" in infos[1]["worker_restart"]
        venv.step([0, 0])


def test_episodes_in_progress_move_into_ray_actors_and_back():
    """``get_state`` of an in-process vector env, ``set_state`` into Ray actors (3 MiniGrid envs on 2):
    the next steps are the ones the first would have taken, and the actors' ``get_state`` says the
    same episodes as the first's."""
    from gridworld.env import make_env

    fns = [functools.partial(make_env, "MiniGrid-DoorKey-5x5-v0") for _ in range(3)]
    actions = np.random.default_rng(3).integers(7, size=(50, 3))
    with InProcessVecEnv(fns, seed=5) as venv:
        venv.reset()
        for a in actions[:20]:
            venv.step(a)
        states = venv.get_state()
        ref = [venv.step(a) for a in actions[20:]]
        final = venv.get_state()
    with RayVecEnv(fns, num_workers=2, seed=99) as venv:
        assert venv.can_restore
        venv.reset()
        assert venv.set_state(states).shape == (3, 3, 7, 7)
        got = [venv.step(a) for a in actions[20:]]
        again = venv.get_state()
    for (o, r, d, _), (o2, r2, d2, _) in zip(got, ref):
        np.testing.assert_array_equal(o, o2)
        np.testing.assert_array_equal(r, r2)
        np.testing.assert_array_equal(d, d2)
    assert [s["length"] for s in again] == [s["length"] for s in final]
    for a, b in zip(again, final):
        np.testing.assert_array_equal(a["env"]["actions"], b["env"]["actions"])


def test_an_envs_get_state_fault_is_reported_as_an_env_error():
    fns = counting(1) + [functools.partial(H.BrokenStateEnv, 1)]
    with RayVecEnv(fns, num_workers=2, seed=0) as venv:
        venv.reset()
        with pytest.raises(EnvWorkerError, match="deliberate get_state failure in env tag 1") as e:
            venv.get_state()
        assert e.value.env_index == 1


def test_a_training_run_on_ray_actors(tmp_path):
    """The trainer with --vec-env ray: a gridworld update on 2 actors (the Ray instance is reused)."""
    from common.ppo.trainer import Trainer
    from gridworld.train import SPEC, GridConfig

    cfg = GridConfig(
        vec_env="ray",
        num_workers=2,
        num_processes=4,
        num_local_steps=16,
        batch_size=2,
        num_epochs=1,
        num_global_steps=64,
        obs_norm_steps=2,
        eval_interval=0,
        video_interval=0,
        picture_interval=0,
        log_path=str(tmp_path),
        run_name="ray",
    )
    trainer = Trainer(SPEC, cfg)
    result = trainer.train()
    assert result["update"] == 1 and os.path.exists(result["checkpoint"])
    assert ray.is_initialized()  # the vec env did not stop the instance it did not start
