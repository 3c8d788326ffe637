"""GAE, returns, minibatches and running statistics against values computed by hand."""

import numpy as np
import pytest

from common.intrinsic.normalize import RewardForwardFilter, RunningMeanStd
from common.ppo.buffer import RolloutBuffer, gae


def test_gae_episodic_by_hand():
    # One env, 3 steps, episode ends after step 1 (index 1).
    r = np.array([[1.0], [2.0], [3.0]], np.float32)
    v = np.array([[0.5], [1.0], [1.5], [2.0]], np.float32)
    d = np.array([[0.0], [1.0], [0.0]], np.float32)
    g, lam = 0.9, 0.8
    # t=2: delta = 3 + .9*2 - 1.5 = 3.3 ; A2 = 3.3
    # t=1: done -> delta = 2 - 1 = 1 ; A1 = 1 (no carry over the boundary)
    # t=0: delta = 1 + .9*1 - .5 = 1.4 ; A0 = 1.4 + .9*.8*1 = 2.12
    np.testing.assert_allclose(gae(r, v, d, g, lam)[:, 0], [2.12, 1.0, 3.3], rtol=1e-6)


def test_gae_non_episodic_ignores_dones():
    r = np.array([[1.0], [2.0], [3.0]], np.float32)
    v = np.array([[0.5], [1.0], [1.5], [2.0]], np.float32)
    g, lam = 0.9, 0.8
    a2 = 3 + 0.9 * 2 - 1.5
    a1 = (2 + 0.9 * 1.5 - 1) + g * lam * a2
    a0 = (1 + 0.9 * 1 - 0.5) + g * lam * a1
    np.testing.assert_allclose(gae(r, v, None, g, lam)[:, 0], [a0, a1, a2], rtol=1e-6)


def test_buffer_combines_streams_and_pairs_next_obs():
    T, N = 4, 2
    buf = RolloutBuffer(T, N, (1, 2, 2))
    buf.start(np.zeros((N, 1, 2, 2), np.uint8))
    for t in range(T):
        done = np.array([t == 1, False], np.float32)
        infos = [{"final_observation": np.full((1, 2, 2), 200, np.uint8)} if done[0] else {}, {}]
        buf.add(
            np.array([t, t]),
            np.zeros(N),
            np.zeros(N),
            np.zeros(N),
            np.ones(N),
            done,
            np.full((N, 1, 2, 2), t + 1, np.uint8),
            infos,
        )
    buf.rewards_int[:] = 0.5
    buf.compute_returns_and_advantages(np.zeros(N), np.zeros(N), 0.9, 1.0, 0.99, ext_coef=2.0, int_coef=3.0)
    np.testing.assert_allclose(buf.advantages, 2 * buf.adv_ext + 3 * buf.adv_int, rtol=1e-6)
    summary = buf.summary()  # the logged spread is the combined advantages', not one stream's
    assert summary["adv_std"] == pytest.approx(float(np.std(2 * buf.adv_ext + 3 * buf.adv_int)), rel=1e-5)
    assert summary["adv_std"] != pytest.approx(float(np.std(buf.adv_int)), rel=1e-3)
    np.testing.assert_allclose(buf.ret_ext, buf.adv_ext + buf.values_ext[:-1])
    assert buf.next_obs_for_reward()[1, 0].max() == 200  # the true terminal frame, not the reset frame
    seen = 0
    for batch in buf.minibatches(2, np.random.default_rng(0)):
        assert batch["obs"].dtype == np.uint8 and len(batch["obs"]) == T * N // 2
        # obs holds t, next_obs t+1 (the value written at step t is t+1), the terminal frame where it ended
        expected = np.where(batch["dones"] > 0, 200, batch["obs"][:, 0, 0, 0] + 1)
        np.testing.assert_array_equal(batch["next_obs"][:, 0, 0, 0], expected)
        np.testing.assert_array_equal(batch["actions"], batch["obs"][:, 0, 0, 0])
        seen += len(batch["actions"])
    assert seen == T * N


def test_buffer_answers_for_its_frames_and_rewards():
    """The trainer and the logger ask the buffer (never its arrays): the terminal-frame rule, the
    gate's frames, the reward clipping and the intrinsic rewards."""
    T, N = 3, 2
    buf = RolloutBuffer(T, N, (1, 2, 2))
    buf.start(np.zeros((N, 1, 2, 2), np.uint8))
    for t in range(T):
        done = np.array([t == 1, False], np.float32)
        infos = [{"final_observation": np.full((1, 2, 2), 200, np.uint8)} if done[0] else {}, {}]
        rewards = np.array([-3.0, 0.5 * t], np.float32)
        buf.add(np.zeros(N), np.zeros(N), np.zeros(N), np.zeros(N), rewards, done, np.full((N, 1, 2, 2), t + 1), infos)
    assert buf.next_frame(1, 0).max() == 200 and buf.next_frame(1, 1).max() == 2 and buf.next_frame(2, 0).max() == 3
    nxt = buf.next_obs_for_reward()
    prev, nxt_given, dones = buf.visit_frames(nxt)
    assert prev[0].max() == 0 and nxt_given is nxt and prev[2, 0].max() == 2 and dones[1, 0] == 1
    buf.clip_rewards()
    np.testing.assert_array_equal(buf.rewards_ext, [[-1, 0], [-1, 1], [-1, 1]])
    buf.store_intrinsic_rewards(np.full((T, N), 0.25, np.float32))
    assert (buf.rewards_int == 0.25).all()


def test_running_mean_std_matches_numpy_on_concatenation():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3, 2, size=(n, 5)) for n in (7, 100, 1, 33)]
    rms = RunningMeanStd(shape=(5,), epsilon=1e-12)
    for c in chunks:
        rms.update(c)
    allx = np.concatenate(chunks)
    np.testing.assert_allclose(rms.mean, allx.mean(0), rtol=1e-9)
    np.testing.assert_allclose(rms.var, allx.var(0), rtol=1e-9)
    clone = RunningMeanStd(shape=(5,))
    clone.set_state_dict(rms.state_dict())
    np.testing.assert_array_equal(clone.mean, rms.mean)
    with pytest.raises(ValueError, match="shape"):
        RunningMeanStd(shape=(4,)).set_state_dict(rms.state_dict())


def test_forward_filter_runs_along_time_per_env():
    rews = np.array([[1.0, 10.0], [0.0, 0.0], [2.0, 1.0]])  # [T=3, N=2]
    f = RewardForwardFilter(gamma=0.5, num_envs=2)
    out = f.filter_rollout(rews)
    np.testing.assert_allclose(out[:, 0], [1.0, 0.5, 2.25])
    np.testing.assert_allclose(out[:, 1], [10.0, 5.0, 3.5])
    # continues across rollouts (RND keeps the accumulator)
    np.testing.assert_allclose(f.update(np.array([0.0, 0.0])), [1.125, 1.75])


def test_forward_filter_refuses_a_state_summed_with_another_discount():
    """A resume with another --int-gamma would keep the file's returns under the new name: refused."""
    f = RewardForwardFilter(gamma=0.99, num_envs=2)
    f.update(np.array([1.0, 2.0]))
    same = RewardForwardFilter(gamma=0.99, num_envs=2)
    same.set_state_dict(f.state_dict())
    np.testing.assert_array_equal(same.rewems, f.rewems)
    other = RewardForwardFilter(gamma=0.999, num_envs=2)
    refused = r"gamma 0\.99, this run's --int-gamma is 0\.999: resume with --int-gamma 0\.99"
    with pytest.raises(ValueError, match=refused):
        other.set_state_dict(f.state_dict())
    assert other.gamma == 0.999 and not other.rewems.any()


def test_minibatches_give_the_intrinsic_module_the_frames_it_scores():
    """Where an episode ended, ``next_obs`` is the true terminal frame (scored by the reward), not the reset frame."""
    T, N = 5, 3
    buf = RolloutBuffer(T, N, (1, 2, 2))
    buf.start(np.zeros((N, 1, 2, 2), np.uint8))
    ends = {(1, 0), (3, 2), (4, 1)}  # (t, env) transitions that end an episode
    for t in range(T):
        done = np.array([(t, i) in ends for i in range(N)], np.float32)
        infos = [
            {"final_observation": np.full((1, 2, 2), 100 + 10 * t + i, np.uint8)} if done[i] else {} for i in range(N)
        ]
        buf.add(
            np.zeros(N),
            np.zeros(N),
            np.zeros(N),
            np.zeros(N),
            np.zeros(N),
            done,
            np.full((N, 1, 2, 2), t + 1, np.uint8),
            infos,
        )  # the reset frame after an end reads t + 1
    scored = buf.next_obs_for_reward().reshape(T * N, 1, 2, 2)
    buf.compute_returns_and_advantages(np.zeros(N), np.zeros(N), 0.9, 0.95, 0.99, 1.0, 1.0)
    trained = {}
    for batch in buf.minibatches(3, np.random.default_rng(1)):
        for o, n in zip(batch["obs"], batch["next_obs"]):
            trained.setdefault(int(o[0, 0, 0]), []).append(n)
    got = sorted(int(n[0, 0, 0]) for frames in trained.values() for n in frames)
    assert got == sorted(int(f[0, 0, 0]) for f in scored)  # the same multiset of frames
    assert {110, 132, 141} <= set(got)  # every terminal frame is trained on


def test_first_visit_gate_pays_each_observation_once_per_episode():
    from common.intrinsic.normalize import FirstVisitGate

    def frames(*codes):  # one env, frames are a single byte each
        return np.array(codes, np.uint8).reshape(len(codes), 1, 1)

    gate = FirstVisitGate(1)
    # episode: 0 -> 1 -> 2 -> 1 -> 2 -> 0 (ends, terminal frame 0) ; next episode starts at 5 -> 5 -> 1
    nxt = frames(1, 2, 1, 2, 0, 5, 1)
    prev = frames(0, 1, 2, 1, 2, 5, 5)  # s_t as the env showed it: the reset frame 5 after the end at t=4
    dones = np.array([0, 0, 0, 0, 1, 0, 0], np.float32)[:, None]
    g = gate.gate_rollout(prev[:, None], nxt[:, None], dones)[:, 0]
    #   1: new; 2: new; 1, 2: revisits; 0: the episode's first frame (seen); 5: the new episode's first frame; 1: new
    np.testing.assert_array_equal(g, [1, 1, 0, 0, 0, 0, 1])
    # the episode continues into the next rollout: 1 was seen, 7 is new
    g2 = gate.gate_rollout(frames(5, 1)[:, None], frames(1, 7)[:, None], np.zeros((2, 1)))[:, 0]
    np.testing.assert_array_equal(g2, [0, 1])
    # an episode that ends at a rollout's last step starts the next rollout afresh, from its first s_t
    g3 = FirstVisitGate(1)
    g3.gate_rollout(frames(0)[:, None], frames(1)[:, None], np.ones((1, 1)))
    np.testing.assert_array_equal(
        g3.gate_rollout(frames(1, 0)[:, None], frames(0, 1)[:, None], np.zeros((2, 1)))[:, 0], [1, 0]
    )
    # state keys instead of frames: the same rule
    keys = np.array([11, 12, 11, 12, 10, 15, 11])
    gk = FirstVisitGate(1).gate_rollout(np.array([10, 11, 12, 11, 12, 15, 15])[:, None], keys[:, None], dones)
    np.testing.assert_array_equal(gk[:, 0], g)
    with pytest.raises(ValueError, match="2 envs"):
        FirstVisitGate(2).gate_rollout(prev[:, None], nxt[:, None], dones)


def test_the_gates_memory_carries_an_episode_over_into_another_gate():
    """``episode_state`` of a gate, given to a new one (a resumed run in another process: the keys do not
    depend on Python's per-process hash salt), pays the same as the first gate goes on to pay."""
    import subprocess
    import sys

    from common.intrinsic.normalize import FirstVisitGate

    def frames(*codes):  # [T, 2 envs, 1, 1]: env 1 repeats env 0's frames shifted by 100
        a = np.array(codes, np.uint8)
        return np.stack([a, a + 100], 1).reshape(len(codes), 2, 1, 1)

    first = FirstVisitGate(2)
    assert first.episode_state() is None  # before any rollout
    first.gate_rollout(frames(0, 1, 2), frames(1, 2, 3), np.array([[0, 0], [0, 1], [0, 0]]))
    state = first.episode_state()
    assert state[0].dtype == np.int64 and len(state[0]) == 4 and len(state[1]) == 2  # env 1 began anew at t=2
    code = (
        "from common.intrinsic.normalize import FirstVisitGate as G; import numpy as np; print(G._key(np.uint8([1])))"
    )
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}  # fmt: skip
    assert keys == {f"{FirstVisitGate._key(np.uint8([1]))}\n"}  # the same key in every process
    second = FirstVisitGate(2)
    second.set_episode_state(state)
    more = (frames(3, 2, 9), frames(2, 9, 1), np.zeros((3, 2)))
    np.testing.assert_array_equal(second.gate_rollout(*more), first.gate_rollout(*more))
    for bad in ([np.zeros(2, np.int64)], [np.zeros(2, np.float64), None], "keys"):
        with pytest.raises(ValueError, match="2 int64"):
            second.set_episode_state(bad)


def test_embeddings_for_visualdl_keep_their_geometry_in_200_dimensions():
    from common.run.logger import VISUALDL_MAX_DIM, project_for_visualdl

    rng = np.random.default_rng(0)
    for n in (50, 300):
        x = rng.normal(size=(n, 512)).astype(np.float32)
        y = project_for_visualdl(x)
        assert y.shape == (n, min(n, VISUALDL_MAX_DIM)) and y.dtype == np.float32
        d = lambda a: ((a[:, None] - a[None]) ** 2).sum(-1)  # noqa: E731
        if n <= VISUALDL_MAX_DIM + 1:  # all the points' geometry fits: distances unchanged
            np.testing.assert_allclose(d(y), d(x), rtol=1e-3, atol=1e-2)
        else:  # the largest-variance directions are kept
            assert np.var(y, axis=0).sum() > 0.5 * np.var(x, axis=0).sum()
    small = rng.normal(size=(10, 64)).astype(np.float32)
    assert project_for_visualdl(small) is small


def test_a_time_limit_ends_the_return_unless_bootstrapped_from_the_terminal_frame():
    """Env 0 is cut by a time limit at t=1, env 1 by a game over at t=1: by default both end the
    return; with ``value_of`` the time limit continues it from the terminal frame's value (and only
    there), in the extrinsic stream and in an episodic intrinsic one; a restarted worker's cut (no
    terminal frame) is never a time limit."""
    T, N, gamma, int_gamma = 2, 3, 0.5, 0.25

    def filled(reward=1.0, **kwargs):
        buf = RolloutBuffer(T, N, (1, 1, 1))
        buf.start(np.zeros((N, 1, 1, 1), np.uint8))
        terminal = np.full((1, 1, 1), 7, np.uint8)
        for t in range(T):
            ends = t == 1
            infos = [
                {"final_observation": terminal, "TimeLimit.truncated": True} if ends else {},
                {"final_observation": terminal, "TimeLimit.truncated": False} if ends else {},
                {"worker_restart": "died", "TimeLimit.truncated": True} if ends else {},
            ]
            dones = np.full(N, float(ends), np.float32)
            rewards = np.full(N, reward, np.float32)
            buf.add(np.zeros(N), np.zeros(N), np.zeros(N), np.zeros(N), rewards, dones, np.zeros((N, 1, 1, 1)), infos)
        buf.store_intrinsic_rewards(np.zeros((T, N), np.float32))
        buf.compute_returns_and_advantages(np.zeros(N), np.zeros(N), gamma, 1.0, int_gamma, 1.0, 1.0, **kwargs)
        return buf

    plain = filled()
    np.testing.assert_array_equal(plain.truncated, [[False] * 3, [True, False, False]])
    np.testing.assert_allclose(plain.ret_ext[1], [1.0, 1.0, 1.0])
    asked = []

    def value_of(frames):
        asked.append(frames.copy())
        return np.full(len(frames), 4.0, np.float32), np.full(len(frames), 8.0, np.float32)

    boot = filled(value_of=value_of)
    assert len(asked) == 1 and asked[0].shape == (1, 1, 1, 1) and asked[0].max() == 7  # env 0's terminal frame
    np.testing.assert_allclose(boot.ret_ext[1], [1.0 + gamma * 4.0, 1.0, 1.0])
    np.testing.assert_allclose(boot.ret_ext[0], [1.0 + gamma * (1.0 + gamma * 4.0), 1.5, 1.5])
    np.testing.assert_array_equal(boot.rewards_ext, plain.rewards_ext)  # the logs keep the game's rewards
    np.testing.assert_allclose(boot.ret_int[1], [0.0, 0.0, 0.0])  # non-episodic intrinsic stream: untouched
    episodic = filled(value_of=value_of, int_episodic=True)
    np.testing.assert_allclose(episodic.ret_int[1], [int_gamma * 8.0, 0.0, 0.0])
    clipped = filled(reward=-3.0, clip_reward=True)  # sign-clipped first, then the same returns
    np.testing.assert_array_equal(clipped.rewards_ext, -np.ones((T, N)))
    np.testing.assert_allclose(clipped.ret_ext, -plain.ret_ext)
