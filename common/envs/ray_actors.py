"""Env workers as Ray actors: :class:`RayVecEnv`, the ``VecEnv`` contract on a Ray cluster.

``--vec-env ray`` places the env workers (each hosting several envs, stepped one after another)
as Ray actors on a Ray cluster (``--ray-address auto|HOST:PORT``) or on a local Ray instance
started for the run. The contract is ``common.envs.contract``'s, unchanged:

* uint8 observations, auto-reset with ``final_observation`` and ``episode`` in the infos, env
  ``i`` first reset with ``seed + i`` (the env group is ``common.envs.group.EnvGroup``, as in the other vec envs);
* pipelining: each actor's envs in two halves (``pipeline_groups``); an actor runs the steps it
  is sent in order, so the policy picks one half's actions while the actor steps the other;
* faults: an exception in an env reaches the caller as ``EnvWorkerError`` naming the env, with its
  traceback; an actor that dies (its process killed, its node lost) or does not answer within
  ``timeout`` seconds is reported naming its envs;
* restarts (``max_restarts``): a dead or hung actor is replaced (at most ``max_restarts`` times over
  the vector env's life), its envs seeded afresh (``seed + 1_000_003 * restart``) and reset; the
  steps that were lost report the new first observations, reward 0, ``done=True`` and
  ``infos[i]["worker_restart"]`` (no ``final_observation`` nor ``episode``: the episode was cut).
  Ray's own actor restarts are off: the vector env decides, as ``SubprocVecEnv`` does.

Frames travel through Ray's object store: an actor's answer is a tuple whose observation block is
one numpy array, which Ray serializes out of band (no pickling of its bytes; shared memory between
processes of one node, zero-copy reads here) and which is copied once into the caller's batch.
Rewards and dones are numpy arrays too; only the infos (small dicts) are pickled.

Ray is an optional dependency (``pip install -e ".[distributed]"``); this module imports it only
when a ``RayVecEnv`` is built. The actors import the env factories' modules: on a cluster, install
the project on every node (``pip install -e .`` at the same path, or an image with it).
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from common.envs.contract import EnvFailure, EnvWorkerError, VecEnv, failure_message
from common.envs.group import EnvGroup
from common.envs.workers import (
    THREAD_ENV_VARS,
    halves,
    joined_states,
    refuse_reset_while_stepping,
    replay_shares,
    split_evenly,
    worker_parts,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def require_ray():
    """Import Ray, or fail saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            'Ray is not installed: --vec-env ray needs it (pip install -e ".[distributed]", or pip install ray)'
        ) from e
    return ray


def connect(address: str = "") -> bool:
    """Join the Ray cluster at ``address`` ("auto", "HOST:PORT"), or start a new local Ray instance when
    it is empty (even where a cluster already runs on this machine); nothing when this process is already
    connected. Returns True when this call connected (the caller then disconnects with ``ray.shutdown()``)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    # the actors import the env factories' modules (mario.env, ...) from this checkout
    runtime_env = {"env_vars": {"PYTHONPATH": path, **{k: "1" for k in THREAD_ENV_VARS}}}
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    else:
        # "local" always starts a new instance: with no address Ray would join the cluster a `ray start` left
        # on this machine (and then refuse num_cpus)
        kwargs = {"num_cpus": os.cpu_count() or 1, "include_dashboard": False}
        ray.init(address="local", runtime_env=runtime_env, log_to_driver=False, **kwargs)
    return True


class EnvActor:
    """The body of one Ray actor: envs ``first_index .. first_index + len(env_fns) - 1`` (an ``EnvGroup``).

    Every method answers a tuple, never raises for an env's fault: ``("ok", obs uint8[n, ...],
    rewards float32[n], dones bool[n], infos)`` (``None`` for the three after a reset), or
    ``("error", env_index, phase, traceback)``.
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], first_index: int, seed: int | None):
        self.group, self.failure = None, None
        try:
            self.group = EnvGroup(env_fns, first_index, seed)
        except EnvFailure as f:
            self.failure = ("error", f.env_index, f.phase, f.tb)
        except Exception:  # noqa: BLE001 - e.g. envs of different shapes
            self.failure = ("error", first_index, "construction", traceback.format_exc())
        if self.group is not None:
            self.obs = np.zeros((len(self.group), *self.group.observation_shape), dtype=np.uint8)

    def ready(self):
        """``("ready", observation_shape, num_actions, pid, node address)`` or the construction error."""
        if self.failure is not None:
            return self.failure
        import ray

        node = ray.get_runtime_context().get_node_id()[:8] if ray.is_initialized() else "?"
        return ("ready", self.group.observation_shape, self.group.num_actions, os.getpid(), node)

    def reset(self):
        try:
            self.group.reset(self.obs)
        except EnvFailure as f:
            return ("error", f.env_index, f.phase, f.tb)
        return ("ok", self.obs, None, None, None)

    def get_state(self):
        """``("ok", None, each env's episode in progress or None, None, None)`` (``EnvGroup.get_state``)."""
        try:
            return ("ok", None, self.group.get_state(), None, None)
        except Exception:  # noqa: BLE001 - an env's fault is an answer, as in reset and step
            return ("error", self.group.first_index, "get_state", traceback.format_exc())

    def set_state(self, states: list):
        """Continue the episodes of ``get_state``; answers their observations as ``reset`` does."""
        try:
            self.group.set_state(states, self.obs)
        except EnvFailure as f:
            return ("error", f.env_index, f.phase, f.tb)
        return ("ok", self.obs, None, None, None)

    def step(self, lo: int, hi: int, actions: list):
        """Step this actor's envs ``lo..hi-1`` (its own numbering) with one action each."""
        try:
            rewards, dones, infos = self.group.step(actions, self.obs, lo, hi)
        except EnvFailure as f:
            return ("error", f.env_index, f.phase, f.tb)
        return ("ok", self.obs[lo:hi], rewards, dones, infos)

    def close(self) -> bool:
        if self.group is not None:
            self.group.close()
        return True


@dataclass
class _Sent:
    """One step sent to an actor and not yet received: its env range, Ray's reference to the answer,
    or the stand-in answer of a restart."""

    start: int
    stop: int
    ref: Any = None
    standin: tuple | None = None


class RayVecEnv(VecEnv):
    """Envs in ``num_workers`` Ray actors, each hosting several envs; see the module docstring.

    Args:
        env_fns: one factory per env (picklable: module-level functions or ``functools.partial``).
        num_workers: actors (clamped to ``len(env_fns)``; 0: one per CPU of the Ray cluster); envs are
            split as evenly as possible, contiguous blocks in order.
        seed: env ``i`` first resets with ``seed + i``; ``None`` for unseeded.
        timeout: seconds a reset or step may take before an actor counts as hung.
        start_timeout: seconds for the actors to be placed and build their envs.
        max_restarts: how many times in all a dead or hung actor is replaced while stepping.
        address: the Ray cluster to join ("" : the current connection, or a new local instance).
        cpus_per_worker: Ray CPUs each actor reserves (default: 1, less when there are more actors than
            the cluster's CPUs).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        num_workers: int = 0,
        seed: int | None = None,
        timeout: float = 60.0,
        start_timeout: float = 300.0,
        max_restarts: int = 0,
        address: str = "",
        cpus_per_worker: float | None = None,
    ):
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("need at least one env factory")
        self._ray = require_ray()
        self._closed = True  # until the actors exist: close() is then a no-op
        self._actors: list = []
        self._owns_ray = connect(address)
        try:
            cluster_cpus = float(self._ray.cluster_resources().get("CPU", 1.0))
            self.num_envs = len(env_fns)
            self.num_workers = min(int(num_workers) or max(1, int(cluster_cpus)), self.num_envs)
            self.cpus_per_worker = (
                float(cpus_per_worker) if cpus_per_worker is not None else min(1.0, cluster_cpus / self.num_workers)
            )
            self.timeout, self._start_timeout = float(timeout), float(start_timeout)
            self.max_restarts, self.restarts, self.restart_log = int(max_restarts), 0, []
            self._seed, self._fns = seed, env_fns
            self._ranges = split_evenly(self.num_envs, self.num_workers)
            self._broken: str | None = None
            self._in_flight: dict[int, list[_Sent]] = {w: [] for w in range(self.num_workers)}
            self._where_info: list[str] = ["?"] * self.num_workers
            self._actor_cls = self._ray.remote(EnvActor)
            self._closed = False
            self._actors = [self._spawn(w, seed) for w in range(self.num_workers)]
            deadline = time.monotonic() + self._start_timeout
            spaces = set()
            for w, actor in enumerate(self._actors):
                msg = self._await(w, actor.ready.remote(), "construction", deadline, may_restart=False)
                spaces.add((tuple(msg[1]), msg[2]))
                self._where_info[w] = f"Ray actor pid {msg[3]} on node {msg[4]}"
            if len(spaces) > 1:
                raise ValueError(f"envs differ in (observation_shape, num_actions): {spaces}")
            ((self.observation_shape, self.num_actions),) = spaces
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- internals
    def _spawn(self, w: int, seed: int | None):
        start, stop = self._ranges[w]
        try:
            return self._actor_cls.options(
                num_cpus=self.cpus_per_worker, max_restarts=0, scheduling_strategy="SPREAD"
            ).remote(self._fns[start:stop], start, seed)
        except Exception as exc:  # noqa: BLE001 - what Ray raises for an unpicklable factory varies
            raise TypeError(
                f"RayVecEnv needs picklable env factories (module-level functions or functools.partial of "
                f"them); envs {start}..{stop - 1}: {exc!r}"
            ) from exc

    def _where(self, w: int) -> str:
        start, stop = self._ranges[w]
        envs = f"env {start}" if stop - start == 1 else f"envs {start}-{stop - 1}"
        return f"worker {w}, {self._where_info[w]}, hosting {envs}"

    def _single(self, w: int) -> int | None:
        start, stop = self._ranges[w]
        return start if stop - start == 1 else None

    def _fail(self, exc: EnvWorkerError) -> EnvWorkerError:
        self._broken = str(exc).splitlines()[0]
        return exc

    def _budget_note(self, restartable: bool) -> str:
        if not restartable or self.max_restarts == 0:
            return ""
        return f" (after {self.restarts} worker restarts, the most allowed)"

    def _await(self, w: int, ref, phase: str, deadline: float, may_restart: bool = True) -> tuple:
        """Actor ``w``'s answer ``ref``; raises EnvWorkerError on an env error, a dead actor or a timeout,
        or (while stepping, with budget left) replaces the actor and answers its stand-in."""
        ray = self._ray
        restartable = may_restart and phase == "step"
        fault = None
        try:
            msg = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            fault = (
                f"Env worker actor did not answer within {self.timeout:g} s during {phase} ({self._where(w)}); "
                "hung environment?"
            )
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
            cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            fault = f"Env worker actor died during {phase} ({self._where(w)}): {type(e).__name__}: {cause}"
        if fault is not None:
            if restartable and self.restarts < self.max_restarts:
                self._replace(w, fault)
                return self._in_flight[w][0].standin
            raise self._fail(EnvWorkerError(fault + self._budget_note(restartable), self._single(w), "", w))
        if msg[0] == "error":
            _, env_index, what, tb = msg
            raise self._fail(EnvWorkerError(failure_message(env_index, what, self._where(w), tb), env_index, tb, w))
        return msg

    def _replace(self, w: int, reason: str) -> None:
        """Replace faulty actor ``w``; each of its steps in flight gets a stand-in answer (module docstring)."""
        self._ray.kill(self._actors[w], no_restart=True)
        self.restarts += 1
        seed = None if self._seed is None else self._seed + 1_000_003 * self.restarts
        self._actors[w] = self._spawn(w, seed)
        deadline = time.monotonic() + self._start_timeout
        msg = self._await(w, self._actors[w].ready.remote(), "restart (construction)", deadline, may_restart=False)
        self._where_info[w] = f"Ray actor pid {msg[3]} on node {msg[4]}"
        deadline = time.monotonic() + self.timeout
        reset = self._await(w, self._actors[w].reset.remote(), "restart (reset)", deadline, may_restart=False)
        self.restart_log.append(f"restart {self.restarts}/{self.max_restarts}: {reason}; new {self._where_info[w]}")
        s = self._ranges[w][0]
        for sent in self._in_flight[w]:
            lo, hi = max(sent.start, s) - s, min(sent.stop, self._ranges[w][1]) - s
            infos = [{"worker_restart": reason} for _ in range(hi - lo)]
            zeros, ones = np.zeros(hi - lo, np.float32), np.ones(hi - lo, bool)
            sent.ref, sent.standin = None, ("ok", reset[1][lo:hi], zeros, ones, infos)

    def _guard(self) -> None:
        if self._closed:
            raise RuntimeError("this VecEnv is closed")
        if self._broken is not None:
            raise EnvWorkerError(f"this VecEnv is unusable after an earlier fault: {self._broken}")

    def _parts(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """Each actor's share of envs ``start..stop-1`` (``worker_parts``), in its own numbering."""
        return worker_parts(self._ranges, *self._range(start, stop))

    # ---------------------------------------------------------------- contract
    @property
    def pipeline_groups(self) -> list[tuple[int, int]]:
        """Each actor's envs in two halves (whole when it hosts one env), in env order."""
        return halves(self._ranges)

    def _every_actor(self, refs: list, phase: str, seconds: float) -> list:
        """Every actor's answer to its call ``refs[w]`` within ``seconds`` (a fault raises, as ``_await``)."""
        deadline = time.monotonic() + seconds
        return [self._await(w, ref, phase, deadline) for w, ref in enumerate(refs)]

    def reset(self) -> np.ndarray:
        self._guard()
        refuse_reset_while_stepping(self._in_flight)
        answers = self._every_actor([actor.reset.remote() for actor in self._actors], "reset", self.timeout)
        return np.concatenate([a[1] for a in answers])

    can_restore = True

    def get_state(self) -> list | None:
        self._guard()
        refuse_reset_while_stepping(self._in_flight)
        answers = self._every_actor([actor.get_state.remote() for actor in self._actors], "get_state", self.timeout)
        return joined_states([a[2] for a in answers])

    def set_state(self, states: list) -> np.ndarray:
        self._guard()
        refuse_reset_while_stepping(self._in_flight)
        shares, seconds = replay_shares(states, self._ranges, self.timeout)
        answers = self._every_actor([a.set_state.remote(s) for a, s in zip(self._actors, shares)], "set_state", seconds)
        return np.concatenate([a[1] for a in answers])

    def step_async(self, actions, start: int, stop: int) -> None:
        self._guard()
        parts = self._parts(start, stop)
        for w, lo, hi in parts:
            s = self._ranges[w][0]
            if any(x.start < s + hi and s + lo < x.stop for x in self._in_flight[w]):
                raise RuntimeError(f"envs {start}..{stop - 1} are already stepping; step_wait first")
        a = self._actions(actions, stop - start)
        for w, lo, hi in parts:
            first = self._ranges[w][0] + lo - start  # this actor's actions in a
            ref = self._actors[w].step.remote(lo, hi, a[first : first + hi - lo].tolist())
            self._in_flight[w].append(_Sent(start, stop, ref))

    def step_wait(self, start: int, stop: int):
        self._guard()
        parts = self._parts(start, stop)
        for w, _, _ in parts:
            queue = self._in_flight[w]
            if not any((x.start, x.stop) == (start, stop) for x in queue):
                raise RuntimeError(f"step_wait for envs {start}..{stop - 1} without step_async")
            if (queue[0].start, queue[0].stop) != (start, stop):  # an actor answers in the order it was sent steps
                raise RuntimeError(
                    f"step_wait for envs {start}..{stop - 1} before envs {queue[0].start}.."
                    f"{queue[0].stop - 1}, which were sent to worker {w} first"
                )
        n = stop - start
        obs = np.empty((n, *self.observation_shape), np.uint8)
        rewards, dones, infos = np.empty(n, np.float32), np.empty(n, bool), []
        deadline = time.monotonic() + self.timeout
        at = 0
        for w, lo, hi in parts:
            sent = self._in_flight[w][0]
            if sent.standin is not None:
                msg = sent.standin
            else:
                restarts = self.restarts
                msg = self._await(w, sent.ref, "step", deadline)
                if self.restarts != restarts:  # the restart's own time is not the other actors' fault
                    deadline = time.monotonic() + self.timeout
            self._in_flight[w].pop(0)
            k = hi - lo
            obs[at : at + k], rewards[at : at + k], dones[at : at + k] = msg[1], msg[2], msg[3]
            infos.extend(msg[4])
            at += k
        return obs, rewards, dones, infos

    def close(self, timeout: float = 5.0) -> None:
        """Close every actor's envs (``timeout`` s in all), kill the actors, and stop Ray if this vector env
        started it. Safe to call any number of times."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        try:
            refs = [actor.close.remote() for actor in self._actors]
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=timeout)
        except Exception:  # noqa: BLE001 - an actor may be dead already
            pass
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self._actors = []
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def __del__(self):
        try:
            self.close(timeout=1.0)
        except Exception:  # noqa: BLE001
            pass
