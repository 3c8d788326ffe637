"""The optimized update path computes the same losses and gradients as a plain eager path.

Optimized: the networks' fused conv + bias + activation (``common/cpu/fused.py``), run whole
and as batch shards on threads (``set_num_shards``), the PPO
loss with ``log_softmax`` + ``take_along_axis``, the predictor trained on its share with the
target under ``no_grad``. Reference: the same parameters run through the plain Paddle
layers (``Conv2D`` then ``ReLU``/``LeakyReLU``), and the tutorial's ``Categorical`` +
``tril``/``triu`` log-probabilities.
"""

from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
import paddle.nn.functional as F  # noqa: E402

import common.cpu as cpu  # noqa: E402
import common.cpu.fused as fast_ops  # noqa: E402
import common.cpu.onednn as onednn_conv  # noqa: E402
from common.cpu import switch  # noqa: E402
from common.cpu.fused import conv_act, conv_stack, run_sequential, set_num_shards  # noqa: E402
from common.intrinsic import make_intrinsic  # noqa: E402
from common.intrinsic.networks import ConvFeatureNet  # noqa: E402
from common.ppo.update import PPO, log_prob_entropy  # noqa: E402
from mario.model import MARIO  # noqa: E402
from montezuma.model import RNDPolicy, SNDAuthorsPolicy  # noqa: E402

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers
# tests of a speed path itself; the rest also run with the switch off (CI's plain-route leg, docs/gpu.md)
fast_only = pytest.mark.skipif(not switch.enabled(), reason="PADDLE_CURIOSITY_PLAIN=1 turns the CPU speed paths off")

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(params=[1, 2], ids=["whole", "2-shards"])
def shards(request, monkeypatch):
    """Run each test with the batch whole and split into 2 shards on 2 threads (even tiny batches)."""
    monkeypatch.setattr(fast_ops, "MIN_SHARD", 1)
    monkeypatch.setattr(fast_ops, "MIN_SHARD_ELEMENTS", 1)
    old = set_num_shards(request.param)
    yield request.param
    set_num_shards(old)


def _plain_run(layer, x):
    """Every layer called as is, one after another: the plain Paddle layers, no fusing, no shards."""
    for m in layer if isinstance(layer, (list, tuple, paddle.nn.Sequential)) else [layer]:
        x = m(x)
    return x


def _plain_stack(layers, x, keep=None):
    """``conv_stack``'s reference: conv then activation per layer, on the plain layers."""
    kept = None
    for i, (conv, slope) in enumerate(layers):
        x = F.leaky_relu(conv(x), slope)
        kept = x if i == keep else kept
    return x if keep is None else (x, kept)


def _plain(monkeypatch):
    """Route every network (``common.nets.Net``) through the plain layers (the reference eager path)."""
    monkeypatch.setattr(cpu, "run", _plain_run)


def _batch(rng, n=24, actions=7):
    obs = rng.integers(0, 256, size=(n + 1, 4, 84, 84), dtype=np.uint8)
    return {
        "obs": obs[:-1],
        "next_obs": obs[1:],
        "actions": rng.integers(0, actions, n).astype(np.int64),
        "log_probs": np.full(n, -np.log(actions), np.float32) + rng.normal(0, 0.1, n).astype(np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "ret_ext": rng.normal(size=n).astype(np.float32),
        "ret_int": rng.normal(size=n).astype(np.float32),
        "dones": np.zeros(n, np.float32),
    }


def _grads(layer):
    """Gradients by structured name (generated parameter names differ between two builds)."""
    return {k: p.grad.numpy().copy() for k, p in layer.named_parameters() if p.grad is not None}


def _ppo_and_rnd_step(batch):
    """Losses and gradients of one minibatch: PPO on the policy, distillation on the predictor."""
    paddle.seed(0)
    policy = MARIO(4, 7)
    from mario.rnd_model import make_rnd_networks

    rnd = make_intrinsic(
        "rnd",
        lambda c: make_rnd_networks(c),
        (4, 84, 84),
        4,
        lr=1e-4,
        update_proportion=0.25,
        max_grad_norm=0.5,
        seed=1,
    )
    rnd.observe(batch["obs"])
    ppo = PPO(policy, lr=4e-5, epsilon=0.2, beta=0.01, vf_coef=1.0, max_grad_norm=0.5)
    total, terms = ppo.loss(batch)
    total.backward()
    x = rnd.normalize(batch["next_obs"][rnd._subset(len(batch["next_obs"]))])
    with paddle.no_grad():
        target = rnd.target(x)
    fwd = ((rnd.predictor(x) - target) ** 2).mean()
    fwd.backward()
    losses = {"total": float(total), "forward": float(fwd), **{k: float(v) for k, v in terms.items()}}
    return losses, _grads(policy), _grads(rnd.predictor)


def test_ppo_rnd_losses_and_gradients_match_plain_path(monkeypatch, shards):
    batch = _batch(np.random.default_rng(0))
    fast = _ppo_and_rnd_step(batch)
    _plain(monkeypatch)
    ref = _ppo_and_rnd_step(batch)
    for k in ref[0]:
        assert fast[0][k] == pytest.approx(ref[0][k], rel=RTOL, abs=ATOL), k
    for f, r in ((fast[1], ref[1]), (fast[2], ref[2])):
        assert f.keys() == r.keys() and f
        for name in r:
            np.testing.assert_allclose(f[name], r[name], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("net_cls", [RNDPolicy, SNDAuthorsPolicy])
def test_montezuma_policy_fused_matches_plain(monkeypatch, shards, net_cls):
    paddle.seed(3)
    net = net_cls(4, 18)
    x = paddle.rand([6, 4, 84, 84])
    outs = [o.numpy() for o in net(x)]
    sum(o.sum() for o in net(x)).backward()
    g = _grads(net)
    net.clear_gradients()
    _plain(monkeypatch)
    ref = [o.numpy() for o in net(x)]
    sum(o.sum() for o in net(x)).backward()
    for a, b in zip(outs, ref):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    for name, v in _grads(net).items():
        np.testing.assert_allclose(g[name], v, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("slope", [0.0, 0.01])
def test_conv_act_matches_layers(slope, shards):
    paddle.seed(5)
    conv = paddle.nn.Conv2D(4, 8, 3, stride=2, padding=1)
    x = paddle.rand([3, 4, 20, 20])
    x.stop_gradient = False
    y = conv_act(conv, x, slope)
    (y * y).sum().backward()
    fast = [y.numpy(), x.grad.numpy(), conv.weight.grad.numpy(), conv.bias.grad.numpy()]
    x.clear_gradient()
    conv.clear_gradients()
    y = F.leaky_relu(conv(x), slope) if slope else F.relu(conv(x))
    (y * y).sum().backward()
    for a, b in zip(fast, [y.numpy(), x.grad.numpy(), conv.weight.grad.numpy(), conv.bias.grad.numpy()]):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    with paddle.no_grad():  # the inference path skips the PyLayer
        np.testing.assert_allclose(conv_act(conv, x, slope).numpy(), fast[0], rtol=RTOL, atol=ATOL)
    seq = paddle.nn.Sequential(conv, paddle.nn.LeakyReLU(slope) if slope else paddle.nn.ReLU())
    np.testing.assert_allclose(run_sequential(seq, x).numpy(), fast[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("batch", [1, 5])
def test_conv_stack_shards_match_layers(batch, monkeypatch):
    """Uneven shards (5 = 2 + 2 + 1), a single sample, input gradients through a stack, and the kept map."""
    monkeypatch.setattr(fast_ops, "MIN_SHARD", 1)
    monkeypatch.setattr(fast_ops, "MIN_SHARD_ELEMENTS", 1)
    paddle.seed(7)
    convs = [
        paddle.nn.Conv2D(4, 8, 8, stride=4),
        paddle.nn.Conv2D(8, 16, 3, stride=2, padding=1),
        paddle.nn.Conv2D(16, 16, 3, stride=1),
    ]
    layers = [(convs[0], 0.01), (convs[1], 0.0), (convs[2], 0.01)]
    x = paddle.rand([batch, 4, 36, 36])
    results = []
    for n in (1, 3):
        old = set_num_shards(n)
        try:
            for needs_x_grad in (False, True):
                xx = x.detach()
                xx.stop_gradient = not needs_x_grad
                out, kept = conv_stack(layers, xx, keep=1)
                ((out * out).sum() + kept.sum()).backward()
                results.append(
                    [out.numpy(), kept.numpy()]
                    + [p.grad.numpy() for c in convs for p in (c.weight, c.bias)]
                    + ([xx.grad.numpy()] if needs_x_grad else [])
                )
                for c in convs:
                    c.clear_gradients()
            with paddle.no_grad():
                results.append([conv_stack(layers, x)])
        finally:
            set_num_shards(old)
    xx = x.detach()
    xx.stop_gradient = False
    out, kept = _plain_stack(layers, xx, keep=1)
    ((out * out).sum() + kept.sum()).backward()
    ref = [out.numpy(), kept.numpy()] + [p.grad.numpy() for c in convs for p in (c.weight, c.bias)] + [xx.grad.numpy()]
    for got in results:
        for a, b in zip(got, ref):
            np.testing.assert_allclose(np.asarray(a), b, rtol=RTOL, atol=ATOL)


@fast_only
@pytest.mark.parametrize("kernels", ["paddle", "onednn"])
def test_small_batches_are_not_split(monkeypatch, kernels):
    """Shards need MIN_SHARD samples and MIN_SHARD_ELEMENTS input elements each (hand-offs cost more)."""
    calls = []
    if kernels == "paddle":
        monkeypatch.setattr(fast_ops, "_dnnl_specs", lambda layers, x: None)
        monkeypatch.setattr(fast_ops, "_shard_forward", lambda *a: calls.append(len(a[-1])) or a[-1])
    else:
        if not onednn_conv.available():
            pytest.skip("no oneDNN in this Paddle")
        real = fast_ops._dnnl_forward
        monkeypatch.setattr(
            fast_ops,
            "_dnnl_forward",
            lambda specs, shards, *a: calls.append(len(shards) if len(shards) > 1 else None) or real(specs, shards, *a),
        )
    conv = paddle.nn.Conv2D(4, 8, 3)
    side = 64  # 4 x 64 x 64 = 16,384 elements per sample
    per_sample = 4 * side * side
    enough = max(2 * fast_ops.MIN_SHARD, -(-2 * fast_ops.MIN_SHARD_ELEMENTS // per_sample))
    old = set_num_shards(2)
    try:
        with paddle.no_grad():
            conv_stack([(conv, 0.0)], paddle.rand([2 * fast_ops.MIN_SHARD - 1, 4, side, side]))
            conv_stack([(conv, 0.0)], paddle.rand([64, 4, 7, 7]))  # many samples, tiny inputs (MiniGrid)
            assert [c for c in calls if c is not None] == []
            conv_stack([(conv, 0.0)], paddle.rand([enough, 4, side, side]))
            # Paddle's own kernels are sharded only where Paddle has the fused kernels' pieces (not 2.6)
            split = kernels == "onednn" or fast_ops._HAS_KERNELS
            assert [c for c in calls if c is not None] == ([2] if split else [])
    finally:
        set_num_shards(old)


def test_set_num_shards_rejects_zero():
    with pytest.raises(ValueError, match="got 0"):
        set_num_shards(0)


@pytest.mark.skipif(
    not paddle.__version__.startswith("3"),
    reason="the tutorial's tril/triu trick needs Paddle 3's "
    "Categorical.log_prob, which returns [N, N] for [N] actions (2.6 refuses the shapes)",
)
def test_log_prob_matches_tutorial_tril_triu():
    """The tutorial's Categorical(softmax) + tril/triu diagonal equals log_softmax + take_along_axis."""
    from paddle.distribution import Categorical

    rng = np.random.default_rng(0)
    logits = paddle.to_tensor(rng.normal(size=(10, 7)).astype(np.float32))
    actions = paddle.to_tensor(rng.integers(0, 7, 10).astype(np.int64))
    lp = Categorical(F.softmax(logits, axis=-1)).log_prob(actions)
    lp = paddle.sum(paddle.tensor.triu(paddle.tensor.tril(lp)), axis=1)
    ours, ent = log_prob_entropy(logits, actions)
    np.testing.assert_allclose(ours.numpy(), lp.numpy(), rtol=1e-5, atol=1e-6)
    tut_ent = Categorical(F.softmax(logits, axis=-1)).entropy()  # the tutorial's entropy (softmax applied twice)
    assert tut_ent.shape == ent.shape


@fast_only
def test_onednn_stack_is_used_and_matches_paddle_kernels(monkeypatch):
    """The oneDNN stack (common/cpu/onednn.py) runs on this CPU and gives Paddle's kernels' outputs and
    gradients, with and without gradients, whole and in shards, ReLU and LeakyReLU, with the kept map."""
    if not onednn_conv.available():
        pytest.skip("no oneDNN in this Paddle")
    used = []
    real = fast_ops._dnnl_forward
    monkeypatch.setattr(
        fast_ops, "_dnnl_forward", lambda specs, shards, *a: used.append(len(shards)) or real(specs, shards, *a)
    )
    monkeypatch.setattr(fast_ops, "MIN_SHARD", 1)
    monkeypatch.setattr(fast_ops, "MIN_SHARD_ELEMENTS", 1)
    paddle.seed(11)
    net = ConvFeatureNet(4, out_dim=16, input_hw=84)
    x = paddle.rand([10, 4, 84, 84])

    def run():
        for p in net.parameters():
            p.clear_gradient()
        out, fmap = net.forward_with_map(x)
        ((out * out).sum() + fmap.mean()).backward()
        with paddle.no_grad():
            inference = net(x).numpy()
        return [out.numpy(), fmap.numpy(), inference] + [p.grad.numpy().copy() for p in net.parameters()]

    results = {}
    for shards in (1, 2):
        old = set_num_shards(shards)
        try:
            used.clear()
            results[("onednn", shards)] = run()
            # the training forward (up to the kept map, then the rest) and the no-grad forward (one stack)
            assert used == [shards, shards, shards]
            with monkeypatch.context() as m:
                m.setattr(fast_ops, "_dnnl_specs", lambda layers, x: None)
                results[("paddle", shards)] = run()
        finally:
            set_num_shards(old)
    ref = results[("paddle", 1)]
    for key, got in results.items():
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=str(key))


@fast_only
def test_onednn_loads_from_paddles_wheel():
    """Where Paddle's wheel ships oneDNN, the direct path is on (the self-check passed), not silently off."""
    import os

    if not os.path.exists(os.path.join(os.path.dirname(paddle.__file__), "libs", "libdnnl.so.3")):
        pytest.skip("this Paddle ships no libdnnl.so.3")
    assert onednn_conv.available()


@fast_only
def test_onednn_probe_inside_no_grad_still_turns_the_fast_path_on():
    """The first call to available() may come from a forward pass under paddle.no_grad() (SND-STD sizes its
    heads that way); the self-check's backward pass must not fail there and leave oneDNN off for the process."""
    import os
    import subprocess
    import sys

    if not os.path.exists(os.path.join(os.path.dirname(paddle.__file__), "libs", "libdnnl.so.3")):
        pytest.skip("this Paddle ships no libdnnl.so.3")
    code = (
        "import paddle\n"
        "from common.cpu import onednn\n"
        "with paddle.no_grad():\n"
        "    ok = onednn.available()\n"
        "    still_off = not paddle.is_grad_enabled()\n"
        "print(ok, still_off)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.split()[-2:] == ["True", "True"], out.stdout + out.stderr


@fast_only
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("x_grad", [True, False], ids=["x-grad", "x-frozen"])
def test_numpy_linear_matches_paddle_linear(bias, x_grad, shards, monkeypatch):
    """``common.cpu.linear``: the output and every gradient of ``nn.Linear`` (the DQN's 3136 -> 512 layer),
    whole and with each product split across 2 shard threads (an odd batch: unequal shards)."""
    from common.cpu import linear, sharding

    split = []
    run_shards = sharding.run
    monkeypatch.setattr(sharding, "run", lambda fn, items: split.append(len(items)) or run_shards(fn, items))
    paddle.seed(3)
    layer = paddle.nn.Linear(3136, 512, bias_attr=None if bias else False)
    x = paddle.randn([37, 3136])
    x.stop_gradient = not x_grad
    upstream = paddle.randn([37, 512])
    assert linear.applies(layer, x)

    def run(fn):
        layer.clear_gradients()
        x.clear_grad()
        y = fn(x)
        (y * upstream).sum().backward()
        grads = [layer.weight.grad.numpy().copy()] + ([layer.bias.grad.numpy().copy()] if bias else [])
        return y.numpy(), grads, (x.grad.numpy().copy() if x_grad else x.grad)

    y, grads, gx = run(lambda t: cpu.run(layer, t))
    y_ref, grads_ref, gx_ref = run(layer)
    np.testing.assert_allclose(y, y_ref, rtol=RTOL, atol=ATOL)
    for g, r in zip(grads, grads_ref):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
    if x_grad:
        np.testing.assert_allclose(gx, gx_ref, rtol=RTOL, atol=ATOL)
    else:
        assert gx is None and gx_ref is None
    with paddle.no_grad():
        np.testing.assert_allclose(cpu.run(layer, x).numpy(), y_ref, rtol=RTOL, atol=ATOL)
    # split in 2: the forward, the weight gradient, [the input gradient], the forward without a graph
    assert split == ([2] * (4 if x_grad else 3) if shards == 2 else [])


@fast_only
def test_small_linear_layers_stay_on_paddle(monkeypatch):
    """Below ``MIN_MACS`` the PyLayer's fixed cost would exceed what numpy saves: Paddle's own kernel runs."""
    from common.cpu import linear

    small = paddle.nn.Linear(64, 64)
    assert not linear.applies(small, paddle.randn([16, 64]))
    assert linear.applies(paddle.nn.Linear(3136, 512), paddle.randn([32, 3136]))
    calls = []
    monkeypatch.setattr(linear, "linear", lambda layer, x: calls.append(layer) or layer(x))
    cpu.run(small, paddle.randn([16, 64]))
    assert calls == []
    big = paddle.nn.Linear(3136, 512)
    cpu.run(paddle.nn.Sequential(big, paddle.nn.ReLU()), paddle.randn([32, 3136]))
    assert calls == [big]


@fast_only
def test_threads_holds_numpy_blas_to_one_thread_and_sets_the_shards():
    """``cpu.threads(n)`` holds numpy's OpenBLAS to one thread while open (the shards are the parallelism),
    sets n shards, and gives back the old values."""
    from common.cpu import blas, sharding

    before = blas.get_threads()
    if before is None:
        pytest.skip("numpy links no OpenBLAS here")
    blas.set_threads(2)
    try:
        with cpu.threads(1):
            assert blas.get_threads() == 1 and sharding.count() == 1
            with cpu.threads(2):
                assert blas.get_threads() == 1 and sharding.count() == 2
            assert blas.get_threads() == 1 and sharding.count() == 1
        assert blas.get_threads() == 2
    finally:
        blas.set_threads(before)


@fast_only
def test_together_runs_whole_computations_side_by_side_in_the_callers_grad_mode():
    """``cpu.together``: with two shard threads, two computations run on two threads, each seeing one shard
    (no nested splitting) and the caller's grad mode; the results come back in order, an error is raised
    after every computation has finished; with one thread they run one after another on the caller's."""
    import threading
    import time

    from common.cpu import sharding

    def probe(tag):
        def fn():
            time.sleep(0.05)
            return tag, threading.get_ident(), sharding.count(), paddle.is_grad_enabled()

        return fn

    with cpu.threads(2):
        with paddle.no_grad():
            out = cpu.together([probe("a"), probe("b")])
        assert [o[0] for o in out] == ["a", "b"]
        assert out[1][1] == threading.get_ident() and out[0][1] != out[1][1]  # the last on the caller's thread
        assert [o[2] for o in out] == [1, 1] and sharding.count() == 2
        assert [o[3] for o in out] == [False, False] and paddle.is_grad_enabled()
        done = []

        def slow():
            time.sleep(0.2)
            done.append(1)

        def fail():
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            cpu.together([slow, fail])
        assert done == [1]  # the other computation had finished before the error came out
    with cpu.threads(1):
        out = cpu.together([probe("a"), probe("b")])
        assert {o[1] for o in out} == {threading.get_ident()}
