"""MiniGrid hard-exploration tasks behind the project's env contract (no Paddle).

Why the folder is called ``gridworld`` and not ``minigrid``: with the repository
root on ``sys.path`` (``python gridworld/train.py`` from a checkout, pytest's
rootdir), a top-level package named ``minigrid`` would shadow the installed
``minigrid`` library and ``import minigrid`` would find this folder instead.

Observation: MiniGrid's egocentric 7x7 partial view in its *symbolic* encoding
(``obs["image"]``: per cell object index 0-10, colour index 0-5, state 0-2), as
uint8 ``[3, 7, 7]`` channels-first, rows top (far) to bottom (the agent's row; the
agent sits at the bottom centre, facing up). The object it carries is drawn in its
own cell (MiniGrid's ``gen_obs`` does that), so "has the key" is visible. The
mission string and the direction are not used (``full`` below draws the direction). The values are *category codes*,
not intensities: the trainer scales uint8 by 1/255, and ``gridworld.model`` undoes
that and one-hot encodes the codes (``CHANNEL_SIZES``).

Actions: MiniGrid's 7 (left, right, forward, pickup, drop, toggle, done). ``done``
does nothing in these tasks and ``drop`` only matters in KeyCorridor; we keep the
full set so every task uses the same policy head (standard in the literature).

Reward: MiniGrid's own, ``1 - 0.9 * steps / max_steps`` on success, else 0;
episodes end on success or at the task's ``max_steps`` (time limit, also ``done``; PPO ends the
return at both unless ``--bootstrap-truncated``, ``common/ppo/buffer.py``).
``info``: ``success`` (bool, the episode ended with reward > 0), ``steps``,
``TimeLimit.truncated``, ``carrying`` (object name or ""), ``agent_pos`` (x, y); with ``state_keys``,
``prev_state_key`` and ``state_key`` (int64 keys of the full grid before and after the step:
``--first-visit-key state``).
``frame_stack`` > 1 stacks the last views, the newest last (a new episode fills the stack with its
first view).

What the observation shows (``observation``, ``--observation``): ``view`` is the egocentric view
above; ``full`` is the task's whole grid instead, with the agent drawn in its cell (object 10,
colour red, its direction 0-3 in the state channel: MiniGrid's ``FullyObsWrapper`` encoding; what
it carries is no longer on the grid), ``[3, y, x]`` padded to 7x7 with unseen cells (0), so only
tasks whose grid fits in 7x7 can show it (KeyCorridorS3R3, DoorKey-5x5, ...); ``view+full`` is the
view (stack) followed by the newest full grid as 3 more channels: the policy reads the view
(``gridworld.model`` reads the first channels) and the intrinsic module the grid (its
``--intrinsic-frames`` are the last channels): docs/exploration.md, suite v6.

Seeding: ``reset(seed)`` seeds MiniGrid's layout generator; later ``reset()``
continues its RNG, so a vector env seeded with ``seed + i`` repeats exactly.
``get_state`` is the episode in progress as what replays it (the generator's state when the
episode began, and its actions), so a resumed run continues its episodes (``GameEnv``).

Recording: with ``record_path`` the env renders MiniGrid's full-grid RGB view
(``render_mode="rgb_array"``, the agent's view highlighted) into an mp4 through
``common.envs.video.VideoRecorder``; only recording envs pay for rendering.
"""

from __future__ import annotations

import hashlib

import numpy as np

from common.envs.frames import FrameStack
from common.envs.game_env import GameEnv
from gridworld import fast_view

VIEW = 7
CHANNELS = 3
RECORD_FPS = 8
ACTION_NAMES = ("left", "right", "forward", "pickup", "drop", "toggle", "done")

#: number of categories of each symbolic channel (object, colour, state); from minigrid.core.constants
CHANNEL_SIZES = (11, 6, 3)
#: the same for a full grid, whose agent cell holds the agent's direction (0-3) as its state
FULL_CHANNEL_SIZES = (11, 6, 4)
#: what an observation shows (module docstring)
OBSERVATIONS = ("view", "full", "view+full")
OBJECT_AGENT, COLOR_RED = 10, 0  # minigrid.core.constants: OBJECT_TO_IDX["agent"], COLOR_TO_IDX["red"]

#: tasks this project has tried (any registered MiniGrid id works; these are the examples in errors)
EXAMPLE_IDS = (
    "MiniGrid-Empty-5x5-v0",
    "MiniGrid-DoorKey-5x5-v0",
    "MiniGrid-DoorKey-6x6-v0",
    "MiniGrid-DoorKey-8x8-v0",
    "MiniGrid-MultiRoom-N2-S4-v0",
    "MiniGrid-KeyCorridorS3R1-v0",
    "MiniGrid-KeyCorridorS3R2-v0",
)


def _gym():
    import gymnasium
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids)

    return gymnasium


def validate_env_id(env_id: str) -> None:
    """Raise ``ValueError`` for an id that is not a registered MiniGrid task (lists examples)."""
    gym = _gym()
    if not isinstance(env_id, str) or not env_id.startswith("MiniGrid-") or env_id not in gym.registry:
        raise ValueError(
            f"unknown MiniGrid env id {env_id!r}; examples: {', '.join(EXAMPLE_IDS)} "
            "(any registered 'MiniGrid-*' id works)"
        )


def full_grid(unwrapped) -> np.ndarray:
    """uint8[width, height, 3]: a MiniGrid env's whole grid with the agent drawn in (object, colour and
    direction at its cell), what MiniGrid's ``FullyObsWrapper`` shows."""
    grid = unwrapped.grid.encode()
    x, y = unwrapped.agent_pos
    grid[x, y] = (OBJECT_AGENT, COLOR_RED, unwrapped.agent_dir)
    return grid


def state_key(unwrapped) -> int:
    """The full state of a MiniGrid env as one int64: a hash of ``full_grid``, what the NovelD authors
    count per episode; not salted per process (blake2b), so every worker computes the same key."""
    digest = hashlib.blake2b(full_grid(unwrapped).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class GridEnv(GameEnv):
    """One MiniGrid task; obs uint8 ``[3 * frame_stack, 7, 7]`` (the newest view last; ``view+full``: 3
    more channels, the full grid), ``step(a) -> (obs, reward, done, info)``."""

    num_actions = len(ACTION_NAMES)

    def __init__(
        self,
        env_id: str = "MiniGrid-DoorKey-5x5-v0",
        record_path: str | None = None,
        frame_stack: int = 1,
        state_keys: bool = False,
        observation: str = "view",
    ):
        validate_env_id(env_id)
        if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or not 1 <= frame_stack <= 16:
            raise ValueError(f"frame_stack must be an integer from 1 to 16, got {frame_stack!r}")
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(OBSERVATIONS)}, got {observation!r}")
        self.observation = observation
        self.stack = FrameStack(frame_stack, (CHANNELS, VIEW, VIEW), fill="repeat")
        extra = CHANNELS if observation == "view+full" else 0
        self.observation_shape = (self.stack.shape[0] + extra, VIEW, VIEW)
        self.state_keys, self._key = bool(state_keys), 0
        self._episode_rng, self._episode_actions = None, []  # what replays the episode (get_state)
        self.env_id = env_id
        self.env = _gym().make(env_id, render_mode="rgb_array" if record_path else None)
        self.unwrapped = self.env.unwrapped
        if self.unwrapped.agent_view_size != VIEW:
            raise ValueError(
                f"{env_id} has a {self.unwrapped.agent_view_size}x{self.unwrapped.agent_view_size} "
                f"view; this wrapper expects {VIEW}x{VIEW}"
            )
        if observation != "view" and max(self.unwrapped.width, self.unwrapped.height) > VIEW:
            raise ValueError(
                f"--observation {observation} shows the whole grid padded to {VIEW}x{VIEW}; {env_id}'s grid is "
                f"{self.unwrapped.width}x{self.unwrapped.height} (use --observation view)"
            )
        fast_view.install(self.unwrapped)  # MiniGrid's own view, the same array, faster (docs/performance.md)
        super().__init__(record_path, fps=RECORD_FPS)

    def _full(self) -> np.ndarray:
        """The whole grid as uint8[3, 7, 7] ([channel, y, x]), unseen (0) beyond the task's grid."""
        grid = full_grid(self.unwrapped).transpose(2, 1, 0)
        out = np.zeros((CHANNELS, VIEW, VIEW), np.uint8)
        out[:, : grid.shape[1], : grid.shape[2]] = grid
        return out

    def _obs(self, raw: dict, first: bool = False) -> np.ndarray:
        # MiniGrid's image is indexed [x, y, channel]; make it [channel, y, x] (an upright picture)
        frame = self._full() if self.observation == "full" else np.asarray(raw["image"], np.uint8).transpose(2, 1, 0)
        # an episode starts with its first frame in every slot of the stack
        obs = self.stack.reset(frame) if first else self.stack.push(frame)
        return np.concatenate([obs, self._full()]) if self.observation == "view+full" else obs

    def _record_screen(self):
        if self._recorder is not None:  # rendering costs time: only when recording
            self._record(self.env.render())

    def _info(self, reward: float, terminated: bool, truncated: bool, prev_key: int) -> dict:
        u = self.unwrapped
        keys = {"prev_state_key": prev_key, "state_key": self._key} if self.state_keys else {}
        return {
            **keys,
            "success": bool(terminated and reward > 0),
            "steps": int(u.step_count),
            "TimeLimit.truncated": bool(truncated and not terminated),
            "carrying": u.carrying.type if u.carrying is not None else "",
            "agent_pos": (int(u.agent_pos[0]), int(u.agent_pos[1])),
        }

    def reset(self, seed: int | None = None) -> np.ndarray:
        self._begin_reset()
        # the layout generator as this episode begins: gymnasium's own seeding where a seed is given
        rng = self.unwrapped.np_random if seed is None else _gym().utils.seeding.np_random(int(seed))[0]
        self._episode_rng, self._episode_actions = rng.bit_generator.state, []
        raw, _ = self.env.reset(seed=None if seed is None else int(seed))
        self._needs_reset = False
        self._record_screen()
        if self.state_keys:
            self._key = state_key(self.unwrapped)
        return self._obs(raw, first=True)

    def step(self, action: int):
        action = self._begin_step(action)
        self._episode_actions.append(action)
        raw, reward, terminated, truncated, _ = self.env.step(action)
        done = bool(terminated or truncated)
        self._needs_reset = done
        self._record_screen()
        prev_key = self._key
        if self.state_keys:  # costs time every step: only when a gate counts states (docs/performance.md)
            self._key = state_key(self.unwrapped)
        return self._obs(raw), float(reward), done, self._info(float(reward), terminated, truncated, prev_key)

    def get_state(self) -> dict:
        """The episode in progress as what replays it: the layout generator's state when it began, the
        actions taken since, and the task."""
        return {"rng": self._episode_rng, "actions": np.array(self._episode_actions, np.uint8), "task": self.env_id}

    def set_state(self, state: dict) -> np.ndarray:
        """Replay the episode of ``get_state`` (the same layout, then its actions); returns its observation.
        Only actions reach the env, and a generator state numpy itself checks."""
        task = str(state["task"])
        if task != self.env_id:
            raise ValueError(f"a {task} episode cannot be replayed in {self.env_id}")
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["rng"]
        self.unwrapped.np_random = rng  # reset() without a seed draws the layout from it
        return self._replay(state["actions"], self.unwrapped.max_steps)

    def _close_backend(self) -> None:
        self.env.close()


def make_env(
    env_id: str = "MiniGrid-DoorKey-5x5-v0",
    record_path: str | None = None,
    frame_stack: int = 1,
    state_keys=False,
    observation: str = "view",
) -> GridEnv:
    """Picklable module-level factory (for worker processes)."""
    return GridEnv(
        env_id=env_id, record_path=record_path, frame_stack=frame_stack, state_keys=state_keys, observation=observation
    )
