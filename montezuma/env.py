"""Montezuma's Revenge with the RND paper's Atari recipe, on ale-py directly (no Paddle).

Recipe (Burda et al. 2018, openai/random-network-distillation ``atari_wrappers.py``):

* full 18-action set; extrinsic reward returned raw (game score delta; the trainer
  clips it), life loss is not terminal, the episode ends on game over or after
  ``max_episode_steps`` (4,500) agent steps = 18,000 emulator frames, then
  ``info["TimeLimit.truncated"] = True`` (PPO ends the return there too, as the RND and SND
  authors' PPO, unless ``--bootstrap-truncated``: ``common/ppo/buffer.py``);
* sticky actions, p = 0.25, **per emulator frame**: RND's ``make_atari`` puts its
  ``StickyActionEnv`` *under* ``MaxAndSkipEnv``, so on every one of the 4 frames of
  an agent step the previously executed frame action is repeated with probability p
  (so a new agent action starts after a geometric delay of 0-3 frames; this is also
  Machado et al.'s / ALE v5's definition). We draw these coins from our own
  ``numpy`` Generator seeded by ``reset(seed)`` and set ALE's own
  ``repeat_action_probability`` to 0: ALE's RNG is seeded only when the ROM is
  loaded, so re-seeding per episode would need a ROM reload; ours re-seeds for free
  and makes "same seed -> same trajectory" exact. The sticky action carries over
  from the last frame of the previous agent step and is NOOP after reset.
* frame skip 4: rewards summed, the pixel-wise max of the last two raw RGB frames
  (as RND, max-pooling the raw frames before the gray conversion), then
  RGB -> gray (cv2) -> 84x84 with ``cv2.INTER_AREA`` (RND's ``WarpFrame``), 4-frame
  stack; ``reset`` fills the stack with 4 copies of the reset frame (the RND authors'
  vector env fills it with zeros instead: docs/deviations.md, Montezuma deviation 22). If the game ends
  on frame 0 or 1 of an agent step, the new stack entry is that last frame alone.

ALEInterface is used directly rather than gymnasium's ``ALE/MontezumaRevenge-v5``
(frameskip=1): it emulates more frames per second, because the gymnasium env copies an
RGB observation on every frame (docs/performance.md).

``info``: ``room`` (RAM byte 3, as RND's ``MontezumaInfoWrapper``), ``rooms`` (sorted
rooms visited this episode, the start room included), ``level`` (RAM byte 57),
``lives``, ``score`` (episode score so far), ``events`` (steps of this episode with a
positive reward), ``episode_steps``, ``TimeLimit.truncated``.
"""

from __future__ import annotations

import numpy as np

from common.envs.frames import FrameSkip, FrameStack, GrayResize
from common.envs.game_env import GameEnv

OBS_SIZE = 84
FRAME_SKIP = 4
STACK = 4
RECORD_FPS = 60
ROOM_RAM = 3
LEVEL_RAM = 57
#: Panama Joe's position: RAM bytes 42 (x) and 43 (y, growing upwards). Mapped to the 160x210 RGB
#: screen, his sprite spans x .. x+7 and 311-y .. 323-y in the median frame; a test checks the
#: mapping against the sprite's pixels.
PLAYER_X_RAM, PLAYER_Y_RAM = 42, 43
SPRITE_CENTRE = (3, 317)  # screen column = x + 3, screen row = 317 - y
ROM_NAME = "montezuma_revenge"


def _rom_path() -> str:
    try:
        import ale_py
        from ale_py import roms
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "Montezuma's Revenge needs ale-py: `pip install 'ale-py>=0.9'` (it bundles the Atari ROMs)"
        ) from exc
    try:
        path = roms.get_rom_path(ROM_NAME)
    except Exception as exc:  # pragma: no cover
        path, err = None, exc
    else:
        err = None
    if not path:
        raise FileNotFoundError(
            f"the Montezuma's Revenge ROM ({ROM_NAME}.bin) was not found in ale-py "
            f"{getattr(ale_py, '__version__', '?')}: install ale-py >= 0.9, which bundles the ROMs "
            f"(`pip install -U 'ale-py>=0.9'`), or import a legally obtained ROM with "
            f"`ale-import-roms DIR` on older versions" + (f" ({err})" if err else "")
        )
    return str(path)


process_frame = GrayResize(OBS_SIZE, "area")
"""RGB ``[210, 160, 3]`` uint8 -> gray 84x84 uint8 ``[84, 84]`` (cv2, INTER_AREA: RND's ``WarpFrame``)."""


def rooms_mask(rooms) -> int:
    """A set of RAM room numbers (0-23 on every level) as one integer, sum of 2**room."""
    return sum(1 << int(r) for r in set(rooms))


def rooms_of_mask(mask) -> list:
    """``rooms_mask`` read back: the sorted room numbers of a mask (an int or an integral float)."""
    mask = int(mask)
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def validate_args(sticky_prob, max_episode_steps) -> None:
    """Raise ``ValueError`` naming the bad value; called before the emulator exists."""
    if (
        isinstance(max_episode_steps, bool)
        or not isinstance(max_episode_steps, (int, np.integer))
        or max_episode_steps <= 0
    ):
        raise ValueError(f"max_episode_steps must be a positive integer, got {max_episode_steps!r}")
    try:
        p = float(sticky_prob)
    except (TypeError, ValueError):
        raise ValueError(f"sticky_prob must be a number in [0, 1], got {sticky_prob!r}") from None
    if not 0.0 <= p <= 1.0:  # also rejects NaN
        raise ValueError(f"sticky_prob must be in [0, 1], got {sticky_prob!r}")


class MontezumaEnv(GameEnv):
    """Montezuma's Revenge, RND recipe; obs uint8 ``[4, 84, 84]``, 18 actions.

    ``step(a)`` returns ``(obs, reward, done, info)``; ``done`` is game over or the
    step limit (then ``info["TimeLimit.truncated"]`` is True). ``reset(seed)`` seeds the
    sticky-action RNG; ``reset()`` without a seed continues the current RNG stream
    (seeded from OS entropy at construction).
    """

    observation_shape = (STACK, OBS_SIZE, OBS_SIZE)
    num_actions = 18

    def __init__(self, record_path: str | None = None, sticky_prob: float = 0.25, max_episode_steps: int = 4500):
        validate_args(sticky_prob, max_episode_steps)
        self.sticky_prob = float(sticky_prob)
        self.max_episode_steps = int(max_episode_steps)
        rom = _rom_path()

        import ale_py

        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner per worker
        ale = ale_py.ALEInterface()
        ale.setInt("random_seed", 0)
        ale.setFloat("repeat_action_probability", 0.0)  # stickiness is ours (see module doc)
        ale.setInt("frame_skip", 1)
        ale.setInt("max_num_frames_per_episode", 0)  # the step limit is ours
        ale.loadROM(rom)
        self.ale = ale
        self.action_set = list(ale.getLegalActionSet())  # the full 18-action set
        assert len(self.action_set) == self.num_actions, len(self.action_set)
        h, w = ale.getScreenDims()
        self._raw = np.zeros((2, h, w, 3), dtype=np.uint8)  # last two raw frames of a step
        self._rgb = np.zeros((h, w, 3), dtype=np.uint8)
        # RND's MaxAndSkipEnv (the max of the last two raw screens) and its 4-frame stack
        self.skip = FrameSkip(FRAME_SKIP, pool=2)
        self.stack = FrameStack(STACK, (OBS_SIZE, OBS_SIZE), fill="repeat")
        self._rng = np.random.default_rng()
        self._last_action = 0
        self._steps = 0
        self._score = 0.0
        self._events = 0
        self._rooms: set[int] = set()
        self._episode_rng, self._episode_actions = None, []
        super().__init__(record_path, fps=RECORD_FPS)

    # -- helpers -------------------------------------------------------------------------
    def _record_screen(self) -> None:
        if self._recorder is not None:  # grabbing the screen costs time: only when recording
            self.ale.getScreenRGB(self._rgb)
            self._record(self._rgb)

    def _info(self, truncated: bool) -> dict:
        ram = self.ale.getRAM()
        room = int(ram[ROOM_RAM])
        self._rooms.add(room)
        dx, y0 = SPRITE_CENTRE
        return {
            "room": room,
            "position": (int(ram[PLAYER_X_RAM]) + dx, y0 - int(ram[PLAYER_Y_RAM])),  # screen column, row
            "rooms": sorted(self._rooms),
            "level": int(ram[LEVEL_RAM]),
            "lives": int(self.ale.lives()),
            "score": float(self._score),
            "events": self._events,
            "episode_steps": self._steps,
            "TimeLimit.truncated": bool(truncated),
        }

    @property
    def current_room(self) -> int:
        return int(self.ale.getRAM()[ROOM_RAM])

    def player_position(self) -> tuple[int, int, int]:
        """``(room, column, row)``: the room and the centre of Panama Joe's sprite in screen pixels of the
        ``[210, 160, 3]`` RGB screen (from RAM; may fall off the screen while he changes rooms). A step's
        info carries the same as ``room`` and ``position``."""
        ram = self.ale.getRAM()
        dx, y0 = SPRITE_CENTRE
        return int(ram[ROOM_RAM]), int(ram[PLAYER_X_RAM]) + dx, y0 - int(ram[PLAYER_Y_RAM])

    # -- API -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> np.ndarray:
        self._begin_reset()
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._episode_rng, self._episode_actions = self._rng.bit_generator.state, []  # what replays it
        self.ale.reset_game()
        self._last_action = 0
        self._steps = 0
        self._score = 0.0
        self._events = 0
        self._rooms = {self.current_room}
        self.ale.getScreenRGB(self._rgb)
        self._record(self._rgb)
        self._needs_reset = False
        return self.stack.reset(process_frame(self._rgb))

    def _grab(self, k: int) -> np.ndarray:
        self.ale.getScreenRGB(self._raw[k])
        return self._raw[k]

    def step(self, action: int):
        action = self._begin_step(action)
        self._episode_actions.append(action)
        ale = self.ale
        coins = self._rng.random(FRAME_SKIP)  # one sticky coin per emulator frame

        def act(i):
            if coins[i] >= self.sticky_prob:
                self._last_action = action
            reward = ale.act(self.action_set[self._last_action])
            self._record_screen()
            return reward, ale.game_over()

        frame, reward, game_over, _ = self.skip.step(act, self._grab)
        obs = self.stack.push(process_frame(frame))
        self._steps += 1
        self._score += reward
        self._events += reward > 0
        truncated = not game_over and self._steps >= self.max_episode_steps
        done = game_over or truncated
        if done:
            self._needs_reset = True
        return obs, float(reward), bool(done), self._info(truncated)

    def get_state(self) -> dict:
        """The episode in progress as what replays it: the sticky-action stream's state when the episode
        began and the actions taken since (``reset`` puts the emulator in the same state every time)."""
        return {
            "rng": self._episode_rng,
            "actions": np.array(self._episode_actions, np.uint8),
            "settings": np.array([self.sticky_prob, self.max_episode_steps], np.float64),  # what the replay needs
        }

    def set_state(self, state: dict) -> np.ndarray:
        """Replay the episode of ``get_state`` (a new episode, then its actions with its sticky coins) and
        return its observation uint8 ``[4, 84, 84]``. Only actions reach the emulator: no bytes of a file."""
        played, settings = np.asarray(state["settings"], np.float64), [self.sticky_prob, self.max_episode_steps]
        if not np.array_equal(played, settings):
            raise ValueError(
                f"a Montezuma episode played with (sticky_prob, max_episode_steps) {played.tolist()} cannot be "
                f"replayed with {settings}"
            )

        def begin():  # the sticky-action stream as the episode began
            self._rng.bit_generator.state = state["rng"]
            self._episode_rng = self._rng.bit_generator.state

        return self._replay(state["actions"], self.max_episode_steps, begin)

    def rgb_frame(self) -> np.ndarray:
        """The emulator's current screen, uint8 ``[210, 160, 3]`` RGB (a copy; for eval image strips)."""
        return self.ale.getScreenRGB()


def make_env(record_path: str | None = None, sticky_prob: float = 0.25, max_episode_steps: int = 4500) -> MontezumaEnv:
    """Picklable module-level factory (for worker processes)."""
    return MontezumaEnv(record_path=record_path, sticky_prob=sticky_prob, max_episode_steps=max_episode_steps)
