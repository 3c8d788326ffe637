"""All envs in the calling process: ``InProcessVecEnv``."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from common.envs.contract import EnvFailure, EnvWorkerError, VecEnv, failure_message
from common.envs.group import EnvGroup


def _worker_error(f: EnvFailure) -> EnvWorkerError:
    """An env's fault inside this process, as the contract reports it."""
    return EnvWorkerError(failure_message(f.env_index, f.phase, "in-process", f.tb), f.env_index, f.tb)


class InProcessVecEnv(VecEnv):
    """All envs in the calling process, stepped one after another (debugging, tests, eval)."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], seed: int | None = None):
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("need at least one env factory")
        self._closed = False
        self.num_envs = len(env_fns)
        try:
            self._envs = EnvGroup(env_fns, 0, seed)
        except EnvFailure as f:
            self._closed = True
            raise _worker_error(f) from None
        self.observation_shape = self._envs.observation_shape
        self.num_actions = self._envs.num_actions
        self._obs = np.zeros((self.num_envs, *self.observation_shape), dtype=np.uint8)
        self._pending: np.ndarray | None = None

    def _guard(self) -> None:
        if self._closed:
            raise RuntimeError("this VecEnv is closed")

    def reset(self) -> np.ndarray:
        self._guard()
        self._pending = None
        try:
            self._envs.reset(self._obs)
        except EnvFailure as f:
            raise _worker_error(f) from None
        return self._obs.copy()

    def step_async(self, actions, start: int, stop: int) -> None:
        self._guard()
        self._group(start, stop)
        if self._pending is not None:
            raise RuntimeError("step_async called twice without step_wait")
        self._pending = self._actions(actions)

    def step_wait(self, start: int, stop: int):
        self._guard()
        self._group(start, stop)
        if self._pending is None:
            raise RuntimeError("step_wait without step_async")
        a, self._pending = self._pending, None
        try:
            rewards, dones, infos = self._envs.step(a, self._obs)
        except EnvFailure as f:
            raise _worker_error(f) from None
        return self._obs.copy(), rewards, dones, infos

    can_restore = True

    def get_state(self) -> list | None:
        self._guard()
        return self._envs.get_state()

    def set_state(self, states: list) -> np.ndarray:
        self._guard()
        if len(states) != self.num_envs:
            raise ValueError(f"{len(states)} env states for {self.num_envs} envs")
        try:
            self._envs.set_state(states, self._obs)
        except EnvFailure as f:
            raise _worker_error(f) from None
        return self._obs.copy()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._envs.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
