"""Every SND variant trains end to end in both games and logs its target losses."""

import numpy as np
import pytest

from common.ppo.trainer import Trainer
from common.run.logger import read_metrics
from mario.train import SPEC as MARIO
from mario.train import MarioConfig
from montezuma.train import SPEC as MONTEZUMA
from montezuma.train import MontezumaConfig

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

COMMON = dict(
    num_processes=2,
    num_workers=-1,
    num_local_steps=64,
    batch_size=2,
    num_epochs=1,
    num_global_steps=256,
    obs_norm_steps=2,
    eval_interval=0,
    video_interval=0,
    save_interval=2,
    histogram_interval=0,
    embedding_interval=0,
    target_lr=3e-4,
)
GAMES = {
    "mario": (MARIO, lambda **kw: MarioConfig(world=1, stage=1, **kw)),
    "montezuma": (MONTEZUMA, lambda **kw: MontezumaConfig(max_episode_steps=40, **kw)),
}


@pytest.mark.parametrize("variant", ["snd-v", "snd-std", "snd-vic"])
@pytest.mark.parametrize("game", sorted(GAMES))
def test_snd_variant_runs_and_logs_target_losses(game, variant, tmp_path):
    spec, make_cfg = GAMES[game]
    cfg = make_cfg(intrinsic=variant, log_path=str(tmp_path), run_name="r", **COMMON)
    trainer = Trainer(spec, cfg)
    target0 = [p.numpy().copy() for p in trainer.intrinsic.target.parameters()]
    result = trainer.train()
    assert result["update"] == 2 and result["checkpoint"]
    assert trainer.intrinsic.target_opt.get_lr() == pytest.approx(3e-4)
    moved = [not np.array_equal(a, p.numpy()) for a, p in zip(target0, trainer.intrinsic.target.parameters())]
    assert any(moved), "the SND target did not train"
    metrics = read_metrics(result["run_dir"])
    target_terms = [t for t in metrics if t.startswith("losses/snd_target/")]
    assert "losses/snd_target" in metrics and target_terms and "losses/forward" in metrics
    assert np.isfinite(metrics["intrinsic/raw_reward_mean"][1]).all()
    resumed = Trainer(
        spec, make_cfg(intrinsic=variant, log_path=str(tmp_path), run_name="r2", resume=result["checkpoint"], **COMMON)
    )
    assert resumed.update == 2
    resumed.close()


@pytest.mark.parametrize("variant,policy", [("snd-std", "game"), ("snd-vic", "authors")])
def test_the_authors_networks_train_end_to_end_in_montezuma(variant, policy, tmp_path):
    """``--snd-network authors`` under the authors' reward convention (with SND-VIC also their
    actor-critic, ``--policy-network authors``): a short real run trains the target and the predictor,
    saves, and a resumed trainer loads their shapes and the policy back."""
    from montezuma.model import POLICIES

    spec, make_cfg = GAMES["montezuma"]
    kw = dict(intrinsic=variant, int_reward="snd", snd_network="authors", policy_network=policy, **COMMON)
    trainer = Trainer(spec, make_cfg(run_name="r", log_path=str(tmp_path), **kw))
    assert type(trainer.policy) is POLICIES[policy]
    assert trainer.intrinsic.target.convs[3].weight.shape == [128, 64, 3, 3]
    target0 = [p.numpy().copy() for p in trainer.intrinsic.target.parameters()]
    predictor0 = [p.numpy().copy() for p in trainer.intrinsic.predictor.parameters()]
    policy0 = [p.numpy().copy() for p in trainer.policy.parameters()]
    result = trainer.train()
    assert result["update"] == 2
    nets = (trainer.intrinsic.target, trainer.intrinsic.predictor, trainer.policy)
    for start, net in zip((target0, predictor0, policy0), nets):
        assert any(not np.array_equal(a, p.numpy()) for a, p in zip(start, net.parameters()))
    assert np.isfinite(read_metrics(result["run_dir"])["losses/forward"][1]).all()
    resumed = Trainer(spec, make_cfg(run_name="r2", log_path=str(tmp_path), resume=result["checkpoint"], **kw))
    for a, b in zip(trainer.intrinsic.predictor.parameters(), resumed.intrinsic.predictor.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(trainer.policy.parameters(), resumed.policy.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    resumed.close()
