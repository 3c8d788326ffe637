"""The oneDNN inference engine that runs the policy during collection (common/cpu/predictor.py)."""

import numpy as np
import paddle
import pytest

from common import cpu
from common.cpu.predictor import InferenceEngine, onednn_available
from common.ppo.actor import Actor
from common.ppo.update import PPO
from mario.model import MARIO
from montezuma.model import RNDPolicy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not onednn_available(), reason="this Paddle has no oneDNN predictor (Paddle 2.6: no PIR parameter writer)"
    ),
]


def reference(net, obs):
    with paddle.no_grad():
        return [t.numpy() for t in net(cpu.unit_floats(obs))]


def assert_close(outs, refs, rtol=1e-5, atol=1e-5):
    assert [o.shape for o in outs] == [r.shape for r in refs]
    for o, r in zip(outs, refs):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)


@pytest.mark.parametrize("net_cls,actions", [(MARIO, 7), (RNDPolicy, 18)])
def test_engine_matches_the_training_network_and_follows_its_weights(net_cls, actions):
    paddle.seed(3)
    net = net_cls(4, actions)
    obs = np.random.default_rng(0).integers(0, 256, size=(9, 4, 84, 84), dtype=np.uint8)
    engine = InferenceEngine(net, (4, 84, 84))
    try:
        assert_close(engine(obs), reference(net, obs))
        assert_close(engine(obs[:1]), reference(net, obs[:1]))  # any batch size
        with paddle.no_grad():
            for p in net.parameters():
                p.set_value(p * 1.5 + 0.01)
        stale = engine(obs)
        assert not np.allclose(stale[0], reference(net, obs)[0], rtol=1e-3, atol=1e-4)  # a copy: needs refresh
        engine.refresh()
        assert_close(engine(obs), reference(net, obs))
    finally:
        engine.close()


def test_bf16_engine_is_close_to_fp32():
    paddle.seed(4)
    net = RNDPolicy(4, 18)
    obs = np.random.default_rng(1).integers(0, 256, size=(16, 4, 84, 84), dtype=np.uint8)
    engine = InferenceEngine(net, (4, 84, 84), precision="bf16")
    try:
        for o, r in zip(engine(obs), reference(net, obs)):
            np.testing.assert_allclose(o, r, atol=0.02 * (np.abs(r).max() + 1e-3))
    finally:
        engine.close()
    with pytest.raises(ValueError, match="'fp16'.*|fp16"):
        InferenceEngine(net, (4, 84, 84), precision="fp16")


def test_actor_refreshes_the_engine_on_first_use_after_the_weights_changed(monkeypatch):
    monkeypatch.setattr(InferenceEngine, "min_batch", 8)
    paddle.seed(5)
    net = MARIO(4, 7)
    ppo = PPO(net, lr=1e-3, epsilon=0.2, beta=0.01, vf_coef=0.5, max_grad_norm=0.5)
    calls, refreshes = [], []

    class Spy(InferenceEngine):
        def __call__(self, obs):
            calls.append(len(obs))
            return super().__call__(obs)

        def refresh(self):
            refreshes.append(1)
            super().refresh()

    actor = Actor(net, Spy(net, (4, 84, 84)))
    refreshes.clear()  # the one at construction
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, size=(8, 4, 84, 84), dtype=np.uint8)
    a1 = actor.act(obs, rng)
    actor.values(obs[:3])  # below min_batch: the training network
    assert calls == [8] and len(refreshes) == 1
    actor.values(obs)
    assert calls == [8, 8] and len(refreshes) == 1  # weights unchanged: no refresh
    batch = {
        "obs": obs,
        "actions": a1[0],
        "log_probs": a1[1],
        "advantages": np.ones(8, np.float32),
        "ret_ext": np.zeros(8, np.float32),
        "ret_int": np.zeros(8, np.float32),
    }
    ppo.step(batch)  # new weights; the trainer tells the actor
    actor.weights_changed()
    v_ext, _ = actor.values(obs)
    assert calls == [8, 8, 8] and len(refreshes) == 2
    np.testing.assert_allclose(v_ext, reference(net, obs)[1], rtol=1e-5, atol=1e-5)
    actor.close()


def test_trainer_collection_with_the_engine_matches_the_training_network(tmp_path, monkeypatch):
    """The trainer's predictor path (--inference onednn-bf16, with the exact fp32 predictor standing in for
    the bfloat16 one, which needs AVX512-BF16) and --inference dygraph give the same rollout from one seed."""
    from rollouts import assert_same_rollout, montezuma_rollout

    from common.cpu import ENGINES
    from common.ppo.config import TrainConfig
    from common.run.config import field_meta

    assert tuple(field_meta(TrainConfig, "inference")["choices"]) == ENGINES  # the flag offers the engines
    monkeypatch.setattr(InferenceEngine, "min_batch", 8)  # the 8 envs' batches take the engine
    exact = InferenceEngine.__init__
    monkeypatch.setattr(InferenceEngine, "__init__", lambda self, net, shape, **kw: exact(self, net, shape))

    def rollout(inference):
        def check(tr):
            assert isinstance(tr.actor.engine, InferenceEngine) == (inference == "onednn-bf16")

        return montezuma_rollout(
            tmp_path, inference, check, num_processes=8, num_workers=-1, num_global_steps=96, inference=inference
        )

    assert_same_rollout(rollout("onednn-bf16"), rollout("dygraph"))
