"""The one switch of every CPU speed path.

``on(*tensors)`` decides, for each fast path of this package (the oneDNN stack and the native
collection engine, DLPack float conversion, the fused bias + activation kernels, in-place
normalisation, numpy dense layers and SND-STD's numpy losses, batch shards on threads, the side
thread, the allocator tweak, BLAS and math-thread pinning): it is true only when

* the environment variable ``PADDLE_CURIOSITY_PLAIN`` is unset or ``0``, and
* Paddle's current device is the CPU (the fast paths make new tensors there), and every tensor
  given lives on the CPU (a network built on a GPU must not hand device pointers to oneDNN).

``PADDLE_CURIOSITY_PLAIN=1`` steps all of them aside: the networks run Paddle's plain layers,
exactly the code a ``--device gpu`` run executes, minus CUDA. CI runs the entry points that way
(``docs/gpu.md``). The variable is read at every call, so a test may set it for a while; spawned
workers (evaluation, env workers, ranks) inherit the environment, so they follow their parent.
"""

from __future__ import annotations

import os

ENV = "PADDLE_CURIOSITY_PLAIN"


def enabled() -> bool:
    """False when ``PADDLE_CURIOSITY_PLAIN=1``; a ValueError for a value other than 0 or 1."""
    value = os.environ.get(ENV, "").strip()
    if value in ("", "0"):
        return True
    if value == "1":
        return False
    raise ValueError(f"{ENV}={value!r}: expected 1 (plain Paddle layers only) or 0 / unset (CPU speed paths on)")


def on(*tensors) -> bool:
    """Whether the CPU speed paths may run on ``tensors`` (see the module docstring)."""
    if not enabled():
        return False
    import paddle

    return paddle.get_device() == "cpu" and all(t.place.is_cpu_place() for t in tensors)
