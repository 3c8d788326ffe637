"""What every training loop needs around its learning: the run's folders, stop signals and the
count of non-finite steps. ``common.trainer`` (PPO) and ``common.dqn_trainer`` both use these,
so a run of either behaves the same way at its edges.
"""

from __future__ import annotations

import os
import signal
import warnings

from common.config import RunConfig, UnusablePathError, check_writable, make_folder
from common.errors import NonFiniteLossError


class RunFolder:
    """A run's folders: ``run_dir`` (config.json, logs, videos, pictures) and ``saved_path`` (checkpoints).

    Checked at construction (``check_writable``: an unusable ``--log-path`` or ``--saved-path`` is a
    usage error before anything runs); created by ``create`` once a ``--resume`` has been accepted, so
    a refused resume leaves no folder behind.
    """

    def __init__(self, cfg: RunConfig, default_name: str):
        self.run_dir = os.path.join(cfg.log_path, cfg.run_name or default_name)
        self.saved_path = cfg.saved_path or os.path.join(self.run_dir, "models")
        self._log_flag = ("--log-path", cfg.log_path)
        self._saved_flag = ("--saved-path", cfg.saved_path) if cfg.saved_path else self._log_flag
        check_writable(cfg.log_path, "--log-path")
        if cfg.saved_path:
            check_writable(cfg.saved_path, "--saved-path")

    def create(self, cfg: RunConfig) -> None:
        """Make both folders and write the run's full config as ``run_dir/config.json``."""
        make_folder(self.saved_path, *self._saved_flag)
        make_folder(self.run_dir, *self._log_flag)
        try:
            cfg.to_json(os.path.join(self.run_dir, "config.json"))
        except OSError as e:
            raise UnusablePathError(f"--log-path {cfg.log_path!r}: cannot write config.json: {e.strerror}") from None

    def save(self, name: str, state: dict) -> str:
        """Write checkpoint ``saved_path/name`` atomically (``common.checkpoint``); an OSError names the flag
        that chose the folder. Returns the path."""
        from common.checkpoint import save_checkpoint

        try:
            return save_checkpoint(os.path.join(self.saved_path, name), state)
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror} (the folder comes from {self._saved_flag[0]})") from e


class StopSignals:
    """While open, SIGINT and SIGTERM ask the loop to stop: ``signum`` is set and the loop finishes its
    step, saves and closes. A second signal aborts at once (KeyboardInterrupt).

    ``with StopSignals("finishing this step, saving a checkpoint") as stop: ... stop.requested``
    """

    def __init__(self, doing: str):
        self.doing = doing
        self.signum: int | None = None
        self._old = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> StopSignals:
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # the second Ctrl-C: give up at once
            raise KeyboardInterrupt
        self.signum = signum
        print(
            f"\n{signal.Signals(signum).name} received: {self.doing} (press Ctrl-C again to abort without saving)",
            flush=True,
        )


class NonFiniteSteps:
    """Counts the steps taken back for a non-finite loss or weights; ``limit`` in a row stop the run.

    ``unit`` names a step in the messages ("update", "train step").
    """

    def __init__(self, limit: int, unit: str, total: int = 0):
        self.limit, self.unit = limit, unit
        self.streak = 0  # taken back in a row
        self.total = total  # taken back in the whole run (a resumed run carries it on)

    def ok(self) -> None:
        self.streak = 0

    def taken_back(self, number: int, what: str = "loss or weights") -> None:
        """Step ``number`` was not kept; warn, and raise NonFiniteLossError at ``limit`` in a row."""
        self.streak += 1
        self.total += 1
        warnings.warn(
            f"{self.unit} {number}: non-finite {what}, taken back ({self.streak} in a row, {self.total} in total)",
            RuntimeWarning,
            stacklevel=3,
        )
        if self.streak >= self.limit:
            raise NonFiniteLossError(
                f"{self.streak} consecutive {self.unit}s had a NaN/inf loss or weights (each taken back); stopping. "
                "Try a lower --lr or check the rewards."
            )
