"""The frame steps every pixel game shares, as small parts a game composes (numpy and cv2, no Paddle).

* ``FrameSkip(skip, pool)``: one agent step repeats the action on ``skip`` emulator frames, sums
  their rewards, stops at the episode's end, and max-pools the last ``pool`` frames it grabbed.
* ``GrayResize(size, interpolation, crop, threshold)``: an RGB screen to one small gray frame.
* ``FrameStack(n, frame_shape, fill)``: the last ``n`` frames as one uint8 observation.

The sources differ only in the parameters, and each game passes its source's: the Mario tutorial
pools the last 2 of 4 frames *after* gray-resizing them (bilinear) and fills a new stack with copies
of the first frame; the RND recipe for Montezuma pools the last 2 raw RGB screens *before* (area
interpolation); SRL's Pong processor crops, resizes, thresholds, and fills a new stack with zeros,
while ALE itself skips 7 frames. Where the pooling happens is the game's choice of what
``FrameSkip``'s ``grab`` returns. The env tests (``tests/test_*_env.py``) pin each game's frames
against its source; ``tests/test_frames.py`` pins these parts.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

INTERPOLATIONS = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA}
FILLS = ("repeat", "zeros")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class FrameSkip:
    """Repeat one action on ``skip`` emulator frames; sum the rewards; max-pool the last ``pool`` grabs.

    ``step(act, grab)`` calls ``act(i)`` for frame ``i`` = 0, 1, ... (it advances the emulator one
    frame and returns ``(reward, ended)``) until ``skip`` frames have run or one ended the episode,
    and ``grab(k)`` after each of the last ``pool`` frames (``k`` counts the grabs from 0; a game
    grabbing into preallocated buffers uses it). An episode that ends before the first of those
    frames is grabbed once, after its last frame. Returns ``(pooled frame, summed reward, ended,
    frames run)``; the pooled frame is the pixel-wise maximum of the grabs, or the one grab itself
    (a game's own buffer: copy it if it must outlive the next step).
    """

    def __init__(self, skip: int, pool: int = 2):
        self.skip, self.pool = _positive_int("skip", skip), _positive_int("pool", pool)
        if self.pool > self.skip:
            raise ValueError(f"pool must be at most skip ({self.skip}), got {pool!r}")

    def step(self, act: Callable[[int], tuple], grab: Callable[[int], np.ndarray]):
        total, ended, grabs, i = 0.0, False, [], 0
        for i in range(self.skip):
            reward, ended = act(i)
            total += reward
            if i >= self.skip - self.pool:
                grabs.append(grab(len(grabs)))
            if ended:
                break
        if not grabs:  # ended before the pooled frames: the terminal frame alone
            grabs.append(grab(0))
        frame = grabs[0]
        for other in grabs[1:]:
            frame = np.maximum(frame, other)
        return frame, total, ended, i + 1


class GrayResize:
    """RGB ``uint8[H, W, 3]`` -> gray ``uint8[size, size]``: cv2's RGB2GRAY, an optional crop
    ``(top, left, bottom, right)``, ``cv2.resize`` with ``interpolation`` ("linear", cv2's default,
    or "area"), and an optional ``threshold`` (values above it become 255, the rest 0)."""

    def __init__(
        self, size: int = 84, interpolation: str = "linear", crop: tuple | None = None, threshold: int | None = None
    ):
        self.size = _positive_int("size", size)
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {sorted(INTERPOLATIONS)}, got {interpolation!r}")
        if crop is not None and (len(crop) != 4 or not (crop[0] < crop[2] and crop[1] < crop[3])):
            raise ValueError(f"crop must be (top, left, bottom, right) (top < bottom, left < right), got {crop!r}")
        self.interpolation, self.crop, self.threshold = INTERPOLATIONS[interpolation], crop, threshold

    def __call__(self, rgb: np.ndarray) -> np.ndarray:
        # a strided view (nes-py's channel-reversed screen) must be made contiguous for cv2
        return self._finish(cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY))

    def from_bgrx(self, bgrx: np.ndarray) -> np.ndarray:
        """The same for an emulator's BGRx memory ``uint8[H, W, 4]`` read in place (same gray values)."""
        return self._finish(cv2.cvtColor(bgrx, cv2.COLOR_BGRA2GRAY))

    def _finish(self, gray: np.ndarray) -> np.ndarray:
        if self.crop is not None:
            top, left, bottom, right = self.crop
            gray = gray[top:bottom, left:right]
        small = cv2.resize(gray, (self.size, self.size), interpolation=self.interpolation)
        if self.threshold is not None:
            small = np.where(small > self.threshold, 255, 0).astype(np.uint8)
        return small


class FrameStack:
    """The last ``n`` frames, newest last, as ``uint8[n * C, H, W]`` for frames ``uint8[C, H, W]``
    (or ``[n, H, W]`` for 2-D frames ``[H, W]``).

    ``reset(frame)`` starts an episode: ``fill="repeat"`` puts the frame in every slot (the Mario
    tutorial, MiniGrid here), ``"zeros"`` puts it after zero frames (SRL's window, and the RND
    authors' code). ``push(frame)`` shifts the stack by one frame. Both return a copy; ``frames`` is the
    live array.
    """

    def __init__(self, n: int, frame_shape: tuple, fill: str = "repeat"):
        self.n = _positive_int("n", n)
        if fill not in FILLS:
            raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
        if len(frame_shape) not in (2, 3):
            raise ValueError(f"frame_shape must be (H, W) or (C, H, W), got {frame_shape!r}")
        self.fill = fill
        self.channels = 1 if len(frame_shape) == 2 else int(frame_shape[0])
        self.frames = np.zeros((self.n * self.channels, *frame_shape[-2:]), np.uint8)

    @property
    def shape(self) -> tuple:
        return self.frames.shape

    def reset(self, frame: np.ndarray) -> np.ndarray:
        frame = np.asarray(frame, np.uint8).reshape(self.channels, *self.frames.shape[1:])
        if self.fill == "repeat":
            self.frames[:] = np.tile(frame, (self.n, 1, 1))
        else:
            self.frames[:] = 0
            self.frames[-self.channels :] = frame
        return self.frames.copy()

    def push(self, frame: np.ndarray) -> np.ndarray:
        c = self.channels
        self.frames[:-c] = self.frames[c:]
        self.frames[-c:] = np.asarray(frame, np.uint8).reshape(c, *self.frames.shape[1:])
        return self.frames.copy()
