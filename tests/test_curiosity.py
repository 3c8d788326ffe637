"""NovelD, ICM, E3B and E3B x RND: their rewards against hand-computed values, their training, their checkpoints."""

import numpy as np
import paddle
import pytest

from common.intrinsic import make_intrinsic
from common.intrinsic.base import episode_rewards
from common.intrinsic.dynamics import inverse_loss
from common.intrinsic.e3b import EllipticalMemory
from common.intrinsic.icm import ICM_BETA, forward_error
from common.intrinsic.noveld import novelty_difference
from common.run.distributed import NO_SYNC
from gridworld.rnd_model import make_rnd_networks

SHAPE = (3, 7, 7)
ACTIONS = 7


def module(name, seed=0, **kw):
    m = make_intrinsic(
        name, make_rnd_networks, SHAPE, 3, lr=1e-3, update_proportion=1.0, max_grad_norm=0.5, seed=seed, **kw
    )
    return m


def rollout(T=6, N=3, seed=0, ended=((2, 1), (4, 0))):
    """(obs uint8[T+1, N, ...], next_obs with distinct terminal frames, actions, dones)."""
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 10, size=(T + 1, N, *SHAPE)).astype(np.uint8)
    next_obs, dones = obs[1:].copy(), np.zeros((T, N), np.float32)
    for t, i in ended:
        dones[t, i] = 1
        next_obs[t, i] = rng.integers(0, 10, size=SHAPE)  # the terminal frame, not the reset frame obs[t+1]
    return obs, next_obs, rng.integers(0, ACTIONS, size=(T, N)), dones


def minibatch(obs, next_obs, actions, dones):
    flat = lambda a: a.reshape(-1, *a.shape[2:])  # noqa: E731
    return {"obs": flat(obs[:-1]), "next_obs": flat(next_obs), "actions": actions.reshape(-1), "dones": dones.ravel()}


# ------------------------------------------------------------------ NovelD
def test_novelty_difference_clips_at_zero_on_a_tiny_sequence():
    novelty = np.array([1.0, 4.0, 2.0, 0.5, 3.0])  # N(s_0) .. N(s_4) along one episode
    got = novelty_difference(novelty[1:], novelty[:-1], alpha=0.5)
    # 4 - 0.5*1 = 3.5; 2 - 0.5*4 = 0 (exactly); 0.5 - 0.5*2 < 0 -> 0; 3 - 0.5*0.5 = 2.75
    np.testing.assert_allclose(got, [3.5, 0.0, 0.0, 2.75])
    assert got.dtype == np.float32


def test_noveld_rollout_reward_is_the_clipped_difference_of_rnd_novelties():
    m = module("noveld")
    obs, next_obs, actions, dones = rollout()
    m.observe(obs.reshape(-1, *SHAPE))
    T, N = dones.shape

    def l2(frames):  # the NovelD authors' novelty: the L2 norm of the error, from the networks themselves
        with paddle.no_grad():
            x = m.normalize(frames.reshape(-1, *SHAPE))
            return np.linalg.norm((m.target(x) - m.predictor(x)).numpy(), axis=1).reshape(T, N)

    n_now, n_next = l2(obs[:-1]), l2(next_obs)  # next_obs: the terminal frames where an episode ended
    want = np.maximum(n_next - 0.5 * n_now, 0.0)
    np.testing.assert_allclose(m.rollout_reward(obs, next_obs, actions, dones), want, rtol=1e-5, atol=1e-5)
    assert m.first_visit_gate and not module("rnd").first_visit_gate


def test_noveld_turns_the_trainers_first_visit_gate_on(tmp_path):
    from common.ppo.trainer import Trainer
    from mario.train import SPEC, MarioConfig

    kw = dict(world=1, stage=1, num_processes=2, num_workers=-1, log_path=str(tmp_path), int_first_visit=False)
    gated = Trainer(SPEC, MarioConfig(intrinsic="noveld", run_name="n", **kw))
    plain = Trainer(SPEC, MarioConfig(intrinsic="rnd", run_name="r", **kw))
    try:
        assert gated.int_scale.gate is not None and plain.int_scale.gate is None
    finally:
        gated.close()
        plain.close()


# ------------------------------------------------------------------ ICM
def test_inverse_loss_is_the_cross_entropy_of_a_known_batch():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0], [0.0, 0.0, 0.0]], np.float32)
    actions = np.array([0, 1, 2])
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    want = -log_softmax[np.arange(3), actions].mean()
    got = inverse_loss(paddle.to_tensor(logits), paddle.to_tensor(actions))
    assert got.shape == [] and float(got) == pytest.approx(want, rel=1e-6)


def test_forward_error_is_half_the_squared_distance():
    a = paddle.to_tensor([[1.0, 2.0], [0.0, 0.0]])
    b = paddle.to_tensor([[0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(forward_error(a, b).numpy(), [2.5, 12.5])


def test_icm_reward_is_the_forward_models_error_on_the_true_next_frames():
    m = module("icm", num_actions=ACTIONS)
    obs, next_obs, actions, dones = rollout()
    m.observe(obs.reshape(-1, *SHAPE))
    T, N = dones.shape
    phi_now = m.features(obs[:-1].reshape(-1, *SHAPE))
    phi_next = m.features(next_obs.reshape(-1, *SHAPE))
    one_hot = np.eye(ACTIONS, dtype=np.float32)[actions.reshape(-1)]
    with paddle.no_grad():
        predicted = m.nets.forward_model(paddle.to_tensor(np.concatenate([phi_now, one_hot], 1))).numpy()
    want = 0.5 * ((predicted - phi_next) ** 2).sum(1)
    got = m.rollout_reward(obs, next_obs, actions, dones)
    np.testing.assert_allclose(got, want.reshape(T, N), rtol=1e-4, atol=1e-3)
    with pytest.raises(TypeError, match="rollout_reward"):
        m.reward(obs[0])


def test_icm_logs_its_terms_and_its_total_is_the_papers_weighting():
    m = module("icm", num_actions=ACTIONS)
    obs, next_obs, actions, dones = rollout()
    m.observe(obs.reshape(-1, *SHAPE))
    out = m.update(minibatch(obs, next_obs, actions, dones))
    assert set(out) == {"icm_inverse", "icm_forward", "icm_total"}
    assert out["icm_total"] == pytest.approx((1 - ICM_BETA) * out["icm_inverse"] + ICM_BETA * out["icm_forward"])


def test_icm_features_learn_from_the_inverse_model_only():
    """The forward loss trains the forward model but never reaches the encoder (a gradient there shrinks the
    features and, under the trainer's reward scaling, silences the reward): the encoder's gradient of the
    whole loss equals that of (1 - beta) * the inverse loss alone."""
    m = module("icm", num_actions=ACTIONS)
    obs, next_obs, actions, dones = rollout()
    m.observe(obs.reshape(-1, *SHAPE))
    batch = minibatch(obs, next_obs, actions, dones)
    acts = paddle.to_tensor(batch["actions"].astype(np.int64))

    def encoder_grads(whole: bool):
        m.nets.clear_gradients()
        phi_now, phi_next = paddle.split(
            m.nets.encoder(m.normalize(np.concatenate([batch["obs"], batch["next_obs"]]))), 2
        )
        inverse = inverse_loss(m.nets.inverse(paddle.concat([phi_now, phi_next], axis=1)), acts)
        loss = m.losses(phi_now, phi_next, acts, inverse)[0] if whole else (1 - ICM_BETA) * inverse
        loss.backward()
        forward_grad = m.nets.forward_model[0].weight.grad
        return [p.grad.numpy().copy() for p in m.nets.encoder.parameters()], forward_grad

    whole, forward_grad = encoder_grads(True)
    assert forward_grad is not None and np.abs(forward_grad.numpy()).max() > 0  # the forward model does learn
    inverse_only, _ = encoder_grads(False)
    for a, b in zip(whole, inverse_only):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["icm", "e3b"])
def test_the_inverse_model_learns_which_action_changed_the_frame(name):
    """Next frame = this frame with the action's code written into a fixed cell: learnable from the pair."""
    rng = np.random.default_rng(3)
    m = module(name, num_actions=ACTIONS)
    obs = rng.integers(0, 10, size=(256, *SHAPE)).astype(np.uint8)
    actions = rng.integers(0, ACTIONS, size=256)
    nxt = obs.copy()
    nxt[:, 0, 3, 3] = actions
    m.observe(np.concatenate([obs, nxt]))
    batch = {"obs": obs, "next_obs": nxt, "actions": actions, "dones": np.zeros(256, np.float32)}
    first = m.update(batch)[f"{name}_inverse"]
    for _ in range(60):
        last = m.update(batch)[f"{name}_inverse"]
    assert last < 0.5 * min(first, np.log(ACTIONS))  # well below chance (log 7 = 1.95)


def test_action_modules_need_the_action_count():
    with pytest.raises(ValueError, match="num_actions"):
        module("icm")
    with pytest.raises(ValueError, match="at least 2 actions"):
        module("e3b", num_actions=1)


# ------------------------------------------------------------------ E3B
def direct_bonuses(phis, ridge):
    """phi_k^T (ridge*I + sum_{j<k} phi_j phi_j^T)^-1 phi_k, with an explicit inverse per step."""
    d = phis.shape[1]
    out, cov = [], ridge * np.eye(d)
    for phi in phis:
        out.append(phi @ np.linalg.inv(cov) @ phi)
        cov += np.outer(phi, phi)
    return np.array(out)


def test_elliptical_bonus_equals_the_direct_inverse_formula():
    rng = np.random.default_rng(0)
    phis = rng.normal(size=(40, 2, 6))  # 40 steps, 2 envs, D = 6
    mem = EllipticalMemory(2, 6, ridge=0.1)
    got = np.stack([mem.bonus(p) for p in phis])
    for env in range(2):
        np.testing.assert_allclose(got[:, env], direct_bonuses(phis[:, env], 0.1), rtol=1e-8)
    mem.restart(1, phis[0, 1])  # a new episode for env 1 only, its first observation in C
    again = mem.bonus(phis[1])
    assert again[1] == pytest.approx(direct_bonuses(phis[:2, 1], 0.1)[1], rel=1e-8)
    assert again[0] == pytest.approx(direct_bonuses(np.concatenate([phis[:, 0], phis[1:2, 0]]), 0.1)[-1], rel=1e-8)


def test_e3b_rollout_reward_keeps_each_episode_and_restarts_it_at_its_end():
    m = module("e3b", num_actions=ACTIONS)
    obs, next_obs, actions, dones = rollout(T=6, N=3, ended=((2, 1),))
    m.observe(obs.reshape(-1, *SHAPE))
    got = m.rollout_reward(obs, next_obs, actions, dones)
    phi_obs, phi_next = m.features(obs.reshape(-1, *SHAPE)).reshape(7, 3, -1), None
    phi_next = m.features(next_obs.reshape(-1, *SHAPE)).reshape(6, 3, -1).astype(np.float64)
    # env 0: one episode from obs[0]; env 1: ends at step 2, the next begins at obs[3]
    want0 = direct_bonuses(np.concatenate([phi_obs[:1, 0], phi_next[:, 0]]).astype(np.float64), 0.1)[1:]
    np.testing.assert_allclose(got[:, 0], want0, rtol=1e-4)
    first = direct_bonuses(np.concatenate([phi_obs[:1, 1], phi_next[:3, 1]]).astype(np.float64), 0.1)[1:]
    second = direct_bonuses(np.concatenate([phi_obs[3:4, 1], phi_next[3:, 1]]).astype(np.float64), 0.1)[1:]
    np.testing.assert_allclose(got[:, 1], np.concatenate([first, second]), rtol=1e-4)
    # the next rollout continues the episodes: its rewards differ from a fresh module's
    continued = m.rollout_reward(obs, next_obs, actions, np.zeros_like(dones))
    m.reset_episodes()
    fresh = m.rollout_reward(obs, next_obs, actions, np.zeros_like(dones))
    assert np.all(continued[:, 0] < fresh[:, 0])
    with pytest.raises(ValueError, match="3 envs"):
        m.rollout_reward(obs[:, :2], next_obs[:, :2], actions[:, :2], dones[:, :2])


def test_episodic_count_pays_one_over_the_root_of_the_visits_in_the_episode():
    from common.intrinsic.episodic_count import EpisodicCount

    m = module("episodic-count")
    a, b, c = (np.full(SHAPE, v, np.uint8) for v in (1, 2, 3))
    # env 0: a b a a b (its episode began at a); env 1: ends at step 2 (terminal b), the next begins at c
    obs = np.stack([np.stack(pair) for pair in [(a, a), (b, b), (a, a), (c, c), (a, a), (b, b)]])
    next_obs = obs[1:].copy()
    next_obs[2, 1] = b  # env 1's terminal frame: the reset frame obs[3, 1] = c is the next episode's first
    dones = np.zeros((5, 2), np.float32)
    dones[2, 1] = 1
    got = m.rollout_reward(obs, next_obs, np.zeros((5, 2), np.int64), dones)
    # env 0 visits b a c a b after a: a's 2nd and 3rd visits, b's 1st and 2nd
    np.testing.assert_allclose(got[:, 0], 1 / np.sqrt([1, 2, 1, 3, 2]), rtol=1e-6)
    # env 1: b (1st), a (2nd, a began it), b (2nd, the terminal frame); then c began a new episode: a, b new
    np.testing.assert_allclose(got[:, 1], 1 / np.sqrt([1, 2, 2, 1, 1]), rtol=1e-6)
    # the next rollout continues each episode; reset_episodes forgets them
    continued = m.rollout_reward(obs[-2:], next_obs[-1:], np.zeros((1, 2), np.int64), np.zeros((1, 2), np.float32))
    np.testing.assert_allclose(continued[0], 1 / np.sqrt([3, 2]), rtol=1e-6)
    m.reset_episodes()
    fresh = m.rollout_reward(obs[-2:], next_obs[-1:], np.zeros((1, 2), np.int64), np.zeros((1, 2), np.float32))
    np.testing.assert_allclose(fresh[0], [1.0, 1.0])
    with pytest.raises(ValueError, match="2 envs"):
        m.rollout_reward(obs[:, :1], next_obs[:, :1], np.zeros((5, 1), np.int64), dones[:, :1])
    with pytest.raises(TypeError, match="rollout_reward"):
        m.reward(obs[0])
    # only the counted (last) channels make the state: frames that differ in an earlier one are one state
    last = EpisodicCount(SHAPE, input_channels=1)
    other_a = a.copy()
    other_a[0] = 9
    pair = np.stack([a, other_a])[:, None]  # one env: a, then a frame equal to it in its last channel
    np.testing.assert_allclose(
        last.rollout_reward(pair, pair[1:], np.zeros((1, 1), np.int64), dones[:1, :1]), [[0.5**0.5]]
    )
    with pytest.raises(ValueError, match="input_channels"):
        EpisodicCount(SHAPE, input_channels=4)


def test_e3b_fixed_pays_e3b_s_bonus_and_never_trains_its_encoder():
    obs, next_obs, actions, dones = rollout()
    paddle.seed(0)
    fixed = module("e3b-fixed", num_actions=ACTIONS)
    paddle.seed(0)  # the same initial encoder
    e3b = module("e3b", num_actions=ACTIONS)
    for m in (fixed, e3b):
        m.observe(obs.reshape(-1, *SHAPE))
    np.testing.assert_allclose(  # the same initial encoder pays the same bonus
        fixed.rollout_reward(obs, next_obs, actions, dones), e3b.rollout_reward(obs, next_obs, actions, dones)
    )
    before = [p.numpy().copy() for p in fixed.nets.parameters()]
    assert fixed.update(minibatch(obs, next_obs, actions, dones)) == {}
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(fixed.nets.parameters(), before))


# ------------------------------------------------------------------ E3B x RND
def test_e3b_rnd_pays_the_product_of_e3b_and_rnd_and_trains_both():
    m = module("e3b-rnd", num_actions=ACTIONS)
    obs, next_obs, actions, dones = rollout(T=6, N=3, ended=((2, 1),))
    m.observe(obs.reshape(-1, *SHAPE))
    got = m.rollout_reward(obs, next_obs, actions, dones)
    m.reset_episodes()
    episodic = m.episodic.rollout_reward(obs, next_obs, actions, dones)  # E3B's own bonus, episodes as above
    novelty = m.novelty.reward(next_obs.reshape(-1, *SHAPE)).reshape(6, 3)  # RND's, of every s_t+1
    np.testing.assert_allclose(got, episodic * novelty, rtol=1e-5)
    assert got.dtype == np.float32 and np.all(episodic > 0) and np.all(novelty > 0)
    before = [p.numpy().copy() for p in m.novelty.predictor.parameters()]
    losses = m.update(minibatch(obs, next_obs, actions, dones))
    assert set(losses) == {"e3b_inverse", "forward"} and all(np.isfinite(v) for v in losses.values())
    assert any(np.abs(p.numpy() - b).max() > 0 for p, b in zip(m.novelty.predictor.parameters(), before))


def test_e3b_rnd_pays_a_view_familiar_over_training_far_less_than_e3b_alone_does():
    """Two one-step episodes from the same start, one to a view trained on many times, one to a view never
    seen: E3B pays both as new to their episode (within a small factor); the product pays the familiar one
    ten times less than that, relatively."""
    rng = np.random.default_rng(4)
    start, familiar, unseen = rng.integers(0, 10, size=(3, 1, *SHAPE)).astype(np.uint8)
    m = module("e3b-rnd", num_actions=ACTIONS)
    m.observe(np.concatenate([start, familiar, unseen]))
    seen = {"obs": np.repeat(start, 64, 0), "next_obs": np.repeat(familiar, 64, 0)}
    for _ in range(150):
        m.update({**seen, "actions": np.zeros(64, np.int64), "dones": np.zeros(64, np.float32)})
    obs = np.stack([np.concatenate([start, start]), np.concatenate([familiar, unseen])])  # T+1 = 2, N = 2
    args = (obs, obs[1:], np.zeros((1, 2), np.int64), np.zeros((1, 2), np.float32))
    product = m.rollout_reward(*args)[0]
    m.reset_episodes()
    episodic = m.episodic.rollout_reward(*args)[0]
    assert 0.2 < episodic[0] / episodic[1] < 5.0  # both new to their episode: E3B alone, within a small factor
    assert product[0] / product[1] < 0.1 * episodic[0] / episodic[1]


def test_e3b_rnd_hands_what_data_parallel_attaches_to_both_parts_and_trains_both():
    m = module("e3b-rnd", num_actions=ACTIONS)
    stream, sync = np.random.default_rng(9), lambda parameters, finite: None
    m.rng, m.grad_sync = stream, sync
    assert m.episodic.rng is stream and m.novelty.rng is stream
    assert m.episodic.grad_sync is sync and m.novelty.grad_sync is sync
    assert len(m.normalizers()) == 2 and len(m.networks()) == 3  # E3B's nets; RND's target and predictor
    m.grad_sync = NO_SYNC
    obs, next_obs, actions, dones = rollout()
    m.observe(obs.reshape(-1, *SHAPE))
    before = [p.numpy().copy() for p in m.episodic.nets.parameters()]
    m.update(minibatch(obs, next_obs, actions, dones))
    assert any(np.abs(p.numpy() - b).max() > 0 for p, b in zip(m.episodic.nets.parameters(), before))


# ------------------------------------------------------------------ shared
@pytest.mark.parametrize("name", ["noveld", "icm", "e3b", "e3b-rnd"])
def test_checkpoint_round_trip_gives_the_same_rewards_and_training(name):
    obs, next_obs, actions, dones = rollout()
    a, b = module(name, num_actions=ACTIONS), module(name, seed=5, num_actions=ACTIONS)
    a.observe(obs.reshape(-1, *SHAPE))
    a.update(minibatch(obs, next_obs, actions, dones))
    b.set_state_dict(a.state_dict())
    np.testing.assert_allclose(
        a.rollout_reward(obs, next_obs, actions, dones), b.rollout_reward(obs, next_obs, actions, dones), rtol=1e-6
    )
    batch = minibatch(obs, next_obs, actions, dones)
    assert a.update(batch) == pytest.approx(b.update(batch), rel=1e-5)  # optimizer moments and rng came along
    with pytest.raises(ValueError, match="intrinsic module"):
        module("rnd").set_state_dict(a.state_dict())


@pytest.mark.parametrize("name", ["rnd", "noveld", "icm", "e3b", "e3b-rnd"])
def test_episode_rewards_score_one_played_episode(name):
    m = module(name, num_actions=ACTIONS)
    obs, _, actions, _ = rollout(T=5, N=1, ended=())
    m.observe(obs.reshape(-1, *SHAPE))
    stacks = obs[:, 0]
    got = episode_rewards(m, stacks, actions[:, 0])
    assert got.shape == (5,) and got.dtype == np.float32 and np.all(np.isfinite(got))
    again = episode_rewards(m, stacks, actions[:, 0])  # a fresh episodic memory each time
    np.testing.assert_allclose(got, again, rtol=1e-6)
    if name == "rnd":
        np.testing.assert_allclose(got, m.reward(stacks[1:]), rtol=1e-6)


# ------------------------------------------------------------------ end to end, in every PPO game
LOSS_TAG = {
    "noveld": "losses/forward",
    "icm": "losses/icm_inverse",
    "e3b": "losses/e3b_inverse",
    "e3b-rnd": "losses/e3b_inverse",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["noveld", "icm", "e3b", "e3b-rnd", "count", "episodic-count"])
def test_gridworld_trains_resumes_and_plots_each_module(tmp_path, name):
    import os

    from common.ppo.trainer import Trainer
    from common.run.logger import EVAL_INTRINSIC, read_metrics
    from gridworld.play import main as play_main
    from gridworld.train import SPEC, GridConfig

    kw = dict(intrinsic=name, num_processes=4, num_local_steps=16, batch_size=2, num_epochs=1, obs_norm_steps=2)
    kw.update(eval_interval=2, video_interval=0, histogram_interval=0, log_path=str(tmp_path), seed=1)
    result = Trainer(SPEC, GridConfig(num_global_steps=128, run_name="a", **kw)).train()
    metrics = read_metrics(result["run_dir"])
    assert np.all(np.isfinite(metrics[EVAL_INTRINSIC][1])) and np.all(metrics["intrinsic/raw_reward_mean"][1] > 0)
    if name in LOSS_TAG:
        assert np.all(np.isfinite(metrics[LOSS_TAG[name]][1]))
    if name == "icm":
        assert "losses/icm_forward" in metrics and "losses/icm_total" in metrics
    resumed = Trainer(SPEC, GridConfig(num_global_steps=192, run_name="b", resume=result["checkpoint"], **kw))
    assert resumed.update == 2
    assert resumed.train()["update"] == 3
    out = tmp_path / "play.mp4"
    played = play_main(
        [
            "--checkpoint",
            result["checkpoint"],
            "--output",
            str(out),
            "--max-steps",
            "12",
            "--plot",
            str(tmp_path / "along.png"),
        ]
    )
    assert os.path.exists(played["plot"]) and out.exists()
    along = np.load(tmp_path / "along.npz")
    assert np.all(np.isfinite(along[along.files[0]]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "game,name",
    [
        ("mario", "icm"),
        ("mario", "e3b"),
        ("montezuma", "noveld"),
        ("montezuma", "icm"),
        ("montezuma", "episodic-count"),
    ],
)
def test_atari_like_games_train_with_the_new_modules(tmp_path, game, name):
    from common.ppo.trainer import Trainer
    from common.run.logger import read_metrics
    from mario.train import SPEC as MARIO
    from mario.train import MarioConfig
    from montezuma.train import SPEC as MONTEZUMA
    from montezuma.train import MontezumaConfig

    kw = dict(intrinsic=name, num_processes=2, num_workers=-1, num_local_steps=32, batch_size=2, num_epochs=1)
    kw.update(num_global_steps=128, obs_norm_steps=2, eval_interval=0, video_interval=0, histogram_interval=0)
    kw.update(embedding_interval=0, log_path=str(tmp_path), run_name="r")
    spec, cfg = (
        (MARIO, MarioConfig(world=1, stage=1, **kw))
        if game == "mario"
        else (MONTEZUMA, MontezumaConfig(max_episode_steps=40, **kw))
    )
    result = Trainer(spec, cfg).train()
    assert result["update"] == 2 and result["checkpoint"]
    metrics = read_metrics(result["run_dir"])
    if name in LOSS_TAG:  # the episodic count learns nothing
        assert np.all(np.isfinite(metrics[LOSS_TAG[name]][1]))
    assert np.all(np.isfinite(metrics["intrinsic/raw_reward_mean"][1]))


# ------------------------------------------------------------------ the guide's worked example
def test_hash_counts_pay_one_over_the_root_of_the_visits_so_far():
    m = module("count")
    a, b = rollout(T=1, N=2, ended=())[0][0]  # two different observations
    assert m.codes(np.stack([a, a]))[0] == m.codes(np.stack([a, a]))[1]
    np.testing.assert_allclose(m.reward(np.stack([a, b])), [1.0, 1.0])  # never seen
    m.observe(np.stack([a, a, a, b]))
    np.testing.assert_allclose(m.reward(np.stack([a, b])), [1 / np.sqrt(4), 1 / np.sqrt(2)])
    other = module("count", seed=9)
    other.set_state_dict(m.state_dict())
    np.testing.assert_allclose(other.reward(np.stack([a, b])), m.reward(np.stack([a, b])))
    assert m.update({}) == {}


def test_the_worked_example_stays_under_100_lines_and_is_registered():
    import dataclasses
    import os

    from common.intrinsic import names
    from common.ppo.config import TrainConfig
    from common.run.config import field_meta

    path = os.path.join(os.path.dirname(__file__), "..", "common", "intrinsic", "counts.py")
    assert len(open(path, encoding="utf-8").read().splitlines()) < 100
    assert "count" in names()
    assert tuple(field_meta(TrainConfig, "intrinsic")["choices"]) == names()  # --intrinsic offers every module
    assert "count (SimHash counts" in field_meta(TrainConfig, "intrinsic")["help"]  # and says what each is
    assert dataclasses.is_dataclass(TrainConfig)
