"""What the agent is paid for novelty, once per rollout: score -> gate -> scale -> observe -> store.

``IntrinsicStage(module, cfg, num_envs)`` holds the run's intrinsic module (``common.intrinsic``) and
its ``IntrinsicRewardScale``; ``pay(buffer)`` fills the buffer's intrinsic rewards for the rollout it
holds and returns the raw novelty (for the logs and pictures). Two conventions (``--int-reward``):

* ``rnd`` (the RND paper): each step is paid for the novelty of the state it led to, s_{t+1} (the true
  terminal frame where an episode ended; the module's ``rollout_reward``, which NovelD, ICM, E3B and
  E3B x RND override), optionally gated by first visits, divided by the running std of the discounted
  intrinsic return; the module's normalizer then sees those frames.
* ``snd`` (the SND authors' code): the module's normalizer sees each step's state s_t first, then the
  step is paid clip(eta x novelty(s_t), 0, 1), with no normalisation.
"""

from __future__ import annotations

import numpy as np

from common.intrinsic.normalize import IntrinsicRewardScale
from common.run.checkpoint import copy_state


class IntrinsicStage:
    """The intrinsic module and its reward scale, for one run (``cfg``: a ``TrainConfig``)."""

    def __init__(self, module, cfg, num_envs: int):
        self.module, self.convention = module, cfg.int_reward
        gated = (cfg.int_first_visit and cfg.intrinsic != "none") or module.first_visit_gate
        eta = cfg.int_eta if cfg.int_reward == "snd" else None
        self.scale = IntrinsicRewardScale(cfg.int_gamma, num_envs, first_visit=gated, clip_eta=eta)

    def warm_up(self, envs, obs: np.ndarray, steps: int, rng: np.random.Generator, stopped) -> tuple:
        """The module's observation normalizer warmed up on ``steps`` steps of uniformly random actions in
        ``envs`` from ``obs`` (RND's recipe): ``(last obs, finished)``. A stop (``stopped()`` true before a
        step) or an error gives the module and ``rng`` back as they were, so that the next start warms up
        afresh."""
        module_before, rng_before = copy_state(self.module.state_dict()), rng.bit_generator.state
        finished = False
        try:
            for _ in range(steps):
                if stopped():
                    break
                obs, _, _, _ = envs.step(rng.integers(0, envs.num_actions, size=envs.num_envs))
                self.module.observe(obs)
            else:
                finished = True
        finally:
            if not finished:
                self.module.set_state_dict(module_before)
                rng.bit_generator.state = rng_before
        return obs, finished

    def pay(self, buf) -> np.ndarray:
        """Store the rollout's intrinsic rewards float32[T, N] in ``buf`` (a ``RolloutBuffer``); returns the
        raw novelty float[T, N]."""
        T, N = buf.num_steps, buf.num_envs
        nxt = buf.next_obs_for_reward()
        if self.convention == "snd":  # as their code: the running mean sees s_t before s_t is scored
            states = buf.obs[:-1].reshape(T * N, *buf.obs_shape)
            self.module.observe(states)
            raw = self.module.reward(states).reshape(T, N)
        else:
            raw = self.module.rollout_reward(buf.obs, nxt, buf.actions, buf.dones)
            self.module.observe(nxt.reshape(T * N, *buf.obs_shape))
        buf.store_intrinsic_rewards(self.scale.scale(raw, *buf.visit_frames(nxt)))
        return raw
