"""Faster CPU building blocks with the same math as the plain Paddle layers.

Profiling Paddle 3.3.1 dygraph on CPU (``docs/performance.md``) showed that a
``Conv2D`` layer's bias add and its gradient (a broadcast add of ``[1, C, 1, 1]`` and a
reduce over axes 0, 2, 3) plus the separate ReLU and ReLU-grad kernels cost about as
much as the convolution itself. ``conv_act`` runs the convolution without bias and
then one ``PyLayer`` that adds the bias and applies the activation; its backward
computes the activation gradient from the saved output and the bias gradient as a
small matrix product (an inner-axis reduction), which Paddle's CPU kernels do much
faster than the broadcast reduce. Parameters are the layer's own, so state dicts and
checkpoints are unchanged. ``tests/test_fast_update.py`` checks outputs and gradients
against the plain layers.
"""
from __future__ import annotations

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle import _C_ops
from paddle.autograd import PyLayer


# The fused path calls Paddle's internal kernels; an older Paddle (2.6) without them
# falls back to the plain layers (same math, slower).
_HAS_KERNELS = all(hasattr(_C_ops, n) for n in ("add", "relu", "leaky_relu", "relu_grad", "leaky_relu_grad"))


class _BiasAct(PyLayer):
    """out = act(y + bias[None, :, None, None]), act = ReLU (slope 0) or LeakyReLU(slope)."""

    @staticmethod
    def forward(ctx, y, bias, slope):
        c = y.shape[1]
        z = _C_ops.add(y, bias.reshape([1, c, 1, 1]))
        out = _C_ops.relu(z) if slope == 0.0 else _C_ops.leaky_relu(z, slope)
        ctx.save_for_backward(out)
        ctx.slope = slope
        return out

    @staticmethod
    def backward(ctx, grad):
        out, = ctx.saved_tensor()
        # sign(out) == sign(y + bias) for ReLU and for LeakyReLU with a positive slope
        gy = _C_ops.relu_grad(out, grad) if ctx.slope == 0.0 else _C_ops.leaky_relu_grad(out, grad, ctx.slope)
        n, c = gy.shape[0], gy.shape[1]
        hw = gy.shape[2] * gy.shape[3]
        ones = paddle.ones([hw, 1], dtype=gy.dtype)
        gb = paddle.matmul(gy.reshape([n, c, hw]), ones).sum(axis=0).reshape([c])
        return gy, gb


def conv_act(conv: nn.Conv2D, x: paddle.Tensor, slope: float = 0.0) -> paddle.Tensor:
    """``act(conv(x))`` for an NCHW ``nn.Conv2D`` with bias; act = ReLU (slope 0) or LeakyReLU."""
    y = F.conv2d(x, conv.weight, None, stride=conv._stride, padding=conv._padding, dilation=conv._dilation,
                 groups=conv._groups, data_format=conv._data_format)
    if conv.bias is None or not _HAS_KERNELS:
        if conv.bias is not None:
            y = y + conv.bias.reshape([1, -1, 1, 1])
        return F.relu(y) if slope == 0.0 else F.leaky_relu(y, slope)
    if not paddle.is_grad_enabled() or (y.stop_gradient and conv.bias.stop_gradient):
        z = _C_ops.add(y, conv.bias.reshape([1, y.shape[1], 1, 1]))
        return _C_ops.relu(z) if slope == 0.0 else _C_ops.leaky_relu(z, slope)
    return _BiasAct.apply(y, conv.bias, float(slope))


def run_sequential(seq, x: paddle.Tensor) -> paddle.Tensor:
    """Run an ``nn.Sequential`` (or list of layers), fusing each NCHW Conv2D + ReLU/LeakyReLU pair."""
    layers = list(seq)
    i = 0
    while i < len(layers):
        layer = layers[i]
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        if (isinstance(layer, nn.Conv2D) and layer._data_format == "NCHW"
                and isinstance(nxt, (nn.ReLU, nn.LeakyReLU))):
            slope = nxt._negative_slope if isinstance(nxt, nn.LeakyReLU) else 0.0
            x = conv_act(layer, x, slope)
            i += 2
        else:
            x = layer(x)
            i += 1
    return x
