"""Image augmentations for SND-V's contrastive target training.

Every function takes a float32 batch ``x`` of shape ``[B, C, H, W]`` (observations on
the scale the SND-V target reads them: frames in [0, 1] as the authors augment them, or
per-pixel z-scores; a numpy array or a Paddle tensor)
and a ``numpy.random.Generator`` ``rng`` that draws every random decision, so an
augmentation is reproducible from the generator's state (which the intrinsic module
checkpoints). Each returns a float32 Paddle tensor of the same shape; the pixel work
runs in Paddle because it happens inside the update.

Each augmentation is applied to a sample independently with probability ``p``;
``p=0`` returns the input values unchanged. ``compose`` chains them and
``snd_v_augment`` is SND-V's default pipeline.

Sources: the tile mask (tile sizes 1, 2, 4, 8, 12, 16 px, each tile zeroed with
p=0.1) and the uniform noise (0.2 * U(-1, 1) on pixels in [0, 1]), both with p=0.5,
are in the SND authors' code (Iskandor/SND, ``SNDVEncoderAtari.augment``, on the raw
input before the target sees it); the SND paper and the Japanese SND article add a
random convolution filter, applied first: "random conv -> random tile mask -> uniform
noise". ``snd_v_augment`` is that pipeline for 84x84 pixels (docs/sources.md, section 4).

The authors use those sizes on 96x96 frames; here they are used unchanged on 84x84 Atari
frames. ``snd_v_augment_for(hw, value_max)`` sizes the same pipeline to another
observation: tile sizes and the random-conv kernel scale with the input's side relative
to 84 (a 7x7 MiniGrid view keeps only 1-cell tiles, and a kernel under 3 would not be a
spatial filter, so there is no random conv), and the noise is 0.2 of ``value_max`` (1 for
SND-V, whose inputs are frames in [0, 1] or z-scores: ``common.intrinsic.snd.SNDV``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import paddle
import paddle.nn.functional as F

TILE_SIZES = (1, 2, 4, 8, 12, 16)


def _as_tensor(x) -> paddle.Tensor:
    """numpy array or tensor -> float32 tensor of rank 4 (checked)."""
    t = x if isinstance(x, paddle.Tensor) else paddle.to_tensor(np.asarray(x, dtype=np.float32))
    if t.ndim != 4:
        raise ValueError(f"augmentations expect a [B, C, H, W] batch, got shape {list(t.shape)}")
    return t.astype("float32") if t.dtype != paddle.float32 else t


def _chosen(n: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """bool[n]: which samples get the augmentation (each independently with prob p)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    return rng.random(n) < p


def tile_mask(h: int, w: int, tile: int, tile_prob: float, rng: np.random.Generator) -> np.ndarray:
    """float32[h, w] keep-mask: the image cut into ``tile`` x ``tile`` squares, each 0 with prob ``tile_prob``.

    When ``tile`` does not divide the size, the partial squares at the right/bottom
    edge are tiles of their own (ceil(h / tile) x ceil(w / tile) tiles in all).
    """
    grid = rng.random((math.ceil(h / tile), math.ceil(w / tile))) >= tile_prob
    return np.repeat(np.repeat(grid, tile, axis=0), tile, axis=1)[:h, :w].astype(np.float32)


def random_tile_mask(
    x, rng: np.random.Generator, p: float = 0.5, tile_sizes=TILE_SIZES, tile_prob: float = 0.1
) -> paddle.Tensor:
    """Zero whole square tiles: per chosen sample (prob ``p``) one tile size is drawn
    from ``tile_sizes`` and each tile is zeroed with prob ``tile_prob``; the same
    mask covers all channels (the channels are a frame stack of one screen)."""
    x = _as_tensor(x)
    b, _, h, w = x.shape
    chosen = _chosen(b, p, rng)
    if not chosen.any():
        return x
    mask = np.ones((b, 1, h, w), dtype=np.float32)
    for i in np.flatnonzero(chosen):
        tile = int(tile_sizes[rng.integers(len(tile_sizes))])
        mask[i, 0] = tile_mask(h, w, tile, tile_prob, rng)
    return x * paddle.to_tensor(mask)


def uniform_noise(x, rng: np.random.Generator, p: float = 0.5, scale=0.2) -> paddle.Tensor:
    """Add ``scale * U(-1, 1)`` i.i.d. per pixel to each chosen sample (prob ``p``).

    ``scale``: a number, or one number per channel (float[C])."""
    x = _as_tensor(x)
    chosen = _chosen(x.shape[0], p, rng)
    if not chosen.any():
        return x
    scale = np.asarray(scale, dtype=np.float32)
    if scale.ndim == 1:  # per channel
        scale = scale[:, None, None]
    noise = np.zeros(x.shape, dtype=np.float32)
    noise[chosen] = scale * rng.uniform(-1.0, 1.0, size=(int(chosen.sum()),) + tuple(x.shape[1:]))
    return x + paddle.to_tensor(noise)


def random_conv(x, rng: np.random.Generator, p: float = 0.5, kernel: int = 5) -> paddle.Tensor:
    """Filter each chosen sample (prob ``p``) with a freshly drawn depthwise
    ``kernel`` x ``kernel`` convolution, zero "same" padding, shape kept.

    Weights are N(0, 1/kernel^2) (Xavier-normal for a depthwise filter, as in
    network randomization, Lee et al. 2020): the output of a unit-variance input has
    unit variance in expectation, so the filter changes texture, not scale. Every
    sample and channel gets its own filter (a grouped conv over B*C groups).
    """
    if kernel % 2 != 1:
        raise ValueError(f"kernel must be odd to keep the shape, got {kernel}")
    x = _as_tensor(x)
    b, c, h, w = x.shape
    chosen = _chosen(b, p, rng)
    if not chosen.any():
        return x
    idx = np.flatnonzero(chosen)
    k = len(idx)
    weight = (rng.standard_normal((k * c, 1, kernel, kernel)) / kernel).astype(np.float32)
    sel = paddle.to_tensor(idx)
    xs = paddle.gather(x, sel).reshape([1, k * c, h, w])
    ys = F.conv2d(xs, paddle.to_tensor(weight), padding=kernel // 2, groups=k * c).reshape([k, c, h, w])
    # unchosen samples keep their exact values
    return paddle.scatter(x, sel, ys, overwrite=True)


def compose(*fns):
    """Chain augmentations ``f(x, rng) -> x`` left to right; returns ``f(x, rng)``."""

    def pipeline(x, rng: np.random.Generator) -> paddle.Tensor:
        x = _as_tensor(x)
        for fn in fns:
            x = fn(x, rng)
        return x

    return pipeline


#: SND-V's default: random conv, tile mask, uniform noise, each with p=0.5 (see module doc).
snd_v_augment = compose(random_conv, random_tile_mask, uniform_noise)

#: the input side at which the sizes are used unchanged (the authors': 96, their Atari frames)
ATARI_SIDE = 84
NOISE_SHARE = 0.2
CONV_KERNEL = 5


def snd_v_sizes(side: int) -> dict:
    """``{"tile_sizes": (...), "kernel": k or 0}`` for a ``side`` x ``side`` input (0: no random conv)."""
    scale = side / ATARI_SIDE
    tiles = tuple(sorted({max(1, round(t * scale)) for t in TILE_SIZES}))
    k = 2 * round((CONV_KERNEL * scale - 1) / 2) + 1  # the nearest odd size
    return {"tile_sizes": tiles, "kernel": k if k >= 3 else 0}


def snd_v_augment_for(side: int, value_max=1.0):
    """SND-V's pipeline sized for a ``side`` x ``side`` input whose values span ``value_max``
    (a number, or one per channel): noise of 0.2 x ``value_max``."""
    sizes = snd_v_sizes(side)
    steps = [functools.partial(random_conv, kernel=sizes["kernel"])] if sizes["kernel"] else []
    steps += [
        functools.partial(random_tile_mask, tile_sizes=sizes["tile_sizes"]),
        functools.partial(uniform_noise, scale=NOISE_SHARE * np.asarray(value_max, np.float32)),
    ]
    return compose(*steps)
