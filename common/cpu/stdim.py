"""SND-STD's score losses on the CPU, forward and backward on numpy.

``common.intrinsic.snd`` defines the ST-DIM losses with Paddle ops (``stdim_scores``,
``stdim_terms``): two batched matmuls to ``[P, N, N]`` score tensors, a cross-entropy over
each and the mean of their squares. On the CPU those ops cost SND-STD's target step about as
much as the target's convolutions: Paddle's CPU matmul and exp kernels are slower than numpy's
BLAS and ufuncs, and autograd adds a node per op (docs/performance.md, "SND-STD's score
losses"). ``stdim_losses`` computes the same three numbers and their gradients in one
``PyLayer`` (the gradients written out below), equal to the Paddle ops up to float rounding
(``tests/test_snd.py``). GPU runs use the Paddle ops.
"""

from __future__ import annotations

import numpy as np
import paddle
from paddle.autograd import PyLayer


def _softmax_terms(s: np.ndarray):
    """s float32[P, N, N] (anchor i, candidate j at location p) ->
    (mean over p, i of -log softmax_j(s)[i], mean of s^2, softmax over j float32[P, N, N])."""
    m = s.max(axis=2, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(axis=2, keepdims=True)
    log_sum = np.log(z[..., 0]) + m[..., 0]  # [P, N]
    diag = np.einsum("pii->pi", s)  # the positives' scores
    e /= z
    return float(log_sum.mean() - diag.mean()), float(np.vdot(s, s)) / s.size, e


def _score_grad(prob: np.ndarray, s: np.ndarray, d_ce: float, d_sq: float) -> np.ndarray:
    """d(d_ce * CE + d_sq * mean(s^2)) / ds, float32[P, N, N] (``prob``, the softmax, is reused)."""
    p, n, _ = s.shape
    g = prob * (d_ce / (p * n))
    idx = np.arange(n)
    g[:, idx, idx] -= d_ce / (p * n)
    g += s * (2.0 * d_sq / s.size)
    return g


class _StdimLosses(PyLayer):
    @staticmethod
    def forward(ctx, g, h, local_t):
        g, h = g.numpy(), h.numpy()
        lt = np.ascontiguousarray(local_t.numpy())
        p, n, c = lt.shape
        # scores_gl[p, i, j] = g[i] . lt[p, j]: one GEMM over all locations (a broadcast batched
        # matmul would leave BLAS)
        s_gl = np.ascontiguousarray((lt.reshape(p * n, c) @ g.T).reshape(p, n, n).transpose(0, 2, 1))
        s_ll = np.matmul(h, lt.transpose(0, 2, 1))
        ce_gl, sq_gl, prob_gl = _softmax_terms(s_gl)
        ce_ll, sq_ll, prob_ll = _softmax_terms(s_ll)
        ctx.saved = (g, h, lt, s_gl, s_ll, prob_gl, prob_ll)
        return tuple(paddle.to_tensor(np.float32(v)) for v in (ce_gl, ce_ll, sq_gl + sq_ll))

    @staticmethod
    def backward(ctx, d_gl, d_ll, d_sq):
        g, h, lt, s_gl, s_ll, prob_gl, prob_ll = ctx.saved
        ctx.saved = None
        p, n, c = lt.shape
        d_sq = float(d_sq)
        ds_gl = _score_grad(prob_gl, s_gl, float(d_gl), d_sq)
        ds_ll = _score_grad(prob_ll, s_ll, float(d_ll), d_sq)
        ds_gl_t = np.ascontiguousarray(ds_gl.transpose(0, 2, 1)).reshape(p * n, n)  # rows (p, j), columns i
        dg = ds_gl_t.T @ lt.reshape(p * n, c)
        dh = np.matmul(ds_ll, lt)
        dlt = (ds_gl_t @ g).reshape(p, n, c) + np.matmul(ds_ll.transpose(0, 2, 1), h)
        return paddle.to_tensor(dg), paddle.to_tensor(dh), paddle.to_tensor(dlt)


def stdim_losses(g: paddle.Tensor, h: paddle.Tensor, local_t: paddle.Tensor):
    """SND-STD's score losses, on numpy.

    Args:
        g: float32[N, C], ``W_g(global features of s_{t+1})``.
        h: float32[P, N, C], ``W_l(local features of s_{t+1})`` at each of the P locations.
        local_t: float32[P, N, C], local features of s_t.
    Returns:
        0-D float32 tensors ``(global_local, local_local, score_sq)``: the InfoNCE loss of
        ``scores_gl[p, i, j] = g[i] . local_t[p, j]``, that of
        ``scores_ll[p, i, j] = h[p, i] . local_t[p, j]`` (the positive of anchor i is
        candidate i), and ``mean(scores_gl^2) + mean(scores_ll^2)``.
    """
    return _StdimLosses.apply(g, h, local_t)
