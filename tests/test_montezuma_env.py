"""MontezumaEnv against the real ALE emulator (no mocks of the game)."""

import functools
import os
import pickle

import numpy as np
import pytest

from montezuma.env import MontezumaEnv, make_env, process_frame, rooms_mask, rooms_of_mask
from montezuma.train import episode_metrics

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

RIGHT = 3  # full action set: NOOP, FIRE, UP, RIGHT, LEFT, DOWN, ...


def aid(action) -> int:
    """ale_py.Action (a pybind enum) or int -> int."""
    return int(getattr(action, "value", action))


class AleSpy:
    """Wraps the ALEInterface: records every emulated frame's action, reward, RGB."""

    def __init__(self, ale):
        self.ale = ale
        self.frames = []  # (action int, reward, rgb copy)

    def act(self, action):
        r = self.ale.act(action)
        self.frames.append((aid(action), r, self.ale.getScreenRGB().copy()))
        return r

    def __getattr__(self, name):
        return getattr(self.ale, name)


def rollout(env, seed, actions):
    obs = [env.reset(seed=seed)]
    rewards = []
    for a in actions:
        o, r, d, _ = env.step(int(a))
        obs.append(o)
        rewards.append(r)
        if d:
            break
    return np.stack(obs), rewards


@pytest.fixture(scope="module")
def env():
    e = MontezumaEnv()
    yield e
    e.close()


def test_reset_obs_shape_dtype_and_actions(env):
    obs = env.reset(seed=0)
    assert MontezumaEnv.observation_shape == (4, 84, 84) and env.num_actions == 18
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all((obs[k] == obs[0]).all() for k in range(4)) and obs.max() > obs.min()
    assert len(env.action_set) == 18 and len({aid(a) for a in env.action_set}) == 18


def test_skip_max_stack_and_raw_reward():
    e = MontezumaEnv(sticky_prob=0.0)
    spy = AleSpy(e.ale)
    e.ale = spy
    try:
        prev = e.reset(seed=0)
        rng = np.random.default_rng(3)
        for t in range(30):
            a = int(rng.integers(18))
            spy.frames.clear()
            if t == 5:
                spy.ale.setRAM(21, 0x50)  # lowest BCD score byte: ALE reports +50 next frame
            obs, reward, done, info = e.step(a)
            assert len(spy.frames) == 4 and not done
            assert [f[0] for f in spy.frames] == [aid(e.action_set[a])] * 4  # p=0: never sticky
            assert reward == sum(f[1] for f in spy.frames)
            np.testing.assert_array_equal(obs[:3], prev[1:])
            np.testing.assert_array_equal(obs[3], process_frame(np.maximum(spy.frames[2][2], spy.frames[3][2])))
            if t == 5:
                assert reward == 50.0  # raw score delta, not clipped
            prev = obs
        assert info["score"] == 50.0 and info["events"] == 1  # one step with a positive reward
    finally:
        e.ale = spy.ale
        e.close()


def test_sticky_actions_are_per_frame_with_p(env):
    spy = AleSpy(env.ale)
    env.ale = spy
    try:
        env.reset(seed=11)
        rng = np.random.default_rng(0)
        prev_frame_action, repeats, chances = 0, 0, 0
        for _ in range(400):
            a = int(rng.integers(18))
            spy.frames.clear()
            _, _, done, _ = env.step(a)
            want = aid(env.action_set[a])
            for act, _, _ in spy.frames:
                # each frame plays either the agent's action or the previous frame's
                assert act in (want, prev_frame_action)
                if prev_frame_action != want:
                    chances += 1
                    repeats += act == prev_frame_action
                prev_frame_action = act
            if done:
                break
        assert chances > 300 and 0.17 < repeats / chances < 0.33
    finally:
        env.ale = spy.ale


def test_same_seed_same_trajectory_different_seed_differs(env):
    actions = np.random.default_rng(5).integers(18, size=150)
    o1, r1 = rollout(env, 7, actions)
    o2, r2 = rollout(env, 7, actions)
    o3, _ = rollout(env, 8, actions)
    assert o1.shape == o2.shape and (o1 == o2).all() and r1 == r2
    assert o1.shape != o3.shape or (o1 != o3).any()


def test_sticky_prob_extremes():
    actions = np.random.default_rng(5).integers(18, size=60)
    e0 = MontezumaEnv(sticky_prob=0.0)
    e1 = MontezumaEnv(sticky_prob=1.0)
    try:
        a, _ = rollout(e0, 1, actions)
        b, _ = rollout(e0, 2, actions)
        assert (a == b).all()  # no stickiness: the seed does not matter
        noop, _ = rollout(e0, 1, np.zeros(60, int))
        always, _ = rollout(e1, 1, actions)
        assert (always == noop).all()  # p=1: the NOOP after reset sticks forever
    finally:
        e0.close()
        e1.close()


def test_life_loss_not_terminal_game_over_is(env):
    env.reset(seed=0)
    lives = []
    for _ in range(300):
        obs, r, done, info = env.step(RIGHT)  # walks off the start ledge, every life
        lives.append(info["lives"])
        if done:
            break
    assert done and not info["TimeLimit.truncated"]
    assert lives[0] == 6 and min(lives[:-1]) < lives[0]
    assert len(set(lives)) >= 5  # several lives lost before the episode ended
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_step_limit_truncates():
    e = make_env(max_episode_steps=10)
    try:
        for _ in range(2):  # the counter restarts on reset
            e.reset(seed=0)
            for t in range(10):
                obs, r, done, info = e.step(0)
                assert info["episode_steps"] == t + 1
                assert done == (t == 9) and info["TimeLimit.truncated"] == (t == 9)
    finally:
        e.close()


def test_room_tracking_via_ram(env):
    env.reset(seed=0)
    _, _, _, info = env.step(0)
    assert info["room"] == 1 and info["rooms"] == [1] and info["level"] == 0
    assert info["lives"] == 6 and info["score"] == 0.0
    env.ale.setRAM(3, 0)  # RND's MontezumaInfoWrapper reads the room from ram[3]
    _, _, _, info = env.step(0)
    assert info["room"] == 0 and info["rooms"] == [0, 1]
    env.ale.setRAM(3, 4)
    _, _, _, info = env.step(0)
    assert info["room"] == 4 and info["rooms"] == [0, 1, 4]
    metrics = episode_metrics(info)
    assert metrics["rooms"] == 3 and metrics["room_mask"] == 2**0 + 2**1 + 2**4
    assert rooms_of_mask(metrics["room_mask"]) == [0, 1, 4] and rooms_mask([]) == 0
    env.reset(seed=0)  # a new episode forgets the visited rooms
    _, _, _, info = env.step(0)
    assert info["rooms"] == [1]
    assert type(info["room"]) is int and all(type(r) is int for r in info["rooms"])
    assert len(pickle.dumps(info)) < 400


def test_player_position_is_on_the_sprite():
    """``player_position`` (RAM bytes 42/43 mapped to the screen) lands on Panama Joe's sprite, found by
    its red (200, 72, 72) pixels below the score line, in the frames of a random walk in room 1."""
    rng = np.random.default_rng(0)
    hits = seen = 0
    with make_env(sticky_prob=0.0) as e:
        e.reset(seed=0)
        for _ in range(600):
            _, _, done, _ = e.step(int(rng.integers(18)))
            if done:
                e.reset()
            red = np.all(e.rgb_frame() == (200, 72, 72), axis=-1)
            red[:40] = False  # the lives and the score
            rows, cols = np.nonzero(red)
            room, col, row = e.player_position()
            if room != 1 or not len(cols):
                continue
            seen += 1
            hits += cols.min() - 4 <= col <= cols.max() + 4 and rows.min() - 6 <= row <= rows.max() + 6
    assert seen > 300 and hits >= 0.95 * seen, (hits, seen)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(max_episode_steps=0), "0"),
        (dict(max_episode_steps=-5), "-5"),
        (dict(max_episode_steps=2.5), "2.5"),
        (dict(sticky_prob=-0.1), "-0.1"),
        (dict(sticky_prob=1.5), "1.5"),
        (dict(sticky_prob="high"), "'high'"),
    ],
)
def test_bad_arguments_rejected(kwargs, needle):
    with pytest.raises(ValueError) as err:
        MontezumaEnv(**kwargs)
    assert needle in str(err.value)


def test_bad_action_rejected(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match="18"):
        env.step(18)


def test_factory_pickles():
    f = pickle.loads(pickle.dumps(functools.partial(make_env, sticky_prob=0.0, max_episode_steps=5)))
    e = f()
    try:
        assert e.sticky_prob == 0.0 and e.max_episode_steps == 5
    finally:
        e.close()


def test_recording(tmp_path):
    import imageio.v2 as imageio

    path = str(tmp_path / "videos" / "mr.mp4")
    with make_env(record_path=path) as e:
        e.reset(seed=0)
        for _ in range(6):
            e.step(RIGHT)
        assert not os.path.exists(path)
    assert os.path.exists(path) and not os.path.exists(path + ".tmp.mp4")
    reader = imageio.get_reader(path)
    try:
        frames = [f for f in reader]
    finally:
        reader.close()
    assert len(frames) == 1 + 6 * 4 and frames[0].shape == (210, 160, 3)


def test_an_episode_replays_from_its_state_and_bad_states_are_refused():
    """``get_state`` is the episode's start stream and actions; ``set_state`` on another env replays it:
    the same observations, rewards, rooms and counters from there on."""
    a = make_env(max_episode_steps=500)
    a.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(250):
        a.step(int(rng.integers(18)))
    state = a.get_state()
    assert state["actions"].dtype == np.uint8 and len(state["actions"]) == 250
    b = make_env(max_episode_steps=500)
    b.reset(seed=77)
    np.testing.assert_array_equal(b.set_state(state), a.stack.frames)
    for action in rng.integers(18, size=100):
        (oa, ra, da, ia), (ob, rb, db, ib) = a.step(int(action)), b.step(int(action))
        np.testing.assert_array_equal(oa, ob)
        assert (ra, da, ia) == (rb, db, ib)
        if da:
            break
    with pytest.raises(ValueError, match="fewer than 500"):
        b.set_state({**state, "actions": np.zeros(500, np.uint8)})
    with pytest.raises(ValueError, match=r"expected uint8\[n\]"):
        b.set_state({**state, "actions": np.zeros(5, np.float32)})
    with pytest.raises(ValueError, match=r"\[0.25, 500.0\] cannot be replayed with \[0.25, 4500\]"):
        make_env().set_state(state)
    with pytest.raises(ValueError, match=r"action must be in \[0, 18\)"):
        b.set_state({**state, "actions": np.array([3, 40], np.uint8)})
    a.close()
    b.close()
