"""Pong's networks: the SND article's Q network and SND-V target/predictor, on ``common.dqn.learner.DQNConvNet``.

* Q network (the article's ``QNetwork``, SRL's DQN with ``set_dqn_block()`` and
  ``hidden_block.set((512,))``): DQN image block, Dense(512) + ReLU, Dense(6).
* SND target and predictor (the article's ``SNDNetwork``, one architecture for both):
  DQN image block, Dense(512), no activation.

Input float32[B, 4, 84, 84] in [0, 1]; ``cfg.conv_padding`` picks the article's "same"
geometry or the cheaper "valid" one (``common/dqn/learner.py``). Keras' default initialization.
"""

from __future__ import annotations

from common.dqn.learner import DQNConvNet

HIDDEN = 512
FEATURES = 512


def make_q_network(cfg, obs_shape, num_actions) -> DQNConvNet:
    return DQNConvNet(obs_shape[0], num_actions, hidden=(HIDDEN,), input_hw=obs_shape[-1], padding=cfg.conv_padding)


def make_snd_networks(cfg, in_channels: int, input_hw: int = 84):
    """(target, predictor): two independently initialized ``SNDNetwork``s."""
    return tuple(
        DQNConvNet(in_channels, FEATURES, hidden=(), input_hw=input_hw, padding=cfg.conv_padding) for _ in range(2)
    )
