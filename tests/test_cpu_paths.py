"""Edges of the CPU speed paths (common/cpu/fused.py) where they must step aside or agree with the layers."""

import gc

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from common.cpu import fused, unit_floats


def test_act_slope_is_each_layers_own_slope():
    """Read per layer object: a new LeakyReLU that reuses a freed one's id does not get its slope."""
    for slope in (0.2, 0.01, 0.3):
        act = nn.LeakyReLU(slope)
        assert fused.act_slope(act) == np.float32(slope) or abs(fused.act_slope(act) - slope) < 1e-7
        del act
        gc.collect()
    assert fused.act_slope(nn.ReLU()) == 0.0
    act = nn.LeakyReLU(0.2)
    assert abs(fused.act_slope(act) - 0.2) < 1e-7
    act._negative_slope = 0.1  # read from the layer each time: no answer kept under an id that a new layer may reuse
    assert abs(fused.act_slope(act) - 0.1) < 1e-7

    class Leaky(nn.Layer):  # no _negative_slope: measured through its forward
        def forward(self, x):
            return F.leaky_relu(x, 0.05)

    assert abs(fused.act_slope(Leaky()) - 0.05) < 1e-7


def test_a_padding_mode_other_than_zeros_runs_as_the_layer():
    paddle.seed(0)
    conv = nn.Conv2D(3, 4, 3, padding=1, padding_mode="reflect")
    assert fused.geometry(conv) is None
    x = paddle.rand([5, 3, 9, 9])
    with paddle.no_grad():
        np.testing.assert_allclose(
            fused.conv_stack([(conv, 0.0)], x).numpy(), F.relu(conv(x)).numpy(), rtol=1e-5, atol=1e-6
        )


def test_an_empty_batch_and_non_uint8_inputs_take_the_plain_way():
    from mario.model import MARIO

    paddle.seed(0)
    net = MARIO(4, 7)
    if not paddle.__version__.startswith("2."):  # Paddle 2.6's own convolution refuses an empty batch
        with paddle.no_grad():
            out = net(unit_floats(np.zeros((0, 4, 84, 84), np.uint8)))
        assert [list(t.shape) for t in out] == [[0, 7], [0], [0]]
    wide = np.full((1, 1, 2, 2), 300, np.int64)  # not uint8: divided as it is, never cast to uint8 first
    np.testing.assert_allclose(unit_floats(wide).numpy(), 300 / 255, rtol=1e-6)
