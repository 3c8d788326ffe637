"""Envs in worker processes: :class:`SubprocVecEnv`.

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
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import pickle
import time
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from common.envs.contract import EnvWorkerError, VecEnv, failure_message
from common.envs.workers import (
    describe_exitcode,
    halves,
    joined_states,
    pickle_refers_to_main,
    refuse_reset_while_stepping,
    replay_shares,
    split_evenly,
    worker_launch,
    worker_main,
    worker_parts,
)


def _pickled_factories(env_fns: list, start: int, stop: int) -> bytes:
    """The env factories ``start..stop-1`` as one pickle (what a worker process receives)."""
    try:
        return pickle.dumps(env_fns[start:stop], protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(
            f"SubprocVecEnv needs picklable env factories (module-level functions or "
            f"functools.partial of them); envs {start}..{stop - 1}: {exc!r}"
        ) from exc


def _end_processes(processes: list) -> None:
    """SIGTERM the processes still alive, then SIGKILL those that outlive a second; join them all."""
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(timeout=1.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=1.0)


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
        self._ranges = split_evenly(self.num_envs, self.num_workers)
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

        payloads = [_pickled_factories(env_fns, start, stop) for start, stop in self._ranges]
        hide_main = start_method != "fork" and not any(pickle_refers_to_main(p) for p in payloads)
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
                self._share_observations(start_timeout)
        except BaseException:
            self.close()
            raise

    def _share_observations(self, start_timeout: float) -> None:
        """One shared-memory block of uint8[num_envs, *observation_shape]; each worker writes its envs' rows."""
        from multiprocessing import shared_memory as shm_mod

        nbytes = max(1, self.num_envs * self._obs_size)
        self._shm = shm_mod.SharedMemory(create=True, size=nbytes)
        self._shm_obs = np.ndarray((self.num_envs, *self.observation_shape), dtype=np.uint8, buffer=self._shm.buf)
        for w, (start, _) in enumerate(self._ranges):
            self._conns[w].send(("shm", (self._shm.name, start * self._obs_size)))
        self._gather(range(self.num_workers), "shared-memory setup", start_timeout)

    # ---------------------------------------------------------------- internals
    def _launch(self, w: int, seed: int | None):
        """Start worker ``w``'s process; returns (process, the parent's end of its pipe)."""
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=worker_main,
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
            with worker_launch(self._hide_main):
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
                f"Env worker process died during {phase} ({self._where(w)}): {describe_exitcode(proc.exitcode)}",
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
                        EnvWorkerError(failure_message(env_index, what, self._where(w), tb), env_index, tb, w)
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
        """Each worker's share of envs ``start..stop-1`` (``worker_parts``): every worker whole for all
        envs, else the one worker hosting that pipeline group."""
        return worker_parts(self._ranges, *self._range(start, stop))

    # ------------------------------------------------------------------ contract
    @property
    def pipeline_groups(self) -> list[tuple[int, int]]:
        """Each worker's envs in two halves (whole when it hosts one env), in env order.

        A worker gets the next step of one half while it steps the other, so the caller can
        pick one half's actions without leaving the worker idle (``Trainer.collect``).
        """
        return halves(self._ranges)

    def _every_worker(self, messages: Sequence[tuple], phase: str, timeout: float | None = None) -> dict:
        """Send each worker its message and gather every answer; cut short, the vector env is unusable."""
        ok = False
        try:
            self._send_all(messages, phase)
            results = self._gather(range(self.num_workers), phase, timeout)
            ok = True
        finally:
            if not ok and self._broken is None:
                self._broken = f"interrupted during {phase}"
        return results

    def reset(self) -> np.ndarray:
        self._guard()
        refuse_reset_while_stepping(self._in_flight)
        results = self._every_worker([("reset", None)] * self.num_workers, "reset")
        return self._collect_obs(results, 0, self.num_envs)

    can_restore = True

    def get_state(self) -> list | None:
        self._guard()
        refuse_reset_while_stepping(self._in_flight)
        results = self._every_worker([("get_state", None)] * self.num_workers, "get_state")
        return joined_states([results[w][2] for w in range(self.num_workers)])

    def set_state(self, states: list) -> np.ndarray:
        self._guard()
        refuse_reset_while_stepping(self._in_flight)
        shares, seconds = replay_shares(states, self._ranges, self.timeout)
        results = self._every_worker([("set_state", share) for share in shares], "set_state", seconds)
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
                with contextlib.suppress(Exception):
                    conn.send(("close", None))
        deadline = time.monotonic() + timeout
        for proc in self._processes:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        _end_processes(self._processes)
        for handle in (*self._conns, *self._processes):
            with contextlib.suppress(Exception):
                handle.close()
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
