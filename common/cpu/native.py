"""The policy's forward pass on numpy + oneDNN primitives, for collection on CPU (``--inference native``).

During collection the policy runs on small batches (Montezuma's 8 envs: 2 per call, one
call per pipeline group and step) beside the env workers, which hold the cores. At such batches
Paddle's dygraph spends more time per call dispatching its ~25 ops than computing them
(docs/performance.md). This engine runs the same network with none of that:

* the convolutions on ``common.cpu.onednn``'s primitives (bias + ReLU fused, channels-last,
  weights reordered once per refresh instead of once per call);
* the linear layers on oneDNN matmul primitives (bias and a following ReLU fused);
* the input in one oneDNN reorder (uint8 NCHW -> float32 NHWC) and an in-place ``/ 255``; the
  rest (residual adds, squeezes, layout changes) in numpy;
* one thread, no Paddle tensors, and the GIL released inside every oneDNN call.

The network's dataflow is written once, in its ``compute(x, run)`` method (the games' policy
networks have it): training calls it with ``common.cpu.run``, this engine with its
own ``run``, which knows ``nn.Sequential``, ``Conv2D``, ``Linear``, ``ReLU``, ``LeakyReLU`` and
``Flatten``. ``NativeEngine.supports(net)`` says whether a network qualifies; the constructor
also compares one random batch against the network (``tests/test_native.py``: equal within
float32 rounding, ~1e-6 relative).

``refresh()`` copies the current weights (PPO calls it on first use after an update); a call
on a batch size not seen before builds its primitives once.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn

from common.cpu import onednn
from common.cpu.fused import act_slope, dnnl_conv_specs, fused_groups, unit_floats

_ACTS = (nn.ReLU, nn.LeakyReLU)


class _Unsupported(TypeError):
    pass


class _ChannelsLast:
    """A float32[B, H, W, C] activation between convolutions (the layout they run in on oneDNN)."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray):
        self.a = a

    def nchw(self) -> np.ndarray:
        return np.ascontiguousarray(self.a.transpose(0, 3, 1, 2))


class _FlatChannelsLast:
    """A flattened ``_ChannelsLast`` float32[B, H*W*C], in its own (h, w, c) order: the Linear it feeds
    takes it with its weight rows permuted once (no transpose per call); anything else gets
    the NCHW order ``Flatten`` promises."""

    __slots__ = ("a", "hwc")

    def __init__(self, a: np.ndarray, hwc: tuple):
        self.a, self.hwc = a, hwc

    def nchw(self) -> np.ndarray:
        return np.ascontiguousarray(self.a.reshape(-1, *self.hwc).transpose(0, 3, 1, 2)).reshape(len(self.a), -1)


def _slope(act) -> float:
    return act_slope(act)


def _max_pool(layer: nn.MaxPool2D, x):
    """Non-overlapping max pooling (kernel == stride, no padding, sizes divisible), channels-last."""
    k = layer.ksize
    stride = layer.stride if layer.stride is not None else k
    if not (
        isinstance(k, int)
        and stride == k
        and layer.padding == 0
        and not layer.ceil_mode
        and layer.data_format == "NCHW"
    ):
        raise _Unsupported(f"MaxPool2D({k}, stride={stride}, padding={layer.padding})")
    a = x.a if isinstance(x, _ChannelsLast) else np.ascontiguousarray(_plain(x).transpose(0, 2, 3, 1))
    n, h, w, c = a.shape
    ho, wo = h // k, w // k  # floor, as Paddle: trailing rows/columns that do not fill a window are dropped
    return _ChannelsLast(a[:, : ho * k, : wo * k].reshape(n, ho, k, wo, k, c).max(axis=(2, 4)))


def _plain(x) -> np.ndarray:
    return x.nchw() if isinstance(x, (_ChannelsLast, _FlatChannelsLast)) else x


def _elementwise(fn, x):
    """``fn`` on the values of ``x``, keeping a channels-last wrapper's layout."""
    if isinstance(x, _ChannelsLast):
        return _ChannelsLast(fn(x.a))
    if isinstance(x, _FlatChannelsLast):
        return _FlatChannelsLast(fn(x.a), x.hwc)
    return fn(x)


class NativeEngine:
    """``engine(uint8[B, C, H, W])`` -> ``net``'s outputs as float32 numpy arrays, with the weights of
    the last ``refresh()``. Same interface as ``common.cpu.predictor.InferenceEngine``.

    Args:
        net: a network with ``compute(x, run)`` whose layers this engine knows (``supports``).
        obs_shape: (C, H, W) of one observation (for the construction-time check).
    """

    #: every batch size: no per-call overhead to amortize
    min_batch = 1

    @staticmethod
    def supports(net: nn.Layer) -> bool:
        """True when ``net`` has ``compute(x, run)`` (``common.nets.Net``) and oneDNN loads from Paddle's
        wheel; the constructor still raises if a layer turns out to be one this engine cannot run."""
        return callable(getattr(net, "compute", None)) and onednn.available()

    def __init__(self, net: nn.Layer, obs_shape):
        if not callable(getattr(net, "compute", None)):
            raise TypeError(f"{type(net).__name__} has no compute(x, run) method: the native engine cannot run it")
        if not onednn.available():
            raise RuntimeError(
                "the native engine needs the oneDNN library of Paddle's CPU wheel (common.cpu.available() is False)"
            )
        self.net = net
        self._layers = [m for m in net.sublayers(include_self=True) if isinstance(m, (nn.Linear, nn.Conv2D))]
        self._weights: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._conv_weights: dict[tuple[int, int], np.ndarray] = {}  # (layer, batch) -> reordered weights
        self._permuted: dict[tuple[int, tuple], np.ndarray] = {}  # (Linear, (h, w, c)) -> rows in that order
        self._steps: dict[int, list] = {}  # layer -> its plan (``_plan``)
        self.refresh()
        self._check(tuple(obs_shape))

    def refresh(self) -> None:
        """Copy the network's current weights (call after every weight change)."""
        self._weights = {}
        for m in self._layers:
            if m.bias is None:
                raise _Unsupported(f"{type(m).__name__} without a bias")
            self._weights[id(m)] = (
                np.ascontiguousarray(m.weight.numpy(), dtype=np.float32),
                np.ascontiguousarray(m.bias.numpy(), dtype=np.float32),
            )
        self._conv_weights.clear()
        self._permuted.clear()

    def __call__(self, obs: np.ndarray) -> list[np.ndarray]:
        """uint8[B, C, H, W] -> the network's outputs, float32 numpy arrays in its return order."""
        x = onednn.unit_floats_channels_last(obs)  # one reorder: faster than a numpy transpose (docs/performance.md)
        return [np.ascontiguousarray(_plain(o), dtype=np.float32) for o in self.net.compute(_ChannelsLast(x), self.run)]

    def close(self) -> None:
        """Drop the weight copies (the primitives stay cached per thread in ``common.cpu.onednn``)."""
        self._weights, self._conv_weights, self._permuted = {}, {}, {}

    # ------------------------------------------------------------------ the runner compute() calls
    def run(self, layer: nn.Layer, x):
        steps = self._steps.get(id(layer))
        if steps is None:
            steps = self._steps[id(layer)] = self._plan(layer)
        for step, arg in steps:
            x = step(arg, x)
        return x

    def _plan(self, layer: nn.Layer) -> list:
        """What ``run(layer, x)`` does, worked out once per layer: (method, argument) steps."""
        groups = list(fused_groups(layer)) if isinstance(layer, (nn.Sequential, list, tuple)) else [layer]
        steps, i = [], 0
        while i < len(groups):
            g = groups[i]
            if isinstance(g, list):
                specs = dnnl_conv_specs(g)
                if specs is None:
                    raise _Unsupported(f"a convolution oneDNN cannot run here: {g[0][0]}")
                steps.append((self._convs, list(zip([conv for conv, _ in g], specs))))
            elif isinstance(g, nn.Linear):
                fuse = i + 1 < len(groups) and isinstance(groups[i + 1], _ACTS)
                steps.append((self._linear, (g, _slope(groups[i + 1]) if fuse else None)))
                i += fuse
            else:
                steps.append((self._other, g))
            i += 1
        return steps

    def _convs(self, stack, x) -> _ChannelsLast:
        a = x.a if isinstance(x, _ChannelsLast) else np.ascontiguousarray(_plain(x).transpose(0, 2, 3, 1))
        n, h, w, _ = a.shape
        for conv, (cin, cout, k, stride, pad, slope) in stack:
            t, prim = onednn.conv_for(n, cin, h, w, cout, k, stride, pad, slope)
            weight, bias = self._weights[id(conv)]
            key = (id(conv), n)
            wbuf = self._conv_weights.get(key)
            if wbuf is None:
                wbuf = self._conv_weights[key] = prim.forward_weights(t, weight.ctypes.data)
            y = np.empty((n, prim.ho, prim.wo, cout), np.float32)
            prim.forward(t, a.ctypes.data, None, bias.ctypes.data, y.ctypes.data, wbuf=wbuf)
            a, h, w = y, prim.ho, prim.wo
        return _ChannelsLast(a)

    def _linear(self, layer_slope, x) -> np.ndarray:
        layer, slope = layer_slope
        weight, bias = self._weights[id(layer)]
        if isinstance(x, _FlatChannelsLast):
            a, key = x.a, (id(layer), x.hwc)
            if key not in self._permuted:
                h, w, c = x.hwc
                self._permuted[key] = np.ascontiguousarray(
                    weight.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(h * w * c, -1)
                )
            weight = self._permuted[key]
        else:
            a = np.ascontiguousarray(_plain(x), dtype=np.float32)
        if a.ndim != 2:
            raise _Unsupported(f"Linear on a {a.ndim}-D input")
        t, prim = onednn.linear_for(a.shape[0], weight.shape[0], weight.shape[1], slope)
        y = np.empty((a.shape[0], weight.shape[1]), np.float32)
        prim(t, a.ctypes.data, weight.ctypes.data, bias.ctypes.data, y.ctypes.data)
        return y

    @staticmethod
    def _other(layer: nn.Layer, x):
        """The layers with no weights: activations, Flatten, MaxPool2D, and any layer with ``forward_numpy``."""
        if isinstance(layer, _ACTS):
            slope = np.float32(_slope(layer))
            return _elementwise(lambda a: np.maximum(a, 0) if slope == 0 else np.where(a > 0, a, a * slope), x)
        if isinstance(layer, nn.Tanh):
            return _elementwise(np.tanh, x)
        if isinstance(layer, nn.MaxPool2D):
            return _max_pool(layer, x)
        if callable(getattr(layer, "forward_numpy", None)):  # e.g. gridworld's one-hot decoder (NCHW in, NCHW out)
            return np.ascontiguousarray(layer.forward_numpy(_plain(x)), dtype=np.float32)
        if isinstance(layer, nn.Flatten) and layer.start_axis == 1 and layer.stop_axis == -1:
            if isinstance(x, _ChannelsLast):
                return _FlatChannelsLast(x.a.reshape(len(x.a), -1), x.a.shape[1:])
            a = _plain(x)
            return a.reshape(a.shape[0], -1)
        raise _Unsupported(f"the native engine does not run {type(layer).__name__}")

    def _check(self, obs_shape) -> None:
        """Outputs on one random batch equal the network's within float32 rounding, else raise."""
        obs = np.random.default_rng(0).integers(0, 256, (3, *obs_shape), dtype=np.uint8)
        got = self(obs)
        with paddle.no_grad():
            ref = [r.numpy() for r in self.net(unit_floats(obs))]
        for i, (g, r) in enumerate(zip(got, ref)):
            if g.shape != r.shape or not np.allclose(g, r, rtol=1e-4, atol=1e-5 * (1 + np.abs(r).max())):
                raise RuntimeError(
                    f"native engine output {i} differs from the network's "
                    f"(max abs difference {np.abs(g - r).max() if g.shape == r.shape else g.shape})"
                )
