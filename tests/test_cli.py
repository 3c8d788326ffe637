"""End to end through the command lines users type: train, Ctrl-C, play (real emulators, subprocesses)."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from common.run.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def run_script(script, *args, timeout=900):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        cwd=ROOT,
    )


GAMES = {
    "mario": [
        "--world",
        "1",
        "--stage",
        "1",
        "--num-processes",
        "2",
        "--num-local-steps",
        "64",
        "--batch-size",
        "4",
        "--num-epochs",
        "1",
        "--num-global-steps",
        "256",
        "--obs-norm-steps",
        "4",
        "--max-eval-steps",
        "100",
    ],
    "montezuma": [
        "--num-envs",
        "8",
        "--num-local-steps",
        "16",
        "--num-global-steps",
        "256",
        "--obs-norm-steps",
        "4",
        "--max-eval-steps",
        "100",
        "--eval-interval",
        "1",
        "--max-episode-steps",
        "20",
    ],
}


@pytest.mark.parametrize("game", sorted(GAMES))
def test_train_writes_logs_config_checkpoint_and_play_loads_it(game, tmp_path):
    res = run_script(
        f"{game}/train.py",
        *GAMES[game],
        "--log-path",
        str(tmp_path),
        "--run-name",
        "smoke",
        "--save-interval",
        "1",
        "--video-interval",
        "2",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "smoke"
    # the start: what runs, its folder, how to watch it; the config goes to config.json, not the terminal
    assert f"{game} " in res.stdout and ", intrinsic rnd, seed " in res.stdout
    assert f"run folder: {run} " in res.stdout
    assert f"visualdl --logdir {os.path.relpath(tmp_path, ROOT)} --language en" in res.stdout
    assert '"num_global_steps"' not in res.stdout
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["num_global_steps"] == 256 and cfg["intrinsic"] == "rnd"
    assert glob.glob(str(run / "vdlrecords.*.log"))
    tags = {json.loads(line)["tag"] for line in (run / "metrics.jsonl").read_text().splitlines()}
    assert {"Training Reward", "Total loss", "Forward loss", "Eval Extrinsic reward", "Eval Intrinsic reward"} <= tags
    if game == "montezuma":  # rooms per episode and over the whole run
        assert {"episode/rooms", "charts/rooms_visited_total"} <= tags
    else:
        assert {"eval/x_pos", "eval/flag"} <= tags  # training episodes are longer than this smoke run
    assert os.path.getsize(run / "videos" / "eval_000002.mp4") > 0
    ckpts = sorted(glob.glob(str(run / "models" / "*.pdparams")))
    assert ckpts, "no checkpoint written"
    last = max(ckpts, key=lambda p: load_checkpoint(p)["update"])
    out = tmp_path / "play.mp4"
    play = run_script(f"{game}/play.py", "--checkpoint", last, "--output", str(out), "--max-steps", "50")
    assert play.returncode == 0, play.stderr[-3000:]
    assert ("x_pos" in play.stdout) if game == "mario" else ("rooms" in play.stdout)
    assert out.stat().st_size > 0


def test_sigint_saves_a_loadable_checkpoint_and_ends_the_workers(tmp_path):
    args = GAMES["mario"][:-6] + [
        "--num-global-steps",
        "1000000",
        "--obs-norm-steps",
        "2",
        "--eval-interval",
        "0",
        "--save-interval",
        "0",
        "--log-path",
        str(tmp_path),
        "--run-name",
        "int",
    ]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "mario/train.py"), *args],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = tmp_path / "int" / "metrics.jsonl"
    children = set()
    deadline = time.time() + 180
    while time.time() < deadline and not (metrics.exists() and metrics.stat().st_size > 0):
        children |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.5)
    assert metrics.exists(), "training never finished its first update"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]  # the shell's status for SIGINT, after saving
    assert "SIGINT received" in out
    state = load_checkpoint(glob.glob(str(tmp_path / "int" / "models" / "*.pdparams"))[0])
    assert state["update"] >= 1 and state["game"] == "mario"
    time.sleep(1)
    alive = [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert children and not alive, f"workers left running: {alive}"
