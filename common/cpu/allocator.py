"""Host-allocator tuning for CPU training (glibc ``mallopt``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_allocator_tuned = False


def tune_host_allocator() -> bool:
    """Keep freed tensor memory in the process instead of returning it to the kernel (glibc only).

    Paddle's CPU tensors come from ``malloc``. glibc serves large blocks (above 128 KiB
    to 32 MiB, adaptively) with fresh ``mmap`` pages and unmaps them on free, so every
    activation of every minibatch is page-faulted and zeroed by the kernel again.
    Measured on the 2-core machine (``docs/performance.md``): ReLU over
    [48, 32, 42, 42] 2.7 -> 0.75 ms; one Mario PPO minibatch step 82 -> 63 ms at
    batch 48 and 321 -> 235 ms at batch 192 (whose 43 MiB activations are above any
    mmap threshold, hence mmap is switched off rather than raised). Freed blocks stay
    on the heap for reuse; RSS stays at the working set's peak (the benchmarks report
    it). Returns whether the settings took effect.
    """
    global _allocator_tuned
    if _allocator_tuned:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc without mallopt
        return False
    ok = (mallopt(_M_MMAP_MAX, 0) == 1) & (mallopt(_M_TRIM_THRESHOLD, 1 << 30) == 1)
    ok &= mallopt(_M_TOP_PAD, 64 << 20) == 1
    _allocator_tuned = bool(ok)
    return _allocator_tuned
