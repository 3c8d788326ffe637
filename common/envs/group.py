"""Several envs stepped in sequence, with auto-reset and episode accounting: ``EnvGroup``, the one
implementation of the contract's per-env semantics (in-process, in each worker process, in each Ray actor)."""

from __future__ import annotations

import traceback
from typing import Any, Callable, Sequence

import numpy as np

from common.envs.contract import EnvFailure


def env_spaces(env: Any) -> tuple[tuple[int, ...], int]:
    shape = getattr(env, "observation_shape", None)
    if shape is None:
        shape = env.observation_space.shape
    n = getattr(env, "num_actions", None)
    if n is None:
        n = env.action_space.n
    return tuple(int(s) for s in shape), int(n)


class EnvGroup:
    """Several envs stepped in sequence, with auto-reset and episode accounting.

    Used directly by :class:`InProcessVecEnv` and inside each subprocess worker, so
    both vector envs follow exactly the same semantics.
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], first_index: int, seed: int | None):
        self.first_index = first_index
        self.seed = seed
        self.envs: list[Any] = []
        for j, fn in enumerate(env_fns):
            try:
                self.envs.append(fn())
            except Exception:
                self.close()
                raise EnvFailure(first_index + j, "construction", traceback.format_exc()) from None
        spaces = [env_spaces(env) for env in self.envs]
        if len(set(spaces)) > 1:
            self.close()
            raise ValueError(
                f"envs {first_index}..{first_index + len(self.envs) - 1} differ in "
                f"(observation_shape, num_actions): {spaces}"
            )
        self.observation_shape, self.num_actions = spaces[0]
        n = len(self.envs)
        self._seeded = [False] * n
        self._returns = np.zeros(n, dtype=np.float64)
        self._lengths = np.zeros(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.envs)

    def _check(self, j: int, obs: Any, phase: str) -> np.ndarray:
        if not isinstance(obs, np.ndarray) or obs.dtype != np.uint8 or obs.shape != self.observation_shape:
            desc = f"{type(obs).__name__} {getattr(obs, 'dtype', '')} {getattr(obs, 'shape', '')}"
            raise TypeError(
                f"{phase} returned {desc}; the VecEnv contract needs a uint8 array of shape {self.observation_shape}"
            )
        return obs

    def _reset_one(self, j: int) -> np.ndarray:
        env = self.envs[j]
        if self.seed is not None and not self._seeded[j]:
            obs = env.reset(seed=self.seed + self.first_index + j)
        else:
            obs = env.reset()
        self._seeded[j] = True
        self._returns[j] = 0.0
        self._lengths[j] = 0
        return self._check(j, obs, "reset()")

    def reset(self, out: np.ndarray) -> None:
        for j in range(len(self.envs)):
            try:
                out[j] = self._reset_one(j)
            except Exception:
                raise EnvFailure(self.first_index + j, "reset", traceback.format_exc()) from None

    def step(
        self, actions: Sequence[int], out: np.ndarray, lo: int = 0, hi: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Step envs ``lo..hi-1`` of this group (all by default) with ``actions`` (one each); their
        observations go to ``out[lo:hi]``."""
        hi = len(self.envs) if hi is None else hi
        rewards = np.zeros(hi - lo, dtype=np.float32)
        dones = np.zeros(hi - lo, dtype=bool)
        infos: list[dict] = []
        for j in range(lo, hi):
            env, phase = self.envs[j], "step"
            try:
                obs, reward, done, info = env.step(int(actions[j - lo]))
                self._check(j, obs, "step()")
                reward = float(reward)
                done = bool(done)
                info = dict(info) if info else {}
                self._returns[j] += reward
                self._lengths[j] += 1
                if done:
                    info["final_observation"] = np.array(obs, dtype=np.uint8, copy=True)
                    info["episode"] = {"r": float(self._returns[j]), "l": int(self._lengths[j])}
                    phase = "reset (auto-reset after the episode ended)"
                    obs = self._reset_one(j)
                out[j] = obs
            except Exception:
                raise EnvFailure(self.first_index + j, phase, traceback.format_exc()) from None
            rewards[j - lo] = reward
            dones[j - lo] = done
            infos.append(info)
        return rewards, dones, infos

    def get_state(self) -> list | None:
        """Each env's episode in progress (``env.get_state()``) with its return and length so far, or None
        when one of the envs cannot say (its game has no ``get_state``)."""
        states = []
        for j, env in enumerate(self.envs):
            state = env.get_state() if hasattr(env, "get_state") else None
            if state is None:
                return None
            states.append({"env": state, "return": float(self._returns[j]), "length": int(self._lengths[j])})
        return states

    def set_state(self, states: list, out: np.ndarray) -> None:
        """Continue the episodes of ``get_state`` (one state per env of this group); observations to ``out``."""
        if len(states) != len(self.envs):
            raise ValueError(f"{len(states)} env states for a group of {len(self.envs)} envs")
        for j, (env, state) in enumerate(zip(self.envs, states)):
            try:
                actions = state["env"].get("actions")  # an episode told as its actions: one per step
                if actions is not None and len(actions) != int(state["length"]):
                    raise ValueError(f"an episode of {state['length']} steps told as {len(actions)} actions")
                out[j] = self._check(j, env.set_state(state["env"]), "set_state()")
                self._returns[j], self._lengths[j] = float(state["return"]), int(state["length"])
            except Exception:
                raise EnvFailure(self.first_index + j, "set_state", traceback.format_exc()) from None
            self._seeded[j] = True  # a restored env's stream carries on, as after its first reset

    def close(self) -> None:
        envs, self.envs = self.envs, []
        for env in envs:
            try:
                env.close()
            except Exception:
                pass
