"""A policy stepping a vector env group by group: ``Pipeline``."""

from __future__ import annotations

from typing import Callable

import numpy as np

from common.envs.contract import VecEnv


class Pipeline:
    """A policy stepping a ``VecEnv`` group by group, so that no env worker waits for the policy.

    ``act(obs) -> (actions, *outputs)`` maps one group's ``uint8[n, ...]`` observations to numpy
    arrays of n rows (``actions`` first). Each worker's envs form two groups
    (``VecEnv.pipeline_groups``): while a worker steps one half, the policy picks the other
    half's next actions. Groups are served in env order at every step, so ``act`` sees the
    same envs in the same order as one batched call would (a sampler's random numbers
    reach the same envs); with one group this is the plain act-then-step loop::

        pipe = Pipeline(venv, act)
        pipe.start(obs)                                   # act on obs, send the first step
        for t in range(T):
            acted, (obs, rewards, dones, infos) = pipe.step(last=t == T - 1)
            # acted: (actions, *outputs) that chose this step; obs: what it led to

    ``step(last=False)`` acts on each group's new observations as soon as they arrive and
    sends its next step; with ``last=True`` nothing new is sent. ``drain()`` waits out steps
    in flight (when stopping early).
    """

    def __init__(self, venv: VecEnv, act: Callable):
        self.venv, self.act = venv, act
        self.groups = venv.pipeline_groups
        self._acted: list = [None] * len(self.groups)  # per group: the outputs that chose the step in flight
        self._sent: list[tuple[int, int]] = []

    def start(self, obs: np.ndarray) -> None:
        for g, (a, b) in enumerate(self.groups):
            self._send(g, obs[a:b])

    def _send(self, g: int, obs_group: np.ndarray) -> None:
        a, b = self.groups[g]
        self._acted[g] = self.act(obs_group)
        self.venv.step_async(self._acted[g][0], a, b)
        self._sent.append((a, b))

    def step(self, last: bool = False):
        acted = tuple(np.concatenate(x) for x in zip(*self._acted))
        n = self.venv.num_envs
        obs = np.empty((n, *self.venv.observation_shape), np.uint8)
        rewards, dones, infos = np.empty(n, np.float32), np.empty(n, bool), []
        self._sent = []
        for g, (a, b) in enumerate(self.groups):
            obs[a:b], rewards[a:b], dones[a:b], group_infos = self.venv.step_wait(a, b)
            infos.extend(group_infos)
            if not last:
                self._send(g, obs[a:b])
        return acted, (obs, rewards, dones, infos)

    def drain(self) -> None:
        """Wait for the steps sent by the last ``step`` (their results are dropped)."""
        for a, b in self._sent:
            self.venv.step_wait(a, b)
        self._sent = []
