"""Vectorised environments: one contract for every game.

``VecEnv`` steps ``N`` copies of a game as one batch::

    obs = venv.reset()                                  # uint8[N, *observation_shape]
    obs, rewards, dones, infos = venv.step(actions)     # uint8[N, ...], float32[N], bool[N], N dicts
    venv.close()                                        # idempotent; also a context manager

and, for pipelining, in independent groups of envs (``venv.pipeline_groups``, a list of
``(start, stop)`` env ranges; one range for an in-process vector env, each worker's envs in
two halves for a subprocess one)::

    venv.step_async(actions[start:stop], start, stop)   # returns at once
    obs_g, rewards_g, dones_g, infos_g = venv.step_wait(start, stop)

While one group steps in its worker, the caller can compute another group's actions:
:class:`Pipeline` does this scheduling for a policy (``Trainer.collect`` uses it). Groups of
one worker are answered in the order they were sent.

Contract (shared by :class:`InProcessVecEnv`, :class:`SubprocVecEnv` and ``common.vec_env_ray.RayVecEnv``,
the same env workers as Ray actors on a Ray cluster):

* **Auto-reset.** When env ``i`` ends an episode, ``infos[i]`` gets
  ``final_observation`` (the uint8 observation of the terminal step) and
  ``episode = {"r": return, "l": length}``, computed here from the rewards the env
  returned (never reshaped), and ``obs[i]`` is the first observation of the next
  episode. Rewards are passed through unchanged.
* **Seeding.** Env ``i``'s first reset is ``reset(seed=seed + i)``; later resets are
  unseeded, so each env's RNG carries on and a whole run repeats for a given seed.
  ``seed=None`` leaves every env unseeded.
* **Faults.** Any exception raised by an env (construction, reset, step) reaches the
  caller as :class:`EnvWorkerError` naming the env index and carrying the formatted
  traceback. A subprocess worker that dies (SIGKILL, segfault, ``os._exit``) is
  noticed at once (the parent waits on the worker's pipe *and* its process sentinel)
  and reported with its exit code / signal; a worker that hangs is reported after
  ``timeout`` seconds. After a fault the vector env is unusable; ``close()`` still
  ends every worker (close message, join with timeout, SIGTERM, SIGKILL, join).
* **Restarts** (``SubprocVecEnv(max_restarts=k)``). A worker that dies or hangs while
  stepping is replaced, at most ``k`` times over the vector env's life: the new process
  builds the same envs, seeded afresh (``seed + 1_000_003 * restart``), and resets them.
  The step that was lost reports, for each of those envs, the new first observation,
  reward 0 and ``done=True`` with ``infos[i]["worker_restart"]`` (the fault) and neither
  ``final_observation`` nor ``episode`` (the episode was cut, not finished).
  ``restarts`` counts them; ``restart_log`` describes each. An exception raised by an
  env itself is not retried (it is usually a bug): it is reported at once.

Design of :class:`SubprocVecEnv` (measured in ``benchmarks/env_throughput.py``):

* Each worker process hosts several envs and steps them one after another, so a
  step costs one small message per worker rather than one per env: on a machine
  with few cores, 2 workers x 16 envs is much faster than 32 one-env processes.
* Observations travel through one shared-memory block (``shared_memory=True``,
  the default): a worker writes its envs' frames into its slice and answers with a
  small message (rewards, dones, infos); the parent copies the block once. Pipes
  (``shared_memory=False``) pickle the stacked frames instead.
* Start method ``"spawn"`` (default): forking a process that has imported Paddle
  (OpenMP / CUDA threads) is unsafe. ``spawn`` (like ``forkserver``) normally
  re-imports the parent's ``__main__`` module in every worker, which for a training
  script means importing Paddle 32 times; the parent therefore hides ``__main__``
  while it starts workers, unless an env factory itself lives in ``__main__``.
  Env factories must be picklable: module-level functions or ``functools.partial``.
* Workers start with ``OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=1``
  (set in their environment before the interpreter starts) and with SIGINT ignored:
  Ctrl-C reaches the trainer alone, which then closes the workers.
* Workers are daemonic (so an exiting trainer never waits on them) and exit when
  the parent's end of their pipe closes.

This module never imports Paddle.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import pickletools
import signal
import sys
import threading
import time
import traceback
import types
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "EnvWorkerError",
    "VecEnv",
    "InProcessVecEnv",
    "SubprocVecEnv",
    "make_vec_env",
    "Pipeline",
]

THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


# --------------------------------------------------------------------------- errors
class EnvWorkerError(RuntimeError):
    """An environment failed: it raised, or the worker process hosting it died or hung.

    Attributes:
        env_index: index of the failing env in the vector env, or ``None`` when the
            fault belongs to a whole worker hosting several envs (death, hang).
        worker_traceback: the formatted traceback from inside the worker ("" when
            there is none, e.g. the worker was killed).
        worker_index: index of the worker process (``None`` for in-process envs).
    """

    def __init__(
        self, message: str, env_index: int | None = None, worker_traceback: str = "", worker_index: int | None = None
    ):
        super().__init__(message)
        self.env_index = env_index
        self.worker_traceback = worker_traceback
        self.worker_index = worker_index

    def __reduce__(self):
        return (type(self), (self.args[0], self.env_index, self.worker_traceback, self.worker_index))


class _EnvFailure(Exception):
    """Raised inside an env group; turned into a message (workers) or EnvWorkerError."""

    def __init__(self, env_index: int, phase: str, tb: str):
        super().__init__(f"env {env_index} failed during {phase}")
        self.env_index = env_index
        self.phase = phase
        self.tb = tb


def _failure_message(env_index: int | None, phase: str, where: str, tb: str) -> str:
    who = f"Environment {env_index}" if env_index is not None else "An environment"
    return f"{who} ({where}) raised an exception during {phase}:\n\n{tb.rstrip()}"


def _describe_exitcode(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exit code {code}"


# ------------------------------------------------------------------ the env group
def _env_spaces(env: Any) -> tuple[tuple[int, ...], int]:
    shape = getattr(env, "observation_shape", None)
    if shape is None:
        shape = env.observation_space.shape
    n = getattr(env, "num_actions", None)
    if n is None:
        n = env.action_space.n
    return tuple(int(s) for s in shape), int(n)


class _EnvGroup:
    """Several envs stepped in sequence, with auto-reset and episode accounting.

    Used directly by :class:`InProcessVecEnv` and inside each subprocess worker, so
    both vector envs follow exactly the same semantics.
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], first_index: int, seed: int | None):
        self.first_index = first_index
        self.seed = seed
        self.envs: list[Any] = []
        for j, fn in enumerate(env_fns):
            try:
                self.envs.append(fn())
            except Exception:
                self.close()
                raise _EnvFailure(first_index + j, "construction", traceback.format_exc()) from None
        spaces = [_env_spaces(env) for env in self.envs]
        if len(set(spaces)) > 1:
            self.close()
            raise ValueError(
                f"envs {first_index}..{first_index + len(self.envs) - 1} differ in "
                f"(observation_shape, num_actions): {spaces}"
            )
        self.observation_shape, self.num_actions = spaces[0]
        n = len(self.envs)
        self._seeded = [False] * n
        self._returns = np.zeros(n, dtype=np.float64)
        self._lengths = np.zeros(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.envs)

    def _check(self, j: int, obs: Any, phase: str) -> np.ndarray:
        if not isinstance(obs, np.ndarray) or obs.dtype != np.uint8 or obs.shape != self.observation_shape:
            desc = f"{type(obs).__name__} {getattr(obs, 'dtype', '')} {getattr(obs, 'shape', '')}"
            raise TypeError(
                f"{phase} returned {desc}; the VecEnv contract needs a uint8 array of shape {self.observation_shape}"
            )
        return obs

    def _reset_one(self, j: int) -> np.ndarray:
        env = self.envs[j]
        if self.seed is not None and not self._seeded[j]:
            obs = env.reset(seed=self.seed + self.first_index + j)
        else:
            obs = env.reset()
        self._seeded[j] = True
        self._returns[j] = 0.0
        self._lengths[j] = 0
        return self._check(j, obs, "reset()")

    def reset(self, out: np.ndarray) -> None:
        for j in range(len(self.envs)):
            try:
                out[j] = self._reset_one(j)
            except Exception:
                raise _EnvFailure(self.first_index + j, "reset", traceback.format_exc()) from None

    def step(
        self, actions: Sequence[int], out: np.ndarray, lo: int = 0, hi: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Step envs ``lo..hi-1`` of this group (all by default) with ``actions`` (one each); their
        observations go to ``out[lo:hi]``."""
        hi = len(self.envs) if hi is None else hi
        rewards = np.zeros(hi - lo, dtype=np.float32)
        dones = np.zeros(hi - lo, dtype=bool)
        infos: list[dict] = []
        for j in range(lo, hi):
            env, phase = self.envs[j], "step"
            try:
                obs, reward, done, info = env.step(int(actions[j - lo]))
                self._check(j, obs, "step()")
                reward = float(reward)
                done = bool(done)
                info = dict(info) if info else {}
                self._returns[j] += reward
                self._lengths[j] += 1
                if done:
                    info["final_observation"] = np.array(obs, dtype=np.uint8, copy=True)
                    info["episode"] = {"r": float(self._returns[j]), "l": int(self._lengths[j])}
                    phase = "reset (auto-reset after the episode ended)"
                    obs = self._reset_one(j)
                out[j] = obs
            except Exception:
                raise _EnvFailure(self.first_index + j, phase, traceback.format_exc()) from None
            rewards[j - lo] = reward
            dones[j - lo] = done
            infos.append(info)
        return rewards, dones, infos

    def close(self) -> None:
        envs, self.envs = self.envs, []
        for env in envs:
            try:
                env.close()
            except Exception:
                pass


# ------------------------------------------------------------------ the contract
class VecEnv:
    """The vector-env contract. See the module docstring for the semantics."""

    num_envs: int
    observation_shape: tuple[int, ...]
    num_actions: int

    def reset(self) -> np.ndarray:
        raise NotImplementedError

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        self.step_async(actions, 0, self.num_envs)
        return self.step_wait(0, self.num_envs)

    @property
    def pipeline_groups(self) -> list[tuple[int, int]]:
        """``(start, stop)`` env ranges that ``step_async`` / ``step_wait`` can step independently."""
        return [(0, self.num_envs)]

    def step_async(self, actions, start: int, stop: int) -> None:
        """Start stepping envs ``start..stop-1`` (one of ``pipeline_groups``) with ``actions``."""
        raise NotImplementedError

    def step_wait(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Results of the ``step_async`` of that group: uint8[n, ...], float32[n], bool[n], n dicts."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _group(self, start: int, stop: int) -> int:
        groups = self.pipeline_groups
        if (start, stop) not in groups:
            raise ValueError(f"envs {start}..{stop - 1} are not one of this VecEnv's groups {groups}")
        return groups.index((start, stop))

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def _actions(self, actions, n: int | None = None) -> np.ndarray:
        n = self.num_envs if n is None else n
        a = np.asarray(actions)
        if a.size != n:
            raise ValueError(f"expected {n} actions, got shape {a.shape}")
        a = a.reshape(n)
        if a.dtype.kind not in "iub":
            if a.dtype.kind == "f" and np.all(a == np.round(a)):
                a = a.astype(np.int64)
            else:
                raise TypeError(f"actions must be integers, got dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() >= self.num_actions):
            raise ValueError(f"actions must lie in [0, {self.num_actions}), got {a.tolist()}")
        return a.astype(np.int64, copy=False)

    def __len__(self) -> int:
        return self.num_envs

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, "
            f"observation_shape={self.observation_shape}, num_actions={self.num_actions})"
        )


class InProcessVecEnv(VecEnv):
    """All envs in the calling process, stepped one after another (debugging, tests, eval)."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], seed: int | None = None):
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("need at least one env factory")
        self._closed = False
        self.num_envs = len(env_fns)
        try:
            self._envs = _EnvGroup(env_fns, 0, seed)
        except _EnvFailure as f:
            self._closed = True
            raise EnvWorkerError(
                _failure_message(f.env_index, f.phase, "in-process", f.tb), f.env_index, f.tb
            ) from None
        self.observation_shape = self._envs.observation_shape
        self.num_actions = self._envs.num_actions
        self._obs = np.zeros((self.num_envs, *self.observation_shape), dtype=np.uint8)
        self._pending: np.ndarray | None = None

    def _guard(self) -> None:
        if self._closed:
            raise RuntimeError("this VecEnv is closed")

    def reset(self) -> np.ndarray:
        self._guard()
        self._pending = None
        try:
            self._envs.reset(self._obs)
        except _EnvFailure as f:
            raise EnvWorkerError(
                _failure_message(f.env_index, f.phase, "in-process", f.tb), f.env_index, f.tb
            ) from None
        return self._obs.copy()

    def step_async(self, actions, start: int, stop: int) -> None:
        self._guard()
        self._group(start, stop)
        if self._pending is not None:
            raise RuntimeError("step_async called twice without step_wait")
        self._pending = self._actions(actions)

    def step_wait(self, start: int, stop: int):
        self._guard()
        self._group(start, stop)
        if self._pending is None:
            raise RuntimeError("step_wait without step_async")
        a, self._pending = self._pending, None
        try:
            rewards, dones, infos = self._envs.step(a, self._obs)
        except _EnvFailure as f:
            raise EnvWorkerError(
                _failure_message(f.env_index, f.phase, "in-process", f.tb), f.env_index, f.tb
            ) from None
        return self._obs.copy(), rewards, dones, infos

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._envs.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ------------------------------------------------------------------ subprocesses
def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of n items over `parts` groups, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    ranges, start = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        ranges.append((start, start + size))
        start += size
    return ranges


def _pickle_refers_to_main(payload: bytes) -> bool:
    for op, arg, _ in pickletools.genops(payload):
        if op.name == "GLOBAL" and isinstance(arg, str) and arg.split(" ")[0] == "__main__":
            return True
        if isinstance(arg, str) and arg == "__main__":
            return True
    return False


@contextlib.contextmanager
def _worker_launch(hide_main: bool):
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


def _worker_main(
    conn, worker_index: int, first_index: int, payload: bytes, seed: int | None, inherited_parent_end=None
) -> None:
    """Entry point of a worker process hosting envs first_index .. first_index+len-1."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    for k in THREAD_ENV_VARS:
        os.environ[k] = "1"
    if inherited_parent_end is not None:  # 'fork': drop the parent's end of our pipe
        inherited_parent_end.close()
    group = None
    shm = None
    obs_buf = None

    def send_error(env_index, phase, tb):
        conn.send(("error", env_index, phase, tb))

    try:
        try:
            env_fns = pickle.loads(payload)
            group = _EnvGroup(env_fns, first_index, seed)
        except _EnvFailure as f:
            send_error(f.env_index, f.phase, f.tb)
            return
        except Exception:
            send_error(first_index, "construction", traceback.format_exc())
            return
        conn.send(("ready", group.observation_shape, group.num_actions))
        local = np.zeros((len(group), *group.observation_shape), dtype=np.uint8)
        obs_buf = local
        while True:
            cmd, arg = conn.recv()
            try:
                if cmd == "step":  # arg: (first, stop, actions) of this worker's envs
                    lo, hi, actions = arg
                    rewards, dones, infos = group.step(actions, obs_buf, lo, hi)
                    conn.send(("ok", None if shm is not None else obs_buf[lo:hi], rewards, dones, infos))
                elif cmd == "reset":
                    group.reset(obs_buf)
                    conn.send(("ok", None if shm is not None else obs_buf, None, None, None))
                elif cmd == "shm":
                    from multiprocessing import shared_memory

                    name, offset = arg
                    shm = shared_memory.SharedMemory(name=name)
                    obs_buf = np.ndarray(local.shape, dtype=np.uint8, buffer=shm.buf, offset=offset)
                    conn.send(("ok", None, None, None, None))
                elif cmd == "close":
                    break
                else:
                    raise ValueError(f"unknown command {cmd!r}")
            except _EnvFailure as f:
                send_error(f.env_index, f.phase, f.tb)
            except Exception:
                send_error(None, f"command {cmd!r} in worker {worker_index}", traceback.format_exc())
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the parent went away (or closed our pipe): just leave
    finally:
        if group is not None:
            group.close()
        obs_buf = None
        if shm is not None:
            try:
                shm.close()
            except Exception:
                pass
        try:
            conn.close()
        except Exception:
            pass


def halves(ranges) -> list[tuple[int, int]]:
    """Each worker's env range ``(start, stop)`` split in two halves (whole when it holds one env), in
    order: the pipeline groups of the multi-worker vec envs (subprocess and Ray)."""
    groups = []
    for s, e in ranges:
        mid = s + (e - s + 1) // 2
        groups += [(s, mid), (mid, e)] if e - s > 1 else [(s, e)]
    return groups


class SubprocVecEnv(VecEnv):
    """Envs in ``num_workers`` processes, each hosting several envs.

    Args:
        env_fns: one picklable factory per env (module-level function / partial).
        num_workers: worker processes (clamped to ``len(env_fns)``); envs are split
            as evenly as possible, contiguous blocks in order.
        seed: env ``i`` first resets with ``seed + i``; ``None`` for unseeded.
        start_method: ``"spawn"`` (default), ``"forkserver"`` or ``"fork"`` (unsafe once
            Paddle or any threaded library is loaded in the parent).
        timeout: seconds a reset/step may take before a worker counts as hung.
        start_timeout: seconds for workers to start and build their envs.
        shared_memory: observations through one shared-memory block (default) rather
            than pickled through the pipes.
        max_restarts: how many times in all a worker that dies or hangs while stepping is
            replaced (module docstring); 0 = never, the fault is raised.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        num_workers: int,
        seed: int | None = None,
        start_method: str = "spawn",
        timeout: float = 60.0,
        start_timeout: float = 180.0,
        shared_memory: bool = True,
        max_restarts: int = 0,
    ):
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("need at least one env factory")
        if num_workers < 1:
            raise ValueError("num_workers must be >= 1 (use InProcessVecEnv for none)")
        self._closed = True  # until the workers exist: close() is then a no-op
        self._processes: list[mp.process.BaseProcess] = []
        self.worker_pids: list[int] = []
        self._conns: list[mp.connection.Connection] = []
        self._shm = None
        self._shm_obs = None
        self.num_envs = len(env_fns)
        self.num_workers = min(int(num_workers), self.num_envs)
        self.timeout = float(timeout)
        self.start_method = start_method
        self._ranges = _split(self.num_envs, self.num_workers)
        self._broken: str | None = None
        self._unresponsive: set[int] = set()  # hung workers: close() terminates them at once
        # per worker, the env ranges of the steps sent to it and not yet received, in sending order
        self._in_flight: dict[int, list[tuple[int, int]]] = {}
        self.max_restarts = int(max_restarts)
        self.restarts = 0
        self.restart_log: list[str] = []
        self._replayed: dict[int, list[tuple]] = {}  # per worker, stand-in answers for steps lost in a restart
        self._seed, self._start_timeout = seed, float(start_timeout)
        ctx = mp.get_context(start_method)
        self._ctx = ctx

        payloads = []
        for start, stop in self._ranges:
            try:
                payloads.append(pickle.dumps(env_fns[start:stop], protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as exc:
                raise TypeError(
                    f"SubprocVecEnv needs picklable env factories (module-level functions or "
                    f"functools.partial of them); envs {start}..{stop - 1}: {exc!r}"
                ) from exc
        hide_main = start_method != "fork" and not any(_pickle_refers_to_main(p) for p in payloads)
        self._payloads, self._hide_main = payloads, hide_main

        self._closed = False
        try:
            for w in range(self.num_workers):
                proc, conn = self._launch(w, seed)
                self._processes.append(proc)
                self._conns.append(conn)
                self.worker_pids.append(proc.pid)
            ready = self._gather(range(self.num_workers), "construction", start_timeout)
            spaces = {(tuple(m[1]), m[2]) for m in ready.values()}
            if len(spaces) > 1:
                raise ValueError(f"envs differ in (observation_shape, num_actions): {spaces}")
            ((self.observation_shape, self.num_actions),) = spaces
            self._obs_size = int(np.prod(self.observation_shape))
            if shared_memory:
                from multiprocessing import shared_memory as shm_mod

                nbytes = max(1, self.num_envs * self._obs_size)
                self._shm = shm_mod.SharedMemory(create=True, size=nbytes)
                self._shm_obs = np.ndarray(
                    (self.num_envs, *self.observation_shape), dtype=np.uint8, buffer=self._shm.buf
                )
                for w, (start, _) in enumerate(self._ranges):
                    self._conns[w].send(("shm", (self._shm.name, start * self._obs_size)))
                self._gather(range(self.num_workers), "shared-memory setup", start_timeout)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- internals
    def _launch(self, w: int, seed: int | None):
        """Start worker ``w``'s process; returns (process, the parent's end of its pipe)."""
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_worker_main,
            args=(
                child_end,
                w,
                self._ranges[w][0],
                self._payloads[w],
                seed,
                parent_end if self.start_method == "fork" else None,
            ),
            name=f"VecEnvWorker-{w}",
            daemon=True,
        )
        try:
            with _worker_launch(self._hide_main):
                proc.start()
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        return proc, parent_end

    def _replace(self, w: int, reason: str) -> None:
        """Replace faulty worker ``w`` (see the module docstring); stand-in answers to each of its steps in
        flight wait in ``_replayed[w]``, oldest first."""
        old, conn = self._processes[w], self._conns[w]
        if old.is_alive():
            old.kill()
        old.join(timeout=5.0)
        with contextlib.suppress(Exception):
            conn.close()
        self.restarts += 1
        seed = None if self._seed is None else self._seed + 1_000_003 * self.restarts
        proc, conn = self._launch(w, seed)
        self._processes[w], self._conns[w] = proc, conn
        self.worker_pids[w] = proc.pid
        self._unresponsive.discard(w)
        self.restart_log.append(f"restart {self.restarts}/{self.max_restarts}: {reason}; new worker pid {proc.pid}")
        self._gather([w], "restart (construction)", self._start_timeout, may_restart=False)
        if self._shm is not None:
            conn.send(("shm", (self._shm.name, self._ranges[w][0] * self._obs_size)))
            self._gather([w], "restart (shared-memory setup)", self._start_timeout, may_restart=False)
        conn.send(("reset", None))
        reset = self._gather([w], "restart (reset)", may_restart=False)[w]
        s = self._ranges[w][0]
        answers = []
        for start, stop in self._in_flight.get(w, []):
            lo, hi = max(start, s) - s, min(stop, self._ranges[w][1]) - s
            obs = None if self._shm is not None else reset[1][lo:hi]
            answers.append(
                (
                    "ok",
                    obs,
                    np.zeros(hi - lo, np.float32),
                    np.ones(hi - lo, bool),
                    [{"worker_restart": reason} for _ in range(hi - lo)],
                )
            )
        self._replayed[w] = answers

    def _where(self, w: int) -> str:
        start, stop = self._ranges[w]
        envs = f"env {start}" if stop - start == 1 else f"envs {start}-{stop - 1}"
        pid = self.worker_pids[w] if w < len(self.worker_pids) else None
        return f"worker {w}, pid {pid}, hosting {envs}"

    def _fail(self, exc: EnvWorkerError) -> EnvWorkerError:
        self._broken = str(exc).splitlines()[0]
        return exc

    def _dead(self, w: int, phase: str) -> EnvWorkerError:
        proc = self._processes[w]
        proc.join(timeout=1.0)
        start, stop = self._ranges[w]
        return self._fail(
            EnvWorkerError(
                f"Env worker process died during {phase} ({self._where(w)}): {_describe_exitcode(proc.exitcode)}",
                start if stop - start == 1 else None,
                "",
                w,
            )
        )

    def _gather(
        self, workers: Iterable[int], phase: str, timeout: float | None = None, may_restart: bool = True
    ) -> dict[int, tuple]:
        """Receive one message from each worker; raise EnvWorkerError on an env error,
        a dead worker or a timeout. Waits on pipes and process sentinels together.
        While stepping, a worker that dies or hangs is replaced instead while the restart
        budget lasts (its answer is then the stand-in of ``_replace``)."""
        timeout = self.timeout if timeout is None else timeout
        restartable = may_restart and phase == "step"
        pending = set(workers)
        results: dict[int, tuple] = {}
        deadline = time.monotonic() + timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._unresponsive.update(pending)
                w = min(pending)
                start, stop = self._ranges[w]
                fault = (
                    f"Env worker process did not answer within {timeout:g} s during {phase} "
                    f"({self._where(w)}); hung environment?"
                )
                if restartable and self.restarts < self.max_restarts:
                    self._replace(w, fault)
                    results[w] = self._replayed[w].pop(0)
                    pending.discard(w)
                    deadline = time.monotonic() + timeout  # the restart's own time is not the others' fault
                    continue
                raise self._fail(
                    EnvWorkerError(fault + self._budget_note(restartable), start if stop - start == 1 else None, "", w)
                )
            by_conn = {self._conns[w]: w for w in pending}
            by_sentinel = {self._processes[w].sentinel: w for w in pending}
            ready = mp.connection.wait(list(by_conn) + list(by_sentinel), timeout=remaining)
            for w in sorted({by_conn[o] if o in by_conn else by_sentinel[o] for o in ready}):
                conn = self._conns[w]
                try:
                    if not conn.poll(0):  # poll is also True at EOF; recv() then raises
                        if self._processes[w].is_alive():
                            continue  # spurious wake-up
                        raise EOFError
                    msg = conn.recv()
                except (EOFError, OSError):
                    dead = self._dead(w, phase)
                    if restartable and self.restarts < self.max_restarts:
                        self._broken = None
                        self._replace(w, str(dead))
                        results[w] = self._replayed[w].pop(0)
                        pending.discard(w)
                        deadline = time.monotonic() + timeout
                        continue
                    raise self._fail(
                        EnvWorkerError(str(dead) + self._budget_note(restartable), dead.env_index, "", w)
                    ) from None
                if msg[0] == "error":
                    _, env_index, what, tb = msg
                    raise self._fail(
                        EnvWorkerError(_failure_message(env_index, what, self._where(w), tb), env_index, tb, w)
                    )
                results[w] = msg
                pending.discard(w)
        return results

    def _budget_note(self, restartable: bool) -> str:
        if not restartable or self.max_restarts == 0:
            return ""
        return f" (after {self.restarts} worker restarts, the most allowed)"

    def _guard(self) -> None:
        if self._closed:
            raise RuntimeError("this VecEnv is closed")
        if self._broken is not None:
            raise EnvWorkerError(f"this VecEnv is unusable after an earlier fault: {self._broken}")

    def _send_all(self, messages: Sequence[tuple], phase: str) -> None:
        for w, msg in enumerate(messages):
            try:
                self._conns[w].send(msg)
            except OSError:  # BrokenPipeError, ConnectionResetError: the worker is gone
                raise self._dead(w, phase) from None

    def _collect_obs(self, results: dict[int, tuple], start: int, stop: int) -> np.ndarray:
        if self._shm_obs is not None:
            return self._shm_obs[start:stop].copy()
        return np.concatenate([results[w][1] for w in sorted(results)], axis=0)

    def _parts(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """(worker, first, stop) of each worker's share of envs ``start..stop-1``, in the worker's own
        numbering: every worker whole for all envs, else the one worker hosting that pipeline group."""
        if (start, stop) != (0, self.num_envs):
            self._group(start, stop)
        return [
            (w, max(start, s) - s, min(stop, e) - s) for w, (s, e) in enumerate(self._ranges) if s < stop and start < e
        ]

    # ------------------------------------------------------------------ contract
    @property
    def pipeline_groups(self) -> list[tuple[int, int]]:
        """Each worker's envs in two halves (whole when it hosts one env), in env order.

        A worker gets the next step of one half while it steps the other, so the caller can
        pick one half's actions without leaving the worker idle (``Trainer.collect``).
        """
        return halves(self._ranges)

    def reset(self) -> np.ndarray:
        self._guard()
        if any(self._in_flight.values()):
            busy = sorted(w for w, q in self._in_flight.items() if q)
            raise RuntimeError(f"reset while envs of workers {busy} are stepping; step_wait first")
        ok = False
        try:
            self._send_all([("reset", None)] * self.num_workers, "reset")
            results = self._gather(range(self.num_workers), "reset")
            ok = True
        finally:
            if not ok and self._broken is None:
                self._broken = "interrupted during reset"
        return self._collect_obs(results, 0, self.num_envs)

    def step_async(self, actions, start: int, stop: int) -> None:
        self._guard()
        parts = self._parts(start, stop)
        for w, lo, hi in parts:
            s = self._ranges[w][0]
            if any(a < s + hi and s + lo < b for a, b in self._in_flight.get(w, [])):
                raise RuntimeError(f"envs {start}..{stop - 1} are already stepping; step_wait first")
        a = self._actions(actions, stop - start)
        ok = False
        try:
            for w, lo, hi in parts:
                first = self._ranges[w][0] + lo - start  # this worker's actions in a
                self._in_flight.setdefault(w, []).append((start, stop))
                try:
                    self._conns[w].send(("step", (lo, hi, a[first : first + hi - lo].tolist())))
                except OSError:  # BrokenPipeError, ConnectionResetError: the worker is gone
                    dead = self._dead(w, "step")
                    if self.restarts >= self.max_restarts:
                        self._in_flight[w].pop()
                        raise self._fail(
                            EnvWorkerError(str(dead) + self._budget_note(True), dead.env_index, "", w)
                        ) from None
                    self._broken = None
                    self._replace(w, str(dead))  # every step of w in flight, this one too, gets a stand-in
            ok = True
        finally:
            if not ok and self._broken is None:
                self._broken = "interrupted during step"

    def step_wait(self, start: int, stop: int):
        self._guard()
        workers = [w for w, _, _ in self._parts(start, stop)]
        for w in workers:
            queue = self._in_flight.get(w, [])
            if (start, stop) not in queue:
                raise RuntimeError(f"step_wait for envs {start}..{stop - 1} without step_async")
            if queue[0] != (start, stop):  # a worker answers in the order it was sent steps
                raise RuntimeError(
                    f"step_wait for envs {start}..{stop - 1} before envs {queue[0][0]}.."
                    f"{queue[0][1] - 1}, which were sent to worker {w} first"
                )
        results = {w: self._replayed[w].pop(0) for w in workers if self._replayed.get(w)}
        ok = False
        try:
            results.update(self._gather([w for w in workers if w not in results], "step"))
            ok = True
        finally:
            if not ok and self._broken is None:
                self._broken = "interrupted during step"
        for w in workers:
            self._in_flight[w].pop(0)
        obs = self._collect_obs(results, start, stop)
        rewards = np.concatenate([results[w][2] for w in workers]).astype(np.float32, copy=False)
        dones = np.concatenate([results[w][3] for w in workers]).astype(bool, copy=False)
        infos: list[dict] = []
        for w in workers:
            infos.extend(results[w][4])
        return obs, rewards, dones, infos

    def close(self, timeout: float = 5.0) -> None:
        """End every worker: close message, join (``timeout`` s in all), then SIGTERM,
        then SIGKILL; join them all (no zombies). Safe to call any number of times."""
        if self._closed:
            return
        self._closed = True
        for w, (conn, proc) in enumerate(zip(self._conns, self._processes)):
            if w in self._unresponsive:
                proc.terminate()
            elif proc.is_alive():
                try:
                    conn.send(("close", None))
                except Exception:
                    pass
        deadline = time.monotonic() + timeout
        for proc in self._processes:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self._processes:
            if proc.is_alive():
                proc.terminate()
        for proc in self._processes:
            proc.join(timeout=1.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1.0)
        for conn in self._conns:
            try:
                conn.close()
            except Exception:
                pass
        for proc in self._processes:
            try:
                proc.close()
            except Exception:
                pass
        self._free_shared_memory()

    def abort(self) -> None:
        """End every worker at once (SIGKILL) and free the shared memory: a second Ctrl-C, nothing is waited for."""
        self._closed = True
        for proc in self._processes:
            with contextlib.suppress(Exception):
                proc.kill()
        self._free_shared_memory()

    def _free_shared_memory(self) -> None:
        self._shm_obs = None
        if self._shm is not None:
            with contextlib.suppress(Exception):
                self._shm.close()
                self._shm.unlink()
            self._shm = None

    def __del__(self):
        try:
            self.close(timeout=1.0)
        except Exception:
            pass


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


def make_vec_env(
    env_fns: Sequence[Callable[[], Any]],
    num_workers: int = 0,
    seed: int | None = None,
    kind: str = "subproc",
    **kwargs,
) -> VecEnv:
    """``num_workers == 0``: :class:`InProcessVecEnv`; otherwise :class:`SubprocVecEnv`
    with ``num_workers`` processes. Extra keyword arguments are SubprocVecEnv options
    (``timeout``, ``start_timeout``, ``start_method``, ``shared_memory``, ``max_restarts``); they are
    accepted and ignored in-process, so one call site serves both.

    ``kind="ray"``: a ``common.vec_env_ray.RayVecEnv`` of ``num_workers`` Ray actors (0: one per CPU
    of the Ray cluster), with its options (``timeout``, ``start_timeout``, ``max_restarts``, ``address``)."""
    if kind == "ray":
        from common.vec_env_ray import RayVecEnv

        return RayVecEnv(env_fns, num_workers=max(0, num_workers), seed=seed, **kwargs)
    if kind != "subproc":
        raise ValueError(f"unknown vector-env kind {kind!r}; expected subproc or ray")
    if num_workers <= 0:
        unknown = set(kwargs) - {"timeout", "start_timeout", "start_method", "shared_memory", "max_restarts"}
        if unknown:
            raise TypeError(f"unknown vector-env options {sorted(unknown)}")
        return InProcessVecEnv(env_fns, seed=seed)
    return SubprocVecEnv(env_fns, num_workers=num_workers, seed=seed, **kwargs)


def vec_env_for_run(spec, cfg, rank: int, cores: int, update: int) -> VecEnv:
    """The vector env of a PPO run (``cfg``: a ``TrainConfig``) on data-parallel rank ``rank``.

    ``--num-workers 0`` puts the envs on one worker per core (``cores``: this rank's share),
    several envs per worker: that beats one process per env when envs outnumber cores
    (``benchmarks/env_throughput.py``); -1 keeps them in this process. Env ``i`` is seeded
    with ``seed + i`` (rank ``r``'s as env ``r * num_envs + i`` of one big run); a resumed run
    (``update`` > 0) starts fresh episodes, seeded by its update count so that it does not
    replay the original's.
    """
    fns = [spec.env_factory(cfg, None) for _ in range(cfg.num_envs)]
    workers = {-1: 0, 0: min(cfg.num_envs, cores)}.get(cfg.num_workers, min(cfg.num_workers, cfg.num_envs))
    kw = {"max_restarts": cfg.max_worker_restarts, "timeout": cfg.worker_timeout} if workers > 0 else {}
    if cfg.vec_env == "ray":  # Ray actors; --num-workers 0: one per CPU of the Ray cluster
        workers = cfg.num_workers
        kw = {"max_restarts": cfg.max_worker_restarts, "timeout": cfg.worker_timeout, "kind": "ray"}
        kw["address"] = cfg.ray_address
    seed = cfg.seed + 100_003 * update + rank * cfg.num_envs
    return make_vec_env(fns, num_workers=workers, seed=seed, **kw)
