"""Super Mario Bros environment, faithful to the tutorial's ``game_env.py`` (no Paddle).

One ``MarioEnv`` is the tutorial's ``JoypadSpace -> CustomReward -> CustomSkipFrame``
stack on ``SuperMarioBros-<world>-<stage>-v0``:

* frames: RGB -> gray (cv2) -> 84x84 (cv2 default INTER_LINEAR), see ``process_frame``;
* skip 4: the action is repeated for 4 emulator frames, rewards summed, the new
  stack entry is the pixel-wise max of the last two processed frames, and the
  stack of 4 shifts by one; ``reset`` fills the stack with 4 copies of the frame;
* reward (``CustomReward``): per emulator frame
  ``r = env_reward + (score - prev_score) / 40``, plus at the episode's end
  ``+50 + info["time"]`` if the flag was reached, else ``-50``; then ``r / 10``.
  The agent-step reward is the sum over the 4 frames.

Deviations from the tutorial (all deliberate):

1. Observations stay ``uint8`` (0..255); the tutorial divides by 255 here. Networks
   scale to float themselves; a stacked observation is 28 KB instead of 113 KB
   (float32), which matters when workers pickle them through pipes.
2. On ``done`` the tutorial's ``CustomSkipFrame`` resets inside the wrapper and returns
   the *reset* stack as the observation of the terminal step. We return the true
   terminal stack and leave resetting to the caller (the vector env auto-resets and
   keeps the terminal observation in ``info``). If the episode ends on the first or
   second of the 4 frames (before the two max-pooled frames), the new stack entry
   is that last frame alone.
3. An unknown ``action_type`` raises ``ValueError`` (the tutorial silently plays
   COMPLEX_MOVEMENT for any string that is not "right"/"simple").
4. ``gym_super_mario_bros.make`` is not used: on gym 0.26 it wraps a ``TimeLimit``
   that expects 5-tuples and breaks on nes-py's 4-tuples. We build
   ``SuperMarioBrosEnv(rom_mode="vanilla", target=(world, stage))`` (exactly what the
   ``SuperMarioBros-W-S-v0`` registration passes) and nes-py's ``JoypadSpace``.
5. Recording uses ``common.envs.video.VideoRecorder`` (libx264 via imageio) instead of a
   hand-built ``ffmpeg`` pipe; it also records the reset frame.

The emulator is deterministic: ``reset(seed)`` accepts a seed for API symmetry with
Montezuma but the trajectory depends only on the actions.

Done semantics (gym-super-mario-bros single-stage env): the episode ends when Mario
starts dying (enemy, pit, time out) or gets the flag; losing a life is terminal. The game's clock
running out is a death here, not a time limit: ``info`` never says ``TimeLimit.truncated``.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import sys

import numpy as np

from common.envs.frames import FrameSkip, FrameStack, GrayResize
from common.envs.game_env import GameEnv

OBS_SIZE = 84
FRAME_SKIP = 4
STACK = 4
RECORD_FPS = 60
INFO_KEYS = ("coins", "flag_get", "life", "score", "stage", "status", "time", "world", "x_pos", "y_pos")


def _import_mario():
    """Import gym-super-mario-bros / nes-py, muting gym 0.26's import-time notice.

    Two stacks are supported: gym 0.26 with nes-py 8 and gym-super-mario-bros 7 (Python 3.10-3.12,
    numpy 1: AI Studio's), and gymnasium with nes-py 9 and gym-super-mario-bros 9 (Python 3.13,
    numpy 2), which has no gym. On the first, ``import gym`` prints a multi-line "Gym has been
    unmaintained" notice to stderr (via gym_notices); every env worker would print it. Only that
    first import's printed text is swallowed; exceptions still propagate.
    """
    if "gym" not in sys.modules:
        with contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(ImportError):  # the gymnasium stack has no gym
                import gym  # noqa: F401
    import gym_super_mario_bros
    from gym_super_mario_bros import actions
    from nes_py.wrappers import JoypadSpace

    return gym_super_mario_bros, actions, JoypadSpace


_smb, _actions, _JoypadSpace = _import_mario()


class _ClassicSteps:
    """A JoypadSpace seen through the 4-tuple API on both stacks: ``step(a) -> (frame, reward, done, info)``,
    ``reset() -> frame``; the info holds ``INFO_KEYS`` only, the fields both stacks report.

    On the gymnasium stack (gym-super-mario-bros 9) ``done`` is ``terminated or truncated`` (a single
    stage never truncates without a TimeLimit), and the reward is gym-super-mario-bros 7's, rebuilt
    from the frame's info: the x_pos change (0 when it jumps by more than 5: a warp or a reset), the
    clock's change (never positive), -25 while Mario dies, clipped to [-15, 15]. Version 9 pays new
    best positions, score, coins, power-ups and the flag instead, which would change the tutorial's
    reward (tests/test_mario_stack.py replays a recorded sequence on both stacks)."""

    def __init__(self, joypad):
        self.inner = joypad
        self._last = None  # (x_pos, time) of the previous frame, on the gymnasium stack

    def _classic_reward(self, info) -> float:
        x, clock = info["x_pos"], info["time"]
        last_x, last_clock = self._last if self._last is not None else (x, clock)
        self._last = (x, clock)
        dx = x - last_x
        reward = (dx if -5 <= dx <= 5 else 0) + min(clock - last_clock, 0)
        if info.get("is_dying") or info.get("is_dead"):
            reward -= 25
        return float(max(-15, min(15, reward)))

    def step(self, action):
        out = self.inner.step(action)
        if len(out) == 5:
            frame, _, terminated, truncated, info = out
            done, reward = terminated or truncated, self._classic_reward(info)
        else:
            frame, reward, done, info = out
        return frame, reward, done, {k: info[k] for k in INFO_KEYS if k in info}

    def reset(self):
        out = self.inner.reset()
        if isinstance(out, tuple):  # gymnasium: (frame, info)
            frame, info = out
            self._last = (info["x_pos"], info["time"])
            return frame
        return out

    def close(self):
        return self.inner.close()


def make_stage(world: int, stage: int, actions):
    """``(raw env, joypad)`` for one stage, on either stack: ``SuperMarioBrosEnv`` of the stage with
    ``rom_mode="vanilla"`` where the package has that argument (gym-super-mario-bros 7; 9 plays the
    vanilla ROM by default), behind nes-py's ``JoypadSpace`` seen as ``_ClassicSteps``."""
    try:
        raw = _smb.SuperMarioBrosEnv(rom_mode="vanilla", target=(world, stage))
    except TypeError:
        raw = _smb.SuperMarioBrosEnv(target=(world, stage))
    return raw, _ClassicSteps(_JoypadSpace(raw, actions))


# name -> list of button combinations (the tutorial's three choices)
ACTION_SETS: dict[str, list] = {
    "right": _actions.RIGHT_ONLY,
    "simple": _actions.SIMPLE_MOVEMENT,
    "complex": _actions.COMPLEX_MOVEMENT,
}


GRAY = GrayResize(OBS_SIZE, "linear")  # the tutorial's cv2 RGB2GRAY and cv2.resize (default INTER_LINEAR)


def process_frame(frame_rgb: np.ndarray) -> np.ndarray:
    """RGB ``[240, 256, 3]`` uint8 -> gray 84x84 uint8 ``[1, 84, 84]``.

    Same operations as the tutorial's ``process_frame`` (``cv2.cvtColor`` RGB2GRAY,
    ``cv2.resize`` to 84x84 with its default INTER_LINEAR) except the final ``/255``:
    we keep uint8 and scale to float only inside the networks. ``None`` (the tutorial's
    guard) gives zeros.
    """
    if frame_rgb is None:
        return np.zeros((1, OBS_SIZE, OBS_SIZE), dtype=np.uint8)
    return GRAY(frame_rgb)[None]


def bgrx_view(screen: np.ndarray) -> np.ndarray | None:
    """The emulator's own BGRx pixels ``uint8[240, 256, 4]`` behind nes-py's RGB ``screen`` view, or None.

    nes-py's screen is ``buffer.reshape(240, 256, 4)[:, :, ::-1][:, :, 1:]`` over the emulator's
    little-endian BGRx memory. ``cv2.cvtColor(BGRA2GRAY)`` reads that memory in place and gives the
    same gray values as ``process_frame`` (same channels, same weights; tests/test_mario_env.py),
    without the copy that makes the strided view contiguous (its cost: docs/performance.md).
    None where the layout is another (a big-endian machine, another nes-py)."""
    h, w = screen.shape[:2]
    if screen.dtype != np.uint8 or screen.strides != (w * 4, 4, -1) or sys.byteorder != "little":
        return None
    base = screen.base
    if isinstance(base, np.ndarray):  # nes-py 8: the view's base is the BGRx array itself
        if base.dtype == np.uint8 and base.flags["C_CONTIGUOUS"] and base.size == h * w * 4:
            return base.reshape(h, w, 4)
        return None
    # nes-py 9: the view lies over the emulator's own memory; the same layout, so its BGRx pixels start 2
    # bytes before the view's first (R = byte 2 of a pixel). The array lives as long as the env holds
    # the emulator (MarioEnv keeps it).
    start = screen.__array_interface__["data"][0] - 2
    return np.frombuffer((ctypes.c_uint8 * (h * w * 4)).from_address(start), np.uint8).reshape(h, w, 4)


def _plain(v):
    """numpy scalar -> Python scalar (infos pickle small and compare simply)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def validate_args(world, stage, action_type) -> None:
    """Raise ``ValueError`` naming the bad value; called before any emulator exists."""
    if isinstance(world, bool) or not isinstance(world, (int, np.integer)) or not 1 <= world <= 8:
        raise ValueError(f"world must be an integer 1-8, got {world!r}")
    if isinstance(stage, bool) or not isinstance(stage, (int, np.integer)) or not 1 <= stage <= 4:
        raise ValueError(f"stage must be an integer 1-4, got {stage!r}")
    if action_type not in ACTION_SETS:
        raise ValueError(f"action_type must be one of {sorted(ACTION_SETS)}, got {action_type!r}")


#: the most actions a Mario episode to replay may hold (its clock ends an episode within about 2,000 steps)
MAX_REPLAY = 10_000


class MarioEnv(GameEnv):
    """Tutorial-faithful Super Mario Bros env; obs uint8 ``[4, 84, 84]``.

    ``step(a)`` returns ``(obs, reward, done, info)`` with ``info`` holding the game's
    fields (x_pos, y_pos, flag_get, score, coins, life, time, world, stage, status)
    as plain Python values, and ``x_max``, the episode's farthest x_pos so far. After ``done`` call
    ``reset()``.
    """

    observation_shape = (STACK, OBS_SIZE, OBS_SIZE)

    def __init__(self, world: int = 1, stage: int = 1, action_type: str = "simple", record_path: str | None = None):
        validate_args(world, stage, action_type)
        self.world, self.stage, self.action_type = int(world), int(stage), action_type
        self.actions = ACTION_SETS[action_type]
        self.num_actions = len(self.actions)
        super().__init__(record_path, fps=RECORD_FPS)
        raw, self.env = make_stage(self.world, self.stage, self.actions)
        self.unwrapped = raw
        # the tutorial's CustomSkipFrame: 4 frames, the max of the last two gray frames, a stack of 4
        self.skip = FrameSkip(FRAME_SKIP, pool=2)
        self.stack = FrameStack(STACK, (OBS_SIZE, OBS_SIZE), fill="repeat")
        self.curr_score = self.x_max = 0
        self._bgrx = bgrx_view(raw.screen)  # the screen's memory, read in place (None: copy the RGB view)
        self._frame, self._info = None, {}
        self._episode_actions: list[int] = []  # what replays the episode (the emulator is deterministic)

    def _gray(self, frame) -> np.ndarray:
        """``process_frame(frame)[0]`` for the emulator's current screen ``frame``, read in place where possible."""
        if self._bgrx is None:
            return GRAY(frame)
        return GRAY.from_bgrx(self._bgrx)

    # -- the tutorial's CustomReward, one emulator frame --------------------------------
    def _frame_step(self, action: int):
        frame, reward, done, info = self.env.step(action)
        self._record(frame)
        reward = float(reward) + (info["score"] - self.curr_score) / 40.0
        self.curr_score = info["score"]
        if done:
            if info["flag_get"]:
                # The seed text (indentation lost) reads, inside `if done:`:
                #   if info["flag_get"]: reward += 50; reward += info["time"]
                #   else: reward -= 50
                # The `else` belongs to `if info["flag_get"]` (on `if done:` it would pay -50 on
                # every step; uvipen's original has it there), so the time
                # bonus sits in the flag branch: reaching the flag adds the remaining
                # game time (e.g. +300 -> +30 after /10).
                reward += 50
                reward += info["time"]
            else:
                reward -= 50
        return frame, reward / 10.0, done, info

    # -- the tutorial's CustomSkipFrame ---------------------------------------------------
    def step(self, action: int):
        action = self._begin_step(action)
        self._episode_actions.append(action)

        def act(_i):
            self._frame, reward, done, self._info = self._frame_step(action)
            return reward, done

        # the tutorial pools `if i >= self.skip / 2` with skip 4: the last two frames, after gray-resizing
        pooled, total_reward, done, _ = self.skip.step(act, lambda _k: self._gray(self._frame))
        obs = self.stack.push(pooled)
        if done:
            self._needs_reset = True
        info = {k: _plain(v) for k, v in self._info.items()}
        # x_pos starts again in 1-1's coin room (through the fourth pipe; its exit is at 2,616):
        # x_max, the farthest x_pos of the episode, is the distance that survives it
        self.x_max = info["x_max"] = max(self.x_max, info.get("x_pos", 0))
        return obs, float(total_reward), bool(done), info

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode; ``seed`` is accepted and ignored (deterministic emulator)."""
        self._begin_reset()
        frame = self.env.reset()
        self._record(frame)
        self.curr_score = self.x_max = 0
        self._needs_reset = False
        self._episode_actions = []
        return self.stack.reset(self._gray(frame))

    def get_state(self) -> dict:
        """The episode in progress as what replays it: its actions (the emulator is deterministic)."""
        return {"actions": np.array(self._episode_actions, np.uint8), "level": self._level()}

    def set_state(self, state: dict) -> np.ndarray:
        """Replay the episode of ``get_state`` (a new episode, then its actions); returns its observation.
        Only actions reach the emulator: no bytes of a file."""
        level = str(state["level"])
        if level != self._level():
            raise ValueError(f"a Mario episode played on {level!r} cannot be replayed on {self._level()!r}")
        return self._replay(state["actions"], MAX_REPLAY + 1)

    def _level(self) -> str:
        return f"{self.world}-{self.stage} {self.action_type}"

    def rgb_frame(self) -> np.ndarray:
        """The emulator's current screen, uint8 ``[240, 256, 3]`` RGB (a copy; for eval image strips)."""
        return np.array(self.unwrapped.screen, dtype=np.uint8, order="C")  # copies: screen is a live view

    def _close_backend(self) -> None:
        self.env.close()


def make_env(world: int = 1, stage: int = 1, action_type: str = "simple", record_path: str | None = None) -> MarioEnv:
    """Picklable module-level factory (for worker processes)."""
    return MarioEnv(world=world, stage=stage, action_type=action_type, record_path=record_path)
