"""``--recipe``: a game's named defaults, listed in --help, overridden by typed flags; ``--stop-when-solved``."""

import dataclasses
import os
import subprocess
import sys

import pytest

from common.run.config import parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_recipe_sets_defaults_and_typed_flags_win():
    from mario.train import MarioConfig

    cfg = parse_config(MarioConfig, ["--recipe", "cpu-1-1", "--lr", "2e-4", "--no-stop-when-solved"])
    assert (cfg.recipe, cfg.world, cfg.stage, cfg.action_type) == ("cpu-1-1", 1, 1, "right")
    assert (cfg.num_processes, cfg.num_local_steps, cfg.num_epochs, cfg.batch_size) == (8, 128, 4, 4)
    assert cfg.lr == 2e-4 and cfg.stop_when_solved is False  # typed flags win over the recipe
    assert cfg.minibatch_size == 256
    plain = parse_config(MarioConfig, [])  # no recipe: the tutorial's defaults
    assert (plain.recipe, plain.world, plain.stage, plain.lr, plain.num_epochs) == ("", 4, 4, 4e-5, 10)


def test_every_recipe_value_is_a_field_and_valid():
    from mario.train import MarioConfig

    names = {f.name for f in dataclasses.fields(MarioConfig)}
    for name, recipe in MarioConfig.RECIPES.items():
        assert set(recipe.values) <= names, name
        parse_config(MarioConfig, ["--recipe", name])  # validates


def test_help_lists_the_recipe_and_an_unknown_one_is_refused():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, "mario/train.py", "--help"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert out.returncode == 0
    assert "recipes (--recipe NAME):" in out.stdout and "cpu-1-1:" in out.stdout
    assert "--action-type right" in out.stdout and "--stop-when-solved" in out.stdout
    bad = subprocess.run(
        [sys.executable, "mario/train.py", "--recipe", "fast"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "'fast'" in bad.stderr and "cpu-1-1" in bad.stderr


def test_a_game_without_recipes_refuses_one():
    from gridworld.train import GridConfig

    with pytest.raises(SystemExit) as e:
        parse_config(GridConfig, ["--recipe", "cpu-1-1"])
    assert e.value.code == 2


@pytest.mark.slow
def test_stop_when_solved_ends_the_run_after_the_first_solving_eval(tmp_path):
    """A real tiny MiniGrid run whose level counts as solved at every evaluation: it stops after the first
    one instead of running its 8 updates, and saves the solving policy as the level's checkpoint beside the
    numbered checkpoint of its last update."""
    from common.ppo.trainer import Trainer
    from gridworld.train import SPEC, GridConfig

    spec = dataclasses.replace(SPEC, eval_success=lambda info: True)
    cfg = GridConfig(
        num_processes=4,
        num_local_steps=16,
        batch_size=2,
        num_epochs=1,
        num_global_steps=8 * 64,
        obs_norm_steps=2,
        eval_interval=1,
        eval_in_background=False,
        video_interval=0,
        save_interval=0,
        histogram_interval=0,
        picture_interval=0,
        stop_when_solved=True,
        log_path=str(tmp_path),
        run_name="solved",
        seed=1,
    )
    result = Trainer(spec, cfg).train()
    assert result["update"] == 1 and not result["stopped_by_signal"]
    assert os.path.exists(os.path.join(result["run_dir"], "models", SPEC.checkpoint_name(cfg, None)))
    # the success checkpoint does not stand in for the numbered one a resume looks for (L7 of the lanes' review)
    assert result["checkpoint"] == os.path.join(result["run_dir"], "models", SPEC.checkpoint_name(cfg, 1))
    assert os.path.exists(result["checkpoint"])


@pytest.mark.slow
def test_save_minutes_saves_by_the_clock(tmp_path):
    """--save-minutes: with --save-interval 0, a checkpoint after each update once the minutes have passed."""
    from common.ppo.trainer import Trainer
    from gridworld.train import SPEC, GridConfig

    cfg = GridConfig(
        num_processes=2,
        num_local_steps=8,
        batch_size=2,
        num_epochs=1,
        num_global_steps=3 * 16,
        obs_norm_steps=1,
        eval_interval=0,
        video_interval=0,
        save_interval=0,
        save_minutes=1e-9,
        histogram_interval=0,
        picture_interval=0,
        log_path=str(tmp_path),
        run_name="clock",
    )
    Trainer(SPEC, cfg).train()
    saved = sorted(os.listdir(tmp_path / "clock" / "models"))
    assert saved == [SPEC.checkpoint_name(cfg, u) for u in (1, 2, 3)]
    cfg = dataclasses.replace(cfg, save_minutes=60.0, run_name="hour")
    Trainer(SPEC, cfg).train()
    assert sorted(os.listdir(tmp_path / "hour" / "models")) == [SPEC.checkpoint_name(cfg, 3)]  # the final save only
    with pytest.raises(SystemExit):
        parse_config(GridConfig, ["--save-minutes", "-1"])
