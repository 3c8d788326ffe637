"""CPU speed machinery, behind a small facade.

The RL code (``common/ppo/update.py``, ``actor.py``, ``trainer.py``, ``intrinsic/``, the game folders)
uses only the names below; how they are fast is this package's business:

* ``run(layer, x)``: the runner a network's ``compute(x, run)`` is trained with
  (``common.nets.Net``): runs of Conv2D + ReLU/LeakyReLU fused and, on CPU, computed on the
  oneDNN library inside Paddle's wheel, in batch shards on threads; any other layer as is.
* ``threads(n)``: while open, large convolution and dense-layer batches are split into ``n``
  shards run on ``n`` threads, and numpy's BLAS runs one thread (the trainer opens it around
  its network work).
* ``together(fns)``: independent computations (e.g. two networks' forward passes on one
  batch) side by side on those threads, each whole; one after another with one thread.
* ``unit_floats(obs)``: ``uint8[B, C, H, W]`` -> float32 tensor in [0, 1] (the ``/ 255``).
* ``standardize(x, mean, inv_std, clip)``: a normalizer's ``clip((x - mean) * inv_std)``.
* ``collection_engine(net, obs_shape, kind)``: what runs the policy's forward passes while
  collecting (``native``: numpy + oneDNN primitives; ``onednn``/``onednn-bf16``: a Paddle
  Inference predictor; ``dygraph``: none), or None with the reason.
* ``tune_allocator()``: keep freed tensor memory in the process (glibc).
* ``set_math_threads(n)``: the threads Paddle's own CPU math kernels may use.
* ``available()``: whether the oneDNN fast paths run on this Paddle, here and now.
* ``fast_paths(*tensors)``: whether the CPU speed paths may run (on these tensors): the one
  switch every path above asks (``common.cpu.switch``; ``PADDLE_CURIOSITY_PLAIN=1`` turns them
  all off, and they are off wherever Paddle's device or a tensor is not the CPU).
* ``stdim_losses(g, h, local_t)``: SND-STD's score losses (InfoNCE and the scores' size),
  forward and backward on numpy.
* ``SideThread(name)``: one thread for a step that runs beside the caller's (the intrinsic
  module's update beside the policy's).

Same math as the plain Paddle layers everywhere (``tests/test_fast_update.py``,
``tests/test_native.py``, ``tests/test_snd.py``); every fast path steps aside by itself where the
installed Paddle lacks what it needs (a build without a loadable oneDNN library, or without the
fused kernels) and wherever ``fast_paths`` is False: a GPU run computes with Paddle's own layers
and kernels only (a convolution and its activation still go through ``fused.conv_act``, which is
then just those two layers), and so does a CPU run with ``PADDLE_CURIOSITY_PLAIN=1`` (how CI runs
the GPU route's code, ``docs/gpu.md``).
Modules: ``switch`` (the predicate), ``onednn`` (the C API through ctypes), ``sharding`` (the shard threads),
``fused`` (fused and sharded convolutions, the training runner), ``linear`` (large dense
layers on numpy), ``blas``, ``native`` (the collection engine), ``predictor``
(Paddle Inference), ``allocator``, ``stdim``. Measurements: ``docs/performance.md``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import warnings

from common.cpu import blas, onednn, sharding, switch
from common.cpu.allocator import tune_host_allocator
from common.cpu.fused import run_layer as run
from common.cpu.fused import standardize, unit_floats
from common.cpu.sharding import together
from common.cpu.stdim import stdim_losses

__all__ = [
    "SideThread",
    "available",
    "collection_engine",
    "fast_paths",
    "run",
    "set_math_threads",
    "standardize",
    "stdim_losses",
    "threads",
    "together",
    "tune_allocator",
    "unit_floats",
]

#: what ``--inference`` offers (the fp32 predictor, ``common.cpu.predictor.InferenceEngine``, is no faster than
#: ``native`` anywhere measured: it stays a class for benchmarks/inference.py, not a choice)
ENGINES = ("native", "onednn-bf16", "dygraph")


fast_paths = switch.on


def available() -> bool:
    """True when oneDNN loads from Paddle's wheel, passes its self-check, and the speed paths are on."""
    return onednn.available()


def tune_allocator() -> None:
    """Keep freed host memory in the process (``common.cpu.allocator``); nothing off the speed paths."""
    if fast_paths():
        tune_host_allocator()


def set_math_threads(n: int) -> None:
    """Let Paddle's own CPU math kernels (MKL, OpenMP) use ``n`` threads (a no-op where Paddle lacks the
    call, and off the speed paths: a GPU process leaves its host threads alone)."""
    import paddle

    if fast_paths():
        with contextlib.suppress(AttributeError):
            paddle.base.core.set_num_threads(int(n))


@contextlib.contextmanager
def threads(n: int):
    """While open, split large convolution and dense-layer batches into ``n`` shards on ``n`` threads
    (1: off), and hold numpy's BLAS to one thread: the shards are the parallelism, and BLAS threads
    spinning after a product would take the cores from them (``common.cpu.blas``). Nothing changes
    off the speed paths (``fast_paths()`` False when it opens)."""
    if not fast_paths():
        yield
        return
    n = max(int(n), 1)
    old_blas = blas.set_threads(1)
    old = sharding.set_count(n) if n > 1 else None
    try:
        yield
    finally:
        if old is not None:
            sharding.set_count(old)
        if old_blas is not None:
            blas.set_threads(old_blas)


def collection_engine(net, obs_shape, kind: str, batch: int):
    """An engine ``engine(uint8 obs) -> [outputs as numpy]`` for ``net``'s collection forward passes,
    with ``refresh()`` (copy the current weights), ``close()`` and ``min_batch``; None for ``dygraph``
    or off the speed paths, or when ``kind`` cannot run this net here (a warning says why, except
    for networks the native engine does not know, which quietly use the network itself).

    ``batch``: the largest batch it will see (the predictor only pays off from its ``min_batch``).
    """
    if kind not in ENGINES:
        raise ValueError(f"unknown collection engine {kind!r}; expected one of {', '.join(ENGINES)}")
    if kind == "dygraph" or not fast_paths():
        return None
    try:
        if kind == "native":
            from common.cpu.native import NativeEngine

            return NativeEngine(net, obs_shape) if NativeEngine.supports(net) else None
        from common.cpu.predictor import InferenceEngine

        if batch < InferenceEngine.min_batch:  # the export costs start-up time and saves nothing below it
            warnings.warn(
                f"--inference {kind} needs batches of {InferenceEngine.min_batch} or more, this run's are at most "
                f"{batch}; collection runs the training network (--inference dygraph)",
                stacklevel=2,
            )
            return None
        return InferenceEngine(net, obs_shape, precision="bf16")
    except Exception as e:  # noqa: BLE001 - no oneDNN in this Paddle, or a network the engine cannot run
        warnings.warn(
            f"--inference {kind} is unavailable ({type(e).__name__}: {e}); collection runs the "
            "training network (--inference dygraph)",
            stacklevel=2,
        )
        return None


class SideThread:
    """A thread for work that runs beside the caller's: ``submit(fn, *args)`` returns a Future.

    For two steps that share no parameters, optimizers or random generators (the intrinsic
    module's update and the policy's), so that running them side by side gives the sequential
    result (Paddle's grad mode is per thread). The thread starts at the first ``submit``.
    """

    def __init__(self, name: str):
        self.name = name
        self._pool = None

    def submit(self, fn, *args) -> concurrent.futures.Future:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=self.name)
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
