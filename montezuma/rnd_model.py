"""RND target and predictor for Montezuma's Revenge (the RND paper's networks).

Same architecture as the tutorial's (``common.intrinsic.networks.ConvFeatureNet``),
orthogonal initialization with gain sqrt(2) as in the authors' code
(openai/random-network-distillation; CleanRL's port has the same two networks), and by
default only the latest frame as input (``--intrinsic-frames 1``). The policy network
(``montezuma/model.py``) is CleanRL's variant, not the authors'.
"""

from __future__ import annotations

from common.intrinsic.networks import ConvFeatureNet


def make_rnd_networks(in_channels: int, feature_dim: int = 512):
    """(target, predictor) for float32[B, in_channels, 84, 84] input -> [B, feature_dim]."""
    target = ConvFeatureNet(in_channels, feature_dim, hidden=(), init="orthogonal")
    predictor = ConvFeatureNet(in_channels, feature_dim, hidden=(512, 512), init="orthogonal")
    return target, predictor
