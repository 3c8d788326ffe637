"""Why a training run stopped early: the errors every trainer (PPO, DQN) raises and ``common.launch`` reports."""

from __future__ import annotations


class NonFiniteLossError(RuntimeError):
    """Raised after ``max_nan_updates`` consecutive updates (or train steps) with a NaN/inf loss or weights."""


class RunStoppedError(RuntimeError):
    """The run stopped on an error; ``checkpoint`` holds the state of the last completed update
    (empty when even that could not be written). The original error is ``__cause__``."""

    def __init__(self, message: str, checkpoint: str = ""):
        super().__init__(message)
        self.checkpoint = checkpoint
