"""The batch-shard threads every fast CPU path shares: how many, and the pool they run on.

``set_count(n)`` (only ``common.cpu.threads`` changes it) splits large batches of the
convolution stacks (``common.cpu.fused``) and of the dense layers (``common.cpu.linear``) into
``n`` shards run on ``n`` threads; 1 is off. The count is process-wide, not per thread: a
thread that runs networks beside the trainer's (its side thread for the intrinsic update) must
see it too.

``together(fns)`` runs independent computations (two networks' forward passes on one batch)
on those threads instead, each whole: one pass per thread needs no hand-off between layers,
which splitting every layer of both passes does.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import paddle

_count = 1
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()
_local = threading.local()  # .whole: this thread runs one of ``together``'s computations


def count() -> int:
    """The number of shards now (1: off, and inside ``together``)."""
    return 1 if getattr(_local, "whole", False) else _count


def set_count(n: int) -> int:
    """Split large batches into ``n`` shards run on ``n`` threads (1 = off); returns the old value."""
    global _count, _pool, _pool_size
    if n < 1:
        raise ValueError(f"number of shards must be >= 1, got {n}")
    old, _count = _count, int(n)
    with _pool_lock:
        if _count > 1 and _pool_size < _count:
            if _pool is not None:
                _pool.shutdown(wait=True)
            _pool, _pool_size = ThreadPoolExecutor(_count, thread_name_prefix="cpu-shard"), _count
    return old


def ranges(batch: int, n: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of up to ``n`` equal shards of ``batch`` rows (the last may be smaller)."""
    step = -(-batch // max(n, 1))
    return [(i, min(i + step, batch)) for i in range(0, batch, step)]


def run(fn, items) -> list:
    """``[fn(item) for item in items]``, on the shard threads when there is more than one item.

    On the shard threads ``fn`` runs with autograd off: a shard's work is kernels on detached
    tensors (its callers' PyLayers do the bookkeeping), and Paddle's graph building is not safe from
    two threads at once (two shards slicing one tensor that requires grad both create its
    accumulation node: a heap corruption, seen once in a 4M-step Montezuma run)."""
    if len(items) == 1 or _pool is None:
        return [fn(i) for i in items]
    return list(_pool.map(_without_grad(fn), items))


def _without_grad(fn):
    def call(item):
        with paddle.set_grad_enabled(False):  # grad mode is per thread
            return fn(item)

    return call


def _whole(fn, grad: bool):
    def call():
        _local.whole = True
        try:
            with paddle.set_grad_enabled(grad):  # grad mode is per thread: the caller's
                return fn()
        finally:
            _local.whole = False

    return call


def together(fns) -> list:
    """``[fn() for fn in fns]`` for independent computations, side by side on the shard threads when
    there are at least as many (the last on the caller's thread), each whole (no shards inside) and
    in the caller's grad mode; one after another otherwise."""
    fns = list(fns)
    if len(fns) < 2 or count() < len(fns) or _pool is None:
        return [fn() for fn in fns]
    grad = paddle.is_grad_enabled()
    futures = [_pool.submit(_whole(fn, grad)) for fn in fns[:-1]]
    try:
        last = _whole(fns[-1], grad)()
    finally:
        wait(futures)  # none left running, whatever happened here
    return [f.result() for f in futures] + [last]
