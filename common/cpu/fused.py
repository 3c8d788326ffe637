"""Faster CPU building blocks with the same math as the plain Paddle layers.

Profiling Paddle 3.3.1 dygraph on CPU found three costs that the plain ``Conv2D`` +
``ReLU`` layers leave on the table (each gain below is measured in ``docs/performance.md``):

1. A ``Conv2D`` layer's bias add (a broadcast of ``[1, C, 1, 1]``) and its gradient (a
   reduce over axes 0, 2, 3), plus separate ReLU and ReLU-grad kernels, cost about as
   much as the convolution. ``conv_act`` runs the convolution without bias, then adds a
   ``[C, 1, 1]`` bias (Paddle's broadcast kernel is faster for that shape) and the
   activation in one ``PyLayer`` whose backward gets the bias gradient as a small matrix
   product.
2. Paddle's CPU convolution kernels are single-threaded (``set_num_threads`` does not
   change them) but release the GIL. ``conv_stack`` splits the batch into shards and
   runs every convolution layer's forward and backward on the shards in a thread pool,
   so a 2-core machine runs the update's convolutions on both cores. The shards stay
   split from the first convolution to the last; they are concatenated once, for the
   linear layers.
3. The first layer's input (the observation) needs no gradient, but the convolution
   grad kernel always computes one; its weight gradient is computed as one batched
   matrix product with the ``unfold``-ed input instead (faster, same gradient).

4. Faster still, when the oneDNN library inside Paddle's wheel loads and passes its self-check
   (``common/cpu/onednn.py``): ``conv_stack`` runs the whole stack on oneDNN's kernels,
   channels-last inside, forward and backward, still in batch shards on threads
   (docs/performance.md). Points 1-3 are the fallback when it does not.

Parameters are the layers' own, so state dicts and checkpoints are unchanged.
``tests/test_fast_update.py`` checks outputs and gradients against the plain layers,
sharded and unsharded. The number of shards (``set_num_shards``, ``common.cpu.sharding``) is
1 unless the trainer raises it while it runs the networks (``TrainConfig.num_threads``).

None of this runs off the CPU: every path here asks ``common.cpu.switch.on`` first, so a GPU run
(and a CPU run with ``PADDLE_CURIOSITY_PLAIN=1``) computes with Paddle's plain layers.
"""

from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle import _C_ops
from paddle.autograd import PyLayer

try:
    from paddle.utils.dlpack import from_dlpack

    _HAS_DLPACK = True
except ImportError:  # pragma: no cover - older Paddle
    _HAS_DLPACK = False

from common.cpu import linear, onednn, sharding, switch

# The fused path calls Paddle's internal kernels; an older Paddle (2.6) without them
# falls back to the plain layers (same math, slower).
_HAS_KERNELS = all(
    hasattr(_C_ops, n)
    for n in (
        "add",
        "add_",
        "relu",
        "relu_",
        "leaky_relu",
        "leaky_relu_",
        "relu_grad",
        "leaky_relu_grad",
        "conv2d",
        "conv2d_grad",
    )
)

_HAS_INPLACE = all(hasattr(_C_ops, n) for n in ("subtract_", "multiply_", "clip_"))

MIN_SHARD = 8  # samples per shard at least
MIN_SHARD_ELEMENTS = 1 << 17  # and input elements per shard (one Mario frame stack: 28,224)
set_num_shards = sharding.set_count  # the name the tests and benchmarks use


class Geometry(NamedTuple):
    stride: list
    padding: object  # int, [int, int] or a string such as "SAME"
    dilation: list
    groups: int
    data_format: str


def geometry(conv: nn.Conv2D) -> Geometry | None:
    """A ``Conv2D``'s stride, padding, dilation, groups and layout, or None if this Paddle keeps them
    elsewhere (then every fast path steps aside and the layer runs as it is).

    Paddle 2.6-3.x keep these in private attributes and offer no public accessor; this is the one
    place that reads them.
    """
    try:
        if getattr(conv, "_padding_mode", "zeros") != "zeros":  # reflect/replicate/circular: the layer's own
            return None
        return Geometry(list(conv._stride), conv._padding, list(conv._dilation), int(conv._groups), conv._data_format)
    except (AttributeError, TypeError):
        return None


_slopes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # an activation layer -> its slope


def act_slope(act: nn.Layer) -> float:
    """The negative slope of a ReLU (0) or LeakyReLU layer (its ``_negative_slope``, where this Paddle
    keeps it; else measured once through its public forward, remembered for that layer object)."""
    if isinstance(act, nn.ReLU):
        return 0.0
    slope = getattr(act, "_negative_slope", None)
    if isinstance(slope, (int, float)) and not isinstance(slope, bool):
        return float(slope)
    if act not in _slopes:
        with paddle.no_grad():
            _slopes[act] = -float(act(paddle.to_tensor([-1.0], dtype="float32")).numpy()[0])
    return _slopes[act]


def unit_floats(obs: np.ndarray) -> paddle.Tensor:
    """uint8[B, C, H, W] -> float32 tensor [B, C, H, W] in [0, 1] (``/ 255``, per batch).

    On CPU with oneDNN the values are computed channels-last in numpy and handed to Paddle
    without a copy (DLPack); the tensor is their NCHW view, which the convolutions turn back
    into channels-last for free (much faster than Paddle's cast, divide and that transpose;
    docs/performance.md).
    Same values either way (on Paddle 2.6 within one unit in the last place); other dtypes take
    Paddle's own cast and division.
    """
    if obs.ndim == 4 and obs.dtype == np.uint8 and _HAS_DLPACK and onednn.available():  # available(): speed paths on
        # the capsule (Paddle 2.6 takes only that) owns a reference to the array: the memory stays valid
        return from_dlpack(onednn.unit_floats_channels_last(obs).__dlpack__()).transpose([0, 3, 1, 2])
    return paddle.to_tensor(obs).astype("float32") / 255.0


def standardize(
    x: paddle.Tensor, mean: paddle.Tensor, inv_std: paddle.Tensor, clip: float, in_place: bool = False
) -> paddle.Tensor:
    """``clip((x - mean) * inv_std, -clip, clip)``; ``in_place``: ``x`` is a temporary nobody else
    holds, so its buffer is reused (faster on CPU, same values; CPU speed paths only; docs/performance.md)."""
    if in_place and _HAS_INPLACE and switch.on(x, mean, inv_std):
        _C_ops.subtract_(x, mean)
        _C_ops.multiply_(x, inv_std)
        return _C_ops.clip_(x, -clip, clip)
    return paddle.clip((x - mean) * inv_std, -clip, clip)


def _act(z, slope):
    return _C_ops.relu(z) if slope == 0.0 else _C_ops.leaky_relu(z, slope)


def _plain_act(y, slope):
    return F.relu(y) if slope == 0.0 else F.leaky_relu(y, slope)


def _sum(tensors):
    """Left-to-right sum of per-shard gradients (fixed order: deterministic)."""
    total = tensors[0]
    for t in tensors[1:]:
        total = total + t
    return total


_HAS_ACT_GRADS = hasattr(_C_ops, "relu_grad") and hasattr(_C_ops, "leaky_relu_grad")  # not in Paddle 2.6


def _act_grad(out, grad, slope):
    # sign(out) == sign(pre-activation) for ReLU and for LeakyReLU with a positive slope
    if _HAS_ACT_GRADS:
        return _C_ops.relu_grad(out, grad) if slope == 0.0 else _C_ops.leaky_relu_grad(out, grad, slope)
    positive = (out > 0).astype(grad.dtype)
    return grad * positive if slope == 0.0 else grad * (positive + (1.0 - positive) * slope)


def _bias_grad(gy):
    """Sum of gy float32[N, C, H, W] over N, H, W as a matrix product (faster than Paddle's reduce)."""
    n, c = gy.shape[0], gy.shape[1]
    hw = gy.shape[2] * gy.shape[3]
    return paddle.matmul(gy.reshape([n, c, hw]), paddle.ones([hw, 1], dtype=gy.dtype)).sum(axis=0).reshape([c])


class _BiasAct(PyLayer):
    """out = act(y + bias[:, None, None]), act = ReLU (slope 0) or LeakyReLU(slope)."""

    @staticmethod
    def forward(ctx, y, bias, slope):
        out = _act(_C_ops.add(y, bias.reshape([y.shape[1], 1, 1])), slope)
        ctx.save_for_backward(out)
        ctx.slope = slope
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensor()
        gy = _act_grad(out, grad, ctx.slope)
        return gy, _bias_grad(gy)


def _conv_attrs(conv: nn.Conv2D):
    g = geometry(conv)
    if g is None or g.data_format != "NCHW":
        return None
    pad = g.padding
    if isinstance(pad, int):
        pad = [pad, pad]
    if not (isinstance(pad, (list, tuple)) and len(pad) == 2 and all(isinstance(p, int) for p in pad)):
        return None  # "SAME"/"VALID" strings or 4-sided padding: use the plain path
    return (g.stride, list(pad), "EXPLICIT", g.dilation, g.groups, "NCHW")


@paddle.jit.not_to_static  # plain Python when traced for export (common.cpu.predictor)
def conv_act(conv: nn.Conv2D, x: paddle.Tensor, slope: float = 0.0) -> paddle.Tensor:
    """``act(conv(x))`` for an NCHW ``nn.Conv2D`` with bias; act = ReLU (slope 0) or LeakyReLU.

    The plain layers when traced for export (``common.cpu.predictor``) and wherever the CPU speed
    paths are off (``common.cpu.switch``: a GPU run, ``PADDLE_CURIOSITY_PLAIN=1``)."""
    g = geometry(conv)
    if not paddle.in_dynamic_mode() or g is None or not switch.on(x, conv.weight):
        return _plain_act(conv(x), slope)
    y = F.conv2d(
        x,
        conv.weight,
        None,
        stride=g.stride,
        padding=g.padding,
        dilation=g.dilation,
        groups=g.groups,
        data_format=g.data_format,
    )
    if conv.bias is None or not _HAS_KERNELS:
        if conv.bias is not None:
            y = y + conv.bias.reshape([1, -1, 1, 1])
        return _plain_act(y, slope)
    if not paddle.is_grad_enabled() or (y.stop_gradient and conv.bias.stop_gradient):
        return _bias_act_(y, conv.bias.reshape([y.shape[1], 1, 1]), slope)
    return _BiasAct.apply(y, conv.bias, float(slope))


def _bias_act_(y, br, slope):
    """act(y + br) in place on a conv output y that nothing else holds (no autograd); br float32[C, 1, 1].

    In place because every fresh activation-sized buffer costs page faults (docs/performance.md).
    """
    _C_ops.add_(y, br)
    return _C_ops.relu_(y) if slope == 0.0 else _C_ops.leaky_relu_(y, slope)


def _shard_forward(w, b, attrs, slope, xs):
    """act(conv(x) + b) for every shard, one thread each; all inputs detached (no autograd here)."""
    br = b.reshape([w.shape[0], 1, 1])
    return sharding.run(lambda x: _bias_act_(_C_ops.conv2d(x, w, *attrs), br, slope), xs)


class _ShardedConvAct(PyLayer):
    """One conv + bias + activation layer over batch shards: forward(w, b, attrs, slope, *xs) -> outs."""

    @staticmethod
    def forward(ctx, w, b, attrs, slope, *xs):
        wd, bd = w.detach(), b.detach()
        outs = _shard_forward(wd, bd, attrs, slope, [x.detach() for x in xs])
        ctx.save_for_backward(wd, *xs, *outs)
        ctx.attrs, ctx.slope, ctx.n = attrs, slope, len(xs)
        ctx.need_dx = [not x.stop_gradient for x in xs]
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensor()
        w, xs, outs = saved[0], saved[1 : 1 + ctx.n], saved[1 + ctx.n :]
        attrs, slope = ctx.attrs, ctx.slope
        k = w.shape[2:]

        def one(i):
            gy = _act_grad(outs[i], grads[i] if grads[i] is not None else paddle.zeros_like(outs[i]), slope)
            x = xs[i].detach()
            if ctx.need_dx[i] or attrs[4] != 1 or attrs[3] != [1, 1]:
                dx, dw = _C_ops.conv2d_grad(x, w, gy, *attrs)
            else:  # no input gradient wanted: the weight gradient alone, as one batched GEMM
                cols = F.unfold(x, list(k), attrs[0], attrs[1])  # [n, C*kh*kw, L]
                dw = paddle.matmul(gy.reshape([gy.shape[0], gy.shape[1], -1]), cols, transpose_y=True)
                dx, dw = None, dw.sum(axis=0).reshape(w.shape)
            return (dx if ctx.need_dx[i] else None), dw, _bias_grad(gy)

        res = sharding.run(one, list(range(ctx.n)))
        return (_sum([r[1] for r in res]), _sum([r[2] for r in res]), *[r[0] for r in res])


def _contiguous(t):
    return t.contiguous() if hasattr(t, "is_contiguous") and not t.is_contiguous() else t


def dnnl_conv_specs(layers):
    """(cin, cout, k, stride, pad, slope) per ``(conv, slope)`` when ``common.cpu.onednn`` can run the
    layers (bias, NCHW, groups 1, square kernel, equal strides, no dilation, symmetric padding), else None."""
    specs = []
    for conv, slope in layers:
        w, pad = conv.weight, _conv_attrs(conv)
        if pad is None:
            return None
        k, (s, _, _, d, groups, _) = w.shape[2:], pad
        if conv.bias is None or groups != 1 or k[0] != k[1] or s[0] != s[1] or d != [1, 1] or pad[1][0] != pad[1][1]:
            return None
        specs.append((w.shape[1], w.shape[0], k[0], s[0], pad[1][0], float(slope)))
    return specs


def _dnnl_specs(layers, x):
    """``dnnl_conv_specs`` when this input can go to oneDNN at all (float32, it and the weights on the CPU,
    the library loaded). The tensors' own places decide, not the global device: a network built on a GPU
    and run after ``set_device("cpu")`` must not hand its device pointers to oneDNN."""
    on_cpu = switch.on(x, *(c.weight for c, _ in layers))
    if not (x.dtype == paddle.float32 and on_cpu and onednn.available()):
        return None
    return dnnl_conv_specs(layers)


def _dnnl_forward(specs, shards, x, params):
    """x float32[B, C, H, W] -> (x channels-last [B, H, W, C], every layer's output (channels-last) per
    shard), on oneDNN; params: the layers' weights and biases, detached."""
    xh = _contiguous(x.detach().transpose([0, 2, 3, 1]))
    _, h, w, c = xh.shape
    sample = c * h * w * 4  # bytes per input sample

    def run(shard):
        a, b = shard
        src, hh, ww, acts = xh.data_ptr() + a * sample, h, w, []
        for i, (cin, cout, k, st, pad, slope) in enumerate(specs):
            t, conv = onednn.conv_for(b - a, cin, hh, ww, cout, k, st, pad, slope)
            y = paddle.empty([b - a, conv.ho, conv.wo, cout], dtype="float32")
            conv.forward(t, src, params[2 * i].data_ptr(), params[2 * i + 1].data_ptr(), y.data_ptr())
            acts.append(y)
            src, hh, ww = y.data_ptr(), conv.ho, conv.wo
        return acts

    return xh, sharding.run(run, shards)


def _cat(tensors):
    return paddle.concat(tensors) if len(tensors) > 1 else tensors[0]


class _DnnlConvStack(PyLayer):
    """Every conv + bias + act layer of a stack on oneDNN (``common.cpu.onednn``), per batch shard.

    forward(specs, shards, keep, x, w0, b0, w1, b1, ...): x float32[B, C, H, W] (NCHW) -> the
    last layer's output float32[B, h, w, C'] **channels-last**, and with ``keep`` also layer
    ``keep``'s output (channels-last). The input is transposed to channels-last once and the
    activations stay so between layers (oneDNN has no fast kernels for NCHW convolutions:
    it falls back to its reference code); the caller transposes what it returns.
    """

    @staticmethod
    def forward(ctx, specs, shards, keep, x, *params):
        params = [p.detach() for p in params]
        xh, acts = _dnnl_forward(specs, shards, x, params)
        ctx.specs, ctx.shards, ctx.keep, ctx.need_dx = specs, shards, keep, not x.stop_gradient
        ctx.save_for_backward(xh, *params)
        ctx.acts = acts
        out = _cat([a[-1] for a in acts])
        return out if keep is None else (out, _cat([a[keep] for a in acts]))

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensor()
        xh, params = saved[0], saved[1:]
        specs, keep, acts = ctx.specs, ctx.keep, ctx.acts
        _, h, w, c = xh.shape
        sample = c * h * w * 4
        g_out = grads[0] if grads[0] is not None else paddle.zeros_like(_cat([a[-1] for a in acts]))
        g_keep = grads[1] if keep is not None and len(grads) > 1 else None

        def one(j):
            a, b = ctx.shards[j]
            n, shard = b - a, acts[j]
            g = g_out[a:b]
            hw_in = [(h, w)] + [tuple(t.shape[1:3]) for t in shard[:-1]]
            gws, gbs, gx = [None] * len(specs), [None] * len(specs), None
            for i in reversed(range(len(specs))):
                cin, cout, k, st, pad, slope = specs[i]
                if i == keep and g_keep is not None:
                    g = g + g_keep[a:b]
                gy = _act_grad(shard[i], g, slope)
                t, conv = onednn.conv_for(n, cin, hw_in[i][0], hw_in[i][1], cout, k, st, pad, slope)
                src = xh.data_ptr() + a * sample if i == 0 else shard[i - 1].data_ptr()
                gws[i] = paddle.empty(params[2 * i].shape, dtype="float32")
                gbs[i] = paddle.empty([cout], dtype="float32")
                conv.backward_weights(t, src, gy.data_ptr(), gws[i].data_ptr(), gbs[i].data_ptr())
                if i > 0:
                    g = paddle.empty([n, hw_in[i][0], hw_in[i][1], cin], dtype="float32")
                    conv.backward_data(t, gy.data_ptr(), params[2 * i].data_ptr(), g.data_ptr())
                elif ctx.need_dx:
                    gx = paddle.empty([n, h, w, cin], dtype="float32")
                    conv.backward_data(t, gy.data_ptr(), params[0].data_ptr(), gx.data_ptr())
            return gws, gbs, gx

        res = sharding.run(one, list(range(len(ctx.shards))))
        out = []
        for i in range(len(specs)):
            out += [_sum([r[0][i] for r in res]), _sum([r[1][i] for r in res])]
        dx = None
        if ctx.need_dx:
            dx = _cat([r[2] for r in res]).transpose([0, 3, 1, 2])
        ctx.acts = None
        return (dx, *out)


@paddle.jit.not_to_static  # plain Python when traced for export (common.cpu.predictor)
def conv_stack(layers, x: paddle.Tensor, keep: int | None = None):
    """Run ``act(conv(x))`` for each ``(conv, slope)`` in ``layers``; x float32[B, C, H, W] (NCHW).

    Returns the last output, or ``(last, output of layer keep)`` when ``keep`` is given.
    With ``set_num_shards(n)``, n > 1, on CPU, the batch runs as up to n shards on n threads,
    each of at least ``MIN_SHARD`` samples and ``MIN_SHARD_ELEMENTS`` input elements.
    """
    layers = list(layers)
    # small batches and small inputs: the thread hand-offs would cost more than they save
    n = min(sharding.count(), x.shape[0] // MIN_SHARD, math.prod(x.shape) // MIN_SHARD_ELEMENTS)
    specs = _dnnl_specs(layers, x) if paddle.in_dynamic_mode() and x.shape[0] > 0 else None
    if specs is not None:  # oneDNN: channels-last inside, NCHW out
        shards = sharding.ranges(x.shape[0], n)
        params = [p for conv, _ in layers for p in (conv.weight, conv.bias)]
        if paddle.is_grad_enabled() and not (x.stop_gradient and all(p.stop_gradient for p in params)):
            res = _DnnlConvStack.apply(specs, shards, keep, x, *params)
            res = (res,) if keep is None else res
        else:
            _, acts = _dnnl_forward(specs, shards, x, params)
            res = (_cat([a[-1] for a in acts]),) + (() if keep is None else (_cat([a[keep] for a in acts]),))
        res = [r.transpose([0, 3, 1, 2]) for r in res]
        return res[0] if keep is None else tuple(res)
    attrs = None
    if (
        n > 1
        and _HAS_KERNELS
        and paddle.in_dynamic_mode()
        and all(c.bias is not None for c, _ in layers)
        and switch.on(x, *(c.weight for c, _ in layers))
    ):
        attrs = [_conv_attrs(c) for c, _ in layers]
    if attrs is None or None in attrs:
        kept = None
        for i, (conv, slope) in enumerate(layers):
            x = conv_act(conv, x, slope)
            if i == keep:
                kept = x
        return x if keep is None else (x, kept)
    xs = [x[a:b] for a, b in sharding.ranges(x.shape[0], n)]
    grad = paddle.is_grad_enabled()
    kept = None
    for i, ((conv, slope), a) in enumerate(zip(layers, attrs)):
        if grad:
            xs = list(_ShardedConvAct.apply(conv.weight, conv.bias, a, float(slope), *xs))
        else:
            xs = _shard_forward(conv.weight.detach(), conv.bias.detach(), a, float(slope), xs)
        if i == keep:
            kept = paddle.concat(xs, axis=0)
    out = paddle.concat(xs, axis=0)
    return out if keep is None else (out, kept)


def fused_groups(seq):
    """The layers of ``seq`` in runs: ``[(conv, slope), ...]`` for consecutive NCHW Conv2D + ReLU/LeakyReLU
    pairs (slope 0 for ReLU), or a single other layer."""
    layers = list(seq)
    i = 0
    while i < len(layers):
        stack = []
        while (
            i + 1 < len(layers)
            and isinstance(layers[i], nn.Conv2D)
            and _conv_attrs(layers[i]) is not None
            and isinstance(layers[i + 1], (nn.ReLU, nn.LeakyReLU))
        ):
            stack.append((layers[i], act_slope(layers[i + 1])))
            i += 2
        if stack:
            yield stack
        else:
            yield layers[i]
            i += 1


@paddle.jit.not_to_static  # plain Python when traced for export (common.cpu.predictor)
def run_sequential(seq, x: paddle.Tensor) -> paddle.Tensor:
    """Run an ``nn.Sequential`` (or list of layers), fusing runs of NCHW Conv2D + ReLU/LeakyReLU pairs."""
    for group in fused_groups(seq):
        x = conv_stack(group, x) if isinstance(group, list) else run_layer(group, x)
    return x


@paddle.jit.not_to_static
def run_layer(layer, x: paddle.Tensor) -> paddle.Tensor:
    """``layer(x)``, through ``run_sequential`` for an ``nn.Sequential`` or a list of layers: the ``run``
    of a network's ``compute(x, run)`` in training (``common.cpu.native`` runs the same ``compute``
    on numpy)."""
    if isinstance(layer, (nn.Sequential, list, tuple)):
        return run_sequential(layer, x)
    return linear.linear(layer, x) if linear.applies(layer, x) else layer(x)
