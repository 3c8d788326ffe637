"""The greedy eval in a background process: same results as in the trainer, faults surface, success checkpoint."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

pytest.importorskip("paddle")

from common.ppo.evaluation import BackgroundEvaluator, EvalProcessError  # noqa: E402
from common.ppo.trainer import Trainer  # noqa: E402
from common.run import games  # noqa: E402
from common.run.checkpoint import load_checkpoint  # noqa: E402
from mario.train import SPEC as MARIO  # noqa: E402
from mario.train import MarioConfig

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers


def tiny(tmp_path, **kw):
    base = dict(
        world=1,
        stage=1,
        num_processes=2,
        num_workers=-1,
        num_local_steps=8,
        batch_size=2,
        num_epochs=1,
        num_global_steps=48,
        obs_norm_steps=2,
        eval_interval=1,
        video_interval=0,
        save_interval=0,
        max_eval_steps=30,
        histogram_interval=0,
        embedding_interval=0,
        log_path=str(tmp_path),
    )
    base.update(kw)
    return MarioConfig(**base)


def eval_records(run_dir):
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return sorted(
        (r["tag"], r["step"], round(r["value"], 3))
        for r in rows
        if r["tag"].startswith("eval/") or r["tag"].startswith("Eval")
    )


def test_background_eval_logs_what_the_in_process_eval_logs(tmp_path):
    runs = {}
    for bg in (True, False):
        result = Trainer(MARIO, tiny(tmp_path, run_name=f"bg{bg}", eval_in_background=bg)).train()
        runs[bg] = (eval_records(result["run_dir"]), result["eval"])
    assert runs[True][0] == runs[False][0] and len(runs[True][0]) >= 3 * 4
    assert runs[True][1]["length"] == runs[False][1]["length"]
    assert runs[True][1]["intrinsic"] == pytest.approx(runs[False][1]["intrinsic"], rel=1e-4)


def test_success_checkpoint_holds_the_evaluated_policy(tmp_path):
    spec = dataclasses.replace(MARIO, eval_success=lambda info: True)  # every eval "solves" the level
    result = Trainer(spec, tiny(tmp_path, eval_interval=2, save_interval=1)).train()  # evals after update 2 only
    models = os.path.join(result["run_dir"], "models")
    solved, second = (
        load_checkpoint(os.path.join(models, "mario_1_1.pdparams")),
        load_checkpoint(os.path.join(models, "mario_1_1_2.pdparams")),
    )
    assert solved["update"] == 2 and result["update"] == 3
    for k, v in second["policy"].items():
        np.testing.assert_array_equal(np.asarray(solved["policy"][k]), np.asarray(v))


def test_the_games_registry_names_each_games_module():
    assert games.module_of(MARIO.name) == "mario.train"
    assert all(games.spec_of(name).name == name for name in games.names())
    with pytest.raises(ValueError, match="not one of mario"):
        games.module_of("tetris")


def test_eval_process_errors_surface_with_their_traceback():
    ev = BackgroundEvaluator("no_such_game_module_xyz", {})
    try:
        ev.submit({}, 0)
        with pytest.raises(EvalProcessError, match="ModuleNotFoundError"):
            ev.wait(timeout=120)
    finally:
        ev.close(cancel=True)


def test_a_dead_eval_process_is_reported_and_close_is_clean():
    ev = BackgroundEvaluator("mario.train", tiny("/tmp").to_dict())
    try:
        ev._proc.kill()
        ev._proc.join(30)
        with pytest.raises(EvalProcessError, match="died: killed by SIGKILL"):
            ev.submit({}, 0)
    finally:
        ev.close(cancel=True)
    assert not ev._proc.is_alive()


def test_sigint_with_an_eval_in_flight_ends_every_process(tmp_path):
    """Ctrl-C while the eval process plays: a checkpoint is saved, the eval is cancelled, nothing is left running."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [
        "--world",
        "1",
        "--stage",
        "1",
        "--num-processes",
        "2",
        "--num-local-steps",
        "32",
        "--batch-size",
        "2",
        "--num-epochs",
        "1",
        "--num-global-steps",
        "100000",
        "--obs-norm-steps",
        "2",
        "--eval-interval",
        "1",
        "--video-interval",
        "0",
        "--save-interval",
        "0",
        "--max-eval-steps",
        "20000",
        "--log-path",
        str(tmp_path),
        "--run-name",
        "int",
    ]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(root, "mario/train.py"), *args],
        cwd=root,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = tmp_path / "int" / "metrics.jsonl"
    children = set()
    deadline = time.time() + 240
    while time.time() < deadline:  # until update 2 is logged: the eval of update 1 has been handed over
        children |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        assert proc.poll() is None, proc.stdout.read()
        if metrics.exists() and sum('"Training Reward"' in ln for ln in metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.3)
    children |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]  # SIGINT, after saving
    assert "SIGINT received" in out
    assert glob_one(tmp_path / "int" / "models")["update"] >= 2
    time.sleep(1)
    alive = [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert len(children) >= 3 and not alive, f"left running: {alive}"  # 2 env workers + the eval process


def glob_one(folder):
    import glob

    return load_checkpoint(sorted(glob.glob(str(folder / "*.pdparams")))[-1])
