"""Acting: the policy's forward passes on numpy observations, apart from the update rule.

``Actor(policy, engine)`` answers ``act(obs, rng)`` (sample actions) and ``values(obs)`` for
``uint8[N, C, H, W]`` observations. On CPU an optional collection ``engine``
(``common.cpu.collection_engine``: the same network on a faster runtime) does the forward
passes for batches of at least ``engine.min_batch``; it copies the policy's weights on
its first use after ``weights_changed()``, which the trainer calls whenever an update, a
rollback or a load changed them. The policy network's contract: ``policy(x)`` with
``x`` float32[B, C, H, W] in [0, 1] returns ``(logits float32[B, A], v_ext float32[B],
v_int float32[B])``.
"""

from __future__ import annotations

import numpy as np
import paddle

from common import cpu


def sample_actions(logits: np.ndarray, rng: np.random.Generator):
    """Sample from softmax(logits) float32[B, A] with ``rng``; returns (int64[B], log-prob float32[B]).

    Sampling on the host with the trainer's numpy generator keeps runs
    reproducible and the generator state checkpointable.
    """
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    cdf = np.cumsum(np.exp(logp_all), axis=1)
    u = rng.random((len(z), 1)) * cdf[:, -1:]
    actions = (cdf < u).sum(axis=1).clip(0, z.shape[1] - 1).astype(np.int64)
    return actions, logp_all[np.arange(len(z)), actions].astype(np.float32)


class Actor:
    """The policy's forward passes for collection: ``act``, ``values``, ``forward_numpy``."""

    def __init__(self, policy, engine=None):
        self.policy, self.engine = policy, engine
        self._engine_fresh = False  # the engine holds the policy's current weights

    def weights_changed(self) -> None:
        """The policy's weights changed (update, rollback, load): the engine copies them on next use."""
        self._engine_fresh = False

    @paddle.no_grad()
    def forward_numpy(self, obs: np.ndarray):
        """(logits, v_ext, v_int) as numpy for uint8[N, C, H, W]."""
        if self.engine is not None and len(obs) >= self.engine.min_batch:
            if not self._engine_fresh:
                self.engine.refresh()
                self._engine_fresh = True
            return tuple(self.engine(obs))
        return tuple(t.numpy() for t in self.policy(cpu.unit_floats(obs)))

    def act(self, obs: np.ndarray, rng: np.random.Generator):
        """Sample actions for uint8[N, C, H, W]; returns numpy (actions int64[N], log_probs, v_ext, v_int)."""
        logits, v_ext, v_int = self.forward_numpy(obs)
        actions, logp = sample_actions(logits, rng)
        return actions, logp, v_ext, v_int

    def values(self, obs: np.ndarray):
        """(v_ext, v_int) float32[N] for uint8[N, C, H, W]."""
        _, v_ext, v_int = self.forward_numpy(obs)
        return v_ext, v_int

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
