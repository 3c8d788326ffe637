"""Log-probabilities, entropy and sampling against numpy; one PPO step moves the policy."""

import numpy as np
import paddle

from common.ppo.actor import Actor, sample_actions
from common.ppo.update import PPO, log_prob_entropy


def _np_log_softmax(z):
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def test_log_prob_and_entropy_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5)).astype(np.float32) * 3
    actions = rng.integers(0, 5, size=6)
    logp, ent = log_prob_entropy(paddle.to_tensor(logits), paddle.to_tensor(actions))
    ls = _np_log_softmax(logits.astype(np.float64))
    np.testing.assert_allclose(logp.numpy(), ls[np.arange(6), actions], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ent.numpy(), -(np.exp(ls) * ls).sum(1), rtol=1e-5, atol=1e-6)
    assert logp.shape == [6]  # not [6, 6] as Categorical.log_prob returns


def test_sample_actions_follow_softmax():
    logits = np.array([[0.0, np.log(3.0)]] * 20000, np.float32)
    a, logp = sample_actions(logits, np.random.default_rng(1))
    assert abs(a.mean() - 0.75) < 0.01
    np.testing.assert_allclose(logp[a == 1], np.log(0.75), rtol=1e-5)
    a2, _ = sample_actions(logits, np.random.default_rng(1))
    np.testing.assert_array_equal(a, a2)


def test_ppo_step_increases_advantaged_action_probability():
    from mario.model import MARIO

    paddle.seed(0)
    net = MARIO(4, 3)
    ppo = PPO(net, lr=1e-3, epsilon=0.2, beta=0.0, vf_coef=1.0, max_grad_norm=0.5)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, size=(16, 4, 84, 84), dtype=np.uint8)
    actions, logp, _, _ = Actor(net).act(obs, rng)
    actions[:8] = 0  # half the samples took action 0 and get a positive advantage
    with paddle.no_grad():
        logits0, _, _ = net(paddle.to_tensor(obs).astype("float32") / 255)
    logp = _np_log_softmax(logits0.numpy())[np.arange(16), actions].astype(np.float32)
    p0_before = np.exp(_np_log_softmax(logits0.numpy()))[:, 0].mean()
    batch = {
        "obs": obs,
        "actions": actions,
        "log_probs": logp,
        "advantages": np.where(actions == 0, 1.0, -1.0).astype(np.float32),
        "ret_ext": np.zeros(16, np.float32),
        "ret_int": np.zeros(16, np.float32),
    }
    for _ in range(5):
        out = ppo.step(batch)
    assert set(out) >= {"total", "actor", "critic", "entropy", "approx_kl", "clipfrac"}
    with paddle.no_grad():
        logits, _, _ = net(paddle.to_tensor(obs).astype("float32") / 255)
    p0_after = np.exp(_np_log_softmax(logits.numpy()))[:, 0].mean()
    assert p0_after > p0_before + 0.01
    assert out["approx_kl"] >= 0


def test_unit_floats_is_the_plain_division_and_keeps_its_memory():
    """The channels-last fast path gives Paddle's own x / 255 bit for bit, as a [B, C, H, W] tensor
    that stays valid after its numpy buffer's last Python reference is gone."""
    import gc

    from common.cpu import unit_floats as obs_to_tensor
    from montezuma.model import RNDPolicy

    obs = np.random.default_rng(0).integers(0, 256, size=(6, 4, 84, 84), dtype=np.uint8)
    plain = paddle.to_tensor(obs).astype("float32") / 255.0
    x = obs_to_tensor(obs)
    gc.collect()
    clobber = [np.full((6, 84, 84, 4), 7.0, np.float32) for _ in range(8)]  # reuse freed memory, if any
    assert x.shape == [6, 4, 84, 84] and x.dtype == paddle.float32 and x.stop_gradient
    # the same values: bit for bit on Paddle 3; Paddle 2.6's division kernel may differ in the last bit
    np.testing.assert_array_max_ulp(x.numpy(), plain.numpy(), maxulp=0 if paddle.__version__.startswith("3") else 1)
    paddle.seed(1)
    net = RNDPolicy(4, 18)
    with paddle.no_grad():
        for a, b in zip(net(x), net(plain)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    del clobber
