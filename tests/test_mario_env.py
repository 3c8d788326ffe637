"""MarioEnv against the real NES emulator (no mocks of the game)."""

import functools
import os
import pickle

import cv2
import numpy as np
import pytest

import mario.env as menv
from mario.env import ACTION_SETS, MarioEnv, make_env, process_frame

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

# A fixed SIMPLE_MOVEMENT sequence on 1-1 that scores (a coin block: +200, then
# more) and then dies (done after 94 agent steps). Found once with a seeded random
# search over {right, right+A, right+A+B, A}; the emulator is deterministic.
SCORING_RUN = "2455115512522522441155545225121251225142151222154514245241252421242524552144522124551452254444"


class FrameSpy:
    """Sits between MarioEnv and the JoypadSpace: records every emulator frame."""

    def __init__(self, inner):
        self.inner = inner
        self.log = []  # (processed frame, raw reward, score, done, info)

    def step(self, action):
        frame, reward, done, info = self.inner.step(action)
        self.log.append((process_frame(frame), reward, info["score"], done, dict(info)))
        return frame, reward, done, info

    def reset(self):
        self.log.clear()
        return self.inner.reset()

    def close(self):
        return self.inner.close()


@pytest.fixture(scope="module")
def env():
    e = MarioEnv(world=1, stage=1, action_type="simple")
    yield e
    e.close()


def test_reset_obs_shape_dtype_and_stack(env):
    obs = env.reset()
    assert MarioEnv.observation_shape == (4, 84, 84)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all((obs[k] == obs[0]).all() for k in range(4))
    assert obs.max() > obs.min()  # a real picture, not zeros
    assert env.num_actions == len(ACTION_SETS["simple"]) == 7
    assert {k: len(v) for k, v in ACTION_SETS.items()} == {"right": 5, "simple": 7, "complex": 12}


def test_process_frame_matches_tutorial_ops():
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=(240, 256, 3), dtype=np.uint8)
    out = process_frame(frame)
    assert out.shape == (1, 84, 84) and out.dtype == np.uint8
    ref = cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(out[0], ref)
    # the tutorial's float frame is exactly ours / 255
    np.testing.assert_allclose(out / 255.0, cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), (84, 84))[None] / 255.0)
    # nes-py's screen: a BGRx buffer viewed as [:, :, ::-1][:, :, 1:] (strided, reversed)
    bgrx = np.zeros((240, 256, 4), np.uint8)
    bgrx[..., :3] = frame[..., ::-1]
    view = bgrx[:, :, ::-1][:, :, 1:]
    assert not view.flags["C_CONTIGUOUS"] and (view == frame).all()
    np.testing.assert_array_equal(process_frame(view), out)
    assert process_frame(None).shape == (1, 84, 84)


def test_screen_read_in_place_equals_process_frame(env):
    """MarioEnv reads the emulator's BGRx memory in place (mario.env.bgrx_view): the same gray frames as
    process_frame on nes-py's RGB view, screen after screen of a real episode."""
    assert env._bgrx is not None  # little-endian x86 / ARM: the fast path is the one that runs
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(150):
        _, _, done, _ = env.step(int(rng.integers(0, env.num_actions)))
        np.testing.assert_array_equal(env._gray(env.unwrapped.screen), process_frame(env.unwrapped.screen)[0])
        if done:
            env.reset()
    from mario.env import bgrx_view

    assert bgrx_view(np.zeros((240, 256, 3), np.uint8)) is None  # any other layout: the copying path


def test_tutorial_reward_skip_max_stack_on_scripted_episode(env):
    spy = FrameSpy(env.env)
    env.env = spy
    try:
        prev = env.reset()
        prev_score, saw_score_delta, done = 0, False, False
        for t, a in enumerate(SCORING_RUN):
            spy.log.clear()
            step_start_score = prev_score
            obs, reward, done, info = env.step(int(a))
            frames = spy.log
            assert 1 <= len(frames) <= 4 and (len(frames) == 4 or done)
            # CustomReward per frame, then summed by CustomSkipFrame
            expected = 0.0
            for _, raw, score, fdone, finfo in frames:
                r = raw + (score - prev_score) / 40.0
                saw_score_delta |= score != prev_score
                prev_score = score
                if fdone:
                    r += (50 + finfo["time"]) if finfo["flag_get"] else -50
                expected += r / 10.0
            assert reward == pytest.approx(expected, abs=1e-9), t
            # stack shift + max over the last two processed frames
            np.testing.assert_array_equal(obs[:3], prev[1:])
            last = [f for f in frames[2:]] or [frames[-1]]
            np.testing.assert_array_equal(obs[3], np.max(np.concatenate([f[0] for f in last]), 0))
            assert info["score"] == frames[-1][2]
            prev = obs
            if done:
                break
        assert done and t == len(SCORING_RUN) - 1, "the scripted run should die on its last step"
        assert saw_score_delta and info["score"] >= 200
        assert not info["flag_get"]
        # the last step's reward = its shaped frames without the end term, minus 50/10
        shaped = sum(raw for _, raw, _, _, _ in frames) / 10.0 + (frames[-1][2] - step_start_score) / 400.0
        assert reward == pytest.approx(shaped - 5.0)
        with pytest.raises(RuntimeError, match="reset"):
            env.step(0)
    finally:
        env.env = spy.inner


def test_walking_right_dies_into_goomba_minus_50_over_10(env):
    first = env.reset()
    rewards = []
    for _ in range(60):
        obs, r, done, info = env.step(1)  # right
        rewards.append(r)
        if done:
            break
    # 40: the agent step at which the first Goomba meets Mario when he only walks right, read once off
    # the (deterministic) emulator; another count means a wrapper changed what one agent step is
    assert done and len(rewards) == 40 and not info["flag_get"] and info["score"] == 0
    # last frame: death penalty clipped to -15 by nes-py, then the tutorial's -50; /10
    assert rewards[-1] < -5.0
    # determinism: the same actions give the same episode
    assert (env.reset() == first).all()
    again = [env.step(1)[1] for _ in range(40)]
    assert again == rewards


def test_flag_branch_adds_50_plus_time(env):
    env.reset()
    env.step(0)
    env.unwrapped.ram[0x0770] = 2  # OperMode "victory": gym-super-mario-bros' flag_get
    obs, reward, done, info = env.step(0)  # NOOP: zero raw reward, zero score delta
    assert done and info["flag_get"]
    assert reward == pytest.approx((50 + info["time"]) / 10.0)


def test_x_max_keeps_the_farthest_x_pos_of_the_episode(env):
    """x_pos starts again in 1-1's coin room (RAM poked as it reads there); x_max keeps the farthest."""
    env.reset()
    for _ in range(20):
        info = env.step(1)[3]  # right
    far = info["x_pos"]
    assert info["x_max"] == far > 40
    env.unwrapped.ram[0x6D], env.unwrapped.ram[0x86] = 0, 24  # the page and the x within it
    info = env.step(0)[3]
    assert info["x_pos"] < far and info["x_max"] == far
    env.reset()
    info = env.step(0)[3]
    assert info["x_max"] == info["x_pos"] < far


def test_info_is_plain_python_and_pickles_small(env):
    env.reset()
    obs, reward, done, info = env.step(1)
    assert set(menv.INFO_KEYS) <= set(info)
    for k, v in info.items():
        assert type(v) in (int, bool, str, float), (k, type(v))
    assert isinstance(reward, float) and isinstance(done, bool)
    assert len(pickle.dumps((obs, reward, done, info))) < 29_000


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(world=9), "9"),
        (dict(world=0), "0"),
        (dict(stage=0), "0"),
        (dict(stage=5), "5"),
        (dict(action_type="jump"), "'jump'"),
        (dict(world="1"), "'1'"),
    ],
)
def test_bad_arguments_rejected_before_emulator(monkeypatch, kwargs, needle):
    class NoEmulator:
        def SuperMarioBrosEnv(self, *a, **k):  # noqa: N802
            raise AssertionError("emulator created before validation")

    monkeypatch.setattr(menv, "_smb", NoEmulator())
    with pytest.raises(ValueError) as err:
        MarioEnv(**kwargs)
    msg = str(err.value)
    assert needle in msg
    assert ("1-8" in msg) or ("1-4" in msg) or ("right" in msg and "simple" in msg and "complex" in msg)


def test_other_stages_and_action_sets_build():
    e = make_env(world=8, stage=4, action_type="right")
    try:
        obs = e.reset()
        obs, r, d, info = e.step(0)
        assert (info["world"], info["stage"]) == (8, 4) and e.num_actions == 5
    finally:
        e.close()


def test_factory_pickles():
    f = functools.partial(make_env, world=1, stage=1, action_type="complex")
    g = pickle.loads(pickle.dumps(f))
    e = g()
    try:
        assert e.num_actions == 12
    finally:
        e.close()


def test_recording_writes_every_emulator_frame(tmp_path):
    import imageio.v2 as imageio

    path = str(tmp_path / "sub" / "mario.mp4")
    e = MarioEnv(record_path=path)
    e.reset()
    for _ in range(5):
        e.step(1)
    assert not os.path.exists(path)  # only finalized on close
    e.close()
    e.close()  # idempotent
    assert os.path.exists(path) and not os.path.exists(path + ".tmp.mp4")
    reader = imageio.get_reader(path)
    try:
        frames = [f for f in reader]
        assert reader.get_meta_data()["fps"] == 60
    finally:
        reader.close()
    assert len(frames) == 1 + 5 * 4
    assert frames[0].shape == (240, 256, 3)


def test_an_episode_replays_from_its_actions_and_bad_states_are_refused():
    """``get_state`` is the episode's actions (the emulator is deterministic); ``set_state`` on another
    env replays them: the same observations, rewards and infos from there on."""
    a, b = make_env(), make_env()
    a.reset()
    rng = np.random.default_rng(0)
    for _ in range(120):
        a.step(int(rng.integers(a.num_actions)))
    state = a.get_state()
    assert state["actions"].dtype == np.uint8 and len(state["actions"]) == 120 and state["level"] == "1-1 simple"
    b.reset()
    np.testing.assert_array_equal(b.set_state(state), a.stack.frames)
    for action in rng.integers(a.num_actions, size=60):
        (oa, ra, da, ia), (ob, rb, db, ib) = a.step(int(action)), b.step(int(action))
        np.testing.assert_array_equal(oa, ob)
        assert (ra, da, ia) == (rb, db, ib)
        if da:
            break
    # an episode after a death (holding "right" runs into the first Goomba): the replay starts from the same reset
    right = ACTION_SETS["simple"].index(["right"])
    while not a.step(right)[2]:
        pass
    a.reset()
    for action in rng.integers(a.num_actions, size=30):
        a.step(int(action))
    c = make_env()
    c.reset()
    np.testing.assert_array_equal(c.set_state(a.get_state()), a.stack.frames)
    np.testing.assert_array_equal(c.unwrapped.ram, a.unwrapped.ram)
    c.close()
    with pytest.raises(ValueError, match="played on '1-1 simple' cannot be replayed on '1-2 simple'"):
        make_env(stage=2).set_state(state)
    with pytest.raises(ValueError, match=r"expected uint8\[n\]"):
        b.set_state({**state, "actions": np.zeros(3, np.int64)})
    a.close()
    b.close()
