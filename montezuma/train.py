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

from common.config import TrainConfig, arg  # noqa: E402
from common.game import GameSpec  # noqa: E402
from montezuma.env import OBS_SIZE, STACK, MontezumaEnv, make_env  # noqa: E402


@dataclass
class MontezumaConfig(TrainConfig):
    """PPO + intrinsic reward on Montezuma's Revenge, the RND paper's settings by default."""

    num_global_steps: int = arg(100_000_000, "stop after this many agent steps summed over all envs")
    num_processes: int = arg(128, "number of parallel environments (alias: --num-envs)")
    lr: float = arg(1e-4, "Adam learning rate")
    gamma: float = arg(0.999, "discount factor of the extrinsic reward")
    tau: float = arg(0.95, "GAE lambda")
    beta: float = arg(0.001, "entropy bonus coefficient")
    epsilon: float = arg(0.1, "PPO clipping range")
    batch_size: int = arg(4, "number of minibatches per epoch")
    num_epochs: int = arg(4, "PPO epochs per update")
    num_local_steps: int = arg(128, "rollout length per environment per update")
    value_loss: str = arg("mse", "value loss: smooth_l1 (tutorial) or mse (RND paper)", choices=("smooth_l1", "mse"))
    vf_coef: float = arg(1.0, "weight of the value loss (0.5 * squared error per head)")
    clip_reward: bool = arg(True, "sign-clip extrinsic rewards before learning (the RND paper's Atari setting)")
    ext_coef: float = arg(2.0, "weight of the extrinsic advantage")
    int_coef: float = arg(1.0, "weight of the intrinsic advantage")
    intrinsic_frames: int = arg(1, "how many of the latest stacked frames the intrinsic module sees (RND: 1)")
    obs_norm_steps: int = arg(50 * 128, "random-agent steps per env to initialise the observation normalizer")
    eval_interval: int = arg(10, "run a greedy evaluation episode every this many updates (0: never)")
    max_actions: int = arg(4500, "evaluation stops when the greedy policy repeats one action this many times")
    max_eval_steps: int = arg(4500, "hard cap on agent steps in one evaluation episode")
    save_interval: int = arg(50, "save a checkpoint every this many updates")
    sticky_prob: float = arg(0.25, "sticky-action probability (the agent's previous action is repeated)")
    max_episode_steps: int = arg(4500, "agent steps per episode before it is cut off")

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.sticky_prob <= 1.0:
            raise ValueError(f"--sticky-prob {self.sticky_prob!r} is invalid: expected a value in [0, 1]")
        if self.max_episode_steps <= 0:
            raise ValueError(f"--max-episode-steps {self.max_episode_steps!r} is invalid: expected a positive integer")


def env_factory(cfg: MontezumaConfig, record_path=None):
    return functools.partial(make_env, record_path=record_path, sticky_prob=cfg.sticky_prob,
                             max_episode_steps=cfg.max_episode_steps)


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
)


def main(argv=None):
    from common.trainer import run

    argv = list(sys.argv[1:] if argv is None else argv)
    argv = ["--num-processes" if a == "--num-envs" else
            a.replace("--num-envs=", "--num-processes=") if a.startswith("--num-envs=") else a for a in argv]
    return run(SPEC, argv)


if __name__ == "__main__":
    main()
