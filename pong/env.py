"""Atari Pong as the SND article runs it (gymnasium ``ALE/Pong-v5`` + SRL's ``AtariPongProcessor``); no Paddle.

The article's runner (``snd_article.ja.txt``, ``train(name)``)::

    srl.EnvConfig("ALE/Pong-v5", kwargs=dict(frameskip=7, repeat_action_probability=0,
                                             full_action_space=False))
    env_config.processors = [AtariPongProcessor()]

* ``ALE/Pong-v5`` with ``frameskip=7`` (the text says 8; the code, which we follow, 7):
  each agent step repeats the action on 7 emulator frames and sums their rewards; the
  observation is the last frame (no max-pooling). ``repeat_action_probability=0``: no
  sticky actions. The minimal 6-action set (NOOP, FIRE, RIGHT, LEFT, RIGHTFIRE,
  LEFTFIRE). ALE's own limit of 108,000 emulator frames per episode stays (then
  ``info["TimeLimit.truncated"]``).
* ``AtariPongProcessor`` (SRL v0.16.x ``srl/rl/processors/atari_processor.py``, read from
  pocokhc/simple_distributed_rl): RGB -> gray (``cv2.COLOR_RGB2GRAY``), crop rows 35..194
  and columns 10..149 (``trimming=(35, 10, 195, 150)``: the score above and the walls go),
  ``cv2.resize`` to 84x84 (bilinear, cv2's default), binarize ``> 127 -> 255`` else 0.
  It counts *points played* (either side's: reward +1 or -1) and ends the game at 5
  (a full game ends when one side reaches 21): an episode's return is in [-5, 5].
* SRL's ``window_length=4``: the observation is the last 4 processed frames, uint8
  ``[4, 84, 84]``; at reset SRL fills the window with zero ("dummy") states, so the
  first observation is ``[0, 0, 0, f_0]``.

``info``: ``points_for``, ``points_against`` (this episode), ``score`` (their
difference, the episode's return so far), ``episode_steps``, ``TimeLimit.truncated``.
"""

from __future__ import annotations

import numpy as np

from common.envs.frames import FrameStack, GrayResize
from common.envs.game_env import GameEnv

ENV_ID = "ALE/Pong-v5"
OBS_SIZE = 84
STACK = 4
CROP = (35, 10, 195, 150)  # SRL's trimming: (top, left, bottom, right)
ACTIONS = ("NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE")
RECORD_FPS = 60


process_frame = GrayResize(OBS_SIZE, "linear", crop=CROP, threshold=127)
"""RGB ``uint8[210, 160, 3]`` -> binarized ``uint8[84, 84]`` (values 0 and 255): SRL's AtariPongProcessor."""


def validate_args(frameskip, repeat_action_probability, max_points, stack) -> None:
    """Raise ``ValueError`` naming the bad value; called before the emulator exists."""
    for name, v in (("frameskip", frameskip), ("max_points", max_points), ("stack", stack)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    try:
        p = float(repeat_action_probability)
    except (TypeError, ValueError):
        raise ValueError(
            f"repeat_action_probability must be a number in [0, 1], got {repeat_action_probability!r}"
        ) from None
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"repeat_action_probability must be in [0, 1], got {repeat_action_probability!r}")


class PongEnv(GameEnv):
    """Pong, the article's settings; obs uint8 ``[stack, 84, 84]`` (0/255), 6 actions.

    ``step(a)`` returns ``(obs, reward, done, info)``; ``done`` when ``max_points`` points
    have been played or ALE's frame limit is reached (then ``info["TimeLimit.truncated"]``).
    """

    num_actions = len(ACTIONS)

    def __init__(
        self,
        record_path: str | None = None,
        frameskip: int = 7,
        repeat_action_probability: float = 0.0,
        max_points: int = 5,
        stack: int = STACK,
    ):
        validate_args(frameskip, repeat_action_probability, max_points, stack)
        try:
            import ale_py
            import gymnasium
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "Pong needs ale-py and gymnasium: `pip install 'ale-py>=0.9' gymnasium` (ale-py bundles the Atari ROMs)"
            ) from exc
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        gymnasium.register_envs(ale_py)
        self.env = gymnasium.make(
            ENV_ID,
            frameskip=int(frameskip),
            repeat_action_probability=float(repeat_action_probability),
            full_action_space=False,
        )
        meanings = tuple(self.env.unwrapped.get_action_meanings())
        if meanings != ACTIONS:  # pragma: no cover - a different ale-py
            raise RuntimeError(f"unexpected Pong action set {meanings}; expected {ACTIONS}")
        self.max_points = int(max_points)
        self.stack = FrameStack(stack, (OBS_SIZE, OBS_SIZE), fill="zeros")  # SRL's window of zero "dummy" states
        self.observation_shape = self.stack.shape
        self._rgb = None
        self._points = [0, 0]
        self._steps = 0
        super().__init__(record_path, fps=max(1, RECORD_FPS // int(frameskip)))

    def _screen(self, frame_rgb: np.ndarray) -> np.ndarray:
        self._rgb = frame_rgb
        self._record(frame_rgb)
        return process_frame(frame_rgb)

    def _info(self, truncated: bool) -> dict:
        return {
            "points_for": self._points[0],
            "points_against": self._points[1],
            "score": float(self._points[0] - self._points[1]),
            "episode_steps": self._steps,
            "TimeLimit.truncated": bool(truncated),
        }

    def reset(self, seed: int | None = None) -> np.ndarray:
        self._begin_reset()
        frame, _ = self.env.reset(seed=None if seed is None else int(seed))
        self._points = [0, 0]
        self._steps = 0
        self._needs_reset = False
        return self.stack.reset(self._screen(frame))

    def step(self, action: int):
        action = self._begin_step(action)
        frame, reward, terminated, truncated, _ = self.env.step(action)  # ALE skips the frames (frameskip)
        obs = self.stack.push(self._screen(frame))
        self._steps += 1
        if reward > 0:
            self._points[0] += 1
        elif reward < 0:
            self._points[1] += 1
        terminated = bool(terminated) or sum(self._points) >= self.max_points
        truncated = bool(truncated) and not terminated
        done = terminated or truncated
        if done:
            self._needs_reset = True
        return obs, float(reward), done, self._info(truncated)

    def rgb_frame(self) -> np.ndarray:
        """The current screen, uint8 ``[210, 160, 3]`` RGB (a copy)."""
        return np.array(self._rgb, copy=True)

    def _close_backend(self) -> None:
        self.env.close()


def make_env(
    record_path: str | None = None,
    frameskip: int = 7,
    repeat_action_probability: float = 0.0,
    max_points: int = 5,
    stack: int = STACK,
) -> PongEnv:
    """Picklable module-level factory."""
    return PongEnv(
        record_path=record_path,
        frameskip=frameskip,
        repeat_action_probability=repeat_action_probability,
        max_points=max_points,
        stack=stack,
    )
