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
    #: (cfg, obs_shape, num_actions) -> policy nn.Layer (contract in common/ppo.py)
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
    #: the largest raw observation value, one number or one per channel (255 for pixels); sizes SND-V's noise
    obs_value_max: object = 255.0
    #: cfg -> the name of each action (charts/action_share/<name>); None: action indices
    action_names: Callable | None = None
