"""Train PPO + RND / SND (or plain PPO) on a MiniGrid task: ``python gridworld/train.py --help``.

The CPU-sized exploration benchmark of this project (``benchmarks/exploration.py``).
Settings are the usual small-grid PPO ones (rl-starter-files / CleanRL scale) with
the RND paper's two-stream advantages; see ``GridConfig`` for each choice.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from common.ppo.config import TrainConfig
from common.run.config import arg, default, need
from common.run.game import GameSpec
from gridworld import pictures
from gridworld.env import (
    ACTION_NAMES,
    CHANNEL_SIZES,
    CHANNELS,
    FULL_CHANNEL_SIZES,
    OBSERVATIONS,
    VIEW,
    make_env,
    validate_env_id,
)


@dataclass
class GridConfig(TrainConfig):
    """PPO + intrinsic reward on a MiniGrid task (symbolic 7x7 egocentric view).

    PPO: 16 envs x 128 steps = 2,048 samples per update, 4 epochs x 4 minibatches of
    512, Adam 2.5e-4, gamma 0.99, GAE lambda 0.95, clip 0.2, entropy 0.01, MSE value
    loss with weight 0.5, grad clip 0.5, advantages standardized per minibatch
    (``--norm-adv``, as CleanRL; the RND authors' PPO uses raw advantages; without it the
    normalized intrinsic rewards, small per step on these tasks, are outweighed by the
    entropy bonus's pull and the curiosity does not steer the policy). Intrinsic: the RND
    paper's 2:1 weighting of extrinsic to intrinsic advantages (ext_coef 2,
    int_coef 1), the non-episodic intrinsic stream discounted with 0.99, the
    predictor trained on a quarter of each minibatch (RND's update_proportion), and
    SND-STD's InfoNCE on at most 128 pairs per step (``--snd-max-pairs``; its update's
    cost grows with the pairs: docs/performance.md). The intrinsic module sees all
    3 symbolic channels. Two choices for grids (docs/exploration.md): the intrinsic
    reward is paid only for the first visit of a view within an episode
    (``--int-first-visit``: without it RND farmed novelty by picking up and dropping
    the key), and the SND target trains on a quarter of each minibatch, like the
    predictor (``--target-proportion``: SND's cost per frame close to RND's).
    Envs run in the trainer process (``--num-workers -1``): a MiniGrid step costs
    less than sending it to a worker (docs/performance.md).
    """

    env_id: str = arg(
        "MiniGrid-DoorKey-5x5-v0",
        "MiniGrid task id, e.g. MiniGrid-DoorKey-8x8-v0, MiniGrid-MultiRoom-N2-S4-v0, MiniGrid-KeyCorridorS3R1-v0",
    )
    frame_stack: int = arg(
        1,
        "views per observation, the newest last: a memory of the last views for the feed-forward policy "
        "(the intrinsic module sees the last --intrinsic-frames channels: the newest view's 3 by default, the "
        "grid's with --observation view+full)",
    )
    observation: str = arg(
        "view",
        "what an observation shows: view (the agent's egocentric 7x7 view), full (the whole grid with the agent, "
        "MiniGrid's FullyObsWrapper; grids up to 7x7) or view+full (the policy reads the view, the intrinsic "
        "module the whole grid: its --intrinsic-frames 3 are the last channels; docs/exploration.md, suite v6). "
        "With full or view+full the first-visit gate counts whole grids, like --first-visit-key state",
        choices=OBSERVATIONS,
    )
    num_global_steps: int = default(1_000_000)
    num_processes: int = default(16)
    num_workers: int = default(-1, "the fastest for MiniGrid's cheap envs")
    num_local_steps: int = default(128)
    lr: float = default(2.5e-4)
    gamma: float = default(0.99)
    tau: float = default(0.95)
    batch_size: int = default(4)
    num_epochs: int = default(4)
    value_loss: str = default("mse")
    vf_coef: float = default(0.5)
    ext_coef: float = default(2.0)
    int_coef: float = default(1.0)
    update_proportion: float = default(0.25)
    norm_adv: bool = default(True)
    int_first_visit: bool = default(True, "on: without it RND farmed novelty on KeyCorridor")
    target_proportion: float = default(0.25, "SND's cost per frame close to RND's")
    snd_max_pairs: int = default(128)
    intrinsic_frames: int = default(3, "all symbolic channels: object, colour, state")
    obs_norm_steps: int = default(32)
    save_interval: int = default(100)
    eval_interval: int = default(10)
    video_interval: int = default(100)
    max_actions: int = default(100)
    max_eval_steps: int = default(2_000)
    embedding_interval: int = default(0)

    def validate(self) -> None:
        super().validate()
        validate_env_id(self.env_id)
        need(1 <= self.frame_stack <= 16, "frame-stack", self.frame_stack, "an integer from 1 to 16")
        if self.observation != "view":  # the whole grid is padded to the view's 7x7
            w, h = pictures.grid_size(self.env_id)
            accepted = f"view for {self.env_id}, whose grid is {w}x{h} (full and view+full show grids up to 7x7)"
            need(max(w, h) <= VIEW, "observation", self.observation, accepted)


def env_factory(cfg: GridConfig, record_path=None):
    return functools.partial(
        make_env,
        env_id=cfg.env_id,
        record_path=record_path,
        frame_stack=cfg.frame_stack,
        state_keys=cfg.first_visit_key == "state",
        observation=cfg.observation,
    )


def spaces(cfg: GridConfig):
    extra = CHANNELS if cfg.observation == "view+full" else 0  # the full grid after the views
    return (CHANNELS * cfg.frame_stack + extra, VIEW, VIEW), len(ACTION_NAMES)


def make_policy(cfg, obs_shape, num_actions):
    """The policy one-hot encodes the first channels only: in view+full the views, not the grid after them."""
    from gridworld.model import GridPolicy

    sizes = FULL_CHANNEL_SIZES if cfg.observation == "full" else CHANNEL_SIZES
    return GridPolicy(num_actions, sizes * cfg.frame_stack)


def make_intrinsic_networks(cfg, in_channels):
    from gridworld.rnd_model import make_rnd_networks

    return make_rnd_networks(in_channels)


def level_name(cfg) -> str:
    """MiniGrid-DoorKey-5x5-v0 -> DoorKey-5x5."""
    name = cfg.env_id.removeprefix("MiniGrid-")
    return name.rsplit("-v", 1)[0] if "-v" in name else name


def obs_value_max(cfg) -> tuple:
    """The largest code of each observation channel: the views' (or with --observation full the grids'), then
    with view+full the grid's, whose agent cell holds a direction 0-3 (the module takes its last channels)."""
    sizes = (FULL_CHANNEL_SIZES if cfg.observation == "full" else CHANNEL_SIZES) * cfg.frame_stack
    sizes += FULL_CHANNEL_SIZES if cfg.observation == "view+full" else ()
    return tuple(float(n - 1) for n in sizes)


def episode_metrics(info: dict) -> dict:
    return {"success": float(bool(info.get("success", False)))}


def checkpoint_name(cfg, update):
    """gridworld_<task>_<update>.pdparams, gridworld_<task>.pdparams when the greedy policy solves the task."""
    base = f"gridworld_{level_name(cfg)}"
    return f"{base}.pdparams" if update is None else f"{base}_{update}.pdparams"


SPEC = GameSpec(
    name="gridworld",
    config_cls=GridConfig,
    env_factory=env_factory,
    spaces=spaces,
    make_policy=make_policy,
    make_intrinsic_networks=make_intrinsic_networks,
    level_name=level_name,
    checkpoint_name=checkpoint_name,
    episode_metrics=episode_metrics,
    eval_success=lambda info: bool(info.get("success", False)),
    embedding_metadata=lambda info: [str(info.get("agent_pos", "?")), info.get("carrying", "") or "-"],
    embedding_header=["agent_pos", "carrying"],
    action_names=lambda cfg: list(ACTION_NAMES),
    obs_value_max=obs_value_max,  # category codes, per channel
    state_keys=True,
    observation_picture=pictures.view_picture,
    step_record=pictures.step_record,
    rollout_picture=pictures.rollout_picture,
    picture_name="visits",
)


def main(argv=None):
    from common.ppo.trainer import run

    return run(SPEC, argv)


if __name__ == "__main__":
    main()
