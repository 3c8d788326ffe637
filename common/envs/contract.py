"""The vector-env contract: ``VecEnv`` and its errors.

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
``common.envs.pipeline.Pipeline`` does this scheduling for a policy (``Trainer.collect`` uses
it). Groups of one worker are answered in the order they were sent.

Contract, shared by ``InProcessVecEnv`` (``common.envs.inprocess``), ``SubprocVecEnv``
(``common.envs.subproc``) and ``RayVecEnv`` (``common.envs.ray_actors``: the same env workers as
Ray actors on a Ray cluster):

* **Auto-reset.** When env ``i`` ends an episode, ``infos[i]`` gets
  ``final_observation`` (the uint8 observation of the terminal step) and
  ``episode = {"r": return, "l": length}``, computed here from the rewards the env
  returned (never reshaped), and ``obs[i]`` is the first observation of the next
  episode. Rewards are passed through unchanged.
* **Seeding.** Env ``i``'s first reset is ``reset(seed=seed + i)``; later resets are
  unseeded, so each env's RNG carries on and a whole run repeats for a given seed.
  ``seed=None`` leaves every env unseeded.
* **State.** ``get_state()`` is every env's episode in progress (a list, one dict of numpy
  arrays and plain values per env, with its return and length so far) when every env's game
  can say it (``GameEnv.get_state``), else None; ``set_state(states)`` puts a vector env of the
  same size back there and returns the observations, so a resumed run continues its episodes.
  Called between steps (none in flight).
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

This package never imports Paddle.
"""

from __future__ import annotations

import numpy as np


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


class EnvFailure(Exception):
    """Raised inside an env group; turned into a message (workers) or EnvWorkerError."""

    def __init__(self, env_index: int, phase: str, tb: str):
        super().__init__(f"env {env_index} failed during {phase}")
        self.env_index = env_index
        self.phase = phase
        self.tb = tb


def failure_message(env_index: int | None, phase: str, where: str, tb: str) -> str:
    who = f"Environment {env_index}" if env_index is not None else "An environment"
    return f"{who} ({where}) raised an exception during {phase}:\n\n{tb.rstrip()}"


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

    #: whether ``set_state`` can put this vector env's envs back into episodes in progress
    can_restore = False

    def get_state(self) -> list | None:
        """Every env's episode in progress, or None where this vector env or a game cannot say it."""
        return None

    def set_state(self, states: list) -> np.ndarray:
        """Continue the episodes of ``get_state``: uint8[N, ...] observations."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore episodes in progress")

    def _group(self, start: int, stop: int) -> int:
        groups = self.pipeline_groups
        if (start, stop) not in groups:
            raise ValueError(f"envs {start}..{stop - 1} are not one of this VecEnv's groups {groups}")
        return groups.index((start, stop))

    def _range(self, start: int, stop: int) -> tuple[int, int]:
        """``(start, stop)`` checked: all envs, or one of ``pipeline_groups``."""
        if (start, stop) != (0, self.num_envs):
            self._group(start, stop)
        return start, stop

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
