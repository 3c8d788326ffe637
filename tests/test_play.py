"""Eval videos written by training, and the play scripts run as a user runs them.

Checkpoints come from the tiny real runs of the ``mario_run`` / ``montezuma_run``
session fixtures. ``python <game>/play.py --checkpoint ...`` runs as a subprocess;
its mp4 is read back with imageio and its printed result parsed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import imageio.v2 as imageio
import pytest

from common.run.logger import read_metrics

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def count_frames(path):
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        n, shape = 0, None
        for frame in reader:
            n, shape = n + 1, frame.shape
        return n, shape
    finally:
        reader.close()


def play(game, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, game, "play.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_eval_videos_every_update(mario_run):
    runs, _ = mario_run
    run_dir = runs / "mario_short"
    assert sorted(os.listdir(run_dir / "videos")) == ["eval_000001.mp4", "eval_000002.mp4"]
    lengths = dict(zip(*read_metrics(str(run_dir))["eval/length"]))  # global step -> agent steps
    for update in (1, 2):
        frames, shape = count_frames(str(run_dir / "videos" / f"eval_{update:06d}.mp4"))
        steps = int(lengths[32 * update])
        assert shape == (240, 256, 3)
        # every emulator frame (4 per agent step, fewer if the last step ended the episode) + the reset frame
        assert 4 * (steps - 1) + 2 <= frames <= 4 * steps + 1, (frames, steps)


def test_mario_play_script(mario_run, tmp_path):
    runs, result = mario_run
    out = tmp_path / "mario.mp4"
    proc = play("mario", "--checkpoint", result["checkpoint"], "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("mario 1-1 (update 2):"), line
    got = {k: float(v) for k, v in re.findall(r"(return|steps|x_pos|flag) (-?[\d.]+)", line)}
    assert got["flag"] in (0, 1) and f"video {out}" in line
    # The emulator and the greedy policy are deterministic: the same episode as the run's last eval
    # (update 2, same checkpoint, the run's --max-eval-steps 40).
    m = read_metrics(str(runs / "mario_short"))
    assert got["steps"] == m["eval/length"][1][-1] and got["x_pos"] == m["eval/x_pos"][1][-1]
    assert got["return"] == pytest.approx(m["eval/return"][1][-1], abs=1e-3)
    frames, shape = count_frames(str(out))
    assert shape == (240, 256, 3) and 4 * (got["steps"] - 1) + 2 <= frames <= 4 * got["steps"] + 1


def test_montezuma_play_script(montezuma_run, tmp_path):
    _, result = montezuma_run
    out = tmp_path / "mz.mp4"
    proc = play("montezuma", "--checkpoint", result["checkpoint"], "--output", str(out), "--max-steps", "20")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("montezuma level1 (update 1):"), line
    rooms = float(re.search(r"rooms (\S+?),", line).group(1))
    assert rooms >= 1 and re.search(r"score \d", line) and f"video {out}" in line
    frames, shape = count_frames(str(out))
    assert shape == (210, 160, 3) and frames > 20


@pytest.mark.parametrize("game, other", [("mario", "montezuma"), ("montezuma", "mario")])
def test_play_refuses_a_checkpoint_of_the_other_game(game, other, mario_run, montezuma_run, tmp_path):
    result = {"mario": mario_run, "montezuma": montezuma_run}[other][1]
    main = __import__(f"{game}.play", fromlist=["main"]).main
    with pytest.raises(SystemExit) as e:
        main(["--checkpoint", result["checkpoint"], "--output", str(tmp_path / "x.mp4")])
    msg = str(e.value.code)
    assert msg.startswith("error: ") and f"written by game {other!r}; this is {game!r}" in msg
    assert not (tmp_path / "x.mp4").exists()


def test_frame_strip_is_a_grid_of_moments():
    import numpy as np

    from common.ppo.play import frame_strip

    # 17 NES screens, each filled with its index: 8 evenly spaced ones, halved, in 2 rows of 4, 2-px white lines.
    rgb = [(i, np.full((240, 256, 3), i, np.uint8)) for i in range(17)]
    grid = frame_strip(None, rgb)
    assert grid.shape == (2 * 120 + 2, 4 * 128 + 3 * 2, 3) and grid.dtype == np.uint8
    cells = [grid[r * 122 : r * 122 + 120, c * 130 : c * 130 + 128] for r in range(2) for c in range(4)]
    assert [int(cell.min()) for cell in cells] == [int(cell.max()) for cell in cells] == [0, 2, 5, 7, 9, 11, 14, 16]
    assert (grid[120:122] == 255).all() and (grid[:, 128:130] == 255).all()
    # A short episode: one row; gray stacks without RGB screens: the same grid of the latest 84x84 frames.
    assert frame_strip(None, rgb[:3]).shape == (120, 3 * 128 + 2 * 2, 3)
    stacks = np.random.default_rng(0).integers(0, 255, (41, 4, 84, 84), dtype=np.uint8)
    gray = frame_strip(stacks)
    assert gray.shape == (2 * 84 + 2, 4 * 84 + 3 * 2)
    np.testing.assert_array_equal(gray[86:, :84], stacks[22, -1])  # the 5th of 8 evenly spaced stacks


def test_play_episodes_are_the_single_seed_episodes_and_summed_up(montezuma_run, tmp_path, capsys):
    """``--episodes 3``: the episodes of seeds 0, 1, 2, each as ``--seed k`` alone plays it, then their summary."""
    from montezuma.play import main

    ckpt = montezuma_run[1]["checkpoint"]
    common = ["--checkpoint", ckpt, "--policy", "sample", "--max-steps", "30", "--output", str(tmp_path / "a.mp4")]
    result = main(common + ["--episodes", "3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert result["episodes"][0] == {k: v for k, v in result.items() if k != "episodes"}
    for seed in (1, 2):
        alone = main(common + ["--seed", str(seed)])
        assert {k: alone[k] for k in result["episodes"][seed]} == result["episodes"][seed]
    steps = [e["steps"] for e in result["episodes"]]
    assert lines[1].startswith("  seed 1: return") and "3 episodes (seeds 0-2, sample)" in lines[3]
    assert f"steps mean {sum(steps) / 3:.4g} max {max(steps)}" in lines[3]
    for bad, what in (
        (["--episodes", "0"], "--episodes 0 is invalid"),
        (["--seed", "2147483647", "--episodes", "2"], "last seed"),
    ):
        with pytest.raises(SystemExit):
            main(common + bad)
        assert what in capsys.readouterr().err
