"""The game spec: everything the shared trainer needs to know about one game.

Each game's ``train.py`` builds one ``GameSpec``; the trainer knows nothing else
about games. Env factories must be picklable (module-level functions or
``functools.partial``) because environments live in worker processes, and
environment modules never import Paddle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class GameSpec:
    #: "mario", "montezuma", ...: written into checkpoints, checked on resume
    name: str
    #: the game's TrainConfig subclass (its defaults are the game's)
    config_cls: type
    #: (cfg, record_path or None) -> zero-argument picklable factory of one env
    env_factory: Callable
    #: cfg -> (observation shape, number of actions), without building an env
    spaces: Callable
    #: (cfg, obs_shape, num_actions) -> policy nn.Layer (contract in common/ppo/update.py)
    make_policy: Callable
    #: (cfg, in_channels) -> (target, predictor) nn.Layers for RND/SND
    make_intrinsic_networks: Callable
    #: cfg -> short level name used in run and checkpoint names, e.g. "4-4"
    level_name: Callable
    #: (cfg, update or None) -> checkpoint file name; None names the "level solved" file
    checkpoint_name: Callable
    #: info of a finished episode -> {metric: float}, logged under episode/ (e.g. x_pos, flag)
    episode_metrics: Callable = lambda info: {}
    #: info at the end of an eval episode -> True when the level counts as solved
    eval_success: Callable = lambda info: False
    #: info -> list of str metadata for the embedding view, with its header
    embedding_metadata: Callable = lambda info: []
    embedding_header: list = field(default_factory=list)
    #: info of a finished episode -> the places it visited (Montezuma: rooms); the trainer logs
    #: how many distinct ones the whole run has seen as charts/<visited_name>_visited_total
    visited: Callable | None = None
    visited_name: str = "places"
    #: its envs' infos carry ``prev_state_key`` and ``state_key``, int64 keys of the game's full state
    #: before and after each step (MiniGrid: the whole grid), which ``--first-visit-key state`` counts
    state_keys: bool = False
    #: the largest raw observation value, one number or one per channel (255 for pixels), or cfg -> that
    #: (where a flag changes what the channels hold); sizes SND-V's noise and the SND authors' input scale
    obs_value_max: object = 255.0
    #: cfg -> the name of each action (charts/action_share/<name>); None: action indices
    action_names: Callable | None = None
    #: obs uint8[C, H, W] -> uint8[h, w, 3], a picture of one observation: the frames of
    #: eval/intrinsic_along_episode where the env has no ``rgb_frame()`` (None: its latest frame, gray)
    observation_picture: Callable | None = None
    #: info of one step -> a small record of where the agent is (Mario: x_pos and flag, Montezuma:
    #: room, MiniGrid: agent_pos), kept for every step of a rollout whose picture is due
    step_record: Callable = lambda info: None
    #: (cfg, Rollout) -> (uint8[H, W, 3], {name: array}): where the agent has been, logged as
    #: explore/<picture_name> every ``picture_interval`` updates with its data; None: no picture
    rollout_picture: Callable | None = None
    picture_name: str = "where"


@dataclass
class Rollout:
    """What a game's ``rollout_picture`` draws from: one rollout of T steps x N envs, and the run so far."""

    #: the update this rollout was collected for (1, 2, ...)
    update: int
    #: [T][N] ``step_record(info)`` of every step (the info that comes with s_{t+1})
    records: list
    #: float32[T, N]: the raw novelty of every s_{t+1}, and the scaled reward the advantages saw
    raw_int: object
    rewards_int: object
    #: float32[T, N], 1 where env n's episode ended at step t
    dones: object
    #: the run's ``--intrinsic`` ("none": the rewards are zeros)
    intrinsic: str
    #: place -> update of its first visit (None: unknown, from an old checkpoint), over the whole run
    visited: dict = field(default_factory=dict)
    #: place -> number of finished training episodes that reached it
    visit_counts: dict = field(default_factory=dict)
