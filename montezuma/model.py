"""CleanRL's variant of the RND paper's CNN actor-critic, with two value heads (extrinsic, intrinsic).

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

from common.intrinsic.networks import param_attrs
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
