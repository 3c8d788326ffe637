"""The single-environment contract every game implements (numpy only, never Paddle).

``reset(seed=None) -> obs`` (uint8 ``observation_shape``), ``step(action) -> (obs,
reward, done, info)``, ``close()``; no auto-reset (the vector env does that).
``GameEnv`` holds what the games share: the step/reset guards, the optional mp4
recorder of the raw RGB frames, idempotent ``close()`` and the context manager.
A game implements ``reset``/``step`` with ``_begin_reset``/``_begin_step`` at their
start and ``_close_backend`` to release its emulator.

A game may also offer ``get_state() -> dict`` and ``set_state(state) -> obs``: the episode in
progress as numpy arrays and plain values, so that a resumed run continues its episodes where they
were instead of starting new ones (``common.envs.group.EnvGroup``). Montezuma's, Mario's and
MiniGrid's are what replays the episode (its actions, and the random stream it began with:
Montezuma's sticky actions, MiniGrid's layout generator), so that nothing of a file but legal
actions reaches the emulator. ``GameEnv.get_state`` returns None: the game cannot (Pong's DQN
loop does not ask).
"""

from __future__ import annotations

import numpy as np


class GameEnv:
    observation_shape: tuple
    num_actions: int

    def __init__(self, record_path: str | None, fps: int):
        self.record_path = record_path
        self._recorder = None
        if record_path:
            from common.envs.video import VideoRecorder

            self._recorder = VideoRecorder(record_path, fps=fps)
        self._needs_reset = True
        self._closed = False

    def _begin_reset(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.reset called after close()")

    def _begin_step(self, action) -> int:
        """Check that an episode is running and ``action`` is valid; returns it as an int."""
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}.step called before reset() or after done; call reset() first")
        action = int(action)
        if not 0 <= action < self.num_actions:
            raise ValueError(f"action must be in [0, {self.num_actions}), got {action}")
        return action

    def _record(self, frame_rgb: np.ndarray) -> None:
        if self._recorder is not None:
            self._recorder.add(frame_rgb)

    def get_state(self) -> dict | None:
        """The episode in progress as a dict of numpy arrays and plain values, or None (not supported)."""
        return None

    def set_state(self, state: dict) -> np.ndarray:
        """Continue the episode ``get_state`` described; returns its current observation."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore an episode in progress")

    def _replay(self, actions, limit: int, begin=None) -> np.ndarray:
        """``set_state`` for a game whose episode is its actions: checks them (uint8[n], fewer than
        ``limit``), starts a new episode, calls ``begin()`` (what else the episode began with), replays
        the actions and returns the observation; an episode that ends before its last action is refused."""
        game = type(self).__name__.removesuffix("Env")
        actions = np.asarray(actions)
        if actions.ndim != 1 or actions.dtype != np.uint8 or len(actions) >= limit:
            raise ValueError(
                f"a {game} episode's actions are {actions.dtype} {actions.shape}: expected uint8[n], fewer than {limit}"
            )
        obs = self.reset()
        if begin is not None:
            begin()
        for k, action in enumerate(actions):
            obs, _, done, _ = self.step(int(action))
            if done:
                raise ValueError(f"a {game} episode to replay ended at its action {k + 1} of {len(actions)}")
        return obs

    def _close_backend(self) -> None:
        """Release the emulator (game-specific)."""

    def close(self) -> None:
        """Finalize the video (if recording) and release the emulator. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._recorder is not None:
                self._recorder.close()
        finally:
            self._close_backend()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
