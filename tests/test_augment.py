"""SND-V's augmentations (common/intrinsic/augment.py), real Paddle."""

import numpy as np
import paddle
import pytest

from common.intrinsic.augment import compose, random_conv, random_tile_mask, snd_v_augment, tile_mask, uniform_noise


def _batch(b=4, c=2, h=84, w=84, seed=0):
    # strictly positive so that a zero can only come from the mask
    return np.random.default_rng(seed).uniform(0.5, 2.0, size=(b, c, h, w)).astype(np.float32)


@pytest.mark.parametrize("fn", [random_tile_mask, uniform_noise, random_conv, snd_v_augment])
def test_p_zero_is_identity(fn):
    x = _batch()
    if fn is snd_v_augment:
        fn = compose(
            lambda x, r: random_conv(x, r, p=0.0),
            lambda x, r: random_tile_mask(x, r, p=0.0),
            lambda x, r: uniform_noise(x, r, p=0.0),
        )
        y = fn(x, np.random.default_rng(1))
    else:
        y = fn(x, np.random.default_rng(1), p=0.0)
    assert isinstance(y, paddle.Tensor) and y.dtype == paddle.float32
    np.testing.assert_array_equal(y.numpy(), x)


def test_tile_mask_all_tiles_zeroed():
    y = random_tile_mask(_batch(), np.random.default_rng(0), p=1.0, tile_prob=1.0).numpy()
    assert (y == 0).all()


@pytest.mark.parametrize("tile", [8, 16, 12])
def test_tile_mask_is_tile_aligned(tile):
    # 84 is not a multiple of 8 or 16: the partial edge tiles must behave as whole tiles
    x = _batch(b=6, c=3)
    y = random_tile_mask(x, np.random.default_rng(3), p=1.0, tile_sizes=(tile,), tile_prob=0.5).numpy()
    zero = y == 0
    assert (zero == zero[:, :1]).all(), "every channel shares one mask"
    for i in range(len(x)):
        for r in range(0, 84, tile):
            for c in range(0, 84, tile):
                block = zero[i, 0, r : r + tile, c : c + tile]
                assert block.all() or not block.any(), f"tile ({r},{c}) partly zeroed"
    kept = ~zero
    np.testing.assert_array_equal(y[kept], x[kept])
    assert 0.2 < zero[:, 0].mean() < 0.8


def test_tile_mask_partial_edge_tiles_are_tiles():
    m = tile_mask(10, 7, 4, 0.5, np.random.default_rng(0))
    assert m.shape == (10, 7)
    # 3 x 2 tiles (last row of tiles 2 px high, last column 3 px wide)
    for r in range(0, 10, 4):
        for c in range(0, 7, 4):
            blk = m[r : r + 4, c : c + 4]
            assert (blk == blk.flat[0]).all()


def test_tile_mask_per_sample_probability():
    y = random_tile_mask(
        _batch(b=200, c=1, h=16, w=16), np.random.default_rng(0), p=0.5, tile_sizes=(16,), tile_prob=1.0
    ).numpy()
    masked = (y.reshape(200, -1) == 0).all(axis=1)
    untouched = (y.reshape(200, -1) != 0).all(axis=1)
    assert (masked | untouched).all()
    assert 60 < masked.sum() < 140


def test_uniform_noise_bounded_and_per_sample():
    x = _batch(b=64, c=1, h=16, w=16)
    y = uniform_noise(x, np.random.default_rng(0), p=0.5, scale=0.2).numpy()
    diff = np.abs(y - x)
    assert diff.max() <= 0.2 + 1e-6
    changed = (diff.reshape(64, -1) > 0).any(axis=1)
    assert 15 < changed.sum() < 49
    np.testing.assert_array_equal(y[~changed], x[~changed])
    assert diff[changed].mean() > 0.05  # about scale / 2


def test_random_conv_keeps_shape_changes_values():
    x = _batch(b=4, c=3, h=20, w=24)
    y = random_conv(x, np.random.default_rng(0), p=1.0, kernel=5).numpy()
    assert y.shape == x.shape and np.isfinite(y).all()
    for i in range(4):
        assert not np.allclose(y[i], x[i])
    with pytest.raises(ValueError):
        random_conv(x, np.random.default_rng(0), p=1.0, kernel=4)


def test_random_conv_is_a_depthwise_same_padded_filter():
    # a single bright pixel: the output is non-zero only within kernel // 2 of it
    x = np.zeros((1, 2, 9, 9), np.float32)
    x[0, :, 4, 4] = 1.0
    y = random_conv(x, np.random.default_rng(0), p=1.0, kernel=3).numpy()
    outside = np.ones((9, 9), bool)
    outside[3:6, 3:6] = False
    assert (y[0][:, outside] == 0).all()
    assert not np.allclose(y[0, 0, 3:6, 3:6], y[0, 1, 3:6, 3:6])  # one filter per channel


def test_augmentations_are_reproducible_and_accept_tensors():
    x = _batch(b=8)
    a = snd_v_augment(paddle.to_tensor(x), np.random.default_rng(7)).numpy()
    b = snd_v_augment(x, np.random.default_rng(7)).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.shape == x.shape
    with pytest.raises(ValueError):
        uniform_noise(x[0], np.random.default_rng(0))


def test_compose_order():
    calls = []
    f = compose(lambda x, r: (calls.append("a"), x + 1)[1], lambda x, r: (calls.append("b"), x * 2)[1])
    y = f(np.zeros((1, 1, 2, 2), np.float32), np.random.default_rng(0)).numpy()
    assert calls == ["a", "b"] and (y == 2).all()
