"""Train PPO + RND (or SND, or plain PPO) on Montezuma's Revenge: ``python montezuma/train.py --help``.

Defaults follow the RND paper (Burda et al. 2018, the authors' code): 128 envs x
128 steps, 4 epochs x 4 minibatches, Adam 1e-4, clip 0.1, entropy 0.001,
gamma_ext 0.999, gamma_int 0.99, GAE lambda 0.95, ext_coef 2, int_coef 1,
sign-clipped extrinsic rewards, RND on the latest frame only, observation
normalizer warmed up for 50 x 128 random steps per env. ``--num-processes`` is
the number of environments (``--num-envs`` is accepted as an alias); they run in
``--num-workers`` processes (default: one per CPU core, each stepping several
envs, which beats one process per env). Small-machine settings: docs/usage.md, "Common flags".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from common.ppo.config import TrainConfig
from common.run.config import Recipe, arg, default
from common.run.game import GameSpec
from montezuma import pictures
from montezuma.env import OBS_SIZE, STACK, MontezumaEnv, make_env, rooms_mask

#: ``--policy-network`` choices (``montezuma.model.POLICIES`` builds them; named here so that the config
#: and ``--help`` do not import Paddle)
POLICY_NETWORKS = ("game", "authors")


@dataclass
class MontezumaConfig(TrainConfig):
    """PPO + intrinsic reward on Montezuma's Revenge, the RND paper's settings by default."""

    RECIPES = {
        "snd-montezuma": Recipe(
            "the SND authors' Montezuma settings (Iskandor/SND, config/ppo.config.json, 'montezuma'): 128 envs "
            "x 128 steps, 4 epochs of minibatches of 512, lr 1e-4, entropy 0.001, gamma 0.998 (plain PPO 0.99), "
            "intrinsic gamma 0.99, advantages 2 x extrinsic + 1 x intrinsic (plain PPO 1 x extrinsic), their "
            "reward convention (--int-reward snd) with their eta per method, the intrinsic module trained once "
            "over each rollout on all of it, on the latest frame, no observation warm-up. The authors ran 128M "
            "agent steps; the recipe stops at 4M, where their chart shows SND leaving the first room. "
            "Differences that remain: docs/sources.md, 4.1 'The SND authors' Montezuma recipe and reward convention'",
            dict(
                num_processes=128,
                num_local_steps=128,
                num_epochs=4,
                batch_size=32,
                lr=1e-4,
                beta=0.001,
                epsilon=0.1,
                gamma=0.998,
                int_gamma=0.99,
                ext_coef=2.0,
                int_coef=1.0,
                max_grad_norm=0.5,
                value_loss="mse",
                vf_coef=1.0,
                clip_reward=True,
                int_reward="snd",
                intrinsic_epochs=1,
                update_proportion=1.0,
                target_proportion=1.0,
                snd_max_pairs=512,
                intrinsic_frames=1,
                obs_norm_steps=0,
                num_global_steps=4_000_000,
            ),
            cases=(
                "intrinsic",
                {
                    "none": dict(gamma=0.99, ext_coef=1.0),
                    "rnd": dict(int_eta=1.0),
                    "snd-std": dict(int_eta=1.0),
                    "snd-vic": dict(int_eta=0.25),
                    "snd-v": dict(int_eta=0.5),
                },
            ),
        ),
    }

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
    policy_network: str = arg(
        "game",
        "the actor-critic: game (CleanRL's variant of the RND paper's CNN, montezuma/model.py) or authors "
        "(the SND authors' Atari network: four 3x3 convolutions, a 512-unit trunk, their heads and initial "
        "gains; slower on a CPU). docs/sources.md, section 4.1",
        choices=POLICY_NETWORKS,
    )

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
    from montezuma import model

    return model.make_policy(cfg.policy_network, obs_shape[0], num_actions, input_hw=obs_shape[-1])


def make_intrinsic_networks(cfg, in_channels):
    from montezuma.rnd_model import make_rnd_networks

    return make_rnd_networks(in_channels)


def episode_metrics(info: dict) -> dict:
    """An episode's rooms (how many), score, events (steps with a positive reward: the SND authors'
    chart, 1 about the key, 2 key and a door) and room_mask (sum of 2**room over its RAM room numbers,
    so that the rooms themselves can be read back from the logs: ``montezuma.env.rooms_of_mask``)."""
    rooms = info.get("rooms", ())
    return {
        "rooms": float(len(rooms)),
        "score": float(info.get("score", 0)),
        "events": float(info.get("events", 0)),
        "room_mask": float(rooms_mask(rooms)),
    }


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
