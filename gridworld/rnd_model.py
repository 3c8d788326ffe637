"""RND / SND target and predictor for MiniGrid's 7x7 symbolic view.

``common.intrinsic.networks.ConvFeatureNet`` with small kernels instead of the
RND paper's 8x8/4 (which needs 84x84 input): three 2x2 stride-1 convolutions,
16 - 32 - 32 channels, LeakyReLU: 7x7 -> 6x6 -> 5x5 -> 4x4, flatten 512, then a
linear head to ``feature_dim`` = 128 (the predictor adds two ReLU-Linear(128)
layers, as in RND). Sized for a 2-core CPU: with larger networks the intrinsic update (predictor, and
for SND the target) would cost several times the PPO update. ``forward_with_map``
returns the 32 x 5 x 5 map after the second convolution
(25 locations for SND-STD's local InfoNCE). Orthogonal init (the RND paper's).

The networks see what the intrinsic module gives them: the observation normalized
per cell and channel by a running mean/std, clipped to [-5, 5] (the module's job,
as in RND). We keep that (rather than one-hot codes) so the intrinsic modules run
unchanged; on symbolic codes a per-position standardization is still informative.
"""

from __future__ import annotations

from common.intrinsic.networks import ConvFeatureNet
from gridworld.env import VIEW

GRID_CONV_SPECS = ((16, 2, 1), (32, 2, 1), (32, 2, 1))  # (out_channels, kernel, stride)


def make_rnd_networks(in_channels: int, feature_dim: int = 128):
    """(target, predictor) for float32[B, in_channels, 7, 7] -> [B, feature_dim]."""
    kw = dict(input_hw=VIEW, init="orthogonal", specs=GRID_CONV_SPECS)
    target = ConvFeatureNet(in_channels, feature_dim, hidden=(), **kw)
    predictor = ConvFeatureNet(in_channels, feature_dim, hidden=(feature_dim, feature_dim), **kw)
    return target, predictor
