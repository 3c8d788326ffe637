"""The interface every intrinsic-reward module implements.

The trainer only talks to this interface, so RND and the SND variants are
interchangeable by a config string (see ``common.intrinsic.make_intrinsic``).

Conventions
-----------
* Observations arrive as the rollout stores them: ``uint8[B, C, H, W]`` (the
  game's full frame stack). A module picks the channels it looks at with
  ``input_channels`` (RND on Montezuma: only the latest frame) and normalizes
  them itself (running mean/std, clipped to [-5, 5]); the normalizer is part of
  its ``state_dict``.
* ``reward`` returns the *raw* per-sample novelty (no grad). Scaling by the
  running std of the discounted intrinsic return is the trainer's job, because it
  is the same for every module.
* ``update`` receives one PPO minibatch (see ``common.ppo.buffer.RolloutBuffer``):
  ``obs`` uint8[B,C,H,W] = s_t, ``next_obs`` uint8[B,C,H,W] = s_{t+1},
  ``dones`` float32[B] = 1 where the transition ended an episode (then
  ``next_obs`` is the episode's true terminal frame, the one ``reward`` scored, and
  the pair (s_t, s_{t+1}) is consecutive too; SND's pair objectives still leave
  these transitions out, as the authors' code does). It trains the module's own networks with its
  own optimizers and returns a flat ``dict[str, float]`` of losses whose keys
  become VisualDL tags under ``losses/``.
"""

from __future__ import annotations

import numpy as np


class IntrinsicModule:
    """Base class: computes a novelty reward and trains itself on rollout data."""

    #: registry name, e.g. "rnd", "snd-v"
    name: str = "base"

    def observe(self, obs: np.ndarray) -> None:
        """Update the observation normalizer with ``uint8[B, C, H, W]`` frames."""
        raise NotImplementedError

    def reward(self, obs: np.ndarray) -> np.ndarray:
        """Raw novelty of ``uint8[B, C, H, W]`` observations -> ``float32[B]``."""
        raise NotImplementedError

    def update(self, batch: dict) -> dict:
        """One optimisation step on a minibatch; returns ``{loss_name: float}``."""
        raise NotImplementedError

    def features(self, obs: np.ndarray) -> np.ndarray:
        """Target-network features ``float32[B, D]`` (for the embedding view)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def set_state_dict(self, state: dict) -> None:
        raise NotImplementedError


class NoIntrinsic(IntrinsicModule):
    """``--intrinsic none``: plain PPO. Rewards are zero and nothing is trained."""

    name = "none"

    def observe(self, obs):
        pass

    def reward(self, obs):
        return np.zeros(len(obs), dtype=np.float32)

    def update(self, batch):
        return {}

    def features(self, obs):
        return np.zeros((len(obs), 0), dtype=np.float32)

    def state_dict(self):
        return {}

    def set_state_dict(self, state):
        pass


# ------------------------------------------------------------------ target + predictor checkpoints
def distillation_state(module, **optimizers) -> dict:
    """The checkpoint entry of a module with a ``target`` and a ``predictor`` network (RND, the SND
    variants, the DQN's SND-V): its name, both networks' weights, ``optimizers`` (name: state) and
    its random stream. ``load_distillation_state`` reads the shared part back."""
    return {
        "name": module.name,
        "target": module.target.state_dict(),
        "predictor": module.predictor.state_dict(),
        **optimizers,
        "rng": module.rng.bit_generator.state,
    }


def load_distillation_state(module, state: dict) -> None:
    """Check that ``state`` is of ``module``'s kind, then load both networks and the random stream; the
    caller restores the rest (optimizers, normalizers)."""
    from common.run.checkpoint import load_weights

    if state.get("name") != module.name:
        raise ValueError(f"checkpoint holds intrinsic module {state.get('name')!r}, this run uses {module.name!r}")
    load_weights(module.target, state["target"], "intrinsic/target")
    load_weights(module.predictor, state["predictor"], "intrinsic/predictor")
    module.rng.bit_generator.state = state["rng"]
