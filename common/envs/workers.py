"""How envs are spread over worker processes and how those processes start, run and end."""

from __future__ import annotations

import contextlib
import os
import pickle
import pickletools
import signal
import sys
import threading
import traceback
import types

import numpy as np

from common.envs.contract import EnvFailure
from common.envs.group import EnvGroup

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


#: how long ``set_state`` may take per env of a worker (a replay of up to 4,500 Montezuma steps) on top of
#: the vector env's ``timeout`` before the worker counts as hung; a dead worker is noticed at once
REPLAY_SECONDS = 30.0


def joined_states(parts: list) -> list | None:
    """Every worker's ``EnvGroup.get_state`` answer, in env order: the envs' states, or None when a
    worker's envs cannot say theirs."""
    return None if any(p is None for p in parts) else [s for p in parts for s in p]


def replay_shares(states: list, ranges, timeout: float) -> tuple[list, float]:
    """Each worker's share of ``states`` (one per env of ``ranges``), and how long the replay may take."""
    num_envs = ranges[-1][1]
    if len(states) != num_envs:
        raise ValueError(f"{len(states)} env states for {num_envs} envs")
    most = max(b - a for a, b in ranges)  # a worker replays its envs' episodes one after the other
    return [states[a:b] for a, b in ranges], timeout + REPLAY_SECONDS * most


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of n items over `parts` groups, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    ranges, start = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        ranges.append((start, start + size))
        start += size
    return ranges


def halves(ranges) -> list[tuple[int, int]]:
    """Each worker's env range ``(start, stop)`` split in two halves (whole when it holds one env), in
    order: the pipeline groups of the multi-worker vec envs (subprocess and Ray)."""
    groups = []
    for s, e in ranges:
        mid = s + (e - s + 1) // 2
        groups += [(s, mid), (mid, e)] if e - s > 1 else [(s, e)]
    return groups


def worker_parts(ranges, start: int, stop: int) -> list[tuple[int, int, int]]:
    """(worker, first, stop) of each worker's share of envs ``start..stop-1``, in the worker's own
    numbering; ``ranges``: each worker's ``(start, stop)`` env range."""
    return [(w, max(start, s) - s, min(stop, e) - s) for w, (s, e) in enumerate(ranges) if s < stop and start < e]


def refuse_reset_while_stepping(in_flight: dict) -> None:
    """A RuntimeError when any worker (``{worker: its steps in flight}``) still has a step to answer."""
    if any(in_flight.values()):
        busy = sorted(w for w, q in in_flight.items() if q)
        raise RuntimeError(f"reset while envs of workers {busy} are stepping; step_wait first")


def describe_exitcode(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exit code {code}"


def pickle_refers_to_main(payload: bytes) -> bool:
    for op, arg, _ in pickletools.genops(payload):
        if op.name == "GLOBAL" and isinstance(arg, str) and arg.split(" ")[0] == "__main__":
            return True
        if isinstance(arg, str) and arg == "__main__":
            return True
    return False


@contextlib.contextmanager
def worker_launch(hide_main: bool):
    """While starting workers: single-threaded BLAS/OpenMP in their environment,
    SIGINT ignored (inherited through exec, and kept by Python at start-up), and, if
    allowed, no ``__main__`` for multiprocessing to re-import in them."""
    saved_env = {k: os.environ.get(k) for k in THREAD_ENV_VARS}
    os.environ.update({k: "1" for k in THREAD_ENV_VARS})
    saved_main = sys.modules.get("__main__")
    if hide_main and saved_main is not None:
        sys.modules["__main__"] = types.ModuleType("__main__")
    saved_sigint = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
        if previous is not None:  # None: installed from C, cannot be restored from Python
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            saved_sigint = previous
    try:
        yield
    finally:
        if saved_sigint is not None:
            signal.signal(signal.SIGINT, saved_sigint)
        if hide_main and saved_main is not None:
            sys.modules["__main__"] = saved_main
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Server:
    """A worker's command loop over its ``EnvGroup``: ``step``, ``reset``, ``get_state``, ``set_state``,
    ``shm`` (observations into the shared block from then on), ``close``."""

    def __init__(self, conn, group: EnvGroup, worker_index: int):
        self.conn, self.group, self.worker_index = conn, group, worker_index
        self.shape = (len(group), *group.observation_shape)
        self.obs_buf = np.zeros(self.shape, dtype=np.uint8)  # until the parent sends "shm"
        self.shm = None

    def serve(self) -> None:
        """Answer commands until ``close``; an env's fault is sent back, not raised."""
        while True:
            cmd, arg = self.conn.recv()
            if cmd == "close":
                return
            try:
                self.conn.send(self.answer(cmd, arg))
            except EnvFailure as f:
                self.conn.send(("error", f.env_index, f.phase, f.tb))
            except Exception:
                phase = f"command {cmd!r} in worker {self.worker_index}"
                self.conn.send(("error", None, phase, traceback.format_exc()))

    def answer(self, cmd: str, arg) -> tuple:
        """The reply to one command: ("ok", observations unless shared, rewards, dones, infos)."""
        shared = self.shm is not None
        if cmd == "step":  # arg: (first, stop, actions) of this worker's envs
            lo, hi, actions = arg
            rewards, dones, infos = self.group.step(actions, self.obs_buf, lo, hi)
            return ("ok", None if shared else self.obs_buf[lo:hi], rewards, dones, infos)
        if cmd == "reset":
            self.group.reset(self.obs_buf)
            return ("ok", None if shared else self.obs_buf, None, None, None)
        if cmd == "get_state":
            return ("ok", None, self.group.get_state(), None, None)
        if cmd == "set_state":  # arg: this worker's env states
            self.group.set_state(arg, self.obs_buf)
            return ("ok", None if shared else self.obs_buf, None, None, None)
        if cmd == "shm":
            from multiprocessing import shared_memory

            name, offset = arg
            self.shm = shared_memory.SharedMemory(name=name)
            self.obs_buf = np.ndarray(self.shape, dtype=np.uint8, buffer=self.shm.buf, offset=offset)
            return ("ok", None, None, None, None)
        raise ValueError(f"unknown command {cmd!r}")

    def close(self) -> None:
        self.group.close()
        self.obs_buf = None  # no view into the block outlives it
        if self.shm is not None:
            with contextlib.suppress(Exception):
                self.shm.close()


def _quiet_child(inherited_parent_end) -> None:
    """A worker ignores Ctrl-C (the parent decides), runs one math thread, and (under 'fork') drops the
    parent's end of its pipe."""
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    for k in THREAD_ENV_VARS:
        os.environ[k] = "1"
    if inherited_parent_end is not None:
        inherited_parent_end.close()


def worker_main(
    conn, worker_index: int, first_index: int, payload: bytes, seed: int | None, inherited_parent_end=None
) -> None:
    """Entry point of a worker process hosting envs first_index .. first_index+len-1."""
    _quiet_child(inherited_parent_end)
    server = None
    try:
        try:
            group = EnvGroup(pickle.loads(payload), first_index, seed)
        except EnvFailure as f:
            conn.send(("error", f.env_index, f.phase, f.tb))
            return
        except Exception:
            conn.send(("error", first_index, "construction", traceback.format_exc()))
            return
        server = _Server(conn, group, worker_index)
        conn.send(("ready", group.observation_shape, group.num_actions))
        server.serve()
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the parent went away (or closed our pipe): just leave
    finally:
        if server is not None:
            server.close()
        with contextlib.suppress(Exception):
            conn.close()
