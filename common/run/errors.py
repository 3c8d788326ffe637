"""Why a training run stopped early: the errors every trainer (PPO, DQN) raises and ``common.run.launch`` reports."""

from __future__ import annotations


class UsageError(ValueError):
    """The command line asks for something this run cannot do; reported like a bad flag (exit 2)."""


class NonFiniteLossError(RuntimeError):
    """Raised after ``max_nan_updates`` consecutive updates (or train steps) with a NaN/inf loss or weights."""


class RunStoppedError(RuntimeError):
    """The run stopped on an error; ``checkpoint`` holds the state of the last completed update
    (empty when even that could not be written). The original error is ``__cause__``."""

    def __init__(self, message: str, checkpoint: str = ""):
        super().__init__(message)
        self.checkpoint = checkpoint


def stopped_by(error: Exception, save, progress: str) -> Exception:
    """What a trainer raises instead of ``error`` after saving its state with ``save() -> path``.

    ``progress`` names the saved state in the message (``"update 3"``, ``"train step 31"``). A
    ``NonFiniteLossError`` stays one, with the last good checkpoint appended; anything else becomes a
    ``RunStoppedError`` naming the file and how to ``--resume`` it. When even saving fails (a full
    disk), both errors are told and no file is named.
    """
    what = f"{type(error).__name__}: {error}"
    try:
        path = save()
    except Exception as e:  # noqa: BLE001 - e.g. the disk is full: say so, keep the first error
        why = f"{type(e).__name__}: {e}"
        if isinstance(error, NonFiniteLossError):
            return NonFiniteLossError(f"{error} No good state could be saved: {why}")
        return RunStoppedError(f"{what}\n\nThe state of {progress} could not be saved either: {why}")
    if isinstance(error, NonFiniteLossError):
        return NonFiniteLossError(f"{error} Last good checkpoint: {path} ({progress}).")
    return RunStoppedError(
        f"{what}\n\nThe state of {progress} was saved to {path}; continue with --resume {path}", path
    )
