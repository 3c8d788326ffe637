"""``--int-reward snd``: the SND authors' way of paying novelty, checked against hand-computed cases,
and ``--recipe snd-montezuma``, which uses it with their settings per method."""

import numpy as np
import paddle
import pytest

from common.intrinsic import make_intrinsic
from common.intrinsic.networks import ConvFeatureNet
from common.intrinsic.normalize import IntrinsicRewardScale
from common.ppo.buffer import RolloutBuffer
from common.run.config import parse_config
from montezuma.train import MontezumaConfig

OBS_SHAPE = (4, 84, 84)


def test_snd_payment_is_eta_times_error_clipped_to_0_1_without_normalisation():
    scale = IntrinsicRewardScale(0.99, num_envs=2, clip_eta=0.25)
    raw = np.array([[0.4, 8.0], [-1.0, 2.0]], np.float32)
    frames = (None, None, np.zeros((2, 2), np.float32))  # the gate's frames: unused without a gate
    np.testing.assert_allclose(scale.scale(raw, *frames), [[0.1, 1.0], [0.0, 0.5]], rtol=1e-6)
    # the same rewards again: no running statistic changes what is paid
    np.testing.assert_allclose(scale.scale(raw, *frames), [[0.1, 1.0], [0.0, 0.5]], rtol=1e-6)
    with pytest.raises(ValueError, match="first-visit"):
        IntrinsicRewardScale(0.99, num_envs=2, first_visit=True, clip_eta=1.0)


def test_intrinsic_gae_is_cut_at_episode_ends_only_when_episodic():
    """T=2, one env whose episode ends at t=0; gamma = lambda = 0.5, values 1 everywhere, intrinsic
    rewards 1 and 2. Non-episodic (RND): A1 = 2 + 0.5*1 - 1 = 1.5, A0 = 1 + 0.5*1 - 1 + 0.25*1.5 = 0.875.
    Episodic (SND's code): A1 = 1.5, A0 = 1 - 1 = 0 (nothing flows across the end)."""
    buf = RolloutBuffer(2, 1, (1, 1, 1))
    buf.rewards_int[:] = [[1.0], [2.0]]
    buf.values_int[:] = 1.0
    buf.dones[:] = [[1.0], [0.0]]
    buf.compute_returns_and_advantages(0.0, 1.0, 0.5, 0.5, 0.5, 0.0, 1.0)
    np.testing.assert_allclose(buf.adv_int[:, 0], [0.875, 1.5])
    buf.compute_returns_and_advantages(0.0, 1.0, 0.5, 0.5, 0.5, 0.0, 1.0, int_episodic=True)
    np.testing.assert_allclose(buf.adv_int[:, 0], [0.0, 1.5])
    np.testing.assert_allclose(buf.ret_int[:, 0], [1.0, 2.5])


def _module(name):
    paddle.seed(0)

    def nets(c):
        return ConvFeatureNet(c, 16), ConvFeatureNet(c, 16, hidden=(16,))

    return make_intrinsic(
        name, nets, OBS_SHAPE, 1, lr=1e-3, update_proportion=1.0, max_grad_norm=0.5, seed=0, authors_scale=True
    )


@pytest.mark.parametrize("name", ["rnd", "snd-vic", "snd-std", "snd-v"])
def test_authors_scale_input_and_error(name):
    """RND: the latest frame / 255 minus its running mean, half the summed squared error; the SND
    targets: the latest frame / 255 as it is, the mean squared error over the features."""
    mod = _module(name)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, size=(6, *OBS_SHAPE), dtype=np.uint8)
    mod.observe(obs[:3])
    latest = obs[:, -1:].astype(np.float32) / 255.0
    if name == "rnd":
        x = latest - mod.obs_rms.mean.astype(np.float32) / 255.0
    else:
        x = latest
    with paddle.no_grad():
        xt = paddle.to_tensor(x)
        diff = (mod._target_features(xt) - mod.predictor(xt)).numpy()
    expected = (diff**2).sum(1) / 2 if name == "rnd" else (diff**2).mean(1)
    np.testing.assert_allclose(mod.reward(obs), expected, rtol=1e-5, atol=1e-7)


def test_authors_scale_is_refused_for_modules_outside_their_code():
    with pytest.raises(ValueError, match="noveld"):
        _module("noveld")


@pytest.mark.parametrize(
    "method, gamma, ext_coef, eta", [("none", 0.99, 1.0, 1.0), ("rnd", 0.998, 2.0, 1.0), ("snd-vic", 0.998, 2.0, 0.25)]
)
def test_recipe_sets_the_authors_values_per_method(method, gamma, ext_coef, eta):
    cfg = parse_config(MontezumaConfig, ["--recipe", "snd-montezuma", "--intrinsic", method])
    assert (cfg.gamma, cfg.ext_coef, cfg.int_eta) == (gamma, ext_coef, eta)
    assert (cfg.num_processes, cfg.num_local_steps, cfg.minibatch_size, cfg.num_epochs) == (128, 128, 512, 4)
    assert (cfg.lr, cfg.beta, cfg.int_gamma, cfg.int_reward, cfg.intrinsic_epochs) == (1e-4, 0.001, 0.99, "snd", 1)
    typed = parse_config(
        MontezumaConfig, ["--recipe", "snd-montezuma", "--intrinsic", method, "--gamma", "0.9", "--int-eta", "0.5"]
    )
    assert (typed.gamma, typed.int_eta) == (0.9, 0.5)  # typed flags win over the recipe and its cases


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--int-eta", "0.5"], "--int-eta 0.5 is invalid: expected 1 unless --int-reward snd"),
        (["--int-reward", "snd", "--intrinsic", "noveld"], "--int-reward 'snd' is invalid"),
        (["--int-reward", "snd", "--int-first-visit"], "no first-visit gate"),
        (["--int-reward", "snd", "--int-eta", "0"], "--int-eta 0.0 is invalid: expected a positive scale"),
        (["--intrinsic-epochs", "5", "--num-epochs", "4"], "--intrinsic-epochs 5 is invalid"),
    ],
)
def test_bad_convention_flags_are_refused_by_name(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(MontezumaConfig, argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.slow
def test_trainer_pays_the_novelty_of_s_t_clipped_and_trains_the_module_in_its_epochs(tmp_path):
    """A real Montezuma trainer under the convention: each step's reward is clip(eta x error(s_t), 0, 1)
    of the module after it has seen the rollout's s_t; the module steps only in its first epoch."""
    from common.ppo.trainer import Trainer
    from montezuma.train import SPEC

    cfg = parse_config(
        MontezumaConfig,
        [
            "--recipe", "snd-montezuma", "--intrinsic", "rnd", "--int-eta", "3",
            "--num-processes", "2", "--num-workers", "-1", "--num-local-steps", "8", "--batch-size", "2",
            "--num-epochs", "3", "--intrinsic-epochs", "1", "--eval-interval", "0",
            "--log-path", str(tmp_path), "--run-name", "a",
        ],
    )  # fmt: skip
    trainer = Trainer(SPEC, cfg)
    try:
        rng = np.random.default_rng(5)
        buf = trainer.buffer
        buf.obs[:] = rng.integers(0, 256, size=buf.obs.shape, dtype=np.uint8)
        buf.actions[:] = rng.integers(0, trainer.num_actions, size=buf.actions.shape)
        buf.log_probs[:] = -np.log(trainer.num_actions)
        buf.dones[:] = 0
        buf.dones[3, 1] = 1.0
        reference = make_intrinsic(
            "rnd",
            lambda c: SPEC.make_intrinsic_networks(cfg, c),
            OBS_SHAPE,
            1,
            lr=1e-4,
            update_proportion=1.0,
            max_grad_norm=0.5,
            seed=0,
            authors_scale=True,
        )
        reference.set_state_dict(trainer.intrinsic.state_dict())
        states = buf.obs[:-1].reshape(-1, *OBS_SHAPE)
        reference.observe(states)
        expected = np.clip(3.0 * reference.reward(states).reshape(8, 2), 0.0, 1.0)
        trainer.intrinsic_rewards()
        np.testing.assert_allclose(buf.rewards_int, expected, rtol=1e-5)
        assert 0.0 < expected.min() and expected.max() <= 1.0

        calls = []
        original = trainer.intrinsic.update
        trainer.intrinsic.update = lambda batch: calls.append(len(batch["obs"])) or original(batch)
        buf.compute_returns_and_advantages(0.0, 0.0, 0.99, 0.95, 0.99, 2.0, 1.0, int_episodic=True)
        losses = trainer.learn()
        assert calls == [8, 8]  # 2 minibatches of the first of 3 epochs
        assert losses is not None and np.isfinite(losses["forward"]) and np.isfinite(losses["actor"])
    finally:
        trainer.close()
