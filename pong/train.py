"""The SND article's own experiment: Double DQN, with or without SND-V, on Atari Pong.

    python pong/train.py --agent dqn       # the article's "DQN": epsilon 0.1
    python pong/train.py --agent dqn-e0    # "DQN_e0": epsilon 0
    python pong/train.py --agent snd       # "SND": SND-V intrinsic reward, epsilon 0
    python pong/train.py --help            # every setting, with its source

Defaults are the article's runner (``snd_article.ja.txt``, ``train(name)``, SRL
v0.16.1): ``ALE/Pong-v5`` with ``frameskip=7`` and ``repeat_action_probability=0``,
SRL's ``AtariPongProcessor`` (crop, gray, binarize, 84x84, game over after 5 points),
window 4, double DQN with lr 0.0005, target sync every 2,000 train steps, discount
0.99, replay 10,000 with a 1,000-transition warm-up, batch 32, 100,000 train steps;
SND: reward = extrinsic + 0.5 x intrinsic. Deviations are listed in docs/deviations.md
("Deviations from the SND article"); ``benchmarks/snd_dqn_pong.py`` runs the three agents.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from common.dqn.config import DQNConfig
from common.run.config import arg
from common.run.game import GameSpec
from pong.env import ACTIONS, OBS_SIZE, PongEnv, make_env


@dataclass
class PongConfig(DQNConfig):
    """Double DQN (+ SND-V) on Atari Pong, the SND article's settings by default."""

    frameskip: int = arg(
        7, "emulator frames per agent step, rewards summed (the article's code: frameskip=7; its text says 8)"
    )
    repeat_action_probability: float = arg(0.0, "ALE sticky-action probability (the article: 0)")
    max_points: int = arg(
        5,
        "a game ends after this many points played, either side's (SRL's AtariPongProcessor: "
        "5 instead of a full game to 21)",
    )

    POSITIVE = (*DQNConfig.POSITIVE, "frameskip", "max_points")

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.repeat_action_probability <= 1.0:
            raise ValueError(
                f"--repeat-action-probability {self.repeat_action_probability!r} is invalid: expected a value in [0, 1]"
            )


def env_factory(cfg: PongConfig, record_path=None):
    return functools.partial(
        make_env,
        record_path=record_path,
        frameskip=cfg.frameskip,
        repeat_action_probability=cfg.repeat_action_probability,
        max_points=cfg.max_points,
        stack=cfg.window_length,
    )


def make_policy(cfg, obs_shape, num_actions):
    from pong.model import make_q_network

    return make_q_network(cfg, obs_shape, num_actions)


def make_intrinsic_networks(cfg, in_channels):
    from pong.model import make_snd_networks

    return make_snd_networks(cfg, in_channels)


def episode_metrics(info: dict) -> dict:
    return {"points_for": float(info.get("points_for", 0)), "points_against": float(info.get("points_against", 0))}


SPEC = GameSpec(
    name="pong",
    config_cls=PongConfig,
    env_factory=env_factory,
    spaces=lambda cfg: ((cfg.window_length, OBS_SIZE, OBS_SIZE), PongEnv.num_actions),
    make_policy=make_policy,
    make_intrinsic_networks=make_intrinsic_networks,
    level_name=lambda cfg: f"{cfg.max_points}points",
    checkpoint_name=lambda cfg, step: (
        f"pong_{cfg.agent}.pdparams" if step is None else f"pong_{cfg.agent}_{step}.pdparams"
    ),
    episode_metrics=episode_metrics,
    obs_value_max=255.0,
    action_names=lambda cfg: list(ACTIONS),
)


def main(argv=None):
    from common.dqn.trainer import run

    return run(SPEC, argv)


if __name__ == "__main__":
    main()
