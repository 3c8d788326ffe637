"""Environments that fail on purpose, for tests/test_faults.py (picklable, imported by env workers).

Each wraps the real MiniGrid env and misbehaves once, at a given step count of the env,
in the first worker process that reaches it: a marker file (``FAULT_MARKER`` in the
environment) records that the fault happened, so the replacement worker behaves.
"""

from __future__ import annotations

import functools
import os
import signal
import time

from gridworld.env import GridEnv


class FlakyGridEnv(GridEnv):
    """``kind``: "die" (SIGKILL its own process), "hang" (sleep far longer than any timeout), "die-always"
    (die at that step in every worker, marker or not)."""

    def __init__(self, env_id: str, kind: str, at_step: int, record_path=None):
        super().__init__(env_id, record_path)
        self.kind, self.at_step, self.steps = kind, at_step, 0

    def step(self, action):
        self.steps += 1
        marker = os.environ.get("FAULT_MARKER", "")
        if self.steps == self.at_step and self.kind == "die-always":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.steps == self.at_step and marker and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(f"{self.kind} in pid {os.getpid()}\n")
            if self.kind == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.kind == "hang":
                time.sleep(3600)
        return super().step(action)


def make_flaky(env_id: str, kind: str, at_step: int, record_path=None) -> FlakyGridEnv:
    return FlakyGridEnv(env_id, kind, at_step, record_path)


def flaky_spec(kind: str, at_step: int):
    """gridworld's GameSpec whose envs fail once (``kind`` at env step ``at_step``)."""
    import dataclasses

    from gridworld.train import SPEC

    def env_factory(cfg, record_path=None):
        return functools.partial(make_flaky, cfg.env_id, kind, at_step, record_path=record_path)

    return dataclasses.replace(SPEC, env_factory=env_factory)
