"""``--snd-network authors``: the SND authors' Atari target and predictor for SND-STD and SND-VIC, and
their predictor learning s_t (docs/sources.md, section 4.1)."""

import math

import numpy as np
import paddle
import pytest

from common.intrinsic import AUTHORS_PREDICTOR_GAIN, intrinsic_for_run
from common.intrinsic.networks import authors_snd_networks
from common.run.config import parse_config
from montezuma.train import SPEC as MONTEZUMA
from montezuma.train import MontezumaConfig


def _gram_scale(w: np.ndarray) -> np.ndarray:
    """The Gram matrix of the smaller side of a layer's weights, flattened to 2-D (orthogonal: gain^2 I)."""
    m = w.reshape(w.shape[0], -1)
    return m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m


def test_the_authors_pair_has_their_shapes_activations_and_gains():
    target, predictor = authors_snd_networks(1, predictor_gain=math.sqrt(2))
    convs = [(c.weight.shape, c._stride, c._padding) for c in target.convs]
    assert convs == [
        ([32, 1, 3, 3], [2, 2], 1),
        ([64, 32, 3, 3], [2, 2], 1),
        ([64, 64, 3, 3], [2, 2], 1),
        ([128, 64, 3, 3], [1, 1], 1),
    ]
    assert isinstance(target.act, paddle.nn.ReLU)
    assert [type(m).__name__ for m in predictor.head] == ["Linear", "ELU", "Linear", "ELU", "Linear"]
    assert target.head[0].weight.shape == [128 * 11 * 11, 512]  # 84 -> 42 -> 21 -> 11 -> 11
    for net, gain in ((target, 0.5), (predictor, math.sqrt(2))):
        for p in net.parameters():
            if p.ndim == 1:
                np.testing.assert_array_equal(p.numpy(), 0.0)  # biases start at 0
            else:
                g = _gram_scale(p.numpy())
                np.testing.assert_allclose(g, gain**2 * np.eye(len(g)), atol=1e-4)


def test_the_local_map_is_the_third_convolution_and_the_fast_path_matches_plain_layers():
    paddle.seed(0)
    target, _ = authors_snd_networks(1, predictor_gain=0.5)
    x = paddle.rand([8, 1, 84, 84])
    z, fmap = target.forward_with_map(x)
    assert z.shape == [8, 512] and fmap.shape == [8, 64, 11, 11]
    h = x  # the same layers one by one on Paddle's own kernels
    for i, conv in enumerate(target.convs):
        h = paddle.nn.functional.relu(conv(h))
        if i == 2:
            np.testing.assert_allclose(fmap.numpy(), h.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(z.numpy(), target.head(h.flatten(1)).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", sorted(AUTHORS_PREDICTOR_GAIN))
def test_the_option_builds_the_authors_module_whose_predictor_learns_s_t(method):
    cfg = MontezumaConfig(intrinsic=method, int_reward="snd", snd_network="authors", intrinsic_frames=1)
    module = intrinsic_for_run(MONTEZUMA, cfg, (4, 84, 84))
    assert module.target.convs[0].weight.shape == [32, 1, 3, 3]
    w = module.predictor.convs[1].weight.numpy()
    g = _gram_scale(w)
    np.testing.assert_allclose(g, AUTHORS_PREDICTOR_GAIN[method] ** 2 * np.eye(len(g)), atol=1e-4)
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.integers(0, 255, (8, 4, 84, 84), dtype=np.uint8),
        "next_obs": rng.integers(0, 255, (8, 4, 84, 84), dtype=np.uint8),
        "dones": np.zeros(8, np.float32),
    }
    seen = []
    module.distill = lambda states: seen.append(states) or 0.0
    module.update(batch)
    assert seen and seen[0] is batch["obs"]  # s_t, as the authors' code (ours by default: s_t+1)
    default = intrinsic_for_run(MONTEZUMA, MontezumaConfig(intrinsic=method, intrinsic_frames=1), (4, 84, 84))
    default.distill = lambda states: seen.append(states) or 0.0
    default.update(batch)
    assert seen[1] is batch["next_obs"]


def test_the_option_is_refused_for_other_methods_with_the_accepted_ones_named(capsys):
    with pytest.raises(SystemExit):
        parse_config(MontezumaConfig, ["--intrinsic", "rnd", "--snd-network", "authors"])
    err = capsys.readouterr().err
    assert "--snd-network 'authors' is invalid" in err and "authors is for snd-std, snd-vic" in err


def test_the_authors_policy_has_their_layout_and_gains():
    """``--policy-network authors``: their PPOAtariMotivationNetwork's layers and initial gains."""
    from montezuma.model import SNDAuthorsPolicy

    paddle.seed(0)
    net = SNDAuthorsPolicy(4, 18)
    convs = [(c.weight.shape, c._stride, c._padding) for c in net.features.convs]
    assert convs == [
        ([32, 4, 3, 3], [2, 2], 1),
        ([64, 32, 3, 3], [2, 2], 1),
        ([64, 64, 3, 3], [2, 2], 1),
        ([128, 64, 3, 3], [1, 1], 1),
    ]
    assert [type(m).__name__ for m in net.features.head] == ["Linear"]  # the trunk ends with no activation
    assert [type(m).__name__ for m in net.actor] == ["ReLU", "Linear", "ReLU", "Linear"]
    gains = {
        "features.convs.0.weight": math.sqrt(2),
        "features.head.0.weight": math.sqrt(2),
        "actor.1.weight": 0.01,
        "actor.3.weight": 0.01,
        "critic_hidden.0.weight": 0.1,
        "critic_ext.weight": 0.01,
        "critic_int.weight": 0.01,
    }
    params = dict(net.named_parameters())
    for name, gain in gains.items():
        g = _gram_scale(params[name].numpy())
        np.testing.assert_allclose(g, gain**2 * np.eye(len(g)), atol=1e-4 * max(1.0, gain**2), err_msg=name)
    for name, p in params.items():
        if p.ndim == 1:
            np.testing.assert_array_equal(p.numpy(), 0.0, err_msg=name)
    x = paddle.rand([5, 4, 84, 84])
    logits, v_ext, v_int = net(x)
    assert logits.shape == [5, 18] and v_ext.shape == [5] and v_int.shape == [5]
    # the critic reads the trunk before any ReLU; the actor after one
    h = net.features(x)
    hv = paddle.nn.functional.relu(net.critic_hidden[0](h))
    np.testing.assert_allclose(v_ext.numpy(), net.critic_ext(hv).squeeze(-1).numpy(), rtol=1e-4, atol=1e-6)
    a = net.actor[3](paddle.nn.functional.relu(net.actor[1](paddle.nn.functional.relu(h))))
    np.testing.assert_allclose(logits.numpy(), a.numpy(), rtol=1e-4, atol=1e-6)


def test_the_policy_network_option_picks_the_network_and_names_the_accepted_ones(capsys):
    from montezuma import model
    from montezuma.train import POLICY_NETWORKS

    assert tuple(model.POLICIES) == POLICY_NETWORKS
    for name, cls in model.POLICIES.items():
        cfg = parse_config(MontezumaConfig, ["--recipe", "snd-montezuma", "--policy-network", name])
        assert type(MONTEZUMA.make_policy(cfg, (4, 84, 84), 18)) is cls
    with pytest.raises(SystemExit):
        parse_config(MontezumaConfig, ["--policy-network", "nature"])
    err = capsys.readouterr().err
    assert "nature" in err and "game" in err and "authors" in err
