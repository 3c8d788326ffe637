"""The tutorial's RND networks for Mario.

Target: Conv(32, 8x8/4) - LeakyReLU - Conv(64, 4x4/2) - LeakyReLU - Conv(64, 3x3/1) -
LeakyReLU - Linear(3136, 512). Predictor: the same convolutions, then
Linear(3136, 512) - ReLU - Linear(512, 512) - ReLU - Linear(512, 512). KaimingNormal
weights, zero biases (the tutorial's initializer, set per layer). The tutorial's
input is the whole 4-frame stack, kept by default (``--intrinsic-frames 4``).

The tutorial also tried to rescale the target's weights with
``self.target.parameters()[index] = ...``, an assignment into a temporary list that
never changed anything (defect 3); we leave the target as initialised, which is
what the tutorial actually ran.
"""

from __future__ import annotations

from common.intrinsic.networks import ConvFeatureNet


def make_rnd_networks(in_channels: int, feature_dim: int = 512):
    """(target, predictor) for float32[B, in_channels, 84, 84] input -> [B, feature_dim]."""
    target = ConvFeatureNet(in_channels, feature_dim, hidden=(), init="kaiming_normal")
    predictor = ConvFeatureNet(in_channels, feature_dim, hidden=(512, 512), init="kaiming_normal")
    return target, predictor
