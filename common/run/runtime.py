"""What every training loop needs around its learning: the run's folders, stop signals and the
count of non-finite steps. ``common.ppo.trainer`` (PPO) and ``common.dqn.trainer`` both use these,
so a run of either behaves the same way at its edges.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import warnings

from common.run.config import RunConfig, UnusablePathError, check_writable, make_folder
from common.run.errors import NonFiniteLossError, UsageError


def code_commit() -> str:
    """The commit of this checkout (``git rev-parse HEAD``), or "unknown" (no git, not a checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
    try:
        return subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def holds_run(folder: str) -> bool:
    """Whether ``folder`` holds a run (its config.json or metrics.jsonl)."""
    return any(os.path.exists(os.path.join(folder, f)) for f in ("config.json", "metrics.jsonl"))


def own_run_folder(checkpoint: str) -> str | None:
    """The run folder a checkpoint was saved in (``<run>/models/<file>``, next to the run's config.json), or None."""
    models = os.path.dirname(os.path.abspath(checkpoint))
    run_dir = os.path.dirname(models)
    return run_dir if os.path.basename(models) == "models" and holds_run(run_dir) else None


class RunFolder:
    """A run's folders: ``run_dir`` (config.json, logs, videos, pictures) and ``saved_path`` (checkpoints).

    Checked at construction (``check_writable``: an unusable ``--log-path`` or ``--saved-path`` is a
    usage error before anything runs); created by ``create`` once a ``--resume`` has been accepted, so
    a refused resume leaves no folder behind.
    """

    def __init__(self, cfg: RunConfig, default_name: str):
        own = own_run_folder(cfg.resume) if cfg.resume and not cfg.run_name else None
        self.run_dir = own or os.path.join(cfg.log_path, cfg.run_name or default_name)
        self.saved_path = cfg.saved_path or os.path.join(self.run_dir, "models")
        self._log_flag = ("--log-path", cfg.log_path)
        self._saved_flag = ("--saved-path", cfg.saved_path) if cfg.saved_path else self._log_flag
        check_writable(os.path.dirname(self.run_dir) or ".", "--log-path")
        if cfg.saved_path:
            check_writable(cfg.saved_path, "--saved-path")
        if holds_run(self.run_dir):
            theirs = own_run_folder(cfg.resume) if cfg.resume else None
            if theirs is None or os.path.realpath(theirs) != os.path.realpath(self.run_dir):
                raise UsageError(
                    f"run folder {self.run_dir} already holds a run: a new run never writes into it. Choose another "
                    "--run-name, or continue that run with --resume <one of its checkpoints>"
                    + (f" (--resume {cfg.resume!r} belongs to another run folder)" if cfg.resume else "")
                )

    def create(self, cfg: RunConfig) -> None:
        """Make both folders, remove what a killed save left (``.tmp_*`` files: no other process writes
        here) and write the run's full config as ``run_dir/config.json``."""
        make_folder(self.saved_path, *self._saved_flag)
        make_folder(self.run_dir, *self._log_flag)
        for stale in glob.glob(os.path.join(glob.escape(self.saved_path), ".tmp_*")):
            with contextlib.suppress(OSError):
                os.remove(stale)
        try:
            cfg.to_json(os.path.join(self.run_dir, "config.json"))
        except OSError as e:
            raise UnusablePathError(f"--log-path {cfg.log_path!r}: cannot write config.json: {e.strerror}") from None

    def save(self, name: str, state: dict) -> str:
        """Write checkpoint ``saved_path/name`` atomically (``common.run.checkpoint``); an OSError names the flag
        that chose the folder. Returns the path."""
        from common.run.checkpoint import save_checkpoint

        try:
            return save_checkpoint(os.path.join(self.saved_path, name), state)
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror} (the folder comes from {self._saved_flag[0]})") from e


class StopSignals:
    """While open, SIGINT and SIGTERM ask the loop to stop: ``signum`` is set and the loop finishes its
    step, saves and closes. A second signal aborts at once: KeyboardInterrupt, or, where ``on_abort``
    holds hooks (the entry points' workers), the hooks and then the process's exit with 128 + signum.

    ``with StopSignals("finishing this step, saving a checkpoint") as stop: ... stop.requested``
    """

    def __init__(self, doing: str):
        self.doing = doing
        self.signum: int | None = None
        self.on_abort: list = []  # () -> None each, run before a second signal ends the process
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
            if not self.on_abort:
                raise KeyboardInterrupt
            # An exception raised here could land inside a C++ callback (a PyLayer's backward) and come out
            # as some other error; so the process ends here: the hooks end its workers, then exit 128 + signum.
            name = signal.Signals(signum).name
            print(f"\n{name} again: stopped at once, without saving", file=sys.stderr, flush=True)
            for hook in self.on_abort:
                with contextlib.suppress(BaseException):
                    hook()
            sys.stdout.flush()
            os._exit(128 + signum)
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
