"""Convolutional feature networks for RND / SND targets and predictors.

Both games use the RND paper's architecture (which the tutorial copies):
three convolutions (32@8x8/4, 64@4x4/2, 64@3x3/1) with LeakyReLU, then a linear
head. The predictor has two extra ReLU-Linear(512) layers. The game's
``rnd_model.py`` only picks input channels and the initializer.

Initialization is set per layer through ``ParamAttr`` (never with
``set_global_initializer``, which would silently change every layer created
afterwards, in any module; defect 4 of the tutorial).
"""

from __future__ import annotations

import math

import paddle
import paddle.nn as nn

from common import cpu
from common.nets import Net

CONV_SPECS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (out_channels, kernel, stride)


def param_attrs(init: str, gain: float = math.sqrt(2)):
    """(weight_attr, bias_attr) for ``init`` in {"orthogonal", "kaiming_normal", "kaiming_uniform"}; bias 0."""
    if init == "orthogonal":
        w = nn.initializer.Orthogonal(gain=gain)
    elif init == "kaiming_normal":
        w = nn.initializer.KaimingNormal()
    elif init == "kaiming_uniform":
        w = nn.initializer.KaimingUniform()
    else:
        raise ValueError(f"unknown init {init!r}; expected 'orthogonal', 'kaiming_normal' or 'kaiming_uniform'")
    return paddle.ParamAttr(initializer=w), paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))


def conv_output_hw(hw: int, specs=CONV_SPECS) -> int:
    for _, k, s in specs:
        hw = (hw - k) // s + 1
    return hw


class ConvFeatureNet(Net):
    """float32[B, C, H, W] (normalized) -> float32[B, out_dim].

    ``hidden`` lists the sizes of extra ReLU-Linear layers before the output
    (RND predictor: (512, 512); target: ()).
    ``forward_with_map`` also returns the feature map after the second convolution
    (float32[B, 64, 9, 9] for 84x84 input), the "local features" SND-STD needs.
    """

    def __init__(
        self,
        in_channels: int,
        out_dim: int = 512,
        hidden=(),
        input_hw: int = 84,
        init: str = "orthogonal",
        specs=CONV_SPECS,
    ):
        super().__init__()
        convs, c = [], in_channels
        for out_c, k, s in specs:
            w, b = param_attrs(init)
            convs.append(nn.Conv2D(c, out_c, k, stride=s, weight_attr=w, bias_attr=b))
            c = out_c
        self.convs = nn.LayerList(convs)
        self.act = nn.LeakyReLU()
        flat = c * conv_output_hw(input_hw, specs) ** 2
        layers, d = [], flat
        for h in hidden:
            w, b = param_attrs(init)
            layers += [nn.Linear(d, h, weight_attr=w, bias_attr=b), nn.ReLU()]
            d = h
        w, b = param_attrs(init)
        layers.append(nn.Linear(d, out_dim, weight_attr=w, bias_attr=b))
        self.head = nn.Sequential(*layers)
        self.flatten = nn.Flatten()
        self.out_dim = out_dim
        # the conv stack in order, as plain lists (not sublayers: parameter names stay convs.i.*)
        self._trunk = [m for conv in self.convs for m in (conv, self.act)]
        self._to_map, self._from_map = self._trunk[:4], self._trunk[4:]

    def compute(self, x, run, with_map: bool = False):
        if not with_map:
            return run(self.head, run(self.flatten, run(self._trunk, x)))
        fmap = run(self._to_map, x)  # after the second convolution
        return run(self.head, run(self.flatten, run(self._from_map, fmap))), fmap

    def forward_with_map(self, x):
        """(features float32[B, out_dim], the map after the second convolution float32[B, C, H', W'])."""
        return self.compute(x, cpu.run, with_map=True)
