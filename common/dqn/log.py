"""What a DQN run logs: each training episode as it ends, a line of means every ``log_interval`` train
steps, and each evaluation (``DQNLog``, on top of ``common.run.logger``; the tags are listed in
``common/dqn/trainer.py``'s docstring). Every x-axis is the train count.
"""

from __future__ import annotations

import time

import numpy as np

from common.run.logger import Logger


class _Mean:
    """Running sums of named scalars between two log points (non-finite values are left out)."""

    def __init__(self):
        self.sums, self.counts = {}, {}

    def add(self, values: dict) -> None:
        for k, v in values.items():
            if np.isfinite(v):
                self.sums[k] = self.sums.get(k, 0.0) + float(v)
                self.counts[k] = self.counts.get(k, 0) + 1

    def pop(self) -> dict:
        out = {k: self.sums[k] / self.counts[k] for k in self.sums}
        self.sums, self.counts = {}, {}
        return out


class DQNLog:
    """The scalars of one DQN run between two log points.

    ``step`` takes each env step's intrinsic reward and each train step's losses, ``episode`` each
    finished training episode, ``write`` the interval's means and speeds, ``eval`` an evaluation's
    result; ``progress`` is the progress bar's text.
    """

    def __init__(self, logger: Logger, spec, cfg, env_steps: int, train_steps: int):
        self.logger, self.spec, self.cfg = logger, spec, cfg
        self.losses = _Mean()
        self.int_rewards: list[float] = []
        self.recent: list[float] = []  # the last 10 training episodes' returns (the progress bar's)
        self._mark(env_steps, train_steps)

    def _mark(self, env_steps: int, train_steps: int) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        self._env_steps, self._train_steps = env_steps, train_steps

    def step(self, r_int: float | None, losses: dict | None) -> None:
        """One env step's intrinsic reward (None without SND) and its train step's losses (None if none ran)."""
        if r_int is not None:
            self.int_rewards.append(r_int)
        if losses is not None:
            self.losses.add(losses)

    def episode(self, step: int, ret: float, length: int, int_ret: float | None, info: dict) -> None:
        """A finished training episode: its extrinsic return, length, intrinsic return and the game's scalars."""
        metrics = {"return": ret, "length": length, **self.spec.episode_metrics(info)}
        if int_ret is not None:
            metrics["intrinsic_return"] = int_ret
        self.logger.scalars("episode", metrics, step)
        self.recent = (self.recent + [ret])[-10:]

    def write(self, step: int, env_steps: int, epsilon: float, target_syncs: int, nonfinite: int) -> None:
        """The interval's loss means, exploration state, intrinsic reward and speeds, at train step ``step``."""
        lg, vals = self.logger, self.losses.pop()
        for k in ("q", "snd_target", "forward"):
            if k in vals:
                lg.scalar(f"losses/{k}", vals[k], step)
        for k in ("q_mean", "target_mean"):
            if k in vals:
                lg.scalar(f"charts/{k}", vals[k], step)
        lg.scalar("charts/epsilon", epsilon, step)
        lg.scalar("charts/env_steps", env_steps, step)
        lg.scalar("charts/target_syncs", target_syncs, step)
        lg.scalar("charts/nonfinite_skipped", nonfinite, step)
        if self.int_rewards:
            lg.scalar("intrinsic/reward_mean", float(np.mean(self.int_rewards)), step)
            lg.scalar("intrinsic/reward_max", float(np.max(self.int_rewards)), step)
            self.int_rewards = []
        dt = max(time.perf_counter() - self._wall, 1e-9)
        trained = max(step - self._train_steps, 1)
        lg.scalar("perf/train_steps_per_sec", (step - self._train_steps) / dt, step)
        lg.scalar("perf/env_steps_per_sec", (env_steps - self._env_steps) / dt, step)
        # CPU seconds of all the process' threads: what a step costs, whatever else loads the machine
        lg.scalar("perf/cpu_ms_per_train_step", 1000 * (time.process_time() - self._cpu) / trained, step)
        self._mark(env_steps, step)
        lg.flush()

    def eval(self, result: dict, step: int) -> None:
        self.logger.scalars("eval", result, step)
        self.logger.flush()

    def progress(self, env_steps: int, epsilon: float) -> str:
        parts = [f"env {env_steps}", f"eps {epsilon:.2f}"]
        if self.recent:
            parts.append(f"return {np.mean(self.recent):.2f}")
        return ", ".join(parts)
