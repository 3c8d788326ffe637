"""Large dense layers on the CPU through numpy's BLAS: ``linear(layer, x)``.

Paddle's CPU matmul runs a ``[32, 3136] x [3136, 512]`` product (the DQN's and RND's dense
layer) much slower than numpy's BLAS (docs/performance.md, "The Double DQN train step:
Adam and the dense layers"). ``linear`` computes ``x @ W + b`` and, in one
``PyLayer``, its gradients with numpy, reading the weight where Paddle keeps it and writing
the results straight into Paddle tensors (no copies of the weight or of its gradient). Same
math as ``nn.Linear`` up to float rounding (``tests/test_fast_update.py``). Small layers stay
on Paddle's kernel, where a ``PyLayer``'s fixed cost would exceed the saving; GPU runs never
come here.

With more than one shard thread (``common.cpu.sharding``) each product is split across them
along its output's longer side, at the DQN's batch the weight's (the output's features, the
input gradient's features, the weight gradient's rows): each thread reads its part of the
weight, and no shard's result needs adding to another's. numpy's BLAS itself runs one thread
inside ``common.cpu.threads``: its idle threads spin after each product and take the cores the
convolution shards need.
"""

from __future__ import annotations

import ctypes

import numpy as np
import paddle
import paddle.nn as nn
from paddle.autograd import PyLayer

from common.cpu import sharding, switch

#: batch x in x out multiply-adds from which numpy pays off (a 256 x 64 x 64 layer stays on Paddle)
MIN_MACS = 1 << 21
#: output rows or columns per shard at least (smaller products run whole)
MIN_SHARD_SIZE = 64


def _view(t: paddle.Tensor) -> np.ndarray:
    """A numpy array over a contiguous float32 CPU tensor's memory (no copy; the tensor must outlive it)."""
    n = int(np.prod(t.shape))
    buf = (ctypes.c_float * n).from_address(t.data_ptr())
    return np.frombuffer(buf, dtype=np.float32, count=n).reshape(t.shape)


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b``, split across the shard threads along ``out``'s longer side.

    When the batch is the shorter side, that is the weight's, so each thread reads or writes its
    own part of the weight or its gradient: ``a``'s rows or ``b``'s columns. Every part is a
    strided view numpy hands to BLAS as it is.
    """
    rows = out.shape[0] >= out.shape[1]
    size = out.shape[0 if rows else 1]
    n = min(sharding.count(), size // MIN_SHARD_SIZE)
    if n <= 1:
        np.matmul(a, b, out=out)
    elif rows:
        sharding.run(lambda r: np.matmul(a[r[0] : r[1]], b, out=out[r[0] : r[1]]), sharding.ranges(size, n))
    else:
        sharding.run(lambda r: np.matmul(a, b[:, r[0] : r[1]], out=out[:, r[0] : r[1]]), sharding.ranges(size, n))


def _forward(x: np.ndarray, w: paddle.Tensor, b: paddle.Tensor | None) -> paddle.Tensor:
    y = paddle.empty([x.shape[0], w.shape[1]], dtype="float32")
    yv = _view(y)
    _matmul(x, _view(w), yv)
    if b is not None:
        yv += _view(b)
    return y


class _Linear(PyLayer):
    @staticmethod
    def forward(ctx, x, w, b):
        xn = np.ascontiguousarray(x.numpy())
        ctx.save_for_backward(w)
        ctx.xn, ctx.need_dx, ctx.has_b = xn, not x.stop_gradient, b is not None
        return _forward(xn, w, b)

    @staticmethod
    def backward(ctx, gy):
        (w,) = ctx.saved_tensor()
        gyn = np.ascontiguousarray(gy.numpy())
        xn, ctx.xn = ctx.xn, None
        gw = paddle.empty(w.shape, dtype="float32")
        _matmul(xn.T, gyn, _view(gw))
        gx = None
        if ctx.need_dx:
            gx = paddle.empty([gyn.shape[0], w.shape[0]], dtype="float32")
            _matmul(gyn, _view(w).T, _view(gx))
        if not ctx.has_b:
            return gx, gw
        return gx, gw, paddle.to_tensor(gyn.sum(axis=0))


def applies(layer: nn.Layer, x: paddle.Tensor) -> bool:
    """Whether ``linear`` takes ``layer`` on ``x``: a float32 2-D CPU input, a large enough layer, eager mode."""
    return (
        isinstance(layer, nn.Linear)
        and x.ndim == 2
        and x.dtype == paddle.float32
        and layer.weight.dtype == paddle.float32
        and paddle.in_dynamic_mode()
        and x.shape[0] * layer.weight.shape[0] * layer.weight.shape[1] >= MIN_MACS
        and switch.on(x, layer.weight)
    )


def linear(layer: nn.Linear, x: paddle.Tensor) -> paddle.Tensor:
    """``layer(x)`` for x float32[B, in] -> float32[B, out], on numpy (the caller checks ``applies``)."""
    w, b = layer.weight, layer.bias
    params = [w] if b is None else [w, b]
    if paddle.is_grad_enabled() and not (x.stop_gradient and all(p.stop_gradient for p in params)):
        return _Linear.apply(x, w, b)
    return _forward(np.ascontiguousarray(x.numpy()), w, b)
