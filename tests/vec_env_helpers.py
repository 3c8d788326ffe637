"""Tiny purpose-built envs for tests/test_vec_env.py (picklable: module level).

They follow the env contract (uint8 [4, 84, 84] observations, ``reset(seed)``,
``step -> obs, reward, done, info``) and fail on purpose where a test needs a fault.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

SHAPE = (4, 84, 84)


class CountingEnv:
    """Deterministic given its seed: obs encode (env tag, episode, step); random reward."""

    observation_shape = SHAPE
    num_actions = 3

    def __init__(self, tag: int = 0, episode_len: int = 7):
        self.tag = tag
        self.episode_len = episode_len
        self.rng = np.random.default_rng()
        self.episode = -1
        self.t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(SHAPE, dtype=np.uint8)
        obs[0] = self.tag % 256
        obs[1] = self.episode % 256
        obs[2] = self.t % 256
        obs[3] = self.rng.integers(0, 256)
        return obs

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.episode += 1
        self.t = 0
        return self._obs()

    def step(self, action):
        self.t += 1
        reward = float(self.rng.normal()) + int(action)
        done = self.t >= self.episode_len
        return self._obs(), reward, done, {"t": self.t, "tag": self.tag}

    def close(self):
        pass


class FaultyEnv(CountingEnv):
    """Fails on its `fail_at`-th step (counted over its whole life).

    mode: "raise" (ValueError), "sigkill" (the worker kills itself), "exit"
    (os._exit(3)), "hang" (sleeps an hour), "reset" (raises in reset).
    """

    def __init__(self, tag: int = 0, fail_at: int = 3, mode: str = "raise", episode_len: int = 1000):
        super().__init__(tag, episode_len)
        self.fail_at = fail_at
        self.mode = mode
        self.steps = 0

    def reset(self, seed=None):
        if self.mode == "reset":
            raise ValueError(f"deliberate reset failure in env tag {self.tag}")
        return super().reset(seed)

    def step(self, action):
        self.steps += 1
        if self.steps >= self.fail_at:
            if self.mode == "raise":
                raise ValueError(f"deliberate failure at step {self.steps} in env tag {self.tag}")
            if self.mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.mode == "exit":
                os._exit(3)
            if self.mode == "hang":
                time.sleep(3600)
        return super().step(action)


class BrokenConstructorEnv(CountingEnv):
    def __init__(self, tag: int = 0):
        raise RuntimeError(f"deliberate constructor failure (tag {tag})")


class FloatObsEnv(CountingEnv):
    """Violates the contract: float observations."""

    def reset(self, seed=None):
        return super().reset(seed).astype(np.float32)


class SlowStateEnv(CountingEnv):
    """Takes two seconds to say its episode in progress (a stop can land inside ``get_state``)."""

    def get_state(self):
        time.sleep(2.0)
        return {"t": np.array(self.t)}


class BrokenStateEnv(CountingEnv):
    """Cannot say its episode: ``get_state`` raises."""

    def get_state(self):
        raise ValueError(f"deliberate get_state failure in env tag {self.tag}")
