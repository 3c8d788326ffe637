"""Convolutions on the oneDNN library that ships inside Paddle's CPU wheel, through its C API.

Paddle's dygraph CPU convolutions are per-sample im2col + small GEMMs, far below the CPU's
GEMM rate, and its own oneDNN kernels are only reached through Paddle Inference (forward
only, holding the GIL) or static programs that reorder every tensor between layouts around
each op (``docs/performance.md``). This module calls ``libdnnl.so.3`` directly with
``ctypes``: forward (bias and ReLU/LeakyReLU fused), backward-data and backward-weights (bias
gradient fused) primitives, with the activations kept channels-last (NHWC) from one layer to
the next so that nothing is reordered but the small weight tensors: faster per layer than
Paddle's own kernels, forward and backward (docs/performance.md).

``ctypes`` releases the GIL during each call, so the batch shards of ``common.cpu.fused``
still run on their own threads; every thread gets its own stream and primitives (oneDNN's
library-managed scratchpad is not shared safely between concurrent executions) and one
OpenMP thread.

Only what ``common.cpu.fused.conv_stack`` and the collection engine (``common.cpu.native``: also
matmul and a uint8 -> float32 channels-last reorder) need: float32, groups 1, no dilation,
symmetric integer padding. ``available()`` is False (and ``fused`` keeps Paddle's kernels) when
the library is missing, is not oneDNN 3.x, or a self-check against Paddle's convolution
fails.
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import paddle

from common.cpu import switch

# oneDNN 3.x C API constants (oneapi/dnnl/dnnl_types.h, dnnl_common_types.h)
_F32, _U8, _TAG_ANY, _CPU, _IN_ORDER = 3, 6, 1, 1, 1
_FORWARD_TRAINING, _CONV_DIRECT, _ELTWISE_RELU = 64, 0x1, 0x20
_Q_WEIGHTS_MD, _Q_DIFF_WEIGHTS_MD = 131, 132
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS = 1, 17, 33, 41
_ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS, _ARG_DIFF_BIAS = 129, 145, 161, 169

_P = ctypes.c_void_p
_DIMS = ctypes.c_int64 * 12


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int)]


_lib = None
_omp = None
_state = None  # None: not probed yet; True/False after the self-check
_local = threading.local()
_probe_lock = threading.Lock()


def _load():
    global _lib, _omp
    path = os.path.join(os.path.dirname(paddle.__file__), "libs", "libdnnl.so.3")
    if not os.path.exists(path):
        return False
    lib = ctypes.CDLL(path)
    lib.dnnl_version.restype = ctypes.POINTER(_Version)
    if lib.dnnl_version().contents.major != 3:
        return False
    lib.dnnl_primitive_desc_query_md.restype = _P
    lib.dnnl_primitive_desc_query_md.argtypes = [_P, ctypes.c_int, ctypes.c_int]
    lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
    lib.dnnl_memory_desc_get_size.argtypes = [_P]
    lib.dnnl_memory_create.argtypes = [ctypes.POINTER(_P), _P, _P, _P]
    lib.dnnl_memory_set_data_handle.argtypes = [_P, _P]
    lib.dnnl_primitive_execute.argtypes = [_P, _P, ctypes.c_int, ctypes.POINTER(_ExecArg)]
    lib.dnnl_stream_wait.argtypes = [_P]
    _lib = lib
    try:
        _omp = ctypes.CDLL("libgomp.so.1")  # the OpenMP runtime Paddle's oneDNN is built with
    except OSError:
        _omp = None
    return True


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"oneDNN {what} failed with status {status}")


def _thread():
    """Per-thread engine, stream and primitive cache; one OpenMP thread (the shards are the parallelism)."""
    t = getattr(_local, "t", None)
    if t is None:
        engine, stream = _P(), _P()
        _check(_lib.dnnl_engine_create(ctypes.byref(engine), _CPU, ctypes.c_size_t(0)), "engine")
        _check(_lib.dnnl_stream_create(ctypes.byref(stream), engine, ctypes.c_uint(_IN_ORDER)), "stream")
        if _omp is not None:
            _omp.omp_set_num_threads(1)
        t = _local.t = {"engine": engine, "stream": stream, "primitives": {}}
    return t


def _md(dims, strides, dtype=_F32):
    md = _P()
    _check(
        _lib.dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(dims), _DIMS(*dims), dtype, _DIMS(*strides)),
        "memory desc",
    )
    return md


def _md_any(dims):
    md = _P()
    _check(
        _lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(dims), _DIMS(*dims), _F32, _TAG_ANY), "memory desc"
    )
    return md


def _nchw(n, c, h, w, dtype=_F32):  # also the weights' OIHW layout
    return _md([n, c, h, w], [c * h * w, h * w, w, 1], dtype)


def _nhwc(n, c, h, w):
    return _md([n, c, h, w], [h * w * c, 1, w * c, c])


def _act_attr(slope):
    """A primitive attribute fusing ReLU (slope 0) or LeakyReLU (ReLU's alpha = the negative slope)."""
    post_ops, attr = _P(), _P()
    _check(_lib.dnnl_post_ops_create(ctypes.byref(post_ops)), "post-ops")
    _check(
        _lib.dnnl_post_ops_append_eltwise(post_ops, _ELTWISE_RELU, ctypes.c_float(slope), ctypes.c_float(0.0)),
        "eltwise post-op",
    )
    _check(_lib.dnnl_primitive_attr_create(ctypes.byref(attr)), "attr")
    _check(_lib.dnnl_primitive_attr_set_post_ops(attr, post_ops), "attr post-ops")
    return attr


def _cached(key, build):
    """This thread's primitive(s) under ``key``, built by ``build(t)`` on first use; and the thread state."""
    t = _thread()
    prim = t["primitives"].get(key)
    if prim is None:
        prim = t["primitives"][key] = build(t)
    return t, prim


def _primitive(pd):
    p = _P()
    _check(_lib.dnnl_primitive_create(ctypes.byref(p), pd), "primitive")
    return p


class _Bound:
    """A primitive with its memory objects made once: a call re-points only the buffers that moved
    (creating and destroying them on every call is a large share of a small batch's time;
    docs/performance.md)."""

    def __init__(self, t, prim, arg_mds):
        self.prim, self.stream, self.mems = prim, t["stream"], []
        for _, md in arg_mds:
            m = _P()
            _check(_lib.dnnl_memory_create(ctypes.byref(m), md, t["engine"], None), "memory")
            self.mems.append(m)
        self.ptrs = [None] * len(arg_mds)
        self.args = (_ExecArg * len(arg_mds))(*[_ExecArg(a, m) for (a, _), m in zip(arg_mds, self.mems)])

    def __call__(self, *ptrs):
        """Run on the buffers at ``ptrs`` (one per argument, in the constructor's order)."""
        for i, p in enumerate(ptrs):
            if p != self.ptrs[i]:
                _check(_lib.dnnl_memory_set_data_handle(self.mems[i], _P(p)), "memory handle")
                self.ptrs[i] = p
        _check(_lib.dnnl_primitive_execute(self.prim, self.stream, len(ptrs), self.args), "execute")
        _check(_lib.dnnl_stream_wait(self.stream), "stream wait")


class _Reorder:
    def __init__(self, t, src_md, dst_md):
        pd = _P()
        _check(
            _lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, t["engine"], dst_md, t["engine"], None),
            "reorder",
        )
        self.run = _Bound(t, _primitive(pd), [(_ARG_SRC, src_md), (_ARG_DST, dst_md)])
        self.size = _lib.dnnl_memory_desc_get_size(dst_md)

    def __call__(self, t, src_ptr, dst_ptr):
        self.run(src_ptr, dst_ptr)

    def into_new(self, t, src_ptr) -> np.ndarray:
        """The reordered tensor in a fresh buffer (kept alive by the caller while oneDNN reads it)."""
        buf = np.empty(self.size // 4 + 16, np.float32)
        self(t, src_ptr, buf.ctypes.data)
        return buf


class _Conv:
    """Primitives of one conv layer at one batch size; src and dst channels-last (NHWC), weights OIHW."""

    def __init__(self, t, n, cin, h, w, cout, k, stride, pad, slope):
        self.ho, self.wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        src = _nhwc(n, cin, h, w)
        dst = _nhwc(n, cout, self.ho, self.wo)
        w_any, w_user, bias = _md_any([cout, cin, k, k]), _nchw(cout, cin, k, k), _md([cout], [1])
        st, dil, pd_ = _DIMS(stride, stride), _DIMS(0, 0), _DIMS(pad, pad)
        fwd_pd = _P()
        _check(
            _lib.dnnl_convolution_forward_primitive_desc_create(
                ctypes.byref(fwd_pd),
                t["engine"],
                _FORWARD_TRAINING,
                _CONV_DIRECT,
                src,
                w_any,
                bias,
                dst,
                st,
                dil,
                pd_,
                pd_,
                _act_attr(slope),
            ),
            "convolution forward",
        )
        self.w_fwd = _P(_lib.dnnl_primitive_desc_query_md(fwd_pd, _Q_WEIGHTS_MD, 0))
        self.fwd = _Bound(
            t, _primitive(fwd_pd), [(_ARG_SRC, src), (_ARG_WEIGHTS, self.w_fwd), (_ARG_BIAS, bias), (_ARG_DST, dst)]
        )
        self.w_to_fwd = _Reorder(t, w_user, self.w_fwd)
        bwd_d_pd = _P()
        _check(
            _lib.dnnl_convolution_backward_data_primitive_desc_create(
                ctypes.byref(bwd_d_pd), t["engine"], _CONV_DIRECT, src, w_any, dst, st, dil, pd_, pd_, fwd_pd, None
            ),
            "convolution backward data",
        )
        self.w_bwd = _P(_lib.dnnl_primitive_desc_query_md(bwd_d_pd, _Q_WEIGHTS_MD, 0))
        self.bwd_data = _Bound(
            t, _primitive(bwd_d_pd), [(_ARG_DIFF_DST, dst), (_ARG_WEIGHTS, self.w_bwd), (_ARG_DIFF_SRC, src)]
        )
        self.w_to_bwd = _Reorder(t, w_user, self.w_bwd)
        bwd_w_pd = _P()
        _check(
            _lib.dnnl_convolution_backward_weights_primitive_desc_create(
                ctypes.byref(bwd_w_pd),
                t["engine"],
                _CONV_DIRECT,
                src,
                w_any,
                bias,
                dst,
                st,
                dil,
                pd_,
                pd_,
                fwd_pd,
                None,
            ),
            "convolution backward weights",
        )
        self.dw = _P(_lib.dnnl_primitive_desc_query_md(bwd_w_pd, _Q_DIFF_WEIGHTS_MD, 0))
        self.bwd_weights = _Bound(
            t,
            _primitive(bwd_w_pd),
            [(_ARG_SRC, src), (_ARG_DIFF_DST, dst), (_ARG_DIFF_WEIGHTS, self.dw), (_ARG_DIFF_BIAS, bias)],
        )
        self.dw_buf = np.empty(_lib.dnnl_memory_desc_get_size(self.dw) // 4 + 16, np.float32)  # this thread's
        self.dw_to_user = _Reorder(t, self.dw, w_user)

    def forward_weights(self, t, w_ptr) -> np.ndarray:
        """The OIHW weights at ``w_ptr`` in the forward primitive's layout (to reuse while they do not change)."""
        return self.w_to_fwd.into_new(t, w_ptr)

    def forward(self, t, x_ptr, w_ptr, b_ptr, y_ptr, wbuf=None):
        """``wbuf``: the weights from ``forward_weights``; else they are reordered from ``w_ptr`` now."""
        wbuf = self.w_to_fwd.into_new(t, w_ptr) if wbuf is None else wbuf
        self.fwd(x_ptr, wbuf.ctypes.data, b_ptr, y_ptr)

    def backward_data(self, t, gy_ptr, w_ptr, gx_ptr):
        wbuf = self.w_to_bwd.into_new(t, w_ptr)
        self.bwd_data(gy_ptr, wbuf.ctypes.data, gx_ptr)

    def backward_weights(self, t, x_ptr, gy_ptr, gw_ptr, gb_ptr):
        self.bwd_weights(x_ptr, gy_ptr, self.dw_buf.ctypes.data, gb_ptr)
        self.dw_to_user(t, self.dw_buf.ctypes.data, gw_ptr)


class _Linear:
    """Forward primitive of ``y = act(x @ w + b)`` at one batch size: x [n, k], w [k, m] (Paddle's Linear
    layout), b [m], y [n, m], all row-major float32; ``slope`` None for no activation, else (Leaky)ReLU."""

    def __init__(self, t, n, k, m, slope):
        src, wts, bias, dst = _md([n, k], [k, 1]), _md([k, m], [m, 1]), _md([1, m], [m, 1]), _md([n, m], [m, 1])
        attr = None if slope is None else _act_attr(slope)
        pd = _P()
        _check(
            _lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), t["engine"], src, wts, bias, dst, attr), "matmul"
        )
        self.run = _Bound(t, _primitive(pd), [(_ARG_SRC, src), (_ARG_WEIGHTS, wts), (_ARG_BIAS, bias), (_ARG_DST, dst)])

    def __call__(self, t, x_ptr, w_ptr, b_ptr, y_ptr):
        self.run(x_ptr, w_ptr, b_ptr, y_ptr)


def linear_for(n, k, m, slope) -> tuple:
    """This thread's ``_Linear`` for batch n, k -> m features, and the thread state to run it with."""
    slope = None if slope is None else float(slope)
    return _cached(("linear", n, k, m, slope), lambda t: _Linear(t, n, k, m, slope))


def u8_to_channels_last_for(n, c, h, w) -> tuple:
    """This thread's reorder of uint8[n, c, h, w] into float32[n, h, w, c] (values converted, not scaled)."""
    return _cached(("u8-nhwc", n, c, h, w), lambda t: _Reorder(t, _nchw(n, c, h, w, _U8), _nhwc(n, c, h, w)))


def unit_floats_channels_last(obs: np.ndarray) -> np.ndarray:
    """uint8[N, C, H, W] -> float32[N, H, W, C] = obs / 255 (the same values as Paddle's x / 255),
    channels-last as the convolutions take it: one oneDNN reorder and an in-place divide instead of
    Paddle's cast + divide + transpose (much faster, docs/performance.md; the same values bit for bit on
    Paddle 3, within one unit in the last place on Paddle 2.6, whose division kernel rounds differently)."""
    obs = np.ascontiguousarray(obs, dtype=np.uint8)
    n, c, h, w = obs.shape
    x = np.empty((n, h, w, c), np.float32)
    t, reorder = u8_to_channels_last_for(n, c, h, w)
    reorder(t, obs.ctypes.data, x.ctypes.data)
    np.divide(x, np.float32(255.0), out=x)
    return x


def conv_for(n, cin, h, w, cout, k, stride, pad, slope) -> tuple:
    """This thread's primitives for one layer (NHWC activations), and the thread state to run them with."""
    key = (n, cin, h, w, cout, k, stride, pad, float(slope))
    return _cached(("conv", *key), lambda t: _Conv(t, *key))


def _self_check() -> bool:
    """One small layer forward and backward against Paddle's kernels (guards the hard-coded C API constants)."""
    import paddle.nn.functional as F

    gen = np.random.default_rng(0)
    x_np = gen.random((2, 3, 9, 9), dtype=np.float32)
    x, xh = paddle.to_tensor(x_np), paddle.to_tensor(x_np.transpose(0, 2, 3, 1).copy())
    w = paddle.to_tensor(gen.random((4, 3, 3, 3), dtype=np.float32) - 0.5)
    b = paddle.to_tensor(gen.random(4, dtype=np.float32) - 0.5)
    ref = F.relu(F.conv2d(x, w, b, stride=2, padding=1))
    t, conv = conv_for(2, 3, 9, 9, 4, 3, 2, 1, 0.0)
    y = paddle.empty([2, conv.ho, conv.wo, 4], dtype="float32")
    conv.forward(t, xh.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr())
    if not np.allclose(y.numpy().transpose(0, 3, 1, 2), ref.numpy(), rtol=1e-4, atol=1e-5):
        return False
    gy = paddle.to_tensor(gen.random((2, conv.ho, conv.wo, 4), dtype=np.float32))
    gx, gw, gb = (paddle.empty(s, dtype="float32") for s in ([2, 9, 9, 3], [4, 3, 3, 3], [4]))
    conv.backward_data(t, gy.data_ptr(), w.data_ptr(), gx.data_ptr())
    conv.backward_weights(t, xh.data_ptr(), gy.data_ptr(), gw.data_ptr(), gb.data_ptr())
    gy_nchw = paddle.to_tensor(gy.numpy().transpose(0, 3, 1, 2).copy())
    # the reference gradients through Paddle's public autograd (conv2d_grad is not in Paddle 2.6's _C_ops)
    xr, wr = paddle.to_tensor(x_np, stop_gradient=False), paddle.to_tensor(w.numpy(), stop_gradient=False)
    (F.conv2d(xr, wr, stride=2, padding=1) * gy_nchw).sum().backward()
    return (
        np.allclose(gx.numpy().transpose(0, 3, 1, 2), xr.grad.numpy(), rtol=1e-4, atol=1e-5)
        and np.allclose(gw.numpy(), wr.grad.numpy(), rtol=1e-4, atol=1e-4)
        and np.allclose(gb.numpy(), gy_nchw.numpy().sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-4)
    )


def available() -> bool:
    """True when oneDNN 3.x loads from Paddle's wheel and passes the self-check (probed once, on the CPU).

    False, and not remembered, while the CPU speed paths are off (``common.cpu.switch``: the
    ``PADDLE_CURIOSITY_PLAIN`` switch, or Paddle's current device is not the CPU: the self-check's
    tensors would be made there, and oneDNN handed their device pointers would crash the process, a
    SIGSEGV no ``except`` catches)."""
    global _state
    if not switch.on():
        return False
    if _state is None:
        with _probe_lock:
            if _state is None:
                try:
                    # the check runs a backward pass: the first caller may be inside paddle.no_grad()
                    with paddle.set_grad_enabled(True):
                        _state = bool(_load() and hasattr(paddle.Tensor, "data_ptr") and _self_check())
                except Exception:  # an unexpected library: keep Paddle's kernels
                    _state = False
    return _state
