"""Bootstrap intervals for the benchmarks' reports (seeds, or games of one run, resampled with replacement)."""

from __future__ import annotations

import numpy as np

BOOTSTRAP = 10_000


def _resampled_means(a, n, rng) -> np.ndarray:
    """float[n]: the means of n resamples of ``a`` (with replacement, each as long as ``a``)."""
    a = np.asarray(a, float)
    return a[rng.integers(0, len(a), size=(n, len(a)))].mean(1)


def bootstrap_mean(a, n=BOOTSTRAP, seed=0) -> tuple[float, float]:
    """95 % bootstrap interval of mean(a)."""
    lo, hi = np.percentile(_resampled_means(a, n, np.random.default_rng(seed)), [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_diff(a, b, n=BOOTSTRAP, seed=0) -> tuple[float, float]:
    """95 % bootstrap interval of mean(a) - mean(b), each group resampled within itself."""
    rng = np.random.default_rng(seed)
    da = _resampled_means(a, n, rng)
    db = _resampled_means(b, n, rng)
    lo, hi = np.percentile(da - db, [2.5, 97.5])
    return float(lo), float(hi)
