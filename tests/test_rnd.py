"""RND: frozen target, trained predictor, novelty falls where it was trained, subset-only forward."""

import numpy as np
import paddle
import pytest

from common.intrinsic import make_intrinsic
from mario.rnd_model import make_rnd_networks


def _rnd(update_proportion=0.25, lr=1e-3):
    paddle.seed(0)
    return make_intrinsic(
        "rnd", make_rnd_networks, (4, 84, 84), 1, lr=lr, update_proportion=update_proportion, max_grad_norm=0.5, seed=0
    )


def _frames(n, seed):
    rng = np.random.default_rng(seed)
    # Smooth-ish random images: random blocks upsampled, closer to game frames than white noise.
    small = rng.integers(0, 255, size=(n, 4, 12, 12), dtype=np.uint8)
    return np.repeat(np.repeat(small, 7, axis=2), 7, axis=3)


def test_target_frozen_predictor_trained_and_novelty_falls():
    rnd = _rnd()
    seen, unseen = _frames(32, 0), _frames(32, 1)
    rnd.observe(np.concatenate([seen, unseen]))
    target0 = [p.numpy().copy() for p in rnd.target.parameters()]
    pred0 = [p.numpy().copy() for p in rnd.predictor.parameters()]
    before_seen = rnd.reward(seen).mean()
    for _ in range(60):
        out = rnd.update({"next_obs": seen})
    assert np.isfinite(out["forward"])
    assert all(np.array_equal(a, p.numpy()) for a, p in zip(target0, rnd.target.parameters()))
    assert all(p.stop_gradient for p in rnd.target.parameters())
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(pred0, rnd.predictor.parameters()))
    after_seen, after_unseen = rnd.reward(seen).mean(), rnd.reward(unseen).mean()
    assert after_seen < 0.5 * before_seen
    assert after_seen < 0.7 * after_unseen


def test_predictor_runs_only_on_its_share_of_the_batch():
    rnd = _rnd(update_proportion=0.25)
    rnd.observe(_frames(8, 2))
    sizes = []
    hook = rnd.predictor.register_forward_pre_hook(lambda layer, inp: sizes.append(inp[0].shape[0]))
    try:
        rnd.update({"next_obs": _frames(64, 3)})
    finally:
        hook.remove()
    assert sizes == [16]


def test_observation_normalizer_clips_to_five():
    rnd = _rnd()
    rnd.observe(np.zeros((16, 4, 84, 84), np.uint8) + np.arange(16, dtype=np.uint8)[:, None, None, None])
    x = rnd.normalize(np.full((2, 4, 84, 84), 255, np.uint8)).numpy()
    assert x.shape == (2, 1, 84, 84) and x.max() == pytest.approx(5.0)
