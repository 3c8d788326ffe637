"""SND target trainers (common/intrinsic/snd.py), real Paddle on tiny batches."""

import numpy as np
import paddle
import pytest

from common.intrinsic import make_intrinsic, names
from common.intrinsic.augment import snd_v_augment_for, snd_v_sizes
from common.intrinsic.networks import ConvFeatureNet
from common.intrinsic.snd import (
    SND_VARIANTS,
    SNDSTD,
    SNDV,
    SNDVIC,
    STDIM_BETA1,
    STDIM_BETA2,
    contrastive_pairs,
    infonce_loss,
    snd_v_terms,
    stdim_scores,
    stdim_terms,
    vicreg_terms,
)
from common.run import tensorfile

OBS_SHAPE = (4, 84, 84)
FEAT = 32


def make_networks(in_channels, out_dim=FEAT):
    return (ConvFeatureNet(in_channels, out_dim), ConvFeatureNet(in_channels, out_dim, hidden=(FEAT,)))


def frames(n, seed=0):
    """n distinct uint8[4, 84, 84] frames: random 7x7 blocks of 12 px (structure, not pixel noise)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(n, 4, 7, 7))
    return np.repeat(np.repeat(small, 12, axis=2), 12, axis=3).astype(np.uint8)


def batch(n=8, seed=0, dones=None):
    obs = frames(n + 1, seed)
    return {
        "obs": obs[:-1],
        "next_obs": obs[1:],
        "dones": np.zeros(n, np.float32) if dones is None else np.asarray(dones, np.float32),
    }


def build(name, seed=0, **kw):
    paddle.seed(seed)
    mod = make_intrinsic(
        name,
        make_networks,
        OBS_SHAPE,
        1,
        lr=1e-3,
        update_proportion=0.5,
        max_grad_norm=0.5,
        seed=seed,
        target_lr=kw.pop("target_lr", 1e-3),
    )
    mod.observe(frames(32, seed=99))
    return mod


def params(layer):
    return [p.numpy().copy() for p in layer.parameters()]


def changed(before, layer):
    return any(not np.array_equal(a, p.numpy()) for a, p in zip(before, layer.parameters()))


def t(a):
    return paddle.to_tensor(np.asarray(a, np.float32))


# ---- loss terms against numpy ------------------------------------------------------
def test_snd_v_terms_match_numpy():
    rng = np.random.default_rng(0)
    za, zb = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    tau = np.array([0, 0, 0, 1, 1, 1], np.float32)
    got = snd_v_terms(t(za), t(zb), t(tau))
    d = ((za - zb) ** 2).mean(axis=1)
    np.testing.assert_allclose(float(got["contrastive"]), ((tau - d) ** 2).mean(), rtol=1e-5)
    assert float(got["magnitude"]) == 0.0  # far below the 200 threshold
    big = snd_v_terms(t(za * 10), t(zb * 10), t(tau), limit=50.0)
    mag = (100 * za**2).mean() + (100 * zb**2).mean() - 50.0
    assert mag > 0
    np.testing.assert_allclose(float(big["magnitude"]), mag, rtol=1e-5)


def np_vicreg(za, zb, eps=1e-4):
    n, d = za.shape
    out = {"invariance": ((za - zb) ** 2).mean(), "variance": 0.0, "covariance": 0.0}
    for z in (za, zb):
        std = np.sqrt(z.var(axis=0, ddof=1) + eps)
        out["variance"] += np.maximum(0, 1 - std).mean()
        c = np.cov(z, rowvar=False)
        out["covariance"] += ((c - np.diag(np.diag(c))) ** 2).sum() / d
    return out


def test_vicreg_terms_match_numpy():
    rng = np.random.default_rng(1)
    za, zb = 0.5 * rng.normal(size=(7, 4)), 0.5 * rng.normal(size=(7, 4)) + 0.1
    got, want = vicreg_terms(t(za), t(zb)), np_vicreg(za, zb)
    for k in want:
        np.testing.assert_allclose(float(got[k]), want[k], rtol=1e-4, err_msg=k)
    assert want["variance"] > 0 and want["covariance"] > 0


def test_vicreg_variance_zero_when_std_ge_1_positive_when_collapsed():
    rng = np.random.default_rng(2)
    wide = 3.0 * rng.normal(size=(16, 4))
    wide = (wide - wide.mean(0)) / wide.std(0, ddof=1) * np.array([1.0, 1.5, 2.0, 3.0])  # std exactly >= 1
    assert float(vicreg_terms(t(wide), t(wide))["variance"]) == 0.0
    same = np.ones((16, 4))
    collapsed = vicreg_terms(t(same), t(same))
    # std = sqrt(0 + 1e-4) = 0.01 per dim: relu(1 - 0.01) = 0.99 for each branch
    np.testing.assert_allclose(float(collapsed["variance"]), 2 * 0.99, rtol=1e-5)
    assert float(collapsed["invariance"]) == 0.0 and float(collapsed["covariance"]) == 0.0


def np_infonce(s):
    s = s - s.max(axis=-1, keepdims=True)
    logp = s - np.log(np.exp(s).sum(axis=-1, keepdims=True))
    return -np.mean([logp[p, i, i] for p in range(s.shape[0]) for i in range(s.shape[1])])


def test_infonce_matches_numpy():
    s = np.random.default_rng(3).normal(size=(3, 5, 5)) * 2
    np.testing.assert_allclose(float(infonce_loss(t(s))), np_infonce(s), rtol=1e-5)
    # a perfect classifier (huge diagonal) has ~zero loss, a constant one log(N)
    assert float(infonce_loss(t(np.eye(5)[None] * 100))) < 1e-6
    np.testing.assert_allclose(float(infonce_loss(t(np.zeros((2, 5, 5))))), np.log(5), rtol=1e-5)


def test_stdim_scores_and_terms_match_numpy():
    rng = np.random.default_rng(4)
    n, d, c, h, w = 4, 6, 3, 2, 2
    g_next, l_t, l_next, z_t = (rng.normal(size=s) for s in ((n, d), (n, c, h, w), (n, c, h, w), (n, d)))
    paddle.seed(0)
    gl, ll = paddle.nn.Linear(d, c), paddle.nn.Linear(c, c)
    for lin in (gl, ll):  # non-zero bias so that it is checked too
        lin.bias.set_value(t(rng.normal(size=lin.bias.shape)))
    s_gl, s_ll = stdim_scores(t(g_next), t(l_t), t(l_next), gl, ll)
    W1, b1, W2, b2 = (p.numpy() for p in (gl.weight, gl.bias, ll.weight, ll.bias))  # paddle: y = x W + b
    lt = l_t.reshape(n, c, h * w).transpose(2, 0, 1)  # [P, N, C]
    ln = l_next.reshape(n, c, h * w).transpose(2, 0, 1)
    want_gl = np.einsum("ic,pjc->pij", g_next @ W1 + b1, lt)
    want_ll = np.einsum("pic,pjc->pij", ln @ W2 + b2, lt)
    np.testing.assert_allclose(s_gl.numpy(), want_gl, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s_ll.numpy(), want_ll, rtol=1e-4, atol=1e-5)
    terms = stdim_terms(s_gl, s_ll, t(z_t))
    np.testing.assert_allclose(float(terms["global_local"]), np_infonce(want_gl), rtol=1e-4)
    np.testing.assert_allclose(float(terms["local_local"]), np_infonce(want_ll), rtol=1e-4)
    np.testing.assert_allclose(float(terms["std"]), -z_t.std(axis=1, ddof=1).mean(), rtol=1e-5)
    np.testing.assert_allclose(float(terms["score_sq"]), (want_gl**2).mean() + (want_ll**2).mean(), rtol=1e-4)


def test_cpu_stdim_losses_equal_the_paddle_ops_and_their_gradients():
    """common.cpu.stdim_losses (numpy, hand-written backward) = infonce/score_sq of stdim_scores (Paddle ops)."""
    from common import cpu
    from common.intrinsic.snd import stdim_features

    rng = np.random.default_rng(5)
    n, d, c, h, w = 6, 5, 4, 3, 2
    arrays = [rng.normal(size=s) for s in ((n, d), (n, c, h, w), (n, c, h, w))]
    paddle.seed(1)
    gl, ll = paddle.nn.Linear(d, c), paddle.nn.Linear(c, c)

    def losses(fast):
        xs = [t(a) for a in arrays]
        for x in xs:
            x.stop_gradient = False
        if fast:
            out = cpu.stdim_losses(*stdim_features(*xs, gl, ll))
        else:
            s_gl, s_ll = stdim_scores(*xs, gl, ll)
            terms = stdim_terms(s_gl, s_ll, xs[0])
            out = (terms["global_local"], terms["local_local"], terms["score_sq"])
        assert all(o.shape == [] for o in out)  # 0-D, as Paddle's reductions
        (2.0 * out[0] + 3.0 * out[1] + 0.5 * out[2]).backward()  # unequal weights: each gradient path counts
        grads = [x.grad.numpy() for x in xs] + [p.grad.numpy() for p in (*gl.parameters(), *ll.parameters())]
        for p in (*gl.parameters(), *ll.parameters()):
            p.clear_gradient()
        return [float(o) for o in out], grads

    (want, want_grads), (got, got_grads) = losses(False), losses(True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g_got, g_want in zip(got_grads, want_grads):
        np.testing.assert_allclose(g_got, g_want, rtol=1e-4, atol=1e-6)


def test_contrastive_pairs():
    for n in (2, 7, 16):
        a, b, tau = contrastive_pairs(n, np.random.default_rng(n))
        assert sorted(a) == list(range(n))
        assert (tau == 0).sum() == n // 2
        assert (a[tau == 0] == b[tau == 0]).all() and (a[tau == 1] != b[tau == 1]).all()
        assert ((0 <= b) & (b < n)).all()


# ---- modules -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SND_VARIANTS))
def test_update_trains_target_and_predictor(name):
    mod = build(name)
    assert isinstance(mod, SND_VARIANTS[name]) and mod.name == name
    tb, pb = params(mod.target), params(mod.predictor)
    hb = params(mod.heads) if mod.heads is not None else None
    out = mod.update(batch(8))
    assert set(out) == {"forward", "snd_target", *(f"snd_target/{k}" for k in mod.TERMS)}
    assert all(isinstance(v, float) and np.isfinite(v) for v in out.values())
    assert changed(tb, mod.target), "no gradient reached the SND target"
    assert changed(pb, mod.predictor)
    if hb is not None:
        assert changed(hb, mod.heads)
    r = mod.reward(frames(5))
    assert r.shape == (5,) and r.dtype == np.float32 and (r >= 0).all()


def test_std_total_is_weighted_sum_of_terms():
    mod = build("snd-std")
    out = mod.update(batch(8))
    want = (
        out["snd_target/global_local"]
        + out["snd_target/local_local"]
        + STDIM_BETA1 * out["snd_target/std"]
        + STDIM_BETA2 * out["snd_target/score_sq"]
    )
    np.testing.assert_allclose(out["snd_target"], want, rtol=1e-5)


def test_std_caps_pairs():
    paddle.seed(0)
    target, predictor = make_networks(1)
    mod = SNDSTD(
        target,
        predictor,
        target_lr=1e-3,
        obs_shape=OBS_SHAPE,
        input_channels=1,
        lr=1e-3,
        update_proportion=0.5,
        max_grad_norm=0.5,
        seed=0,
        max_pairs=4,
    )
    seen = []
    orig = mod.target.forward_with_map
    mod.target.forward_with_map = lambda x: (seen.append(x.shape[0]), orig(x))[1]
    out = mod.update(batch(10))
    assert seen[0] == 8 and np.isfinite(out["snd_target"])  # 4 pairs -> one pass over 2 * 4 states


@pytest.mark.parametrize("name", ["snd-std", "snd-vic"])
def test_no_consecutive_pairs_skips_target_step(name):
    mod = build(name)
    tb, pb = params(mod.target), params(mod.predictor)
    out = mod.update(batch(6, dones=[1, 1, 1, 1, 1, 0]))  # one valid pair is not enough
    assert out["snd_target"] == 0.0 and all(out[f"snd_target/{k}"] == 0.0 for k in mod.TERMS)
    assert not changed(tb, mod.target)
    assert changed(pb, mod.predictor)


def test_rnd_target_never_changes_via_registry():
    mod = build("rnd")
    assert all(p.stop_gradient for p in mod.target.parameters())
    tb, pb = params(mod.target), params(mod.predictor)
    for s in range(3):
        out = mod.update(batch(8, seed=s))
    assert set(out) == {"forward"}
    assert not changed(tb, mod.target)
    assert changed(pb, mod.predictor)


def test_snd_v_loss_falls_on_fixed_states():
    paddle.seed(0)
    target = ConvFeatureNet(1, 16)
    predictor = ConvFeatureNet(1, 16, hidden=(16,))
    mod = SNDV(
        target,
        predictor,
        target_lr=1e-3,
        obs_shape=OBS_SHAPE,
        input_channels=1,
        lr=1e-3,
        update_proportion=0.25,
        max_grad_norm=0.5,
        seed=0,
    )
    obs = frames(16, seed=5)
    mod.observe(obs)
    fixed = {"obs": obs, "next_obs": obs, "dones": np.zeros(16, np.float32)}
    losses = [mod.update(fixed)["snd_target/contrastive"] for _ in range(40)]
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < 0.5 * first, (first, last)
    # and the target now tells states apart: two augmentations of one state are
    # closer than augmentations of two different states (on average)
    rng = np.random.default_rng(1)
    x = mod.standardize(mod.raw(obs))
    with paddle.no_grad():
        za = mod.target(mod.augment(x, rng)).numpy()
        zb = mod.target(mod.augment(x, rng)).numpy()
    d = ((za[:, None] - zb[None]) ** 2).mean(-1)
    same, different = np.diag(d).mean(), d[~np.eye(len(d), dtype=bool)].mean()
    assert same < 0.7 * different, (same, different)


@pytest.mark.parametrize("name", sorted(SND_VARIANTS))
def test_state_dict_round_trip(name, tmp_path):
    mod = build(name)
    mod.update(batch(8, seed=1))  # optimizer moments and rng have moved
    path = str(tmp_path / "snd.pdparams")
    tensorfile.write(path, mod.state_dict())  # the checkpoints' format
    probe = frames(6, seed=3)
    r0, u0, r1 = mod.reward(probe), mod.update(batch(8, seed=2)), mod.reward(probe)
    mod.update(batch(8, seed=4))  # wander off, then restore
    mod.observe(frames(8, seed=5))
    state = tensorfile.read(path)
    assert state["name"] == name and "target_opt" in state and "predictor_opt" in state
    mod.set_state_dict(state)
    np.testing.assert_array_equal(mod.reward(probe), r0)
    assert mod.update(batch(8, seed=2)) == u0
    np.testing.assert_array_equal(mod.reward(probe), r1)


def test_set_state_dict_rejects_other_module():
    vic = build("snd-vic")
    with pytest.raises(ValueError, match="snd-vic"):
        build("snd-v").set_state_dict(vic.state_dict())


def test_registry_builds_each_variant_with_target_lr():
    for name, cls in SND_VARIANTS.items():
        mod = build(name, target_lr=3e-4)
        assert type(mod) is cls
        assert mod.target_opt.get_lr() == pytest.approx(3e-4)
        assert mod.predictor_opt.get_lr() == pytest.approx(1e-3)
    assert {SNDV, SNDSTD, SNDVIC} == set(SND_VARIANTS.values())


def test_make_intrinsic_rejects_unknown_names():
    with pytest.raises(ValueError) as err:
        make_intrinsic("snd-x", make_networks, OBS_SHAPE, 1, lr=1e-3, update_proportion=0.25, max_grad_norm=0.5, seed=0)
    for name in names():
        assert name in str(err.value)


@pytest.mark.parametrize("name", sorted(SND_VARIANTS))
def test_target_trains_on_its_share_of_the_minibatch(name):
    paddle.seed(0)
    target, predictor = make_networks(1)
    mod = make_intrinsic(
        name,
        lambda c: (target, predictor),
        OBS_SHAPE,
        1,
        lr=1e-3,
        update_proportion=0.25,
        max_grad_norm=0.5,
        seed=0,
        target_proportion=0.25,
    )
    mod.observe(frames(32, seed=99))
    seen = []
    compute = mod.target.compute
    mod.target.compute = lambda x, run, **kw: (seen.append(x.shape[0]), compute(x, run, **kw))[1]
    mod.update(batch(16))
    # the target step: 4 of 16 samples, SND-V pairs them (2 x 4 states), STD/VIC take (s_t, s_t+1) of each;
    # then the predictor's step reads the target on its own 4
    assert seen == [8, 4], seen


def test_snd_v_augmentations_are_sized_to_the_observation():
    assert snd_v_sizes(84) == {"tile_sizes": (1, 2, 4, 8, 12, 16), "kernel": 5}  # the authors' Atari sizes
    assert snd_v_sizes(7) == {"tile_sizes": (1,), "kernel": 0}  # MiniGrid's view: 1-cell tiles, no random conv
    assert snd_v_sizes(42)["kernel"] == 3
    # the pairs are augmented on the scale the target reads: MiniGrid's view (codes 0-10, 0-5, 0-2) gets
    # 1-cell tiles and noise of 0.2 on its z-scores, or on [0, 1] under the SND authors' scale
    paddle.seed(0)
    mod = sndv(obs_shape=(3, 7, 7), input_channels=3, specs=((8, 2, 1),))
    x = paddle.full([64, 3, 7, 7], 0.5)
    y = mod.augment(x, np.random.default_rng(0)).numpy()
    kept = np.abs(y - 0.5) <= 0.2 + 1e-6
    assert np.abs(y[kept] - 0.5).max() > 0.15  # noise of 0.2
    assert (np.abs(y[~kept]) <= 0.2 + 1e-6).all() and (~kept).any()  # a 1-cell tile zeroed (then noise)


def sndv(obs_shape=OBS_SHAPE, input_channels=1, specs=None):
    """An SND-V module whose target records the inputs it was given (``module.seen``)."""
    hw = obs_shape[-1]
    kw = {"input_hw": hw, "specs": specs} if specs else {}
    target = ConvFeatureNet(input_channels, 8, **kw)
    predictor = ConvFeatureNet(input_channels, 8, **kw)
    mod = SNDV(target, predictor, target_lr=1e-3, obs_shape=obs_shape, input_channels=input_channels,
               lr=1e-3, update_proportion=0.25, max_grad_norm=0.5, seed=0)  # fmt: skip
    forward = target.forward
    mod.seen = []

    def recording(x, *args):
        mod.seen.append(x.numpy())
        return forward(x, *args)

    target.forward = recording
    return mod


def test_snd_v_pairs_of_still_pixels_are_not_blown_to_the_clip():
    """A screen whose pixels never change but in one patch: the target's augmented inputs stay off the
    +-5 clip of the standardized scale (augmenting raw pixels before the per-pixel standardization put
    about half of them there: a still pixel's std is ~0), and under the authors' scale they are the
    frames in [0, 1] with their noise, as in the SND authors' code."""
    rng = np.random.default_rng(0)
    obs = np.full((64, 4, 84, 84), 40, np.uint8)
    obs[:, :, 30:50, 30:50] = rng.integers(0, 256, (64, 4, 20, 20), dtype=np.uint8)
    paddle.seed(0)
    mod = sndv()
    mod.observe(obs)
    mod._target_loss({"obs": obs})
    z = mod.seen[-1]
    assert z.shape == (128, 1, 84, 84)
    assert np.mean(np.abs(z) >= 4.99) < 0.01
    paddle.seed(0)
    mod = sndv()
    mod.observe(obs)
    mod.use_authors_scale(255.0)
    twin = np.random.default_rng()
    twin.bit_generator.state = mod.rng.bit_generator.state
    mod._target_loss({"obs": obs})
    idx_a, idx_b, _ = contrastive_pairs(len(obs), twin)  # the authors' order: augment the pixels, then / 255
    x = mod.raw(obs)
    on_pixels = snd_v_augment_for(84, 255.0)  # noise of 0.2 x 255 on the raw pixels
    raw_first = [(on_pixels(paddle.gather(x, paddle.to_tensor(i)), twin) / 255.0).numpy() for i in (idx_a, idx_b)]
    np.testing.assert_allclose(mod.seen[-1], np.concatenate(raw_first), atol=1e-5)


def test_stdim_losses_benchmark_runs():
    """benchmarks/stdim_losses.py at its smallest: both paths run and the table prints."""
    import contextlib
    import io
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import stdim_losses

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        stdim_losses.main(["--rounds", "1", "--reps", "1", "--sizes", "minigrid"])
    assert out.getvalue().splitlines()[2].startswith("| minigrid (128, 128, 32, 5) |")
