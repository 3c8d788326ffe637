"""The vector env of a run: in-process, worker processes or Ray actors."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from common.envs.contract import VecEnv
from common.envs.inprocess import InProcessVecEnv
from common.envs.subproc import SubprocVecEnv


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

    ``kind="ray"``: a ``common.envs.ray_actors.RayVecEnv`` of ``num_workers`` Ray actors (0: one per CPU
    of the Ray cluster), with its options (``timeout``, ``start_timeout``, ``max_restarts``, ``address``)."""
    if kind == "ray":
        from common.envs.ray_actors import RayVecEnv

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
    (``update`` > 0) is seeded by its update count, so that the fresh episodes it starts where it
    cannot continue the checkpoint's (``common.ppo.episodes``) do not replay the original's.
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
