"""Convolutional feature networks for RND / SND targets and predictors.

Mario and Montezuma use the RND paper's architecture (which the tutorial copies):
three convolutions (32@8x8/4, 64@4x4/2, 64@3x3/1) with LeakyReLU, then a linear
head. The predictor has two extra ReLU-Linear(512) layers. MiniGrid
(``gridworld/rnd_model.py``) uses three 2x2/1 convolutions (16-32-32) and 128 features.
Each game's ``rnd_model.py`` picks the input channels and the initializer (MiniGrid's also
the convolutions, the input side and the feature size).

``authors_snd_networks`` builds the SND authors' own pair for SND-STD and SND-VIC instead
(``--snd-network authors``; docs/sources.md, section 4.1).

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

CONV_SPECS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (out_channels, kernel, stride[, padding])
#: the SND authors' Atari encoder (``ST_DIM_CNN``): four 3x3 convolutions, padding 1
AUTHORS_SND_SPECS = ((32, 3, 2, 1), (64, 3, 2, 1), (64, 3, 2, 1), (128, 3, 1, 1))
_ACTS = {"leaky_relu": nn.LeakyReLU, "relu": nn.ReLU, "elu": nn.ELU}


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
    for _, k, s, *pad in specs:
        hw = (hw + 2 * (pad[0] if pad else 0) - k) // s + 1
    return hw


def _act(name: str) -> nn.Layer:
    if name not in _ACTS:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(_ACTS)}")
    return _ACTS[name]()


class ConvFeatureNet(Net):
    """float32[B, C, H, W] (normalized) -> float32[B, out_dim].

    ``specs``: one ``(out_channels, kernel, stride[, padding])`` per convolution, each followed by
    ``act``. ``hidden`` lists the sizes of extra Linear layers before the output, each followed by
    ``hidden_act`` (RND predictor: (512, 512); target: ()). Every layer is initialised by ``init``
    (orthogonal with ``gain``), biases 0.
    ``forward_with_map`` also returns the feature map after convolution ``map_after`` (counted from 1,
    or the last of a shorter stack: float32[B, 64, 9, 9] after the second for the default stack on
    84x84 input), the "local features" SND-STD needs.
    """

    def __init__(
        self,
        in_channels: int,
        out_dim: int = 512,
        hidden=(),
        input_hw: int = 84,
        init: str = "orthogonal",
        specs=CONV_SPECS,
        act: str = "leaky_relu",
        hidden_act: str = "relu",
        gain: float = math.sqrt(2),
        map_after: int = 2,
    ):
        super().__init__()
        if map_after < 1:
            raise ValueError(f"map_after counts convolutions from 1, got {map_after}")
        map_after = min(map_after, len(specs))
        convs, c = [], in_channels
        for out_c, k, s, *pad in specs:
            w, b = param_attrs(init, gain)
            conv = nn.Conv2D(c, out_c, k, stride=s, padding=pad[0] if pad else 0, weight_attr=w, bias_attr=b)
            convs.append(conv)
            c = out_c
        self.convs = nn.LayerList(convs)
        self.act = _act(act)
        flat = c * conv_output_hw(input_hw, specs) ** 2
        layers, d = [], flat
        for h in hidden:
            w, b = param_attrs(init, gain)
            layers += [nn.Linear(d, h, weight_attr=w, bias_attr=b), _act(hidden_act)]
            d = h
        w, b = param_attrs(init, gain)
        layers.append(nn.Linear(d, out_dim, weight_attr=w, bias_attr=b))
        self.head = nn.Sequential(*layers)
        self.flatten = nn.Flatten()
        self.out_dim = out_dim
        # the conv stack in order, as plain lists (not sublayers: parameter names stay convs.i.*)
        self._trunk = [m for conv in self.convs for m in (conv, self.act)]
        self._to_map, self._from_map = self._trunk[: 2 * map_after], self._trunk[2 * map_after :]

    def compute(self, x, run, with_map: bool = False):
        if not with_map:
            return run(self.head, run(self.flatten, run(self._trunk, x)))
        fmap = run(self._to_map, x)  # after convolution ``map_after``
        return run(self.head, run(self.flatten, run(self._from_map, fmap))), fmap

    def forward_with_map(self, x):
        """(features float32[B, out_dim], the map after convolution ``map_after`` float32[B, C, H', W'])."""
        return self.compute(x, cpu.run, with_map=True)


def authors_snd_networks(in_channels: int, predictor_gain: float, feature_dim: int = 512, input_hw: int = 84):
    """(target, predictor) as the SND authors' Atari code builds them for SND-STD and SND-VIC.

    Target: their ``ST_DIM_CNN``, four 3x3 convolutions (32, 64, 64, 128; strides 2, 2, 2, 1;
    padding 1) with ReLU, then a linear layer to ``feature_dim``, all orthogonal with gain 0.5;
    its local map is the third convolution's output (float32[B, 64, 11, 11] on 84x84 input).
    Predictor: the same convolutions, then ``feature_dim``-ELU-``feature_dim``-ELU-``feature_dim``,
    orthogonal with ``predictor_gain`` (theirs: 0.5 for SND-STD, sqrt(2) for SND-VIC).
    """
    shape = dict(specs=AUTHORS_SND_SPECS, act="relu", input_hw=input_hw, map_after=3)
    target = ConvFeatureNet(in_channels, feature_dim, hidden=(), gain=0.5, **shape)
    predictor = ConvFeatureNet(
        in_channels, feature_dim, hidden=(feature_dim, feature_dim), hidden_act="elu", gain=predictor_gain, **shape
    )
    return target, predictor
