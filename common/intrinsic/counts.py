"""Counts of hashed observations (Tang et al. 2017, "#Exploration", arXiv 1611.04717): the worked
example of docs/intrinsic_modules.md, a whole intrinsic module in one small file.

Each observation is hashed to ``bits`` bits by SimHash, the signs of a fixed random projection
of its values, ``code(s) = sign(A x(s))`` with A ~ N(0, 1) of shape [k*H*W, bits]: nearby
observations tend to share a code, so the count generalises a little. The reward of s_{t+1} is
``1 / sqrt(n(code(s_{t+1})) + 1)`` with n the number of times its code was seen before this
rollout (the +1 counts the visit being paid for). The counts grow in ``observe``, which the
trainer calls with every rollout's next observations after scoring them (and in the warm-up).
Nothing is trained; the counts and the projection are the checkpoint. Counts are not episodic
and not shared between data-parallel ranks (each rank counts its own envs' visits).
"""

from __future__ import annotations

import numpy as np

from common.intrinsic.base import IntrinsicModule
from common.intrinsic.registry import register

SIMHASH_BITS = 32  # the paper's k ranges 64-512 on Atari; 32 is plenty for a 7x7 grid view


@register("count")
class HashCount(IntrinsicModule):
    """``--intrinsic count``: 1/sqrt(n + 1), n the visits counted before this rollout, for SimHash codes
    of the last ``input_channels`` channels."""

    summary = "SimHash counts, the worked example"

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, settings):
        return cls(obs_shape, input_channels, seed=settings.seed)

    def __init__(self, obs_shape, input_channels: int, bits: int = SIMHASH_BITS, seed: int = 0):
        c, h, w = obs_shape
        if not 1 <= input_channels <= c or not 1 <= bits <= 62:
            raise ValueError(f"need 1 <= input_channels <= {c} and 1 <= bits <= 62, got {input_channels}, {bits}")
        self.input_channels = input_channels
        rng = np.random.default_rng(seed)
        self.projection = rng.standard_normal((input_channels * h * w, bits)).astype(np.float32)
        self.counts: dict[int, int] = {}

    def codes(self, obs: np.ndarray) -> np.ndarray:
        """uint8[B, C, H, W] -> int64[B] SimHash codes (bit j = sign of projection j)."""
        x = obs[:, -self.input_channels :].reshape(len(obs), -1).astype(np.float32)
        signs = (x @ self.projection) > 0
        return signs.astype(np.int64) @ (np.int64(1) << np.arange(signs.shape[1], dtype=np.int64))

    def reward(self, obs: np.ndarray) -> np.ndarray:
        seen = np.array([self.counts.get(int(code), 0) for code in self.codes(obs)], np.float64)
        return (1.0 / np.sqrt(seen + 1.0)).astype(np.float32)

    def observe(self, obs: np.ndarray) -> None:
        codes, times = np.unique(self.codes(obs), return_counts=True)
        for code, n in zip(codes.tolist(), times.tolist()):
            self.counts[code] = self.counts.get(code, 0) + n

    def update(self, batch: dict) -> dict:
        return {}  # nothing to learn: the counts grow in observe

    def features(self, obs: np.ndarray) -> np.ndarray:
        x = obs[:, -self.input_channels :].reshape(len(obs), -1).astype(np.float32)
        return np.sign(x @ self.projection).astype(np.float32)

    def state_dict(self) -> dict:
        keys = np.fromiter(self.counts.keys(), np.int64, len(self.counts))
        return {
            "name": self.name,
            "projection": self.projection,
            "codes": keys,
            "counts": np.fromiter(self.counts.values(), np.int64, len(self.counts)),
        }

    def set_state_dict(self, state: dict) -> None:
        self.check_state(state)
        projection = np.asarray(state["projection"], np.float32)
        if projection.shape != self.projection.shape:
            raise ValueError(f"count: projection of shape {projection.shape}, this run's is {self.projection.shape}")
        codes, counts = np.asarray(state["codes"], np.int64), np.asarray(state["counts"], np.int64)
        if codes.shape != counts.shape or codes.ndim != 1:
            raise ValueError(f"count: {codes.shape} codes for {counts.shape} counts")
        self.projection = projection
        self.counts = dict(zip(codes.tolist(), counts.tolist()))
