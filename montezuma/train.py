"""Train PPO + RND (or SND, or plain PPO) on Montezuma's Revenge: ``python montezuma/train.py --help``.

Defaults follow the RND paper (Burda et al. 2018, the authors' code): 128 envs x
128 steps, 4 epochs x 4 minibatches, Adam 1e-4, clip 0.1, entropy 0.001,
gamma_ext 0.999, gamma_int 0.99, GAE lambda 0.95, ext_coef 2, int_coef 1,
sign-clipped extrinsic rewards, RND on the latest frame only, observation
normalizer warmed up for 50 x 128 random steps per env. ``--num-processes`` is
the number of environments (``--num-envs`` is accepted as an alias); they run in
``--num-workers`` processes (default: one per CPU core, each stepping several
envs, which beats one process per env). See the README for small-machine settings.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

if __package__ in (None, ""):  # `python montezuma/train.py` from a checkout: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common.ppo.config import TrainConfig  # noqa: E402
from common.run.config import arg, default  # noqa: E402
from common.run.game import GameSpec  # noqa: E402
from montezuma import pictures  # noqa: E402
from montezuma.env import OBS_SIZE, STACK, MontezumaEnv, make_env  # noqa: E402


@dataclass
class MontezumaConfig(TrainConfig):
    """PPO + intrinsic reward on Montezuma's Revenge, the RND paper's settings by default."""

    num_global_steps: int = default(100_000_000)
    num_processes: int = default(128, "the RND paper's")
    lr: float = default(1e-4)
    gamma: float = default(0.999)
    tau: float = default(0.95)
    beta: float = default(0.001)
    epsilon: float = default(0.1)
    batch_size: int = default(4)
    num_epochs: int = default(4)
    num_local_steps: int = default(128)
    value_loss: str = default("mse")
    vf_coef: float = default(1.0, "0.5 * squared error per head")
    clip_reward: bool = default(True)
    ext_coef: float = default(2.0)
    int_coef: float = default(1.0)
    intrinsic_frames: int = default(1, "RND: the latest frame only")
    obs_norm_steps: int = default(50 * 128, "the RND paper's 50 x 128")
    eval_interval: int = default(10)
    max_actions: int = default(4500)
    max_eval_steps: int = default(4500)
    save_interval: int = default(50)
    sticky_prob: float = arg(0.25, "sticky-action probability (the agent's previous action is repeated)")
    max_episode_steps: int = arg(4500, "agent steps per episode before it is cut off")

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.sticky_prob <= 1.0:
            raise ValueError(f"--sticky-prob {self.sticky_prob!r} is invalid: expected a value in [0, 1]")
        if self.max_episode_steps <= 0:
            raise ValueError(f"--max-episode-steps {self.max_episode_steps!r} is invalid: expected a positive integer")


def env_factory(cfg: MontezumaConfig, record_path=None):
    return functools.partial(
        make_env, record_path=record_path, sticky_prob=cfg.sticky_prob, max_episode_steps=cfg.max_episode_steps
    )


def make_policy(cfg, obs_shape, num_actions):
    from montezuma.model import RNDPolicy

    return RNDPolicy(obs_shape[0], num_actions)


def make_intrinsic_networks(cfg, in_channels):
    from montezuma.rnd_model import make_rnd_networks

    return make_rnd_networks(in_channels)


def episode_metrics(info: dict) -> dict:
    return {"rooms": float(len(info.get("rooms", ()))), "score": float(info.get("score", 0))}


SPEC = GameSpec(
    name="montezuma",
    config_cls=MontezumaConfig,
    env_factory=env_factory,
    spaces=lambda cfg: ((STACK, OBS_SIZE, OBS_SIZE), MontezumaEnv.num_actions),
    make_policy=make_policy,
    make_intrinsic_networks=make_intrinsic_networks,
    level_name=lambda cfg: "level1",
    checkpoint_name=lambda cfg, update: "montezuma.pdparams" if update is None else f"montezuma_{update}.pdparams",
    episode_metrics=episode_metrics,
    embedding_metadata=lambda info: [str(info.get("room", -1))],
    embedding_header=["room"],
    visited=lambda info: info.get("rooms", ()),
    visited_name="rooms",
    step_record=pictures.step_record,
    rollout_picture=pictures.rollout_picture,
    picture_name="rooms",
)


def main(argv=None):
    from common.ppo.trainer import run

    return run(SPEC, argv)


if __name__ == "__main__":
    main()
