"""Actor-critic for MiniGrid's symbolic 7x7 view or whole grid (contract in ``common/ppo/update.py``).

Input scale: the trainer feeds every policy ``uint8 / 255`` (right for pixels).
MiniGrid's observation holds category codes (object 0-10, colour 0-5, state 0-2),
so the first thing ``forward`` does is undo that scaling (``round(x * 255)``, exact
for uint8) and one-hot encode each channel's code: ``[B, 3, 7, 7] -> [B, 20, 7, 7]``
(11 + 6 + 3 categories, ``gridworld.env.CHANNEL_SIZES``; a whole grid, ``--observation full``, has
4 states, the agent's directions: ``FULL_CHANNEL_SIZES``, 21 channels). A code above a channel's
range is clipped to its last category. This keeps ``common/`` unchanged: the
game's network owns the meaning of its observation.

Trunk: the widely used MiniGrid CNN (lcswillems/rl-starter-files):
Conv(16, 2x2) - ReLU - MaxPool 2 - Conv(32, 2x2) - ReLU - Conv(64, 2x2) - ReLU
-> 64 features; then three heads, each Linear(64, 64) - Tanh - Linear(64, out):
policy logits, extrinsic value, intrinsic value. Orthogonal init (gain sqrt 2 in
the trunk, 0.01 for the logits, 1 for the values), zero biases.
"""

from __future__ import annotations

import math

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from common.intrinsic.networks import param_attrs
from common.nets import Net
from gridworld.env import CHANNEL_SIZES


class OneHotCodes(nn.Layer):
    """float32[B, C, H, W] in [0, 1] (= uint8 codes / 255) -> float32[B, sum(sizes), H, W] one-hot of the
    first ``len(sizes)`` channels (C may be more: ``--observation view+full``'s grid is for the intrinsic
    module).

    No parameters. ``forward_numpy`` is the same function on numpy, for the native engine.
    """

    def __init__(self, sizes=CHANNEL_SIZES):
        super().__init__()
        self.sizes = tuple(sizes)

    def forward(self, x):
        codes = paddle.round(x * 255.0).astype("int64")
        parts = []
        for c, n in enumerate(self.sizes):
            idx = paddle.clip(codes[:, c], 0, n - 1)  # [B, H, W]
            parts.append(F.one_hot(idx, n).transpose([0, 3, 1, 2]))  # [B, n, H, W]
        return paddle.concat(parts, axis=1).astype("float32")

    def forward_numpy(self, a: np.ndarray) -> np.ndarray:
        codes = np.rint(a * 255.0).astype(np.int64)
        parts = [
            np.eye(n, dtype=np.float32)[np.clip(codes[:, c], 0, n - 1)].transpose(0, 3, 1, 2)
            for c, n in enumerate(self.sizes)
        ]
        return np.concatenate(parts, axis=1)


def _layer(cls, *args, gain=math.sqrt(2), **kw):
    w, b = param_attrs("orthogonal", gain=gain)
    return cls(*args, weight_attr=w, bias_attr=b, **kw)


def _head(out: int, gain: float):
    return nn.Sequential(_layer(nn.Linear, 64, 64), nn.Tanh(), _layer(nn.Linear, 64, out, gain=gain))


class GridPolicy(Net):
    """x float32[B, C, 7, 7] in [0, 1] -> (logits [B, A], v_ext [B], v_int [B]); it reads the first
    ``len(channel_sizes)`` channels (3 per stacked view)."""

    def __init__(self, num_actions: int, channel_sizes=CHANNEL_SIZES):
        super().__init__()
        self.channel_sizes = tuple(channel_sizes)
        self.one_hot = OneHotCodes(self.channel_sizes)
        self.features = nn.Sequential(
            _layer(nn.Conv2D, sum(self.channel_sizes), 16, 2),
            nn.ReLU(),
            nn.MaxPool2D(2),
            _layer(nn.Conv2D, 16, 32, 2),
            nn.ReLU(),
            _layer(nn.Conv2D, 32, 64, 2),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.actor = _head(num_actions, gain=0.01)
        self.critic_ext = _head(1, gain=1.0)
        self.critic_int = _head(1, gain=1.0)

    def compute(self, x, run):
        h = run(self.features, run(self.one_hot, x))  # [B, 64]
        return run(self.actor, h), run(self.critic_ext, h).squeeze(-1), run(self.critic_int, h).squeeze(-1)
