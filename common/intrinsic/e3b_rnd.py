"""E3B x RND: an episodic bonus times a global one (Henaff, Jiang and Raileanu 2023, arXiv 2306.03236).

E3B (``common.intrinsic.e3b``) measures how new a state is within its episode only: each
episode starts with an empty ellipse, so a view pays the same in the thousandth episode as in the
first. RND (``common.intrinsic.rnd``) measures how new it is over all of training. "A Study of
Global and Episodic Bonuses for Exploration in Contextual MDPs" combines the two; this module
pays their product::

    r(s_t, a_t, s_{t+1}) = b_E3B(s_{t+1}) * b_RND(s_{t+1})

so a state pays when it is new to the episode *and* new to the agent. Each factor is computed
exactly as its own module computes it, with its own networks, optimizer and input normalizer
(two normalizers of the same frames: simpler than sharing one, for the price of a second pass
of running statistics): E3B's inverse-dynamics features and elliptical memory, RND's frozen random target and
trained predictor (half the squared error). Both train on every PPO minibatch. The product is
not rescaled here: like every module's reward, it is scaled by the trainer's running std of the
intrinsic return, which absorbs a constant factor of either term.

Its random stream is one, shared by both parts (a data-parallel rank gives it its own), and so is
its gradient averaging. The checkpoint holds both parts' states.
"""

from __future__ import annotations

import numpy as np

from common.intrinsic.base import IntrinsicModule
from common.intrinsic.e3b import E3B
from common.intrinsic.registry import register
from common.intrinsic.rnd import RND


@register("e3b-rnd")
class E3BxRND(IntrinsicModule):
    """E3B's bonus times RND's. Losses: ``losses/e3b_inverse`` (E3B's encoder), ``losses/forward`` (RND)."""

    summary = "E3B's episodic bonus times RND's global novelty"
    scores_states = False  # E3B's factor needs the episode: rollout_reward, never reward(obs)

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, settings):
        return cls(
            E3B.from_run(make_networks, obs_shape, input_channels, settings),
            RND.from_run(make_networks, obs_shape, input_channels, settings),
        )

    def __init__(self, episodic: E3B, novelty: RND):
        self.episodic, self.novelty = episodic, novelty
        self.novelty.rng = self.episodic.rng  # one stream for both parts' minibatch shares

    # ---- what data-parallel training attaches to: both parts ------------------------
    @property
    def rng(self) -> np.random.Generator:
        return self.episodic.rng

    @rng.setter
    def rng(self, generator: np.random.Generator) -> None:
        self.episodic.rng = self.novelty.rng = generator

    @property
    def grad_sync(self):
        return self.episodic.grad_sync

    @grad_sync.setter
    def grad_sync(self, sync) -> None:
        self.episodic.grad_sync = self.novelty.grad_sync = sync

    def normalizers(self) -> list:
        return self.episodic.normalizers() + self.novelty.normalizers()

    def networks(self) -> list:
        return self.episodic.networks() + self.novelty.networks()

    # ---- reward ---------------------------------------------------------------------
    def observe(self, obs: np.ndarray) -> None:
        self.episodic.observe(obs)
        self.novelty.observe(obs)

    def reward(self, obs):
        raise TypeError("e3b-rnd scores transitions within their episodes, not observations: use rollout_reward")

    def rollout_reward(self, obs, next_obs, actions, dones):
        """E3B's bonus of each s_{t+1} times RND's, float32[T, N] (arguments: ``IntrinsicModule``)."""
        episodic = self.episodic.rollout_reward(obs, next_obs, actions, dones)
        novelty = self.novelty.rollout_reward(obs, next_obs, actions, dones)
        return (episodic * novelty).astype(np.float32)

    def reset_episodes(self) -> None:
        self.episodic.reset_episodes()

    def features(self, obs: np.ndarray) -> np.ndarray:
        """E3B's features float32[B, D]: the space its ellipses are drawn in."""
        return self.episodic.features(obs)

    # ---- training -------------------------------------------------------------------
    def update(self, batch: dict) -> dict:
        return {**self.episodic.update(batch), **self.novelty.update(batch)}

    # ---- checkpointing --------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"name": self.name, "episodic": self.episodic.state_dict(), "novelty": self.novelty.state_dict()}

    def set_state_dict(self, state: dict) -> None:
        self.check_state(state)
        self.episodic.set_state_dict(state["episodic"])
        self.novelty.set_state_dict(state["novelty"])
