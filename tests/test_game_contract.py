"""Every registered game (``common.run.games``) through one contract: what the trainers, the zoo and the
evaluation process assume of a ``GameSpec`` and of the envs it makes, checked on the real emulators."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from common.run import games
from common.run.config import parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name", games.names())
def test_every_game_keeps_the_contract(name):
    spec = games.spec_of(name)
    assert spec.name == name
    cfg = parse_config(spec.config_cls, [])
    obs_shape, num_actions = spec.spaces(cfg)
    assert len(obs_shape) == 3 and num_actions >= 2
    assert isinstance(spec.level_name(cfg), str) and spec.level_name(cfg)
    assert spec.checkpoint_name(cfg, 7).endswith("_7.pdparams") and spec.checkpoint_name(cfg, None).endswith(
        ".pdparams"
    )

    make = spec.env_factory(cfg)
    make = pickle.loads(pickle.dumps(make))  # envs are built in worker processes
    env = make()
    try:
        obs = env.reset(seed=0)
        assert obs.shape == tuple(obs_shape) and obs.dtype == np.uint8
        rng = np.random.default_rng(0)
        for _ in range(8):
            obs, reward, done, info = env.step(int(rng.integers(num_actions)))
            assert obs.shape == tuple(obs_shape) and obs.dtype == np.uint8
            assert isinstance(reward, float) and isinstance(done, bool) and isinstance(info, dict)
            truncated = info.get("TimeLimit.truncated", False)  # the one spelling of a time limit
            assert isinstance(truncated, bool) and (done or not truncated) and "truncated" not in info
            if done:
                obs = env.reset()
        metrics = spec.episode_metrics(info)
        assert all(isinstance(v, float) for v in metrics.values())
        assert isinstance(spec.eval_success(info), bool)
        assert len(pickle.dumps(info)) < 4096  # infos travel through the workers' pipes every step
    finally:
        env.close()
    if spec.action_names is not None:
        assert len(spec.action_names(cfg)) == num_actions


def test_a_game_script_runs_the_code_of_the_checkout_on_pythonpath(tmp_path):
    """The game folders carry no sys.path edits: a lane's clone runs its own code through PYTHONPATH
    (``benchmarks/lanes.child_env``), not an installed copy of another checkout."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import lanes

    env = lanes.child_env(str(tmp_path))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
    fake = tmp_path / "common"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('the checkout on PYTHONPATH came first')\n")
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "gridworld", "train.py"), "--help"], env=env, capture_output=True, text=True
    )
    assert "the checkout on PYTHONPATH came first" in res.stderr, res.stderr[-500:]
    for folder in ("mario", "montezuma", "gridworld", "pong", "common"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                if f.endswith(".py"):
                    assert "sys.path.insert" not in open(os.path.join(base, f), encoding="utf-8").read(), f


@pytest.mark.parametrize(
    "name", [n for n in games.names() if hasattr(parse_config(games.spec_of(n).config_cls, []), "vf_coef")]
)
def test_every_ppo_game_refuses_a_negative_loss_weight_by_name(name, capsys):
    for flag in ("--beta", "--int-coef", "--ext-coef", "--vf-coef"):
        with pytest.raises(SystemExit):
            parse_config(games.spec_of(name).config_cls, [flag, "-1"])
        assert f"{flag} -1.0 is invalid: expected a number >= 0" in capsys.readouterr().err
