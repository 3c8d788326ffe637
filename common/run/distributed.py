"""Data-parallel training on ``paddle.distributed``: the RND paper's own design (its authors ran
many MPI workers), in Paddle.

``python -m paddle.distributed.launch --nproc_per_node N mario/train.py ...`` (``--ips`` for
several machines) starts N ranks. Each rank owns its envs (env ``i`` of rank ``r`` is seeded
like env ``r * num_envs + i`` of one big run, so no two ranks replay the same episodes), its
rollout and a replica of the networks; after every backward pass and before every optimizer
step the gradients are averaged over the ranks, so every replica takes the same step and
the replicas stay bit-identical. The statistics that scale rewards (the observation
normalizer, the running std of the intrinsic return) are pooled over the ranks, so every rank
scales its rewards identically (as the RND authors' MPI code does). Rank 0 alone logs,
evaluates and writes checkpoints.

``World.current(device)`` is this process's place: ``size``, ``rank``, ``is_main``. In one
process (no launcher) every operation below is a no-op or the identity, and the trainer runs
exactly as before. The hooks the update rule calls:

* ``grad_sync(parameters, finite, has_data=True) -> Agreement(step, finite)`` between
  ``backward`` and ``optimizer.step`` (``PPO.step``, ``DistillationModule.distill``, the SND
  target step): the averaged gradients are in place, and every rank takes the same decision
  (a loss that is not finite on any rank: nobody steps and every rank reports it, so the
  trainer's all-or-nothing rollback happens on every rank). ``NO_SYNC`` in one process.
* ``RunningMeanStd.sync``: ``pooled_moments(mean, var, count)`` -> the moments of every
  rank's batch together.

Collectives run on three communicators: the policy's gradients (main thread), the intrinsic
module's (its update may run on a second thread, ``Trainer.learn``), and the rest (statistics,
agreements, on the main thread); each is used by one thread in one order on every rank.
A collective that fails because a peer is gone raises :class:`RankLostError` (the trainer then
saves the last completed update on rank 0 and stops, like any other fault).
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import numpy as np

#: environment variables the launcher sets: the number of ranks, and how many share this machine
WORLD_SIZE_VARS = ("PADDLE_TRAINERS_NUM", "PADDLE_GLOBAL_SIZE")
LOCAL_SIZE_VARS = ("PADDLE_LOCAL_SIZE",)


class Agreement(NamedTuple):
    """What every rank decided about one optimizer step."""

    step: bool  #: apply the (averaged) gradients
    finite: bool  #: every rank's loss was finite (False: report it, the update is rolled back)


def NO_SYNC(parameters, finite: bool, has_data: bool = True) -> Agreement:
    """One process: nothing to average; step when the loss is finite and there was one."""
    return Agreement(bool(finite and has_data), bool(finite))


class RankLostError(RuntimeError):
    """A collective operation failed: another rank died (or its machine is unreachable)."""


def _env_int(names, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return default


def combine_moments(parts):
    """(mean, var, count) of several batches together from each one's ``(mean, var, count)``, in order
    (Chan et al.'s parallel formula, as ``RunningMeanStd.update_from_moments``)."""
    mean, var, count = parts[0]
    mean, var, count = np.asarray(mean, np.float64), np.asarray(var, np.float64), float(count)
    for m, v, n in parts[1:]:
        n = float(n)
        delta = m - mean
        total = count + n
        m2 = var * count + v * n + delta**2 * count * n / total
        mean, var, count = mean + delta * n / total, m2 / total, total
    return mean, var, count


class SilentLogger:
    """What ranks other than 0 log to: ``common.run.logger.Logger``'s methods, doing nothing."""

    def __init__(self):
        self.last: dict = {}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class World:
    """This process's rank among ``size`` data-parallel ranks (one process: rank 0 of 1)."""

    _current: World | None = None

    def __init__(self, size: int = 1, rank: int = 0, local_size: int = 1):
        self.size, self.rank, self.local_size = int(size), int(rank), int(local_size)
        self._groups: dict = {}

    # ------------------------------------------------------------------ who am I
    @staticmethod
    def launched_size() -> int:
        """How many ranks a launcher (``paddle.distributed.launch``) started, without joining them (1: none)."""
        return _env_int(WORLD_SIZE_VARS, 1)

    @classmethod
    def current(cls, device: str = "cpu") -> World:
        """This process's world, initialised once per process (``paddle.distributed.init_parallel_env``
        when a launcher started several ranks; CPU ranks talk over gloo, GPU ranks over NCCL)."""
        if cls._current is None:
            size = cls.launched_size()
            if size > 1:
                import paddle.distributed as dist

                if device == "cpu":  # a GPU build would pick NCCL for the ranks otherwise
                    os.environ["PADDLE_DISTRI_BACKEND"] = "gloo"
                dist.init_parallel_env()
                world = cls(dist.get_world_size(), dist.get_rank(), _env_int(LOCAL_SIZE_VARS, 1))
                world._groups = {name: dist.new_group(list(range(world.size))) for name in ("policy", "intrinsic")}
            else:
                world = cls()
            cls._current = world
        return cls._current

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, evaluates and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def cores(self) -> int:
        """This rank's share of the machine's CPU cores (all of them in one process)."""
        return max(1, (os.cpu_count() or 1) // max(1, self.local_size))

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.size})"

    # ------------------------------------------------------------------ collectives
    def _collective(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - gloo/NCCL raise RuntimeError/OSError-like errors
            raise RankLostError(
                f"rank {self.rank} of {self.size}: the collective operation '{what}' failed, most likely "
                f"because another rank stopped (its own log says why; with paddle.distributed.launch: "
                f"workerlog.N in --log_dir): {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e) else ''}"
            ) from e

    def _all_reduce(self, tensor, what: str, op=None, group=None):
        import paddle.distributed as dist

        self._collective(what, dist.all_reduce, tensor, op=op or dist.ReduceOp.SUM, group=group)
        return tensor

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on any rank."""
        return bool(self.max_int(int(bool(flag))))

    def all(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on every rank."""
        return not self.any(not flag)

    def max_int(self, value: int) -> int:
        """The largest ``value`` over the ranks."""
        if not self.distributed:
            return int(value)
        import paddle
        import paddle.distributed as dist

        t = paddle.to_tensor([int(value)], dtype="int64")
        return int(self._all_reduce(t, "agree", op=dist.ReduceOp.MAX).numpy()[0])

    def stop_now(self, stop) -> bool:
        """Whether a stop signal (``common.run.runtime.StopSignals``) ends the current phase at once: yes in one
        process; data-parallel ranks stop only between updates, where they agree (``stop_agreed``): one
        rank leaving a phase early would leave the others waiting for it."""
        return stop.requested and not self.distributed

    def stop_agreed(self, stop) -> bool:
        """Whether to stop, the same on every rank (a signal that reached any rank stops them all)."""
        if self.distributed:
            stop.signum = self.max_int(stop.signum or 0) or None
        return stop.requested

    def gather_objects(self, items: list) -> list:
        """Every rank's list of picklable ``items``, concatenated in rank order (on every rank)."""
        if not self.distributed:
            return list(items)
        import paddle.distributed as dist

        out: list = []
        self._collective("gather", dist.all_gather_object, out, list(items))
        return [x for part in out for x in part]

    def gather_episodes(self, episodes: list) -> list:
        """The finished-episode infos of every rank on rank 0 (their ``final_observation`` left behind),
        an empty list elsewhere; in one process ``episodes`` itself."""
        if not self.distributed:
            return episodes
        light = [{k: v for k, v in info.items() if k != "final_observation"} for info in episodes]
        everyone = self.gather_objects(light)
        return everyone if self.is_main else []

    def pooled_moments(self, mean, var, count):
        """(mean, var, count) of every rank's batch together, from each batch's own ``mean``, ``var``
        (float arrays of one shape) and ``count``: the same numbers on every rank (Chan's formula,
        rank by rank)."""
        if not self.distributed:
            return mean, var, count
        import paddle
        import paddle.distributed as dist

        mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
        local = paddle.to_tensor(np.concatenate([mean.ravel(), var.ravel(), [float(count)]]))
        parts: list = []
        self._collective("pool statistics", dist.all_gather, parts, local)
        k = mean.size
        arrays = [part.numpy() for part in parts]
        return combine_moments([(a[:k].reshape(mean.shape), a[k : 2 * k].reshape(mean.shape), a[-1]) for a in arrays])

    def gradient_sync(self, stream: str):
        """The ``grad_sync`` hook of one stream of updates ("policy" or "intrinsic"): ``NO_SYNC`` in one
        process, else a :class:`GradientSync` on that stream's communicator."""
        return GradientSync(self, self._groups[stream], stream) if self.distributed else NO_SYNC

    def broadcast_layers(self, *layers) -> None:
        """Every rank takes rank 0's parameters of these layers (``None`` entries are skipped)."""
        if not self.distributed:
            return
        import paddle
        import paddle.distributed as dist

        with paddle.no_grad():
            for layer in layers:
                for p in [] if layer is None else layer.parameters():
                    self._collective("broadcast parameters", dist.broadcast, p, src=0)

    # ------------------------------------------------------------------ the trainer's hooks
    def own_stream(self, rng: np.random.Generator) -> np.random.Generator:
        """Rank ``r``'s own random stream: ``rng`` advanced by ``r`` jumps of 2^127 draws (rank 0: ``rng``)."""
        if self.rank == 0:
            return rng
        return np.random.Generator(rng.bit_generator.jumped(self.rank))

    def check_checkpoint(self, state: dict, path: str, allow_change: bool) -> None:
        """Refuse a checkpoint written by a run of another world size, unless ``allow_change``."""
        from common.run.checkpoint import CheckpointError

        saved = int(state.get("world_size", 1))
        if saved != self.size and not allow_change:
            raise CheckpointError(
                f"{path} was written by a run of {saved} data-parallel rank{'s' if saved != 1 else ''}; "
                f"this run has {self.size}. Resume on {saved} rank{'s' if saved != 1 else ''}, or pass "
                "--allow-world-size-change to continue anyway (every rank then starts from that state; "
                "the intrinsic-return filter of rank 0's envs is copied to every rank)"
            )


class GradientSync:
    """Averages gradients over the ranks between ``backward`` and ``optimizer.step``.

    ``sync(parameters, finite, has_data=True)``: one all-reduce of every gradient and two flags
    (finite, has data). Gradients are weighted by ``has_data`` (a rank with no loss this step,
    e.g. SND without consecutive pairs, contributes nothing and still takes the others' step);
    returns the :class:`Agreement` every rank shares.
    """

    def __init__(self, world: World, group, stream: str):
        self.world, self.group, self.stream = world, group, stream
        self.seconds = 0.0  #: time spent here, waiting for the slower ranks included (benchmarks/scaling.py)

    def __call__(self, parameters, finite: bool, has_data: bool = True) -> Agreement:
        import paddle

        t0 = time.perf_counter()
        params = [p for p in parameters if not p.stop_gradient]
        weight = 1.0 if finite and has_data else 0.0
        grads = [
            p.grad.reshape([-1]) * weight if p.grad is not None and weight else paddle.zeros([p.size], p.dtype)
            for p in params
        ]
        flags = paddle.to_tensor([weight, 0.0 if finite else 1.0], dtype=params[0].dtype if params else "float32")
        flat = paddle.concat([*grads, flags])
        self.world._all_reduce(flat, f"{self.stream} gradients", group=self.group)
        total, nonfinite = (float(x) for x in flat[-2:].numpy())
        agreed = Agreement(step=total > 0 and nonfinite == 0, finite=nonfinite == 0)
        if agreed.step:
            if any(p.grad is None for p in params):  # no loss here yet: zero gradients to take the others' step
                paddle.add_n([(p * 0.0).sum() for p in params]).backward()
            with paddle.no_grad():
                offset = 0
                for p in params:  # written in place on the device (set_value goes through the host on Paddle 2.6)
                    paddle.assign((flat[offset : offset + p.size] / total).reshape(p.shape), output=p.grad)
                    offset += p.size
        self.seconds += time.perf_counter() - t0
        return agreed
