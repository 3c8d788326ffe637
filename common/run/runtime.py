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


def run_commits(previous, here: str, path: str = "") -> list[str]:
    """The commits a run's code came from, oldest first: ``previous`` (a resumed checkpoint's
    ``code_commits``; ``path`` names it in a refusal) and ``here`` (this checkout's, ``code_commit``)
    when it differs from the last. A checkpoint carries the list, so a card or a report can say what
    code trained the weights, not only what code exported them."""
    from common.run.checkpoint import CheckpointError

    ok = isinstance(previous, (list, tuple)) and len(previous) <= 1000
    if not (ok and all(isinstance(c, str) and 0 < len(c) <= 64 for c in previous)):
        raise CheckpointError(f"{path}: entry 'code_commits' is invalid: expected a list of commit ids")
    return list(previous) if previous and previous[-1] == here else [*previous, here]


def physical_memory() -> int:
    """Bytes of this machine's memory (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_fits(nbytes: int, flags: str, what: str, share: float = 0.8) -> None:
    """``UsageError`` naming ``flags`` when ``what`` (``nbytes``) needs more than ``share`` of this machine's memory."""
    have = physical_memory()
    if have and nbytes > share * have:
        raise UsageError(
            f"{flags} is invalid here: {what} needs {nbytes / 2**30:.1f} GB, at most {share:.0%} of this "
            f"machine's {have / 2**30:.1f} GB of memory"
        )


def holds_run(folder: str) -> bool:
    """Whether ``folder`` holds a run (its config.json or metrics.jsonl)."""
    return any(os.path.exists(os.path.join(folder, f)) for f in ("config.json", "metrics.jsonl"))


#: in a --saved-path folder: the run folder whose checkpoints it holds (so that a resume finds its own run)
OWNER_FILE = ".run_folder"


def own_run_folder(checkpoint: str) -> str | None:
    """The run folder a checkpoint was saved in, or None: ``<run>/models/<file>`` next to the run's
    config.json, or the folder a ``--saved-path`` folder names in its ``.run_folder``."""
    models = os.path.dirname(os.path.abspath(checkpoint))
    run_dir = os.path.dirname(models)
    if os.path.basename(models) == "models" and holds_run(run_dir):
        return run_dir
    try:
        with open(os.path.join(models, OWNER_FILE), encoding="utf-8") as f:
            named = f.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return named if os.path.isabs(named) and holds_run(named) else None


def inside(path: str, folder: str) -> bool:
    """Whether ``path``, symlinks followed, lies inside ``folder`` (symlinks followed too)."""
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root + os.sep)


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
        theirs = own_run_folder(cfg.resume) if cfg.resume else None
        resuming_here = theirs is not None and os.path.realpath(theirs) == os.path.realpath(self.run_dir)
        if holds_run(self.run_dir) and not resuming_here:
            raise UsageError(
                f"run folder {self.run_dir} already holds a run: a new run never writes into it. Choose another "
                "--run-name, or continue that run with --resume <one of its checkpoints>"
                + (f" (--resume {cfg.resume!r} belongs to another run folder)" if cfg.resume else "")
            )
        if cfg.saved_path and not resuming_here:  # another run's checkpoints: never written over
            owner = own_run_folder(os.path.join(cfg.saved_path, "x.pdparams"))
            if owner is not None or glob.glob(os.path.join(glob.escape(cfg.saved_path), "*.pdparams")):
                raise UsageError(
                    f"--saved-path {cfg.saved_path!r} is invalid: it holds another run's checkpoints"
                    + (f" (of {owner})" if owner else "")
                    + "; a new run writes into an empty or new folder"
                )
        if not cfg.saved_path and os.path.lexists(self.saved_path) and not inside(self.saved_path, self.run_dir):
            raise UsageError(  # e.g. <run>/models is a symlink into another run: never followed
                f"run folder {self.run_dir}: its models/ leads out of it ({os.path.realpath(self.saved_path)}); "
                "checkpoints are written only inside a run's own folder"
            )
        self._lock = None
        self.commits = [code_commit()]  # the commits the run's code came from (a checkpoint's ``code_commits``)

    def resumed_from(self, state: dict, path: str, cfg: RunConfig | None = None) -> None:
        """Put the run's earlier commits, from its checkpoint ``state`` (read from ``path``), before this one;
        say so, naming each, when ``cfg`` changes a setting the checkpoint's run learned with
        (``RunConfig.changed_since``): the run goes on with the new values, and its config.json holds them."""
        self.commits = run_commits(state.get("code_commits", ()), self.commits[-1], path)
        changes = cfg.changed_since(state["config"]) if cfg is not None else []
        if changes:  # printed, not a warning: the benchmark suites start their runs with warnings off
            print(f"note: resumed from {path} with settings other than its run's: {'; '.join(changes)}", flush=True)

    def create(self, cfg: RunConfig) -> None:
        """Make both folders, remove what a killed save left (``.tmp_*`` files: no other process writes
        here) and write the run's full config as ``run_dir/config.json``."""
        make_folder(self.saved_path, *self._saved_flag)
        make_folder(self.run_dir, *self._log_flag)
        self._take_lock()
        if self.saved_path != os.path.join(self.run_dir, "models"):  # a resume from there finds this run
            with contextlib.suppress(OSError):
                with open(os.path.join(self.saved_path, OWNER_FILE), "w", encoding="utf-8") as f:
                    f.write(os.path.abspath(self.run_dir) + "\n")
        for stale in glob.glob(os.path.join(glob.escape(self.saved_path), ".tmp_*")):
            with contextlib.suppress(OSError):
                os.remove(stale)
        try:
            cfg.to_json(os.path.join(self.run_dir, "config.json"))
        except OSError as e:
            raise UnusablePathError(f"--log-path {cfg.log_path!r}: cannot write config.json: {e.strerror}") from None

    def _take_lock(self) -> None:
        """Hold ``run_dir/.lock`` for this process's life: a second run started in the same folder at the
        same time is refused instead of sharing it (the kernel drops the lock when the process ends)."""
        import fcntl

        path = os.path.join(self.run_dir, ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UsageError(
                f"run folder {self.run_dir} is in use by another run right now: choose another --run-name"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock = fd

    def release(self) -> None:
        """Let go of the folder's lock (the run is over; also when this object is collected)."""
        if getattr(self, "_lock", None) is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = None

    __del__ = release

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
    step, saves and closes. The same signal again aborts at once: KeyboardInterrupt, or, where
    ``on_abort`` holds hooks (the entry points' workers), the hooks and then the process's exit with
    128 + signum. The first signal of the *other* kind is taken as the same stop, not as an abort: a
    shutdown (or ``pkill``) sends SIGTERM to every process, and a supervisor that got it too (the
    benchmark suites) passes a SIGINT on; any signal after that aborts, except in a process whose parent
    has ended since (the signal its supervisor's end sends: ``benchmarks/lanes.py``), where none does.

    ``with StopSignals("finishing this step, saving a checkpoint") as stop: ... stop.requested``
    """

    def __init__(self, doing: str):
        self.doing = doing
        self.signum: int | None = None
        self.on_abort: list = []  # () -> None each, run before a second signal ends the process
        self._old = {}
        self._other_kind_seen = False
        self._parent = os.getppid()

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
        name = signal.Signals(signum).name
        if self.signum is None:  # the first: stop after this step
            self.signum = signum
            again = "press Ctrl-C again" if signum == signal.SIGINT else f"send {name} again"
            print(f"\n{name} received: {self.doing} ({again} to abort without saving)", flush=True)
            return
        if os.getppid() != self._parent:
            # orphaned: the signal is the one its supervisor's end sends (benchmarks/lanes.py), no one's abort
            print(f"\n{name} as the process that started this one ended: the same stop, still {self.doing}", flush=True)
            return
        if signum != self.signum and not self._other_kind_seen:
            self._other_kind_seen = True
            first = signal.Signals(self.signum).name
            print(f"\n{name} after {first}: the same stop, still {self.doing} (one more signal aborts)", flush=True)
            return
        # the second Ctrl-C: give up at once
        if not self.on_abort:
            raise KeyboardInterrupt
        # An exception raised here could land inside a C++ callback (a PyLayer's backward) and come out
        # as some other error; so the process ends here: the hooks end its workers, then exit 128 + signum.
        print(f"\n{name} again: stopped at once, without saving", file=sys.stderr, flush=True)
        for hook in self.on_abort:
            with contextlib.suppress(BaseException):
                hook()
        sys.stdout.flush()
        os._exit(128 + signum)


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
