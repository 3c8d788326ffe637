"""The thread count of numpy's BLAS (the OpenBLAS numpy's wheels bundle), through its C API.

numpy's matrix products (``common.cpu.linear``, ``common.cpu.stdim``) run on OpenBLAS, which
starts one thread per core and lets them spin a while after each call. Beside the trainer's own
threads (the convolution and dense-layer shards, a side thread for the intrinsic update, or a
second run on the other core) a spinning BLAS thread takes CPU time from them (measured in
docs/performance.md, "The Double DQN train step on two threads"). ``set_threads`` is what
``common.cpu.threads`` uses to hold BLAS to one thread. Where numpy links another BLAS (or none
can be found) it does nothing.
"""

from __future__ import annotations

import ctypes
import functools

# symbol names of the setter / getter in OpenBLAS builds: numpy's 64-bit-integer build, scipy-openblas, plain
_NAMES = (
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


@functools.lru_cache(maxsize=1)
def _api():
    """(set, get) C functions of the OpenBLAS numpy loaded, or None."""
    import numpy  # noqa: F401  (loads its BLAS)

    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:  # not Linux
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                return setter, getter
    return None


def get_threads() -> int | None:
    """numpy's BLAS threads now, or None where unknown."""
    api = _api()
    return None if api is None else int(api[1]())


def set_threads(n: int) -> int | None:
    """Let numpy's BLAS use ``n`` threads; returns the previous count (None: no OpenBLAS found, nothing done)."""
    api = _api()
    if api is None:
        return None
    old = int(api[1]())
    api[0](int(n))
    return old
