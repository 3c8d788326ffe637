"""Tests of common/envs/ (in-process and subprocess vec envs, the pipeline): contract, seeding, faults.

The real emulators are the subject where behaviour depends on them (shapes,
identical trajectories in-process vs subprocess and across runs, auto-reset); small
envs from tests/vec_env_helpers.py inject the faults (raise, SIGKILL, os._exit, hang).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import vec_env_helpers as H  # noqa: E402

from common.envs.contract import EnvWorkerError, VecEnv
from common.envs.factory import make_vec_env
from common.envs.inprocess import InProcessVecEnv
from common.envs.subproc import SubprocVecEnv

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def counting(n, episode_len=7):
    return [functools.partial(H.CountingEnv, i, episode_len) for i in range(n)]


def montezuma_fns(n, **kw):
    from montezuma.env import make_env

    return [functools.partial(make_env, **kw) for _ in range(n)]


def mario_fns(n):
    from mario.env import make_env

    return [functools.partial(make_env, world=1, stage=1, action_type="simple") for _ in range(n)]


def assert_workers_gone(pids):
    """Every worker ended and was reaped (no zombie left behind)."""
    me = os.getpid()
    for pid in pids:
        if psutil.pid_exists(pid):
            try:
                proc = psutil.Process(pid)
                alive_child = proc.ppid() == me
                status = proc.status()
            except psutil.NoSuchProcess:
                continue
            assert not alive_child, f"worker {pid} still exists (status {status})"
    assert not [p for p in mp.active_children() if p.pid in pids]


def rollout(venv, actions):
    """obs after reset, then (obs, rewards, dones, infos) per step."""
    out = [venv.reset()]
    for a in actions:
        out.append(venv.step(a))
    return out


def assert_same_rollout(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    for (o1, r1, d1, i1), (o2, r2, d2, i2) in zip(a[1:], b[1:]):
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(d1, d2)
        assert len(i1) == len(i2)
        for x, y in zip(i1, i2):
            assert x.keys() == y.keys()
            for k in x:
                if k == "final_observation":
                    np.testing.assert_array_equal(x[k], y[k])
                else:
                    assert x[k] == y[k], k


def check_step_types(venv, n):
    obs = venv.reset()
    assert obs.shape == (n, *venv.observation_shape) and obs.dtype == np.uint8
    # a list and a numpy int array are both accepted
    for actions in ([0] * n, np.arange(n) % venv.num_actions):
        obs, rew, done, infos = venv.step(actions)
        assert obs.shape == (n, *venv.observation_shape) and obs.dtype == np.uint8
        assert rew.shape == (n,) and rew.dtype == np.float32
        assert done.shape == (n,) and done.dtype == np.bool_
        assert isinstance(infos, list) and len(infos) == n and all(isinstance(i, dict) for i in infos)


# ----------------------------------------------------------------- contract, real envs
def test_shapes_and_dtypes_inprocess_and_subprocess_mario():
    with InProcessVecEnv(mario_fns(1)) as venv:
        assert isinstance(venv, VecEnv) and venv.num_envs == 1
        assert venv.observation_shape == (4, 84, 84) and venv.num_actions == 7
        check_step_types(venv, 1)
    with SubprocVecEnv(mario_fns(2), num_workers=2) as venv:
        assert venv.observation_shape == (4, 84, 84) and venv.num_actions == 7
        check_step_types(venv, 2)


def test_subprocess_matches_inprocess_montezuma():
    """Same seed and actions: identical trajectories, auto-resets included (3 envs on 2
    workers: an uneven split), through shared memory and through pipes."""
    fns = montezuma_fns(3, max_episode_steps=6)
    actions = np.random.default_rng(0).integers(18, size=(14, 3))
    with InProcessVecEnv(fns, seed=11) as venv:
        ref = rollout(venv, actions)
    with SubprocVecEnv(fns, num_workers=2, seed=11) as venv:
        assert [len(range(*r)) for r in venv._ranges] == [2, 1]
        assert_same_rollout(ref, rollout(venv, actions))
    with SubprocVecEnv(fns, num_workers=2, seed=11, shared_memory=False) as venv:
        assert_same_rollout(ref, rollout(venv, actions))
    assert any(d.any() for _, _, d, _ in ref[1:])  # auto-reset was exercised


def test_episodes_in_progress_move_to_another_vector_env_montezuma():
    """``get_state`` of a vector env, ``set_state`` into a new one (in process, or 3 envs on 2 worker
    processes): the next steps are the ones the first would have taken, episode returns and auto-resets
    included; a game without ``get_state`` answers None."""
    fns = montezuma_fns(3, max_episode_steps=30)
    actions = np.random.default_rng(2).integers(18, size=(50, 3))
    with InProcessVecEnv(fns, seed=5) as venv:
        rollout(venv, actions[:20])
        states = venv.get_state()
        ref = [None, *[venv.step(a) for a in actions[20:]]]  # (no first observation to compare)
    assert [s["length"] for s in states] == [20, 20, 20] and all(len(s["env"]["actions"]) == 20 for s in states)
    for make in (lambda: InProcessVecEnv(fns, seed=99), lambda: SubprocVecEnv(fns, num_workers=2, seed=99)):
        with make() as venv:
            venv.reset()
            obs = venv.set_state(states)
            assert obs.shape == (3, 4, 84, 84)
            assert_same_rollout(ref, [None, *[venv.step(a) for a in actions[20:]]])
    assert any(d.any() for _, _, d, _ in ref[1:])  # an episode ended after the move: its return counts the first part
    with InProcessVecEnv([functools.partial(H.CountingEnv, 0)]) as venv:  # a game with no get_state
        venv.reset()
        assert venv.get_state() is None
    lying = [{**s, "length": s["length"] + 1} for s in states]  # a file's length must match its actions
    with InProcessVecEnv(fns, seed=99) as venv, pytest.raises(EnvWorkerError, match="21 steps told as 20 actions"):
        venv.reset()
        venv.set_state(lying)


def test_a_stop_inside_get_state_leaves_the_vector_env_unusable():
    """A Ctrl-C while the workers are answering ``get_state`` leaves their answers in the pipes: a later
    step would read them as its own, so the vector env refuses every later call, naming why."""
    fns = [functools.partial(H.SlowStateEnv, i) for i in range(2)]

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    with SubprocVecEnv(fns, num_workers=2, seed=0) as venv:
        venv.reset()
        before = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                venv.get_state()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
        with pytest.raises(EnvWorkerError, match="interrupted during get_state"):
            venv.step(np.zeros(2, dtype=np.int64))


def test_same_seed_repeats_a_run_montezuma():
    """Montezuma's sticky actions draw from the env RNG: a seed must pin them down."""
    fns = montezuma_fns(2, max_episode_steps=8)
    actions = np.random.default_rng(1).integers(18, size=(20, 2))
    with SubprocVecEnv(fns, num_workers=1, seed=123) as venv:
        first = rollout(venv, actions)
    with SubprocVecEnv(fns, num_workers=2, seed=123) as venv:
        second = rollout(venv, actions)
    assert_same_rollout(first, second)


def test_auto_reset_montezuma():
    with SubprocVecEnv(montezuma_fns(2, max_episode_steps=5), num_workers=2, seed=0) as venv:
        venv.reset()
        total = np.zeros(2)
        for t in range(1, 6):
            obs, rew, done, infos = venv.step([3, 4])
            total += rew
            if t < 5:
                assert not done.any()
                assert all("episode" not in i and "final_observation" not in i for i in infos)
        assert done.all()
        for i in range(2):
            info = infos[i]
            assert info["TimeLimit.truncated"] is True
            assert info["episode"] == {"r": pytest.approx(total[i]), "l": 5}
            fin = info["final_observation"]
            assert fin.dtype == np.uint8 and fin.shape == (4, 84, 84)
            # the returned obs is a reset obs: the stack holds 4 copies of one frame
            assert all(np.array_equal(obs[i][0], obs[i][k]) for k in range(1, 4))
            assert not np.array_equal(fin, obs[i])  # the player moved during the episode
        obs, rew, done, infos = venv.step([0, 0])  # the next episode counts from 1 again
        assert not done.any() and all(i["episode_steps"] == 1 for i in infos)


# -------------------------------------------------------------- contract, small envs
def test_seeding_env_i_gets_seed_plus_i_then_unseeded():
    n = 3
    for seed in (7, 100):
        with SubprocVecEnv(counting(n), num_workers=2, seed=seed) as venv:
            obs = venv.reset()
            expected = [np.random.default_rng(seed + i).integers(0, 256) for i in range(n)]
            assert obs[:, 3, 0, 0].tolist() == expected
            assert obs[:, 0, 0, 0].tolist() == list(range(n))  # env order preserved
            obs = venv.reset()  # later resets are unseeded: the RNG carries on
            assert obs[:, 3, 0, 0].tolist() != expected


def test_episode_stats_are_raw_reward_sums():
    with make_vec_env(counting(4, episode_len=3), num_workers=2, seed=0) as venv:
        assert isinstance(venv, SubprocVecEnv)
        venv.reset()
        total = np.zeros(4)
        episodes = 0
        for t in range(7):
            obs, rew, done, infos = venv.step([2, 1, 0, 1])
            total += rew
            for i in np.flatnonzero(done):
                assert infos[i]["episode"]["l"] == 3
                assert infos[i]["episode"]["r"] == pytest.approx(total[i], abs=1e-5)
                assert infos[i]["final_observation"][2, 0, 0] == 3  # step counter of the terminal obs
                assert obs[i][2, 0, 0] == 0  # the next episode's first obs
                total[i] = 0
                episodes += 1
        assert episodes == 8


@pytest.mark.parametrize("workers", [0, 1, 3, 4])
def test_pipelined_groups_step_like_the_whole_vector(workers):
    """step_async/step_wait group by group gives exactly what step() gives for the same seed."""
    n, actions = 5, [[2, 1, 0, 1, 2], [0, 0, 1, 2, 1], [1, 2, 2, 0, 0], [2, 2, 2, 1, 0]]
    with make_vec_env(counting(n, episode_len=3), num_workers=workers, seed=4) as whole:
        ref = [whole.reset()] + [whole.step(a) for a in actions]
    with make_vec_env(counting(n, episode_len=3), num_workers=workers, seed=4) as venv:
        groups = venv.pipeline_groups
        per_worker = [3, 2] if workers == 0 else [len(range(n)[w::workers]) for w in range(workers)]
        assert groups[0][0] == 0 and groups[-1][1] == n
        assert len(groups) == (1 if workers == 0 else sum(2 if k > 1 else 1 for k in per_worker))
        assert all(a < b and b == c for (a, b), (c, _) in zip(groups, groups[1:]))
        got = [venv.reset()]
        for a in actions:
            for s, e in groups:  # all groups in flight at once, then collected
                venv.step_async(np.asarray(a[s:e]), s, e)
            parts = [venv.step_wait(s, e) for s, e in groups]
            got.append(
                (
                    np.concatenate([p[0] for p in parts]),
                    np.concatenate([p[1] for p in parts]),
                    np.concatenate([p[2] for p in parts]),
                    [i for p in parts for i in p[3]],
                )
            )
    np.testing.assert_array_equal(got[0], ref[0])
    for (o, r, d, i), (o2, r2, d2, i2) in zip(got[1:], ref[1:]):
        np.testing.assert_array_equal(o, o2)
        np.testing.assert_array_equal(r, r2)
        np.testing.assert_array_equal(d, d2)
        assert [x.get("episode") for x in i] == [x.get("episode") for x in i2]
        assert sum("episode" in x for x in i) > 0 or not d.any()


def test_step_async_misuse_is_refused():
    with SubprocVecEnv(counting(4), num_workers=2, seed=0) as venv:
        venv.reset()
        groups = venv.pipeline_groups
        assert groups == [(0, 1), (1, 2), (2, 3), (3, 4)]  # each worker's 2 envs in halves
        (a, b), (c, d) = groups[:2]  # both on worker 0
        with pytest.raises(ValueError, match="not one of this VecEnv's groups"):
            venv.step_async([0, 0], 0, 2)
        with pytest.raises(RuntimeError, match="without step_async"):
            venv.step_wait(a, b)
        venv.step_async([0] * (b - a), a, b)
        with pytest.raises(RuntimeError, match="already stepping"):
            venv.step_async([0] * (b - a), a, b)
        with pytest.raises(RuntimeError, match="step_wait first"):
            venv.reset()
        venv.step_async([1] * (d - c), c, d)  # queued behind (a, b) on the same worker
        with pytest.raises(RuntimeError, match="which were sent to worker 0 first"):
            venv.step_wait(c, d)
        with pytest.raises(RuntimeError, match="already stepping"):
            venv.step([0, 1, 2, 0])
        venv.step_wait(a, b)
        venv.step_wait(c, d)
        venv.step([0, 1, 2, 0])  # back to normal


def test_make_vec_env_in_process_and_action_validation():
    with make_vec_env(counting(2), num_workers=0, seed=0) as venv:
        assert isinstance(venv, InProcessVecEnv)
        venv.reset()
        with pytest.raises(ValueError):
            venv.step([0, 0, 0])
        with pytest.raises(ValueError):
            venv.step([0, 3])  # out of range: 3 actions
        venv.step(np.array([[1], [2]], dtype=np.int32))


def test_unpicklable_factory_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="picklable"):
        SubprocVecEnv([lambda: H.CountingEnv()], num_workers=1)


# ------------------------------------------------------------------------- faults
def test_exception_in_step_names_env_and_carries_traceback():
    fns = counting(4)
    fns[2] = functools.partial(H.FaultyEnv, 2, fail_at=3, mode="raise")
    venv = SubprocVecEnv(fns, num_workers=2)
    pids = list(venv.worker_pids)
    venv.reset()
    venv.step([0] * 4)
    venv.step([0] * 4)
    with pytest.raises(EnvWorkerError) as ei:
        venv.step([0] * 4)
    err = ei.value
    assert err.env_index == 2 and err.worker_index == 1
    assert "deliberate failure at step 3 in env tag 2" in err.worker_traceback
    assert "ValueError" in err.worker_traceback and "vec_env_helpers.py" in err.worker_traceback
    assert "Environment 2" in str(err) and "deliberate failure" in str(err)
    with pytest.raises(EnvWorkerError, match="unusable"):
        venv.step([0] * 4)
    t0 = time.monotonic()
    venv.close()
    assert time.monotonic() - t0 < 3
    assert_workers_gone(pids)


def test_exception_in_construction_and_reset():
    fns = counting(3)
    fns[1] = functools.partial(H.BrokenConstructorEnv, 1)
    with pytest.raises(EnvWorkerError, match="construction") as ei:
        SubprocVecEnv(fns, num_workers=3)
    assert ei.value.env_index == 1 and "deliberate constructor failure" in ei.value.worker_traceback
    assert not mp.active_children()

    fns = counting(2) + [functools.partial(H.FaultyEnv, 2, mode="reset")]
    with SubprocVecEnv(fns, num_workers=2) as venv:
        with pytest.raises(EnvWorkerError, match="during reset") as ei:
            venv.reset()
        assert ei.value.env_index == 2 and "deliberate reset failure" in ei.value.worker_traceback


def test_exception_in_process_env():
    fns = counting(2) + [functools.partial(H.FaultyEnv, 2, fail_at=1)]
    with InProcessVecEnv(fns) as venv:
        venv.reset()
        with pytest.raises(EnvWorkerError) as ei:
            venv.step([0, 0, 0])
    assert ei.value.env_index == 2 and "deliberate failure" in ei.value.worker_traceback
    fns = [functools.partial(H.BrokenConstructorEnv, 0)]
    with pytest.raises(EnvWorkerError, match="construction"):
        InProcessVecEnv(fns)


def test_contract_violation_float_obs():
    with SubprocVecEnv([functools.partial(H.FloatObsEnv, 0)], num_workers=1) as venv:
        with pytest.raises(EnvWorkerError, match="uint8"):
            venv.reset()


@pytest.mark.parametrize("mode, expected", [("sigkill", "SIGKILL"), ("exit", "exit code 3")])
def test_worker_death_inside_step_is_detected_fast(mode, expected):
    fns = counting(3) + [functools.partial(H.FaultyEnv, 3, fail_at=2, mode=mode)]
    venv = SubprocVecEnv(fns, num_workers=2, timeout=60)
    pids = list(venv.worker_pids)
    venv.reset()
    venv.step([0] * 4)
    t0 = time.monotonic()
    with pytest.raises(EnvWorkerError, match="died") as ei:
        venv.step([0] * 4)
    assert time.monotonic() - t0 < 5
    assert expected in str(ei.value) and ei.value.worker_index == 1
    t0 = time.monotonic()
    venv.close()
    venv.close()  # idempotent
    assert time.monotonic() - t0 < 3
    assert_workers_gone(pids)


def test_worker_sigkilled_mid_run_montezuma():
    venv = SubprocVecEnv(montezuma_fns(4), num_workers=2, seed=0, timeout=60)
    pids = list(venv.worker_pids)
    venv.reset()
    for _ in range(3):
        venv.step(np.zeros(4, dtype=np.int64))
    os.kill(pids[0], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(EnvWorkerError) as ei:
        for _ in range(100):
            venv.step(np.zeros(4, dtype=np.int64))
    assert time.monotonic() - t0 < 5
    assert "SIGKILL" in str(ei.value) and "worker 0," in str(ei.value) and "died" in str(ei.value)
    t0 = time.monotonic()
    venv.close()
    assert time.monotonic() - t0 < 3
    assert_workers_gone(pids)


def test_hung_worker_times_out_and_close_kills_it():
    fns = counting(1) + [functools.partial(H.FaultyEnv, 1, fail_at=2, mode="hang")]
    venv = SubprocVecEnv(fns, num_workers=2, timeout=1.0)
    pids = list(venv.worker_pids)
    venv.reset()
    venv.step([0, 0])
    t0 = time.monotonic()
    with pytest.raises(EnvWorkerError, match="did not answer within 1 s") as ei:
        venv.step([0, 0])
    assert 0.9 < time.monotonic() - t0 < 4
    assert ei.value.env_index == 1
    t0 = time.monotonic()
    venv.close()
    assert time.monotonic() - t0 < 3
    assert_workers_gone(pids)


def test_workers_ignore_sigint():
    """Ctrl-C goes to the whole process group; workers must leave it to the trainer."""
    with SubprocVecEnv(counting(2), num_workers=2) as venv:
        venv.reset()
        for pid in venv.worker_pids:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        obs, *_ = venv.step([0, 0])
        assert obs.shape[0] == 2


def test_close_idempotent_and_context_manager():
    omp = os.environ.get("OMP_NUM_THREADS")
    with SubprocVecEnv(counting(2), num_workers=2) as venv:
        assert os.environ.get("OMP_NUM_THREADS") == omp  # only the workers' environment changed
        pids = list(venv.worker_pids)
        venv.reset()
    assert venv.closed
    assert_workers_gone(pids)
    venv.close()
    with pytest.raises(RuntimeError, match="closed"):
        venv.step([0, 0])
    inproc = InProcessVecEnv(counting(1))
    inproc.close()
    inproc.close()
    assert inproc.closed


def test_workers_do_not_reimport_the_main_module(tmp_path):
    """A training script imports Paddle at the top; spawn would re-run that import in
    every worker. The vector env hides __main__ while starting them, unless a factory
    lives in __main__ (then the worker must import it)."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(f"""
        import functools, os, sys
        open(os.path.join({str(tmp_path)!r}, "imported-%d" % os.getpid()), "w").close()
        sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, "tests")!r}]
        import vec_env_helpers as H
        from common.envs.subproc import SubprocVecEnv

        class MainEnv(H.CountingEnv):
            pass

        if __name__ == "__main__":
            factory = MainEnv if sys.argv[1] == "main" else H.CountingEnv
            with SubprocVecEnv([factory, factory], num_workers=2, seed=0) as venv:
                venv.reset()
                venv.step([0, 1])
            print("ok")
    """)
    )
    for kind, expected_imports in (("helpers", 1), ("main", 3)):
        for f in tmp_path.glob("imported-*"):
            f.unlink()
        res = subprocess.run([sys.executable, str(script), kind], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and "ok" in res.stdout, res.stderr
        assert len(list(tmp_path.glob("imported-*"))) == expected_imports, kind
