"""The tutorial's ``MARIO`` actor-critic, plus the intrinsic value head RND needs.

Architecture exactly as the tutorial: 4 x [Conv2D(32, 3x3, stride 2, padding 1) + ReLU]
-> flatten (32 x 6 x 6 = 1152) -> Linear(1152, 512) (no activation, as in the
tutorial) -> actor Linear(512, A), extrinsic critic Linear(512, 1), and our intrinsic
critic Linear(512, 1). KaimingUniform weights, zero biases, set per layer (the
tutorial's ``set_global_initializer`` leaked into every layer built afterwards).
"""

from __future__ import annotations

import paddle.nn as nn

from common.intrinsic.networks import param_attrs
from common.nets import Net


def _linear(i, o):
    w, b = param_attrs("kaiming_uniform")
    return nn.Linear(i, o, weight_attr=w, bias_attr=b)


class MARIO(Net):
    """x float32[B, 4, 84, 84] in [0, 1] -> (logits [B, A], v_ext [B], v_int [B])."""

    def __init__(self, input_num: int, actions: int):
        super().__init__()
        layers, c = [], input_num
        for _ in range(4):
            w, b = param_attrs("kaiming_uniform")
            layers += [nn.Conv2D(c, 32, 3, stride=2, padding=1, weight_attr=w, bias_attr=b), nn.ReLU()]
            c = 32
        self.features = nn.Sequential(*layers)
        self.flatten = nn.Flatten()  # no parameters: state dicts are unchanged
        self.linear0 = _linear(32 * 6 * 6, 512)
        self.actor = _linear(512, actions)
        self.critic_ext = _linear(512, 1)
        self.critic_int = _linear(512, 1)

    def compute(self, x, run):
        h = run(self.linear0, run(self.flatten, run(self.features, x)))
        return run(self.actor, h), run(self.critic_ext, h).squeeze(-1), run(self.critic_int, h).squeeze(-1)
