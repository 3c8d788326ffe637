"""Bootstrap intervals for the benchmarks' reports (seeds, or games of one run, resampled with replacement)."""

from __future__ import annotations

import numpy as np

BOOTSTRAP = 10_000


def bootstrap_mean(a, n=BOOTSTRAP, seed=0) -> tuple[float, float]:
    """95 % bootstrap interval of mean(a)."""
    rng = np.random.default_rng(seed)
    a = np.asarray(a, float)
    lo, hi = np.percentile(a[rng.integers(0, len(a), size=(n, len(a)))].mean(1), [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_diff(a, b, n=BOOTSTRAP, seed=0) -> tuple[float, float]:
    """95 % bootstrap interval of mean(a) - mean(b), each group resampled within itself."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, float), np.asarray(b, float)
    da = a[rng.integers(0, len(a), size=(n, len(a)))].mean(1)
    db = b[rng.integers(0, len(b), size=(n, len(b)))].mean(1)
    lo, hi = np.percentile(da - db, [2.5, 97.5])
    return float(lo), float(hi)
