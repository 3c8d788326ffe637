"""The shared frame parts (common/envs/frames.py) on hand-made frames; each game's env test pins them
against its source."""

import cv2
import numpy as np
import pytest

from common.envs.frames import FrameSkip, FrameStack, GrayResize


def _episode(rewards, end_at=None):
    """act/grab over a scripted emulator: frame i's screen is filled with a value per frame."""
    log = {"acted": [], "grabbed": []}
    screens = [np.full((2, 3), v, np.uint8) for v in (5, 9, 7, 3)]

    def act(i):
        log["acted"].append(i)
        return rewards[i], end_at == i

    def grab(k):
        i = log["acted"][-1]
        log["grabbed"].append((k, i))
        return screens[i]

    return act, grab, log


def test_frame_skip_sums_rewards_and_pools_the_last_two_frames():
    act, grab, log = _episode([1.0, 0.5, 0.0, 2.0])
    frame, reward, ended, frames = FrameSkip(4, pool=2).step(act, grab)
    assert reward == 3.5 and not ended and frames == 4
    assert log["grabbed"] == [(0, 2), (1, 3)]
    np.testing.assert_array_equal(frame, np.full((2, 3), 7, np.uint8))  # max(7, 3)


@pytest.mark.parametrize("end_at, grabbed, value", [(0, [(0, 0)], 5), (1, [(0, 1)], 9), (2, [(0, 2)], 7)])
def test_an_early_end_stops_and_grabs_what_it_can(end_at, grabbed, value):
    act, grab, log = _episode([1.0, 1.0, 1.0, 1.0], end_at=end_at)
    frame, reward, ended, frames = FrameSkip(4, pool=2).step(act, grab)
    assert ended and frames == end_at + 1 and reward == end_at + 1.0
    assert log["acted"] == list(range(end_at + 1)) and log["grabbed"] == grabbed
    assert frame.max() == value


def test_pool_one_is_the_last_frame_and_bad_settings_are_named():
    act, grab, log = _episode([0.0] * 4)
    frame, _, _, _ = FrameSkip(4, pool=1).step(act, grab)
    assert log["grabbed"] == [(0, 3)] and frame.max() == 3
    for kwargs, needle in (({"skip": 0}, "skip"), ({"skip": 2, "pool": 3}, "pool"), ({"skip": True}, "skip")):
        with pytest.raises(ValueError, match=needle):
            FrameSkip(**kwargs)


def test_gray_resize_is_cv2s_ops_and_reads_bgrx_the_same():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (60, 50, 3), dtype=np.uint8)
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    np.testing.assert_array_equal(GrayResize(21)(rgb), cv2.resize(gray, (21, 21)))
    area = cv2.resize(gray, (21, 21), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(GrayResize(21, "area")(rgb), area)
    cropped = cv2.resize(gray[5:40, 2:30], (21, 21))
    np.testing.assert_array_equal(GrayResize(21, crop=(5, 2, 40, 30))(rgb), cropped)
    binary = GrayResize(21, threshold=127)(rgb)
    np.testing.assert_array_equal(binary, np.where(cv2.resize(gray, (21, 21)) > 127, 255, 0))
    assert binary.dtype == np.uint8 and set(np.unique(binary)) <= {0, 255}
    bgrx = np.concatenate([rgb[:, :, ::-1], np.zeros((60, 50, 1), np.uint8)], axis=2)
    np.testing.assert_array_equal(GrayResize(21).from_bgrx(bgrx), GrayResize(21)(rgb))
    np.testing.assert_array_equal(GrayResize(21)(rgb[:, :, ::-1][:, :, ::-1]), GrayResize(21)(rgb))  # strided views
    with pytest.raises(ValueError, match="interpolation"):
        GrayResize(84, "cubic")
    with pytest.raises(ValueError, match="crop"):
        GrayResize(84, crop=(10, 0, 5, 5))


def test_frame_stack_fills_and_shifts_newest_last():
    f = [np.full((2, 2), v, np.uint8) for v in range(1, 6)]
    rep = FrameStack(3, (2, 2), fill="repeat")
    assert rep.shape == (3, 2, 2)
    np.testing.assert_array_equal(rep.reset(f[0])[:, 0, 0], [1, 1, 1])
    rep.push(f[1])
    out = rep.push(f[2])
    np.testing.assert_array_equal(out[:, 0, 0], [1, 2, 3])
    out[:] = 0  # a copy: the stack keeps its frames
    np.testing.assert_array_equal(rep.push(f[3])[:, 0, 0], [2, 3, 4])
    zeros = FrameStack(3, (2, 2), fill="zeros")
    np.testing.assert_array_equal(zeros.reset(f[0])[:, 0, 0], [0, 0, 1])
    np.testing.assert_array_equal(zeros.push(f[1])[:, 0, 0], [0, 1, 2])


def test_frame_stack_of_multi_channel_frames():
    views = [np.full((3, 2, 2), v, np.uint8) for v in range(1, 4)]
    stack = FrameStack(2, (3, 2, 2))
    assert stack.shape == (6, 2, 2)
    np.testing.assert_array_equal(stack.reset(views[0])[:, 0, 0], [1] * 6)
    np.testing.assert_array_equal(stack.push(views[1])[:, 0, 0], [1, 1, 1, 2, 2, 2])
    one = FrameStack(1, (3, 2, 2))
    np.testing.assert_array_equal(one.push(views[2]), views[2])
    with pytest.raises(ValueError, match="fill"):
        FrameStack(2, (2, 2), fill="first")
    with pytest.raises(ValueError, match="frame_shape"):
        FrameStack(2, (2,))
