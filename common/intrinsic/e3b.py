"""E3B, Exploration via Elliptical Episodic Bonuses (Henaff et al. 2022, arXiv 2210.05805).

A count that generalises: within an episode, the bonus of a new state is how far its features
lie outside the ellipse of the features seen so far in that episode::

    b(s_{t+1}) = phi(s_{t+1})^T C_t^{-1} phi(s_{t+1}),   C_t = ridge * I + sum of phi phi^T over the episode so far

with phi learned by inverse dynamics (``common.intrinsic.dynamics``: an encoder trained to
predict a_t from phi(s_t), phi(s_{t+1})) and ridge = 0.1 (the paper's lambda). After scoring,
phi(s_{t+1}) joins C. The episode's first observation joins C without a bonus (as the
first-visit gate counts it as visited).

C^{-1} is never inverted: each step updates it by the Sherman-Morrison rank-one formula
``C^{-1} <- C^{-1} - u u^T / (1 + b)`` with ``u = C^{-1} phi`` (O(D^2) per step, float64 so
thousands of updates do not drift), one matrix per env, reset to ``I / ridge`` when the env's
episode ends. That memory is episodic state, not learned state: it is not checkpointed, and a
resumed run starts it afresh (the game's episodes are continued, docs/usage.md: the continued
ones count as new to it; a checkpoint would grow by D x D x 8 bytes per env). The encoder keeps training
between rollouts, so an episode that spans rollouts holds features of the encoder's earlier
weights, as in the paper's own agent, which updates C while acting.
"""

from __future__ import annotations

import numpy as np

from common.intrinsic.dynamics import InverseDynamicsModule
from common.intrinsic.registry import register

#: the paper's ridge (lambda): C_0 = ridge * I
E3B_RIDGE = 0.1


class EllipticalMemory:
    """One inverse covariance float64[D, D] per env, kept by rank-one updates."""

    def __init__(self, num_envs: int, dim: int, ridge: float = E3B_RIDGE):
        if ridge <= 0:
            raise ValueError(f"the E3B ridge must be > 0, got {ridge}")
        self.num_envs, self.dim, self.ridge = int(num_envs), int(dim), float(ridge)
        self.inverse = np.repeat((np.eye(dim) / ridge)[None], self.num_envs, axis=0)

    def bonus(self, phi: np.ndarray) -> np.ndarray:
        """phi^T C^{-1} phi for each env's phi float[N, D] -> float64[N], then phi joins each env's C."""
        phi = np.asarray(phi, np.float64)
        u = np.einsum("nij,nj->ni", self.inverse, phi)  # C^{-1} phi (C^{-1} is symmetric)
        b = np.einsum("ni,ni->n", phi, u)
        self.inverse -= u[:, :, None] * u[:, None, :] / (1.0 + b)[:, None, None]
        return b

    def restart(self, env: int, first_phi: np.ndarray) -> None:
        """Env ``env`` begins an episode whose first observation has features ``first_phi`` float[D]."""
        self.inverse[env] = np.eye(self.dim) / self.ridge
        phi = np.asarray(first_phi, np.float64)
        u = self.inverse[env] @ phi
        self.inverse[env] -= np.outer(u, u) / (1.0 + phi @ u)


@register("e3b")
class E3B(InverseDynamicsModule):
    """Inverse-dynamics features, an elliptical bonus per episode. Losses: ``losses/e3b_inverse``."""

    summary = "elliptical episodic bonus in inverse-dynamics features"

    def __init__(self, *args, ridge: float = E3B_RIDGE, **kwargs):
        super().__init__(*args, **kwargs)
        self.ridge = float(ridge)
        self.memory: EllipticalMemory | None = None  # built at the first rollout, one matrix per env

    def losses(self, phi_now, phi_next, actions, inverse):
        return inverse, {"inverse": inverse}

    def reset_episodes(self) -> None:
        self.memory = None

    def rollout_reward(self, obs, next_obs, actions, dones):
        T, N = dones.shape
        phi, phi_next = self.rollout_features(obs, next_obs, dones)
        if self.memory is not None and self.memory.num_envs != N:
            raise ValueError(f"E3B holds the episodes of {self.memory.num_envs} envs, got a rollout of {N}")
        if self.memory is None:
            self.memory = EllipticalMemory(N, self.feature_dim, self.ridge)
            for i in range(N):  # the episodes in progress begin here
                self.memory.restart(i, phi[0, i])
        bonus = np.zeros((T, N), np.float32)
        for t in range(T):
            bonus[t] = self.memory.bonus(phi_next[t])
            for i in np.flatnonzero(dones[t]):  # obs[t+1, i] is the next episode's first observation
                self.memory.restart(int(i), phi[t + 1, i])
        return bonus


@register("e3b-fixed")
class E3BFixed(E3B):
    """E3B's bonus in the features of its encoder's initial random weights, which never train (the
    inverse model is built but not used). An ablation: it asks whether training by inverse dynamics is
    what makes E3B's bonus fall within an episode on MiniGrid (docs/exploration.md, suite v8). No losses."""

    summary = "E3B's elliptical bonus on a fixed random encoder (an ablation)"

    def update(self, batch: dict) -> dict:
        return {}  # the encoder keeps its initial weights; only the input normaliser moves (observe)
