"""The native collection engine: the policy's forward on oneDNN primitives + numpy (common/cpu/native.py)."""

import numpy as np
import paddle
import paddle.nn as nn
import pytest

from common import cpu
from common.cpu.native import NativeEngine
from common.nets import Net
from gridworld.model import GridPolicy
from mario.model import MARIO
from montezuma.model import RNDPolicy, SNDAuthorsPolicy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not cpu.available(), reason="this Paddle ships no usable oneDNN library"),
]


def reference(net, obs):
    with paddle.no_grad():
        return [t.numpy() for t in net(cpu.unit_floats(obs))]


def assert_close(outs, refs):
    assert [o.shape for o in outs] == [r.shape for r in refs]
    for o, r in zip(outs, refs):
        assert o.dtype == np.float32 and o.flags.c_contiguous
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5 * (1 + np.abs(r).max()))


class LeakyNet(Net):
    """Padded convolutions with LeakyReLU, a Flatten feeding a Linear + LeakyReLU, a plain ReLU, a
    residual, and an activation between a Flatten and its Linear: the other layer kinds and
    orders the engine knows."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(4, 8, 3, stride=2, padding=1),
            nn.LeakyReLU(0.2),
            nn.Conv2D(8, 8, 3, stride=1, padding=1),
            nn.LeakyReLU(0.2),
            nn.Flatten(),
            nn.Linear(8 * 6 * 6, 16),
            nn.LeakyReLU(0.1),
        )
        self.head = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        self.out = nn.Linear(16, 3)
        self.flat_act = nn.Sequential(
            nn.Conv2D(4, 4, 3, stride=3), nn.ReLU(), nn.Flatten(), nn.LeakyReLU(0.3), nn.Linear(4 * 4 * 4, 2)
        )

    def compute(self, x, run):
        h = run(self.features, x)
        return run(self.out, h + run(self.head, h)), run(self.features, x).sum(-1), run(self.flat_act, x)


@pytest.mark.parametrize(
    "net_cls,args",
    [(MARIO, (4, 7)), (RNDPolicy, (4, 18)), (SNDAuthorsPolicy, (4, 18)), (LeakyNet, ()), (GridPolicy, (7,))],
)
def test_engine_matches_the_network_at_any_batch_and_follows_refresh(net_cls, args):
    paddle.seed(3)
    net = net_cls(*args)
    shape = {LeakyNet: (4, 12, 12), GridPolicy: (3, 7, 7)}.get(net_cls, (4, 84, 84))
    high = 11 if net_cls is GridPolicy else 256  # MiniGrid's category codes
    obs = np.random.default_rng(0).integers(0, high, size=(9, *shape), dtype=np.uint8)
    assert NativeEngine.supports(net)
    engine = NativeEngine(net, shape)
    for n in (9, 1, 4, 9):  # new batch sizes build their primitives; old ones reuse theirs
        assert_close(engine(obs[:n]), reference(net, obs[:n]))
    with paddle.no_grad():
        for p in net.parameters():
            p.set_value(p * 1.5 + 0.01)
    stale = engine(obs)
    assert not np.allclose(stale[0], reference(net, obs)[0], rtol=1e-3, atol=1e-4)  # a copy until refresh()
    engine.refresh()
    assert_close(engine(obs), reference(net, obs))
    assert_close(engine(obs[:4]), reference(net, obs[:4]))


def test_networks_without_compute_or_with_unknown_layers_are_refused():
    class Plain(nn.Layer):  # a network written as a plain forward: nothing for the engine to run
        def forward(self, x):
            return x

    assert not NativeEngine.supports(Plain())
    with pytest.raises(TypeError, match="Plain has no compute"):
        NativeEngine(Plain(), (3, 7, 7))

    class Pooled(LeakyNet):
        def compute(self, x, run):
            return (run(nn.AvgPool2D(2), x),)

    with pytest.raises(TypeError, match="does not run AvgPool2D"):
        NativeEngine(Pooled(), (4, 12, 12))


def test_trainer_collection_native_matches_dygraph_and_repeats(tmp_path):
    """The default (--inference native) and --inference dygraph give the same rollout from one seed,
    and two native runs with that seed are identical."""
    from rollouts import assert_same_rollout, montezuma_rollout

    from montezuma.train import MontezumaConfig

    def rollout(inference, name):
        def check(tr):
            assert isinstance(tr.actor.engine, NativeEngine) == (inference == "native")

        return montezuma_rollout(tmp_path, name, check, inference=inference)

    assert MontezumaConfig().inference == "native"
    fast, again, plain = rollout("native", "a"), rollout("native", "b"), rollout("dygraph", "c")
    for k in fast:
        np.testing.assert_array_equal(fast[k], again[k], err_msg=k)
    assert_same_rollout(fast, plain)


def test_onednn_is_off_and_unprobed_while_the_device_is_not_the_cpu(monkeypatch):
    """Off the CPU the self-check would hand device pointers to oneDNN: available() says False without
    probing (and without remembering it), and on the CPU again it answers as before."""
    import paddle

    from common.cpu import onednn

    on_cpu = onednn.available()
    monkeypatch.setattr(paddle, "get_device", lambda: "gpu:0")
    monkeypatch.setattr(onednn, "_self_check", lambda: pytest.fail("probed off the CPU"))
    assert onednn.available() is False
    monkeypatch.undo()
    assert onednn.available() == on_cpu
