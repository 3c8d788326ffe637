"""``common.optim.adam``: the merged Adam update is plain Adam's, and it resumes from a checkpoint exactly."""

from __future__ import annotations

import re

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
import paddle.nn as nn  # noqa: E402

from common.optim import adam  # noqa: E402
from common.run.checkpoint import copy_state, optimizer_state, set_optimizer_state  # noqa: E402


def _net():
    paddle.seed(0)
    return nn.Sequential(
        nn.Conv2D(4, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 32), nn.ReLU(), nn.Linear(32, 5)
    )


def _step(net, opt, rng):
    x = paddle.to_tensor(rng.standard_normal((16, 4, 8, 8)).astype("float32"))
    (net(x) ** 2).mean().backward()
    opt.step()
    opt.clear_grad()


@pytest.mark.parametrize("clip", [None, 0.5], ids=["no-clip", "clip-0.5"])
def test_merged_adam_follows_plain_adam(clip):
    runs = []
    for merged in (True, False):
        net = _net()
        kw = {"grad_clip": nn.ClipGradByGlobalNorm(clip)} if clip else {}
        if merged:
            opt = adam(net.parameters(), 1e-3, epsilon=1e-7, **kw)
        else:
            opt = paddle.optimizer.Adam(learning_rate=1e-3, parameters=net.parameters(), epsilon=1e-7, **kw)
        rng = np.random.default_rng(1)
        for _ in range(30):
            _step(net, opt, rng)
        runs.append([p.numpy() for p in net.parameters()])
    start = [p.numpy() for p in _net().parameters()]
    for merged, plain, p0 in zip(*runs, start):
        assert np.abs(plain - p0).max() > 1e-3  # the steps moved the weights
        np.testing.assert_allclose(merged, plain, rtol=0, atol=1e-6)


def test_merged_adam_resumes_from_its_state_exactly():
    """Ten steps, a checkpoint of weights + optimizer state, ten more: the same as twenty straight."""
    a = _net()
    opt_a = adam(a.parameters(), 1e-2, grad_clip=nn.ClipGradByGlobalNorm(0.5))
    rng = np.random.default_rng(0)
    for _ in range(10):
        _step(a, opt_a, rng)
    weights, state, rng_state = copy_state(a.state_dict()), copy_state(optimizer_state(opt_a)), rng.bit_generator.state
    for _ in range(10):
        _step(a, opt_a, rng)
    b = _net()
    b.set_state_dict(weights)
    opt_b = adam(b.parameters(), 1e-2, grad_clip=nn.ClipGradByGlobalNorm(0.5))
    set_optimizer_state(opt_b, state)
    rng.bit_generator.state = rng_state
    for _ in range(10):
        _step(b, opt_b, rng)
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_a_reset_optimizers_state_resumes_in_a_fresh_optimizer():
    """A second Adam over the same parameters (a reset, e.g. after update 1 is rolled back) names its
    moments ``..._moment1_1``; the next process's first Adam names them ``..._0``. The saved state
    carries neither counter, so it loads into a fresh optimizer, and back into the reset one."""
    a = _net()
    rng = np.random.default_rng(0)
    _step(a, adam(a.parameters(), 1e-2), rng)
    opt_a = adam(a.parameters(), 1e-2)  # the reset
    for _ in range(3):
        _step(a, opt_a, rng)
    assert any(key.endswith("_moment1_1") for key in opt_a.state_dict())  # Paddle's counter moved on
    weights, state, rng_state = copy_state(a.state_dict()), copy_state(optimizer_state(opt_a)), rng.bit_generator.state
    assert not [key for key in state if re.search(r"_\d+$", key)], sorted(state)
    for _ in range(3):
        _step(a, opt_a, rng)
    after = [p.numpy() for p in a.parameters()]

    def replays(net, opt):  # the saved state loaded into (net, opt): the same three steps follow
        net.set_state_dict(weights)
        set_optimizer_state(opt, state)
        rng.bit_generator.state = rng_state
        for _ in range(3):
            _step(net, opt, rng)
        for p, q in zip(after, net.parameters()):
            np.testing.assert_array_equal(p, q.numpy())
        return opt

    b = _net()
    replays(b, adam(b.parameters(), 1e-2))  # a fresh network and optimizer, as in the next process
    c = replays(a, adam(a.parameters(), 1e-2))  # a third Adam over a's parameters, loaded before its first step
    assert any(key.endswith("_moment1_2") for key in c.state_dict())
    replays(a, opt_a)  # and a rollback into the reset optimizer itself
