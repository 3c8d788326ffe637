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
    Keeping it makes elementwise kernels and whole minibatch steps faster on CPU, same
    values (``docs/performance.md``). mmap is switched off rather than its threshold
    raised: a large minibatch's activations are above any threshold. Freed blocks stay
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
