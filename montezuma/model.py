"""Montezuma's actor-critics: CleanRL's variant of the RND paper's CNN (the default), and the SND authors'.

``RNDPolicy`` is CleanRL's variant of the RND paper's CNN actor-critic, with two value heads
(extrinsic, intrinsic):

Conv(32, 8x8/4) - ReLU - Conv(64, 4x4/2) - ReLU - Conv(64, 3x3/1) - ReLU - flatten (3136)
- Linear(3136, 256) - ReLU - Linear(256, 448) - ReLU = h.
Policy: Linear(448, 448) - ReLU - Linear(448, A). Values: v = Linear(448, 1)(h + ReLU(Linear(448, 448)(h)))
for each stream (one residual "extra layer" shared by the two value heads).
This is the layout of CleanRL's ``ppo_rnd_envpool.py``. The RND authors' network
(openai/random-network-distillation, ``policies/cnn_policy_param_matched.py``) has a 4x4 third
convolution (2,304 features) and a residual extra layer in the policy head too. The network is
kept as it is: checkpoints and the speed measurements depend on it (docs/deviations.md, Montezuma deviation 21).
Orthogonal initialization, zero biases, set per layer: gain sqrt(2) for the convolutions, the two
trunk layers and the policy's hidden layer (CleanRL: 0.01 there), 0.1 for the extra layer, 0.01
for the policy logits and the value heads.
"""

from __future__ import annotations

import math

import paddle.nn as nn

from common.intrinsic.networks import AUTHORS_SND_SPECS, ConvFeatureNet, param_attrs
from common.nets import Net


def _linear(i, o, gain=math.sqrt(2)):
    w, b = param_attrs("orthogonal", gain)
    return nn.Linear(i, o, weight_attr=w, bias_attr=b)


def _conv(i, o, k, s):
    w, b = param_attrs("orthogonal")
    return nn.Conv2D(i, o, k, stride=s, weight_attr=w, bias_attr=b)


class RNDPolicy(Net):
    """x float32[B, 4, 84, 84] in [0, 1] -> (logits [B, A], v_ext [B], v_int [B])."""

    def __init__(self, input_num: int, actions: int):
        super().__init__()
        self.features = nn.Sequential(
            _conv(input_num, 32, 8, 4),
            nn.ReLU(),
            _conv(32, 64, 4, 2),
            nn.ReLU(),
            _conv(64, 64, 3, 1),
            nn.ReLU(),
            nn.Flatten(),
            _linear(64 * 7 * 7, 256),
            nn.ReLU(),
            _linear(256, 448),
            nn.ReLU(),
        )
        self.actor = nn.Sequential(_linear(448, 448), nn.ReLU(), _linear(448, actions, gain=0.01))
        self.extra_layer = nn.Sequential(_linear(448, 448, gain=0.1), nn.ReLU())
        self.critic_ext = _linear(448, 1, gain=0.01)
        self.critic_int = _linear(448, 1, gain=0.01)

    def compute(self, x, run):
        h = run(self.features, x)
        hv = h + run(self.extra_layer, h)
        return run(self.actor, h), run(self.critic_ext, hv).squeeze(-1), run(self.critic_int, hv).squeeze(-1)


class SNDAuthorsPolicy(Net):
    """The SND authors' Atari actor-critic (Iskandor/SND, ``PPOAtariMotivationNetwork``), on our frames.

    x float32[B, 4, H, W] in [0, 1] -> (logits [B, A], v_ext [B], v_int [B]).
    Trunk: four 3x3 convolutions (32/2, 64/2, 64/2, 128/1, padding 1) with ReLU, flatten, Linear(512)
    with no activation (15,488 inputs on 84x84 frames; theirs 18,432 on 96x96). Policy: ReLU -
    Linear(512, 512) - ReLU - Linear(512, A). Values: Linear(512, 512) - ReLU, then one Linear(512, 1)
    per stream (the critic reads the trunk's output before any ReLU, as theirs does).
    Orthogonal initialization, zero biases: gain sqrt(2) in the trunk, 0.01 for the policy's hidden
    layer and logits, 0.1 for the critic's hidden layer, 0.01 for the value heads (their gains).
    Their plain-PPO network differs only in its critic (one head, a ReLU before its hidden layer).
    """

    def __init__(self, input_num: int, actions: int, input_hw: int = 84, feature_dim: int = 512):
        super().__init__()
        self.features = ConvFeatureNet(
            input_num, feature_dim, specs=AUTHORS_SND_SPECS, act="relu", input_hw=input_hw, gain=math.sqrt(2)
        )
        self.actor = nn.Sequential(
            nn.ReLU(),
            _linear(feature_dim, feature_dim, gain=0.01),
            nn.ReLU(),
            _linear(feature_dim, actions, gain=0.01),
        )
        self.critic_hidden = nn.Sequential(_linear(feature_dim, feature_dim, gain=0.1), nn.ReLU())
        self.critic_ext = _linear(feature_dim, 1, gain=0.01)
        self.critic_int = _linear(feature_dim, 1, gain=0.01)

    def compute(self, x, run):
        h = self.features.compute(x, run)
        hv = run(self.critic_hidden, h)
        return run(self.actor, h), run(self.critic_ext, hv).squeeze(-1), run(self.critic_int, hv).squeeze(-1)


#: ``--policy-network`` name -> network class (``montezuma.train.POLICY_NETWORKS`` lists the names)
POLICIES = {"game": RNDPolicy, "authors": SNDAuthorsPolicy}


def make_policy(name: str, input_num: int, actions: int, input_hw: int = 84) -> Net:
    """The ``--policy-network`` ``name`` for ``input_num`` stacked frames of side ``input_hw``."""
    if name not in POLICIES:
        raise ValueError(f"--policy-network {name!r} is invalid: expected one of {', '.join(POLICIES)}")
    if name == "game":
        return RNDPolicy(input_num, actions)
    return SNDAuthorsPolicy(input_num, actions, input_hw=input_hw)
