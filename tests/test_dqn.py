"""The Double DQN learner, the uint8 replay memory, the article's SND-V module, Pong and the DQN entry point.

Learner and module tests use tiny networks so that every number can be checked by hand;
the replay memory is checked against the stacks the real Pong environment returns; the
entry point runs real (short) Pong training.
"""

import json
import os
import subprocess
import sys

import numpy as np
import paddle
import paddle.nn as nn
import pytest

from common.dqn.learner import DoubleDQN, DQNConvNet, LinearSchedule, double_dqn_targets, epsilon_greedy, same_padding
from common.dqn.replay import ReplayMemory
from common.dqn.snd import SNDVArticle, article_contrastive_loss, article_pairs
from common.run.checkpoint import CheckpointError, load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TinyQ(nn.Layer):
    """uint8-scaled [B, 1, 2, 2] -> [B, 3]: one linear layer, weights set by the tests."""

    def __init__(self, out=3):
        super().__init__()
        self.fc = nn.Linear(4, out)

    def forward(self, x):
        return self.fc(paddle.flatten(x, 1))


def set_linear(layer, w, b):
    layer.fc.weight.set_value(np.asarray(w, np.float32))
    layer.fc.bias.set_value(np.asarray(b, np.float32))


def q_numpy(layer, obs):
    x = obs.reshape(len(obs), -1).astype(np.float32) / 255.0
    return x @ layer.fc.weight.numpy() + layer.fc.bias.numpy()


# ----------------------------------------------------------------------------- TD targets
def test_double_dqn_targets_by_hand():
    rewards = np.array([1.0, 0.0, -1.0], np.float32)
    terminals = np.array([0.0, 1.0, 0.0], np.float32)
    q_online = np.array([[1, 3, 2], [5, 0, 0], [0, 1, 4]], np.float32)  # argmax: 1, 0, 2
    q_target = np.array([[10, 20, 30], [7, 8, 9], [4, 5, 6]], np.float32)
    # double: the online net picks, the target net values: 20, (terminal), 6
    np.testing.assert_allclose(double_dqn_targets(rewards, terminals, q_online, q_target, 0.5), [11.0, 0.0, 2.0])
    # plain DQN: max of the target net: 30, (terminal), 6
    np.testing.assert_allclose(
        double_dqn_targets(rewards, terminals, q_online, q_target, 0.5, double=False), [16.0, 0.0, 2.0]
    )


def make_learner(interval=2000, double=True, lr=0.01):
    paddle.seed(0)
    online, target = TinyQ(), TinyQ()
    return DoubleDQN(online, target, lr=lr, discount=0.9, target_update_interval=interval, double=double)


def test_learner_targets_select_with_online_and_value_with_target():
    learner = make_learner()
    set_linear(learner.q_net, np.eye(4, 3), [0, 0, 0])  # online: Q(s', a) = s'_a
    set_linear(learner.target_net, [[1, 2, 3]] * 4, [0, 0, 0])  # target: Q(s', a) = (a + 1) * sum(s')
    next_obs = np.array([[0, 255, 0, 0], [255, 0, 0, 0]], np.uint8).reshape(2, 1, 2, 2)
    y = learner.targets(np.array([0.5, 1.0], np.float32), np.array([0.0, 1.0], np.float32), next_obs)
    # sample 0: online picks a=1 (s'_1 = 1), target values it 2 * 1 -> 0.5 + 0.9 * 2; sample 1 terminal
    np.testing.assert_allclose(y, [0.5 + 0.9 * 2.0, 1.0], rtol=1e-6)
    plain = make_learner(double=False)
    set_linear(plain.target_net, [[1, 2, 3]] * 4, [0, 0, 0])
    np.testing.assert_allclose(
        plain.targets([0.5, 1.0], [0.0, 0.0], next_obs), [0.5 + 0.9 * 3, 1.0 + 0.9 * 3], rtol=1e-6
    )


def test_targets_on_two_threads_equal_one_thread():
    """With two CPU threads the online and target passes of ``targets`` run side by side (``cpu.together``),
    each whole: the TD targets are bit-identical to one thread's, on the real DQN network."""
    from common import cpu

    paddle.seed(1)
    learner = DoubleDQN(DQNConvNet(4, 6), DQNConvNet(4, 6), lr=1e-3, discount=0.99, target_update_interval=10)
    learner.learn(*_conv_batch(seed=2))  # online and target now differ (the sync happened before the step)
    _, _, rewards, terminals, next_obs = _conv_batch(seed=3)
    with cpu.threads(1):
        one = learner.targets(rewards, terminals, next_obs)
    with cpu.threads(2):
        two = learner.targets(rewards, terminals, next_obs)
    np.testing.assert_array_equal(one, two)


def _conv_batch(seed, n=16):
    rng = np.random.default_rng(seed)
    obs = (rng.random((n, 4, 84, 84)) < 0.1).astype(np.uint8) * 255
    next_obs = (rng.random((n, 4, 84, 84)) < 0.1).astype(np.uint8) * 255
    return obs, rng.integers(0, 6, n), rng.random(n).astype(np.float32), np.zeros(n, np.float32), next_obs


def test_learn_is_huber_on_the_taken_action_and_steps_adam():
    learner = make_learner()
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (4, 1, 2, 2), dtype=np.uint8)
    next_obs = rng.integers(0, 256, (4, 1, 2, 2), dtype=np.uint8)
    actions = np.array([0, 2, 1, 2])
    rewards = np.array([3.0, 0.1, -2.0, 0.0], np.float32)
    terminals = np.array([0, 0, 1, 0], np.float32)
    q_online, q_target = q_numpy(learner.q_net, next_obs), q_numpy(learner.target_net, next_obs)
    y = double_dqn_targets(rewards, terminals, q_online, q_target, 0.9)
    err = q_numpy(learner.q_net, obs)[np.arange(4), actions] - y
    huber = np.where(np.abs(err) < 1, 0.5 * err**2, np.abs(err) - 0.5).mean()
    before = learner.q_net.fc.weight.numpy().copy()
    out = learner.learn(obs, actions, rewards, terminals, next_obs)
    assert out["q"] == pytest.approx(huber, rel=1e-5)
    assert out["target_mean"] == pytest.approx(y.mean(), rel=1e-5)
    assert not np.allclose(before, learner.q_net.fc.weight.numpy())  # Adam moved the online net
    assert learner.train_count == 1


def test_target_sync_interval_follows_srl():
    """SRL: ``if train_count % interval == 0: sync`` after the update, then ``train_count += 1``."""
    learner = make_learner(interval=3, lr=0.05)
    rng = np.random.default_rng(1)
    synced_after = []
    for i in range(8):
        obs = rng.integers(0, 256, (4, 1, 2, 2), dtype=np.uint8)
        out = learner.learn(
            obs, rng.integers(0, 3, 4), rng.normal(size=4).astype(np.float32), np.zeros(4, np.float32), obs[::-1].copy()
        )
        same = np.array_equal(learner.q_net.fc.weight.numpy(), learner.target_net.fc.weight.numpy())
        assert same == bool(out["synced"])
        synced_after.append(bool(out["synced"]))
    assert synced_after == [True, False, False, True, False, False, True, False]  # 1-based updates 1, 4, 7
    assert learner.sync_count == 3 and learner.train_count == 8


def test_learner_rejects_bad_settings_by_name():
    with pytest.raises(ValueError, match="target_update_interval"):
        DoubleDQN(TinyQ(), TinyQ(), lr=1e-3, discount=0.9, target_update_interval=0)
    with pytest.raises(ValueError, match="discount"):
        DoubleDQN(TinyQ(), TinyQ(), lr=1e-3, discount=1.5, target_update_interval=1)
    with pytest.raises(ValueError, match="uint8"):
        make_learner().q_values(np.zeros((1, 1, 2, 2), np.float32))


def test_conv_net_shapes_and_keras_same_padding():
    assert same_padding(84, 8, 4) == ([2, 2], 21) and same_padding(21, 4, 2) == ([1, 2], 11)
    x = paddle.rand([2, 4, 84, 84])
    assert DQNConvNet(4, 6, padding="same").flat_dim == 64 * 11 * 11
    assert DQNConvNet(4, 6, padding="valid").flat_dim == 64 * 7 * 7
    assert tuple(DQNConvNet(4, 512, hidden=(), padding="valid")(x).shape) == (2, 512)
    with pytest.raises(ValueError, match="padding"):
        DQNConvNet(4, 6, padding="full")


# ----------------------------------------------------------------------------- epsilon
def test_epsilon_schedule_constant_and_linear():
    const = LinearSchedule(0.1)
    assert const(0) == const(10**9) == 0.1
    lin = LinearSchedule(0.1, initial=1.0, decay_steps=100)
    assert lin(0) == 1.0 and lin(50) == pytest.approx(0.55) and lin(100) == lin(10**6) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="initial"):
        LinearSchedule(0.1, initial=1.5, decay_steps=10)
    with pytest.raises(ValueError, match="decay_steps"):
        LinearSchedule(0.1, initial=1.0, decay_steps=-1)


def test_epsilon_greedy_frequencies():
    rng = np.random.default_rng(0)
    q = np.array([0.0, 5.0, 1.0, 2.0, -1.0, 0.5])
    assert all(epsilon_greedy(q, 0.0, rng) == 1 for _ in range(200))
    picks = np.array([epsilon_greedy(q, 0.1, rng) for _ in range(20_000)])
    assert abs((picks != 1).mean() - 0.1 * 5 / 6) < 0.01  # random on 10 %, which hits the greedy one 1/6 of it
    uniform = np.bincount([epsilon_greedy(q, 1.0, rng) for _ in range(12_000)], minlength=6) / 12_000
    assert np.all(np.abs(uniform - 1 / 6) < 0.02)


# ----------------------------------------------------------------------------- replay memory
def frame(v):
    return np.full((2, 3), v, np.uint8)


def test_replay_stacks_never_cross_episode_starts():
    mem = ReplayMemory(100, (2, 3), stack=4)
    mem.start_episode(frame(10))
    for v in (11, 12, 13, 14):
        mem.add(0, 1.0, v == 14, frame(v))
    mem.start_episode(frame(20))
    mem.add(1, 0.5, False, frame(21))
    mem.add(2, 0.0, False, frame(22))
    firsts = [s[:, 0, 0].tolist() for s in mem.stacks(np.arange(8))]
    assert firsts == [
        [0, 0, 0, 10],
        [0, 0, 10, 11],
        [0, 10, 11, 12],
        [10, 11, 12, 13],
        [11, 12, 13, 14],
        [0, 0, 0, 20],
        [0, 0, 20, 21],
        [0, 20, 21, 22],
    ]
    assert mem.frames.dtype == np.uint8
    assert len(mem) == 6 and mem.num_states == 8  # the terminal frame 14 and the newest 22 start no transition


def test_replay_sample_fields_and_no_replacement():
    mem = ReplayMemory(100, (2, 3), stack=2)
    mem.start_episode(frame(0))
    for t in range(1, 11):
        mem.add(t % 3, float(t), t == 10, frame(t))
    rng = np.random.default_rng(0)
    b = mem.sample(10, rng)
    assert b["obs"].dtype == np.uint8 and b["obs"].shape == (10, 2, 2, 3) and b["next_obs"].dtype == np.uint8
    assert sorted(b["indices"].tolist()) == list(range(10))  # all 10 transitions, each once
    newest = b["obs"][:, -1, 0, 0].astype(int)
    np.testing.assert_array_equal(b["next_obs"][:, -1, 0, 0], newest + 1)
    np.testing.assert_array_equal(b["rewards"], newest + 1.0)
    np.testing.assert_array_equal(b["actions"], (newest + 1) % 3)
    np.testing.assert_array_equal(b["terminals"], (newest + 1 == 10).astype(np.float32))
    with pytest.raises(ValueError, match="cannot sample 11"):
        mem.sample(11, rng)
    with pytest.raises(ValueError, match="uint8"):
        mem.add(0, 0.0, False, np.zeros((2, 3), np.float32))


def test_replay_wraps_without_returning_overwritten_frames():
    mem = ReplayMemory(8, (1, 1), stack=3)
    truth = {}  # absolute index -> the frame values of its stack
    t, ep = 0, []
    for episode_len in (5, 7, 3, 6):
        ep = [t]
        mem.start_episode(np.full((1, 1), t % 256, np.uint8))
        truth[t] = [0, 0, t]
        for _ in range(episode_len):
            t += 1
            mem.add(0, 0.0, False, np.full((1, 1), t % 256, np.uint8))
            ep.append(t)
            window = ep[-3:]
            truth[t] = [0] * (3 - len(window)) + window
        t += 1
    rng = np.random.default_rng(0)
    for _ in range(50):
        b = mem.sample(len(mem), rng)
        for i, k in enumerate(b["indices"]):
            assert k >= mem.written - mem.capacity + 2  # windows stay inside the ring
            assert b["obs"][i, :, 0, 0].tolist() == truth[k]
            assert b["next_obs"][i, :, 0, 0].tolist() == truth[k + 1]


def test_replay_rebuilds_the_stacks_pong_returns():
    from pong.env import make_env

    env = make_env(max_points=1)
    mem = ReplayMemory(60, (84, 84), stack=4)
    rng = np.random.default_rng(0)
    truth = {}
    obs = env.reset(seed=0)
    mem.start_episode(obs[-1])
    truth[mem.written - 1] = obs
    ends = 0
    for _ in range(160):
        obs, r, done, info = env.step(int(rng.integers(6)))
        mem.add(0, r, done and not info["TimeLimit.truncated"], obs[-1])
        truth[mem.written - 1] = obs
        if done:
            ends += 1
            obs = env.reset()
            mem.start_episode(obs[-1])
            truth[mem.written - 1] = obs
    env.close()
    assert ends >= 2  # the stacks cross at least two episode starts (a 1-point game lasts ~40 steps)
    b = mem.sample(len(mem), rng)
    for i, k in enumerate(b["indices"]):
        np.testing.assert_array_equal(b["obs"][i], truth[k])
        np.testing.assert_array_equal(b["next_obs"][i], truth[k + 1])
    states = mem.sample_states(mem.num_states, rng)
    assert states.dtype == np.uint8 and len(states) == mem.num_states


def test_replay_state_dict_round_trip():
    mem = ReplayMemory(10, (2, 3), stack=2)
    mem.start_episode(frame(1))
    for v in range(2, 14):
        mem.add(v % 2, v * 0.5, False, frame(v))
    copy = ReplayMemory(10, (2, 3), stack=2)
    copy.set_state_dict(mem.state_dict())
    assert copy.written == mem.written and len(copy) == len(mem)
    a, b = mem.sample(5, np.random.default_rng(3)), copy.sample(5, np.random.default_rng(3))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(ValueError, match="capacity"):
        ReplayMemory(11, (2, 3), stack=2).set_state_dict(mem.state_dict())
    with pytest.raises(RuntimeError, match="start_episode"):
        ReplayMemory(10, (2, 3)).add(0, 0.0, False, frame(0))


# ----------------------------------------------------------------------------- SND-V, the article's version
class TinyFeat(nn.Layer):
    def __init__(self, d=5):
        super().__init__()
        self.fc = nn.Linear(2 * 3 * 3, d)

    def forward(self, x):
        return self.fc(paddle.flatten(x, 1))


def test_a_state_from_before_the_first_step_restores_fresh_optimizers():
    """A DQN run takes a bad step back to the state kept at its start, before any optimizer had stepped:
    the learner and SND-V start fresh moments and go on exactly as they did from the start."""
    from common.run.checkpoint import copy_state

    rng = np.random.default_rng(0)
    obs, next_obs = (rng.integers(0, 256, (4, 1, 2, 2), dtype=np.uint8) for _ in range(2))
    batch = (obs, np.array([0, 2, 1, 2]), np.ones(4, np.float32), np.zeros(4, np.float32), next_obs)
    learner = make_learner()
    start = copy_state(learner.state_dict())
    losses = [learner.learn(*batch)["q"] for _ in range(3)]  # each the loss before its step
    learner.set_state_dict(start)
    assert learner.train_count == 0
    # the second and third losses follow steps taken with the moments: equal only if they restarted fresh
    assert [learner.learn(*batch)["q"] for _ in range(3)] == pytest.approx(losses, rel=1e-6)

    s = rng.integers(0, 256, (6, 2, 3, 3), dtype=np.uint8)
    m = make_snd()
    start = copy_state(m.state_dict())
    losses = [m.target_step(s, s[:3]) for _ in range(3)]
    m.set_state_dict(start)
    assert [m.target_step(s, s[:3]) for _ in range(3)] == pytest.approx(losses, rel=1e-6)


def make_snd(**kw):
    paddle.seed(0)
    return SNDVArticle(TinyFeat(), TinyFeat(), lr=1e-3, seed=0, **kw)


def feats(net, x):
    return x.reshape(len(x), -1).astype(np.float32) @ net.fc.weight.numpy() + net.fc.bias.numpy()


def test_article_loss_and_pairs_by_hand():
    z1 = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 0.0]], np.float32)
    z2 = np.array([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]], np.float32)
    tau = np.array([0.0, 1.0, 1.0], np.float32)
    # distances 0, 2, 5 -> (0 - 0)^2 + (1 - 2)^2 + (1 - 5)^2 = 17 (a sum over the batch, squared distances)
    assert float(article_contrastive_loss(paddle.to_tensor(z1), paddle.to_tensor(z2), paddle.to_tensor(tau))) == 17.0
    a, b, tau = article_pairs(np.arange(4), np.arange(10, 12))
    assert a.tolist() == [0, 1, 2, 3] and b.tolist() == [0, 1, 10, 11] and tau.tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="even batch"):
        article_pairs(np.arange(4), np.arange(3))


def test_target_step_computes_only_the_tau1_pairs_with_the_same_loss():
    rng = np.random.default_rng(0)
    s1 = rng.integers(0, 256, (6, 2, 3, 3), dtype=np.uint8)
    s2 = rng.integers(0, 256, (3, 2, 3, 3), dtype=np.uint8)
    m = make_snd(noise=0.2)
    state = m.rng.bit_generator.state
    with paddle.no_grad():  # all B pairs, as the article computes them, with the same noise
        x_a, x_b, tau = m.contrastive_inputs(s1, s2)
        full = article_contrastive_loss(m.target(x_a), m.target(x_b), paddle.to_tensor(tau))
        d = ((m.target(x_a) - m.target(x_b)) ** 2).sum(axis=1).numpy()
    assert np.all(d[:3] == 0) and np.all(d[3:] > 0)  # tau-0 pairs are identical inputs
    np.testing.assert_allclose(x_a.numpy()[:3], x_b.numpy()[:3])
    m.rng.bit_generator.state = state
    w = m.target.fc.weight.numpy().copy()
    assert m.target_step(s1, s2) == pytest.approx(float(full), rel=1e-5)
    assert not np.allclose(w, m.target.fc.weight.numpy())
    noise = x_a.numpy() - s1.astype(np.float32) / 255
    assert noise.min() >= -0.2 and noise.max() <= 0.2 and np.abs(noise).max() > 0.1


@pytest.mark.parametrize("pairing", ["same", "shifted"])
def test_distillation_pairing(pairing):
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 256, (4, 2, 3, 3), dtype=np.uint8)
    nxt = rng.integers(0, 256, (4, 2, 3, 3), dtype=np.uint8)
    m = make_snd(distill_pairing=pairing)
    zt = feats(m.target, nxt / 255.0)
    zp = feats(m.predictor, (nxt if pairing == "same" else obs) / 255.0)
    target_w = m.target.fc.weight.numpy().copy()
    assert m.distill(obs, nxt) == pytest.approx(((zp - zt) ** 2).mean(), rel=1e-5)
    np.testing.assert_array_equal(target_w, m.target.fc.weight.numpy())  # no gradient reaches the target


def test_snd_reward_is_the_plain_squared_error():
    rng = np.random.default_rng(2)
    obs = rng.integers(0, 256, (3, 2, 3, 3), dtype=np.uint8)
    m = make_snd()
    want = ((feats(m.target, obs / 255.0) - feats(m.predictor, obs / 255.0)) ** 2).sum(axis=1)
    np.testing.assert_allclose(m.reward(obs), want, rtol=1e-5)
    with pytest.raises(ValueError, match="distill_pairing"):
        make_snd(distill_pairing="cross")
    with pytest.raises(ValueError, match="uint8"):
        m.reward(obs.astype(np.float32))


# ----------------------------------------------------------------------------- Pong
def test_pong_env_preprocessing_and_five_point_games():
    from pong.env import PongEnv, process_frame

    env = PongEnv()
    obs = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert not obs[:3].any() and set(np.unique(obs[-1])) <= {0, 255}  # SRL's zero dummy states at reset
    raw = env.rgb_frame()
    np.testing.assert_array_equal(process_frame(raw), obs[-1])
    banner = raw.copy()
    banner[:35] = 255  # the score area is cropped away
    np.testing.assert_array_equal(process_frame(banner), obs[-1])
    rng = np.random.default_rng(0)
    points, done, steps = 0, False, 0
    while not done:
        obs, r, done, info = env.step(int(rng.integers(6)))
        points += r != 0
        steps += 1
    assert points == 5 and info["points_for"] + info["points_against"] == 5 and not info["TimeLimit.truncated"]
    assert info["score"] == info["points_for"] - info["points_against"] and steps == info["episode_steps"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.close()
    with pytest.raises(ValueError, match="frameskip"):
        PongEnv(frameskip=0)
    with pytest.raises(ValueError, match="repeat_action_probability"):
        PongEnv(repeat_action_probability=2)


def test_pong_env_does_not_import_paddle():
    code = "import sys; import pong.env, common.dqn.replay; assert 'paddle' not in sys.modules, 'paddle imported'"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


# ----------------------------------------------------------------------------- the entry point
TINY = [
    "--memory-capacity",
    "300",
    "--memory-warmup-size",
    "100",
    "--batch-size",
    "8",
    "--max-points",
    "1",
    "--eval-interval",
    "40",
    "--max-eval-steps",
    "100",
    "--video-interval",
    "1",
    "--log-interval",
    "20",
    "--save-interval",
    "0",
]


def tags_of(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return {json.loads(line)["tag"] for line in f}


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "dqn-e0", "snd"])
def test_tiny_real_pong_run_through_the_entry_point(agent, tmp_path):
    from pong.train import main

    res = main(
        [
            "--agent",
            agent,
            "--train-steps",
            "80" if agent != "snd" else "40",
            *TINY,
            "--log-path",
            str(tmp_path),
            "--run-name",
            agent,
        ]
    )
    steps = 80 if agent != "snd" else 40
    assert res["train_steps"] == steps and res["env_steps"] >= 100 + steps - 1 and os.path.exists(res["checkpoint"])
    cfg = json.loads((tmp_path / agent / "config.json").read_text())
    assert cfg["epsilon"] == {"dqn": 0.1, "dqn-e0": 0.0, "snd": 0.0}[agent] and cfg["frameskip"] == 7
    tags = tags_of(res["run_dir"])
    assert {
        "episode/return",
        "episode/length",
        "eval/return",
        "losses/q",
        "charts/target_syncs",
        "perf/train_steps_per_sec",
    } <= tags
    assert ({"losses/snd_target", "losses/forward", "intrinsic/reward_mean", "episode/intrinsic_return"} <= tags) == (
        agent == "snd"
    )
    assert os.listdir(tmp_path / agent / "videos")
    along = sorted((tmp_path / agent / "eval_intrinsic").glob("step_*.npz")) if agent == "snd" else []
    assert bool(along) == (agent == "snd")  # the recorded eval episode's intrinsic reward, SND only
    if along:
        from test_pictures import check_peaks

        from common.pictures import load_record

        rec = load_record(str(along[-1]))
        assert rec["rewards"].size >= 1 and rec["frames"].shape[1:] == (84, 84, 3)
        check_peaks(rec["rewards"], rec["peaks"])  # the marked peaks are the episode's highest values
        assert along[-1].with_suffix(".png").exists()
    state = load_checkpoint(res["checkpoint"])
    assert state["game"] == "pong" and state["agent"] == agent and state["learner"]["train_count"] == steps


@pytest.mark.slow
@pytest.mark.parametrize("save_replay", [True, False])
def test_resume_continues_counters_and_replay_policy(save_replay, tmp_path):
    from common.dqn.trainer import DQNTrainer
    from pong.train import SPEC, PongConfig, main

    flags = ["--agent", "snd", *TINY, "--eval-interval", "0", "--log-path", str(tmp_path)]
    if not save_replay:
        flags.append("--no-save-replay")
    first = main(flags + ["--train-steps", "20", "--run-name", "a"])
    state = load_checkpoint(first["checkpoint"])
    assert (state["replay"] is not None) == save_replay
    assert state["intrinsic"]["name"] == "snd-v-dqn" and state["env_steps"] == first["env_steps"]
    cfg = PongConfig(
        agent="snd",
        memory_capacity=300,
        memory_warmup_size=100,
        batch_size=8,
        max_points=1,
        eval_interval=0,
        log_path=str(tmp_path),
        run_name="b",
        train_steps=30,
        resume=first["checkpoint"],
    )
    trainer = DQNTrainer(SPEC, cfg)
    assert trainer.train_count == 20 and trainer.env_steps == first["env_steps"]
    assert trainer.folder.commits == state["code_commits"] and len(state["code_commits"]) == 1
    if save_replay:
        assert trainer.memory.written == state["replay"]["written"] and len(trainer.memory) >= 100
    else:
        assert trainer.memory.written == 0  # documented: the memory starts empty and warms up again
    np.testing.assert_array_equal(
        trainer.learner.q_net.state_dict()["head.0.weight"].numpy(), state["policy"]["head.0.weight"].numpy()
    )
    res = trainer.train()
    assert res["train_steps"] == 30
    assert res["env_steps"] == first["env_steps"] + (10 if save_replay else 109)  # empty: 100 warm-up steps first
    with pytest.raises(CheckpointError, match="agent"):
        DQNTrainer(
            SPEC,
            PongConfig(
                agent="dqn",
                memory_capacity=300,
                memory_warmup_size=100,
                batch_size=8,
                log_path=str(tmp_path),
                run_name="c",
                resume=first["checkpoint"],
            ),
        )


def test_help_names_the_sources_and_bad_values_are_refused(capsys):
    from pong.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for source in (
        "runner.train(max_train_count=100_000)",
        "frameskip=7",
        "0.0005",
        "2,000",
        "int_reward_scale",
        "10,000",
        "--agent {dqn,dqn-e0,snd}",
    ):
        assert source in text, source
    for bad, needle in (
        (["--agent", "snd", "--batch-size", "7"], "batch-size"),
        (["--memory-warmup-size", "20000"], "memory-warmup-size"),
        (["--epsilon", "1.5"], "epsilon"),
        (["--snd-distill-pairing", "cross"], "snd-distill-pairing"),
        (["--lr", "inf"], "--lr inf is invalid"),
    ):
        with pytest.raises(SystemExit):
            main(bad)
        assert needle in capsys.readouterr().err


@pytest.mark.slow
def test_same_seed_repeats_exactly(tmp_path):
    from pong.train import main

    flags = ["--agent", "snd", *TINY, "--eval-interval", "0", "--train-steps", "15", "--log-path", str(tmp_path)]
    a = load_checkpoint(main(flags + ["--run-name", "a"])["checkpoint"])
    # saving and the NaN guard's patience say when the run writes or stops, not what it learns (HOW_NOT_WHAT)
    b = load_checkpoint(
        main(flags + ["--run-name", "b", "--save-interval", "5", "--max-nan-updates", "9"])["checkpoint"]
    )
    for nets_a, nets_b in (
        (a["policy"], b["policy"]),
        (a["intrinsic"]["target"], b["intrinsic"]["target"]),
        (a["intrinsic"]["predictor"], b["intrinsic"]["predictor"]),
    ):
        for name, value in nets_a.items():
            np.testing.assert_array_equal(value.numpy(), nets_b[name].numpy(), err_msg=name)
    np.testing.assert_array_equal(a["replay"]["frames"], b["replay"]["frames"])


@pytest.mark.slow
def test_sigint_saves_a_loadable_checkpoint(tmp_path):
    import signal
    import time

    args = [
        "--agent",
        "dqn",
        *TINY,
        "--eval-interval",
        "0",
        "--log-interval",
        "5",
        "--train-steps",
        "1000000",
        "--log-path",
        str(tmp_path),
        "--run-name",
        "int",
    ]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "pong", "train.py"), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    metrics = tmp_path / "int" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and "losses/q" in metrics.read_text()):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]  # the shell's status for SIGINT, as the PPO games
    assert "SIGINT received" in out
    ckpts = os.listdir(tmp_path / "int" / "models")
    state = load_checkpoint(str(tmp_path / "int" / "models" / ckpts[0]))
    assert len(ckpts) == 1 and state["learner"]["train_count"] >= 5 and state["replay"] is not None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_sees_every_nan_and_inf(bad):
    """The one-sum-per-tensor check the DQN trainer runs after every step agrees with ``nonfinite_tensors``."""
    from common.run.checkpoint import all_finite, nonfinite_tensors

    w = paddle.ones([3, 4])
    state = [{"a": paddle.zeros([2]), "b": {"w": w}}, {"n": np.zeros(2), "i": paddle.to_tensor([1, 2])}]
    assert all_finite(state) and not nonfinite_tensors(state)
    w[1, 2] = bad
    assert not all_finite(state) and nonfinite_tensors(state) == ["0/b/w"]
    assert all_finite([]) and all_finite({"i": paddle.to_tensor([7])})


@pytest.mark.slow
def test_pong_play_plays_the_greedy_episode_and_the_zoo_exports_it(tmp_path):
    """pong/play.py: the Q network's greedy episode, an mp4 and the points; common.zoo makes a weights-only
    file of it that plays the same episode; another game's checkpoint is refused."""
    from common import zoo
    from pong.play import main as play
    from pong.train import main

    run = main(["--agent", "snd", *TINY, "--eval-interval", "0", "--log-path", str(tmp_path), "--train-steps", "20"])
    out = play(["--checkpoint", run["checkpoint"], "--output", str(tmp_path / "p.mp4"), "--max-steps", "60"])
    assert 0 < out["steps"] <= 60 and set(out) >= {"return", "points_for", "points_against"}
    assert os.path.getsize(tmp_path / "p.mp4") > 1000
    again = play(["--checkpoint", run["checkpoint"], "--output", str(tmp_path / "q.mp4"), "--max-steps", "60"])
    assert again["return"] == out["return"]  # greedy on a CPU: the same episode
    card = zoo.export("pong", run["checkpoint"], "tiny-pong", hours=0.0, zoo=str(tmp_path / "zoo"))
    state = load_checkpoint(str(tmp_path / "zoo" / "tiny-pong.pdparams"))
    assert "learner" not in state and "replay" not in state and state["zoo"] == 1
    assert card["settings"]["agent"] == "snd" and card["agent_steps"] == run["env_steps"]
    assert "Double DQN + SND-V" in zoo.markdown_table(str(tmp_path / "zoo"))


def test_replay_bytes_is_what_the_memory_holds():
    from common.dqn.replay import ReplayMemory, replay_bytes

    m = ReplayMemory(50, (84, 84), 4)
    held = sum(a.nbytes for a in (m.frames, m.actions, m.rewards, m.terminals, m.firsts))
    assert replay_bytes(50, (84, 84)) == held


@pytest.mark.slow
def test_evaluations_never_change_what_is_trained(tmp_path):
    """An evaluation's epsilon coins are its own: a run with evaluations trains the same weights as one without."""
    from pong.train import main

    flags = ["--agent", "dqn", *TINY, "--train-steps", "30", "--max-eval-steps", "30", "--test-epsilon", "0.5"]
    flags += ["--log-path", str(tmp_path)]
    runs = [main(flags + ["--eval-interval", str(every), "--run-name", f"e{every}"]) for every in (0, 10)]
    weights = [load_checkpoint(r["checkpoint"])["policy"] for r in runs]
    assert "eval/return" in tags_of(runs[1]["run_dir"]) and "eval/return" not in tags_of(runs[0]["run_dir"])
    for name, w in weights[0].items():
        np.testing.assert_array_equal(w.numpy(), weights[1][name].numpy(), err_msg=name)
