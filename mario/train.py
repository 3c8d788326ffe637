"""Train PPO + RND (or SND, or plain PPO) on Super Mario Bros: ``python mario/train.py --help``.

Defaults are the tutorial's (world 4-4, simple actions, 6 processes, 512 local
steps, 10 epochs, 16 minibatches, lr 4e-5, gamma 0.9, tau 1.0, beta 0.01, clip
0.2, grad clip 0.5, update proportion 0.25, seed 314). The intrinsic settings are
ours (the tutorial's RND never reached the advantages), see ``MarioConfig``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from common.ppo.config import TrainConfig
from common.run.config import Recipe, arg, default
from common.run.game import GameSpec
from mario import pictures
from mario.env import ACTION_SETS, OBS_SIZE, STACK, make_env


@dataclass
class MarioConfig(TrainConfig):
    """PPO + intrinsic reward on Super Mario Bros, the tutorial's settings by default.

    Intrinsic settings (not in the tutorial): the extrinsic advantage keeps weight 1
    so the tutorial's PPO objective is unchanged, the intrinsic advantage gets 0.5
    (the RND paper's 2:1 ratio of extrinsic to intrinsic), and the intrinsic stream
    is discounted with 0.99 (RND), longer than the extrinsic 0.9 so that novelty a
    few screens ahead still pulls.
    """

    RECIPES = {
        "cpu-1-1": Recipe(
            "clear world 1-1 on a 2-core CPU in the fewest CPU-hours (docs/mario_learning.md): the tutorial's "
            "discounting, clipping and entropy bonus, with RIGHT_ONLY actions (the tutorial's 'right'), "
            "8 envs x 128 steps, 4 epochs x 4 minibatches (the RND paper's PPO shape), lr 1e-4 (the "
            "tutorial's source project's default) and a greedy evaluation every 5 updates",
            dict(
                world=1,
                stage=1,
                action_type="right",
                num_processes=8,
                num_local_steps=128,
                num_epochs=4,
                batch_size=4,
                lr=1e-4,
                num_global_steps=4_000_000,
                eval_interval=5,
                video_interval=50,
                save_interval=0,
                save_minutes=5.0,
                stop_when_solved=True,
            ),
        ),
        "no-reward-1-1": Recipe(
            "curiosity alone on world 1-1, the ICM paper's test (docs/mario_no_reward.md): no game reward at all "
            "(--ext-coef 0), COMPLEX_MOVEMENT (12 actions, as many going left as right), 1M agent steps; "
            "otherwise cpu-1-1's shape (8 envs x 128 steps, 4 epochs x 4 minibatches, lr 1e-4)",
            dict(
                world=1,
                stage=1,
                action_type="complex",
                num_processes=8,
                num_local_steps=128,
                num_epochs=4,
                batch_size=4,
                lr=1e-4,
                ext_coef=0.0,
                int_coef=1.0,
                num_global_steps=1_000_000,
                eval_interval=5,
                video_interval=50,
                save_interval=0,
                save_minutes=5.0,
            ),
        ),
    }

    world: int = arg(4, "world 1-8", choices=tuple(range(1, 9)))
    stage: int = arg(4, "stage 1-4", choices=(1, 2, 3, 4))
    action_type: str = arg(
        "simple",
        "action set: right (RIGHT_ONLY), simple (SIMPLE_MOVEMENT), complex (COMPLEX_MOVEMENT)",
        choices=tuple(ACTION_SETS),
    )
    ext_coef: float = default(1.0, "1, the tutorial's: its PPO objective unchanged")
    int_coef: float = default(0.5, "the RND paper's 2:1 ratio; 0 is what the tutorial actually ran")
    obs_norm_steps: int = default(128)


def env_factory(cfg: MarioConfig, record_path=None):
    return functools.partial(
        make_env, world=cfg.world, stage=cfg.stage, action_type=cfg.action_type, record_path=record_path
    )


def spaces(cfg: MarioConfig):
    return (STACK, OBS_SIZE, OBS_SIZE), len(ACTION_SETS[cfg.action_type])


def make_policy(cfg, obs_shape, num_actions):
    from mario.model import MARIO

    return MARIO(obs_shape[0], num_actions)


def make_intrinsic_networks(cfg, in_channels):
    from mario.rnd_model import make_rnd_networks

    return make_rnd_networks(in_channels)


def episode_metrics(info: dict) -> dict:
    return {
        "x_pos": float(info.get("x_pos", 0)),
        "x_max": float(info.get("x_max", info.get("x_pos", 0))),  # the farthest (x_pos restarts in a coin room)
        "flag": float(bool(info.get("flag_get", False))),
        "score": float(info.get("score", 0)),
    }


def checkpoint_name(cfg, update):
    """The tutorial's names: mario_{world}_{stage}_{update}.pdparams, mario_{world}_{stage}.pdparams on the flag."""
    return (
        f"mario_{cfg.world}_{cfg.stage}.pdparams"
        if update is None
        else f"mario_{cfg.world}_{cfg.stage}_{update}.pdparams"
    )


SPEC = GameSpec(
    name="mario",
    config_cls=MarioConfig,
    env_factory=env_factory,
    spaces=spaces,
    make_policy=make_policy,
    make_intrinsic_networks=make_intrinsic_networks,
    level_name=lambda cfg: f"{cfg.world}-{cfg.stage}",
    checkpoint_name=checkpoint_name,
    episode_metrics=episode_metrics,
    eval_success=lambda info: bool(info.get("flag_get", False)),
    embedding_metadata=lambda info: [
        str(int(info.get("x_pos", 0)) // 256 * 256),
        f"{info.get('world', '?')}-{info.get('stage', '?')}",
    ],
    embedding_header=["x_pos_bucket", "stage"],
    step_record=pictures.step_record,
    rollout_picture=pictures.rollout_picture,
    picture_name="intrinsic_by_x",
)


def main(argv=None):
    from common.ppo.trainer import run

    return run(SPEC, argv)


if __name__ == "__main__":
    main()
