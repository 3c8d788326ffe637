"""Session fixtures: one tiny real training run per game, shared by the VisualDL, video and play tests.

Imported into ``conftest.py``. Each run is the real trainer (``<game>.train.main``) in this
process with in-process envs (``--num-workers -1``): 2 envs x 16 steps per update.

A session fixture is made once per pytest-xdist worker: ``conftest.py`` puts every test that uses
one into the xdist group "short_runs", so that one worker makes each run once for all of them.
"""

from __future__ import annotations

import os

import pytest

MARIO_FLAGS = [
    "--world",
    "1",
    "--stage",
    "1",
    "--num-processes",
    "2",
    "--num-workers",
    "-1",
    "--num-local-steps",
    "16",
    "--batch-size",
    "2",
    "--num-epochs",
    "1",
    "--num-global-steps",
    "64",
    "--obs-norm-steps",
    "2",
    "--eval-interval",
    "1",
    "--video-interval",
    "1",
    "--max-eval-steps",
    "40",
    "--histogram-interval",
    "1",
    "--embedding-interval",
    "1",
    "--picture-interval",
    "1",
]

MONTEZUMA_FLAGS = [
    "--num-envs",
    "2",
    "--num-workers",
    "-1",
    "--num-local-steps",
    "16",
    "--batch-size",
    "2",
    "--num-epochs",
    "1",
    "--num-global-steps",
    "32",
    "--obs-norm-steps",
    "1",
    "--eval-interval",
    "1",
    "--video-interval",
    "0",
    "--max-eval-steps",
    "20",
    "--histogram-interval",
    "0",
    "--embedding-interval",
    "1",
]


@pytest.fixture(scope="session")
def mario_run(tmp_path_factory):
    """``(runs_dir, result)`` of a 2-update Mario 1-1 RND run under ``<tmp>/runs/mario_short``."""
    from mario.train import main

    runs = tmp_path_factory.mktemp("mario") / "runs"
    result = main(MARIO_FLAGS + ["--log-path", str(runs), "--run-name", "mario_short"])
    assert result["update"] == 2 and os.path.exists(result["checkpoint"])
    return runs, result


@pytest.fixture(scope="session")
def montezuma_run(tmp_path_factory):
    """``(runs_dir, result)`` of a 1-update Montezuma RND run under ``<tmp>/runs/montezuma_short``."""
    from montezuma.train import main

    runs = tmp_path_factory.mktemp("montezuma") / "runs"
    result = main(MONTEZUMA_FLAGS + ["--log-path", str(runs), "--run-name", "montezuma_short"])
    assert result["update"] == 1 and os.path.exists(result["checkpoint"])
    return runs, result


def tiny_grid_run(tmp_path, **overrides) -> dict:
    """``Trainer.train()``'s result of a tiny in-process MiniGrid run (DoorKey-5x5, 4 envs x 16 steps, 2
    updates, no evaluation, videos or periodic checkpoints) under ``tmp_path``; ``overrides`` are
    GridConfig fields."""
    from common.ppo.trainer import Trainer
    from gridworld.train import SPEC, GridConfig

    fields = dict(
        num_processes=4,
        num_local_steps=16,
        batch_size=2,
        num_epochs=1,
        num_global_steps=128,
        obs_norm_steps=2,
        eval_interval=0,
        video_interval=0,
        save_interval=0,
        histogram_interval=0,
        log_path=str(tmp_path),
        run_name="tiny",
        seed=1,
    )
    return Trainer(SPEC, GridConfig(**{**fields, **overrides})).train()
