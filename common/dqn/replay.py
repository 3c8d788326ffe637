"""Uniform replay memory that stores single uint8 frames and rebuilds frame stacks on sampling.

A DQN on Atari feeds its network windows of the last ``stack`` frames
(``window_length`` 4 in the SND article's runner). Storing each transition's two
stacked states, as the article's SRL memory does (``[prev_state, state, ...]`` as
float arrays), costs 2 x 4 x 84 x 84 x 4 bytes = 226 KB per transition; here every
observation's newest frame is stored once, as uint8 (7 KB), and the windows are
rebuilt when a batch is sampled: 10,000 transitions take ~71 MB instead of ~2.2 GB.

Layout. The memory is a ring of ``capacity`` entries, one per observation, in the
order they were seen. Entry ``k`` holds the newest frame of observation o_k and, once
the agent has acted on it, the transition o_k -> o_{k+1}: action, reward and whether
the episode *terminated* there (no bootstrap; a time-limit truncation is not a
termination). An episode's first observation is flagged ``first``; its last
observation (the terminal frame) is stored too but has no transition from it.

Frame stacks. The stack of entry k is frames k-stack+1 .. k; positions before the
episode's first entry are zero frames, so a window never crosses an episode start
(SRL fills its window with zero "dummy" states at reset: the stack of an episode's
first observation is ``[0, 0, 0, f_0]``, what ``pong/env.py`` returns).

Capacity. ``capacity`` counts observations; the number of transitions is that minus
one per episode end held (an episode's terminal observation has no transition) and
minus the newest observation. ``__len__`` is the number of sampleable transitions.
The oldest ``stack - 1`` entries are never sampled once the ring has wrapped (their
windows would reach overwritten frames).

Resume. ``state_dict()`` holds everything (frames included) as numpy arrays, so a
checkpoint can carry the memory and a resumed run samples the same data; the DQN
trainer saves it unless ``--no-save-replay`` (then a resumed run starts with an empty
memory and waits for ``memory_warmup_size`` transitions again).

numpy only (no Paddle): environment-side code may import it.
"""

from __future__ import annotations

import numpy as np


def replay_bytes(capacity: int, frame_shape) -> int:
    """Bytes a ``ReplayMemory`` of ``capacity`` holds: per entry a uint8 frame, an int64 action, a float32
    reward and two bool flags."""
    return int(capacity) * (int(np.prod(frame_shape)) + 8 + 4 + 1 + 1)


class ReplayMemory:
    """Ring of single uint8 frames with transition data; samples uniformly, without replacement.

    Args:
        capacity: observations held (oldest overwritten first), >= ``stack`` + 1.
        frame_shape: shape of one frame, e.g. (84, 84).
        stack: frames per state (the window length).
    """

    def __init__(self, capacity: int, frame_shape=(84, 84), stack: int = 4):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < stack + 1:
            raise ValueError(f"capacity must be an integer >= stack + 1 = {stack + 1}, got {capacity!r}")
        if isinstance(stack, bool) or not isinstance(stack, (int, np.integer)) or stack < 1:
            raise ValueError(f"stack must be a positive integer, got {stack!r}")
        self.capacity = int(capacity)
        self.stack = int(stack)
        self.frame_shape = tuple(int(s) for s in frame_shape)
        self.frames = np.zeros((self.capacity, *self.frame_shape), np.uint8)
        self.actions = np.full(self.capacity, -1, np.int64)  # -1: no transition from this entry
        self.rewards = np.zeros(self.capacity, np.float32)
        self.terminals = np.zeros(self.capacity, bool)
        self.firsts = np.zeros(self.capacity, bool)
        self.written = 0  # entries ever written; entry with absolute index a lives at a % capacity

    # ------------------------------------------------------------------ writing
    def _check_frame(self, frame) -> np.ndarray:
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.shape != self.frame_shape:
            raise ValueError(f"a frame must be uint8 {self.frame_shape}, got {frame.dtype} {frame.shape}")
        return frame

    def _write(self, frame: np.ndarray, first: bool) -> None:
        i = self.written % self.capacity
        self.frames[i] = frame
        self.actions[i] = -1
        self.rewards[i] = 0.0
        self.terminals[i] = False
        self.firsts[i] = first
        self.written += 1

    def start_episode(self, frame) -> None:
        """Store an episode's first observation (its newest frame, uint8 ``frame_shape``)."""
        self._write(self._check_frame(frame), True)

    def add(self, action: int, reward: float, terminal: bool, next_frame) -> None:
        """Record the transition from the newest observation and store the next one.

        ``terminal``: the episode terminated at the next observation (its value is 0;
        no bootstrap). A truncated episode is not terminal: pass False, then call
        ``start_episode`` for the next episode either way.
        """
        if self.written == 0:
            raise RuntimeError("ReplayMemory.add before start_episode: store the episode's first frame first")
        next_frame = self._check_frame(next_frame)
        i = (self.written - 1) % self.capacity
        if self.actions[i] >= 0:
            raise RuntimeError("ReplayMemory.add: the newest observation already has a transition")
        self.actions[i] = int(action)
        self.rewards[i] = float(reward)
        self.terminals[i] = bool(terminal)
        self._write(next_frame, False)

    # ------------------------------------------------------------------ reading
    @property
    def num_states(self) -> int:
        """Observations held (sampleable by ``sample_states``)."""
        return len(self._state_indices())

    def __len__(self) -> int:
        """Transitions held that ``sample`` can return."""
        return len(self._transition_indices())

    def _oldest(self) -> int:
        """The oldest absolute index whose whole window is still in the ring."""
        if self.written <= self.capacity:
            return 0
        return self.written - self.capacity + self.stack - 1

    def _state_indices(self) -> np.ndarray:
        return np.arange(self._oldest(), self.written)

    def _transition_indices(self) -> np.ndarray:
        idx = np.arange(self._oldest(), self.written - 1)  # the newest entry has no next observation yet
        return idx[self.actions[idx % self.capacity] >= 0]

    def stacks(self, indices) -> np.ndarray:
        """Frame stacks of absolute entry indices ``int[B]`` -> ``uint8[B, stack, *frame_shape]``.

        Positions before the episode's first entry are zero frames.
        """
        indices = np.asarray(indices, np.int64)
        offsets = np.arange(self.stack - 1, -1, -1)  # oldest position first
        absolute = indices[:, None] - offsets[None, :]  # [B, S]
        pos = absolute % self.capacity
        out = self.frames[pos]  # [B, S, H, W] (a copy)
        # a position is cut when an episode starts after it within the window: first[k - j + 1 .. k]
        first = self.firsts[pos] & (absolute >= 0)
        # started_after[b, s] = any(first[b, s+1:])
        started_after = np.zeros_like(first)
        started_after[:, :-1] = np.flip(np.logical_or.accumulate(np.flip(first[:, 1:], 1), axis=1), 1)
        cut = started_after | (absolute < 0)
        out[cut] = 0
        return out

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict:
        """``batch_size`` distinct transitions, uniformly.

        Returns ``{"obs": uint8[B, S, H, W], "actions": int64[B], "rewards": float32[B],
        "terminals": float32[B] (1 = no bootstrap), "next_obs": uint8[B, S, H, W],
        "indices": int64[B] (absolute entry indices)}``.
        """
        valid = self._transition_indices()
        if batch_size > len(valid):
            raise ValueError(f"cannot sample {batch_size} transitions from a memory holding {len(valid)}")
        idx = np.sort(rng.choice(valid, size=batch_size, replace=False))
        pos = idx % self.capacity
        return {
            "obs": self.stacks(idx),
            "actions": self.actions[pos].copy(),
            "rewards": self.rewards[pos].copy(),
            "terminals": self.terminals[pos].astype(np.float32),
            "next_obs": self.stacks(idx + 1),
            "indices": idx,
        }

    def sample_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` distinct stored observations (episode starts and terminal frames included),
        uniformly: ``uint8[n, S, H, W]``. The SND article's ``memory_snd.sample``."""
        valid = self._state_indices()
        if n > len(valid):
            raise ValueError(f"cannot sample {n} observations from a memory holding {len(valid)}")
        return self.stacks(np.sort(rng.choice(valid, size=n, replace=False)))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything, as numpy arrays and ints (what a checkpoint may hold)."""
        return {
            "capacity": self.capacity,
            "stack": self.stack,
            "frame_shape": list(self.frame_shape),
            "written": int(self.written),
            "frames": self.frames,
            "actions": self.actions,
            "rewards": self.rewards,
            "terminals": self.terminals,
            "firsts": self.firsts,
        }

    def set_state_dict(self, state: dict) -> None:
        got = (int(state["capacity"]), int(state["stack"]), tuple(int(s) for s in state["frame_shape"]))
        want = (self.capacity, self.stack, self.frame_shape)
        if got != want:
            raise ValueError(f"replay memory state is (capacity, stack, frame shape) {got}, this memory is {want}")

        def arr(x):
            return np.asarray(x.numpy() if hasattr(x, "numpy") else x)

        self.frames[...] = arr(state["frames"])
        self.actions[...] = arr(state["actions"])
        self.rewards[...] = arr(state["rewards"])
        self.terminals[...] = arr(state["terminals"])
        self.firsts[...] = arr(state["firsts"])
        self.written = int(state["written"])
