"""The one switch of the CPU speed paths (``common.cpu.switch``) and the plain route it leaves.

``PADDLE_CURIOSITY_PLAIN=1`` (or a device other than the CPU) must step every speed path aside,
so that what runs is Paddle's plain layers: the code of a ``--device gpu`` run, minus CUDA.
CI also runs the entry points' short runs with the variable set (``.ci/run``, ``docs/gpu.md``).
"""

from __future__ import annotations

import multiprocessing
import warnings

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import common.cpu as cpu  # noqa: E402
import common.cpu.fused as fused  # noqa: E402
import common.cpu.linear as linear  # noqa: E402
import common.cpu.onednn as onednn  # noqa: E402
from common.cpu import blas, sharding, switch  # noqa: E402
from common.intrinsic import make_intrinsic  # noqa: E402
from common.run.checkpoint import all_finite  # noqa: E402
from common.run.device import warn_ignored_cpu_flags  # noqa: E402
from mario.model import MARIO  # noqa: E402
from mario.train import MarioConfig  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setenv(switch.ENV, "1")


def test_the_switch_reads_its_variable_and_names_a_bad_value(monkeypatch):
    monkeypatch.delenv(switch.ENV, raising=False)
    assert switch.enabled() and cpu.fast_paths()
    monkeypatch.setenv(switch.ENV, "0")
    assert switch.enabled()
    monkeypatch.setenv(switch.ENV, "1")
    assert not switch.enabled() and not cpu.fast_paths() and not cpu.available()
    monkeypatch.setenv(switch.ENV, "yes")
    with pytest.raises(ValueError, match=r"PADDLE_CURIOSITY_PLAIN='yes': expected 1"):
        cpu.fast_paths()


def test_the_speed_paths_are_off_where_paddle_works_on_another_device(monkeypatch):
    """A GPU process (its device simulated: this Paddle is a CPU build): no path may run, oneDNN's
    self-check included (its tensors would be made on the GPU)."""
    monkeypatch.delenv(switch.ENV, raising=False)
    x = paddle.ones([2, 3])
    assert cpu.fast_paths(x)
    monkeypatch.setattr(paddle, "get_device", lambda: "gpu:0")
    assert not cpu.fast_paths() and not cpu.fast_paths(x)
    assert not onednn.available() and cpu.collection_engine(MARIO(4, 7), (4, 84, 84), "native", 8) is None


def _forbid_fast_paths(monkeypatch):
    """Make every speed path fail loudly if it is entered."""

    def refuse(name):
        def fail(*args, **kwargs):
            raise AssertionError(f"{name} ran with the CPU speed paths off")

        return fail

    for owner, name in (
        (fused._BiasAct, "apply"),
        (fused._ShardedConvAct, "apply"),
        (fused._DnnlConvStack, "apply"),
        (linear._Linear, "apply"),
        (onednn, "unit_floats_channels_last"),
        (fused._C_ops, "subtract_"),
    ):
        monkeypatch.setattr(owner, name, refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
    import common.cpu.stdim as stdim

    monkeypatch.setattr(stdim._StdimLosses, "apply", refuse("stdim"))


def _mario_step(batch):
    """Outputs and gradients of the Mario policy and the RND predictor on one batch, with 2 threads."""
    from mario.rnd_model import make_rnd_networks

    paddle.seed(0)
    policy = MARIO(4, 7)
    rnd = make_intrinsic(
        "rnd", make_rnd_networks, (4, 84, 84), 4, lr=1e-4, update_proportion=1.0, max_grad_norm=0.5, seed=1
    )
    rnd.observe(batch)
    with cpu.threads(2):
        logits, v_ext, v_int = policy(cpu.unit_floats(batch))
        (logits.sum() + v_ext.sum() + v_int.sum()).backward()
        x = rnd.normalize(batch)
        fwd = ((rnd.predictor(x) - rnd.target(x).detach()) ** 2).mean()
        fwd.backward()
    grads = {f"policy/{k}": p.grad.numpy() for k, p in policy.named_parameters()}
    grads.update({f"predictor/{k}": p.grad.numpy() for k, p in rnd.predictor.named_parameters()})
    return [logits.numpy(), v_ext.numpy(), float(fwd)], grads


def _spy(fn, calls):
    def wrapped(*args, **kwargs):
        calls.append(fn)
        return fn(*args, **kwargs)

    return wrapped


def test_the_plain_route_runs_no_speed_path_and_computes_what_the_fast_one_does(monkeypatch):
    """Mario's policy and RND (conv stacks, large dense layers, in-place normalisation, the ``/ 255``
    conversion, 2 threads) on the plain route: none of the fast code is entered, and outputs and
    gradients equal those of the CPU speed paths."""
    monkeypatch.setattr(fused, "MIN_SHARD", 1)  # the fast route shards even this small batch
    monkeypatch.setattr(fused, "MIN_SHARD_ELEMENTS", 1)
    batch = np.random.default_rng(0).integers(0, 256, size=(12, 4, 84, 84), dtype=np.uint8)
    monkeypatch.delenv(switch.ENV, raising=False)
    entered = []
    for stack in (fused._DnnlConvStack, fused._ShardedConvAct):  # the fast route's conv stacks (with grads)
        monkeypatch.setattr(stack, "apply", _spy(stack.apply, entered))
    fast_out, fast_grads = _mario_step(batch)
    assert entered, "the fast route took no fast conv stack: the comparison would prove nothing"
    monkeypatch.setenv(switch.ENV, "1")
    _forbid_fast_paths(monkeypatch)
    plain_out, plain_grads = _mario_step(batch)
    for a, b in zip(fast_out, plain_out):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    assert fast_grads.keys() == plain_grads.keys()
    for name, g in plain_grads.items():
        np.testing.assert_allclose(fast_grads[name], g, rtol=RTOL, atol=ATOL, err_msg=name)


def test_snd_std_losses_take_the_paddle_ops_on_the_plain_route(plain, monkeypatch):
    """SND-STD's score losses: the Paddle formulation (the GPU's), not the numpy one."""
    _forbid_fast_paths(monkeypatch)
    from montezuma.rnd_model import make_rnd_networks

    paddle.seed(0)
    obs = np.random.default_rng(0).integers(0, 256, size=(17, 4, 84, 84), dtype=np.uint8)
    snd = make_intrinsic(
        "snd-std", make_rnd_networks, (4, 84, 84), 1, lr=1e-4, update_proportion=1.0, max_grad_norm=0.5, seed=0
    )
    snd.observe(obs)
    out = snd.update({"obs": obs[:-1], "next_obs": obs[1:], "dones": np.zeros(16, np.float32)})
    assert np.isfinite(out["snd_target"]) and np.isfinite(out["forward"])


def test_threads_changes_nothing_on_the_plain_route(plain):
    before_shards, before_blas = sharding.count(), blas.get_threads()
    with cpu.threads(2):
        assert sharding.count() == before_shards and blas.get_threads() == before_blas
    big = paddle.nn.Linear(3136, 512)
    assert not linear.applies(big, paddle.ones([64, 3136]))
    assert cpu.collection_engine(MARIO(4, 7), (4, 84, 84), "native", 8) is None


def _child_switch(queue):
    queue.put(switch.enabled())


def test_spawned_children_inherit_the_switch(plain):
    ctx = multiprocessing.get_context("spawn")  # how the eval and env workers start
    queue = ctx.Queue()
    child = ctx.Process(target=_child_switch, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=120) is False
    finally:
        child.join(timeout=60)


def test_cpu_only_flags_warn_where_the_speed_paths_are_off(plain):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warn_ignored_cpu_flags(MarioConfig()) == []  # nothing set: nothing to say
        ignored = warn_ignored_cpu_flags(MarioConfig(num_threads=2, inference="onednn-bf16"))
    assert ignored == ["num_threads", "inference"]
    text = " ".join(str(w.message) for w in caught)
    assert "--num-threads 2" in text and "--inference 'onednn-bf16'" in text and "PADDLE_CURIOSITY_PLAIN=1" in text


def test_cpu_only_flags_are_quiet_where_they_apply(monkeypatch):
    monkeypatch.delenv(switch.ENV, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_ignored_cpu_flags(MarioConfig(num_threads=2)) == []


def test_all_finite_checks_tensors_of_several_dtypes():
    """One stack per place and dtype (a GPU run's Adam keeps beta-pow accumulators on the CPU)."""
    state = {"w": paddle.ones([3]), "acc": paddle.ones([1], dtype="float64"), "n": paddle.to_tensor([1])}
    assert all_finite(state)
    state["acc"] = paddle.to_tensor([float("nan")], dtype="float64")
    assert not all_finite(state)
    assert all_finite({})
