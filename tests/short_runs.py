"""Session fixtures: one tiny real training run per game, shared by the VisualDL, video and play tests.

Imported into ``conftest.py``. Each run is the real trainer (``<game>.train.main``) in this
process with in-process envs (``--num-workers -1``): 2 envs x 16 steps per update.
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
