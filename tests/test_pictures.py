"""Curiosity at work, in pictures: each picture's content, from its drawing code and from short real runs.

* The greedy eval's intrinsic reward along the episode (``eval/intrinsic_along_episode``,
  ``<run>/eval_intrinsic/update_N.png`` + ``.npz``, ``play.py --plot``): the values are the episode's,
  the marked peaks are its highest values, the frames are the game's screens (MiniGrid: its view).
* Where the agent has been (``explore/<name>``, ``<run>/explore/update_N.png`` + ``.npz``): Mario's
  bins cover every x_pos of the rollout, Montezuma's map colours exactly the rooms the run logged
  (from a checkpoint too, an old one included), MiniGrid's heat map counts every step of the rollout.

The Mario run is the session's ``mario_run`` (2 envs x 16 steps, 2 updates, RND); Montezuma (SND-V),
MiniGrid (SND-STD, SND-VIC, none) run here, each a few seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from common import pictures
from common.run.logger import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_png(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def check_peaks(rewards: np.ndarray, peaks: np.ndarray, count: int = pictures.PEAKS):
    """``peaks`` are the highest values, highest first, each the largest outside its predecessors' gaps."""
    gap = len(rewards) // (3 * count)
    assert 0 < len(peaks) <= count and len(set(peaks.tolist())) == len(peaks)
    assert rewards[peaks[0]] == rewards.max()
    assert np.all(np.diff(rewards[peaks]) <= 0)
    near = np.zeros(len(rewards), bool)
    for p in peaks:
        near[max(0, p - gap) : p + gap + 1] = True
    if len(peaks) == count:  # every value left out is no higher than the lowest peak
        assert np.all(rewards[~near] <= rewards[peaks].min())
    else:  # fewer peaks only when nothing was left
        assert near.all()


def check_along_episode(record: dict, png: str, length: int, total: float, frame_shape: tuple):
    """A saved along-episode record and its PNG, for an episode of ``length`` steps whose summed intrinsic
    reward was logged as ``total``."""
    rewards = record["rewards"]
    assert rewards.shape == (length,) and np.all(np.isfinite(rewards))
    np.testing.assert_allclose(rewards.sum(), total, rtol=1e-4)
    np.testing.assert_array_equal(record["steps"], np.arange(1, length + 1))
    check_peaks(rewards, record["peaks"])
    marked = record["marked"]
    assert marked[-1] == length and set((record["peaks"] + 1).tolist()) <= set(marked.tolist())
    np.testing.assert_array_equal(record["frame_steps"], marked)  # short episodes keep every screen
    assert record["frames"].shape == (len(marked), *frame_shape) and record["frames"].dtype == np.uint8
    image = read_png(png)
    assert image.shape == (560, 1000, 3) and image.std() > 20


def play(game, *args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, game, "play.py"), *args],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )


# ------------------------------------------------------------------ the drawing code
@pytest.mark.parametrize("length", [1, 3, 12, 40, 500])
def test_peaks_are_the_highest_values(length):
    rng = np.random.default_rng(length)
    rewards = rng.gamma(2.0, 1.0, length).astype(np.float32)
    check_peaks(rewards, pictures.peak_indices(rewards))


def test_along_episode_takes_the_frames_of_the_marked_steps(tmp_path):
    rewards = np.ones(50, np.float32)
    rewards[[9, 30]] = [5.0, 3.0]
    screens = [(s, np.full((120, 128, 3), s, np.uint8)) for s in range(0, 51, 2)]  # every other step kept
    record = pictures.along_episode(rewards, pictures.episode_frames(None, screens))
    assert record["peaks"][:2].tolist() == [9, 30]
    assert record["marked"].tolist()[-1] == 50 and {10, 31} <= set(record["marked"].tolist())
    assert np.all(np.abs(record["frame_steps"] - record["marked"]) <= 1)  # the nearest kept screen
    assert [int(f[0, 0, 0]) for f in record["frames"]] == record["frame_steps"].tolist()
    image = pictures.draw_along_episode(record, "title")
    assert image.shape == (560, 1000, 3) and image.dtype == np.uint8
    path = pictures.save_record(str(tmp_path / "a.npz"), record)
    back = pictures.load_record(path)
    assert set(back) == set(record) and all(np.array_equal(back[k], record[k]) for k in record)
    # no screens: the observations themselves (the latest gray frame by default)
    stacks = np.arange(51, dtype=np.uint8)[:, None, None, None] * np.ones((1, 4, 84, 84), np.uint8)
    step, frame = pictures.episode_frames(stacks)(7)
    assert step == 7 and frame.shape == (84, 84, 3) and np.all(frame == 7)


def test_minigrid_view_is_drawn_in_colour():
    from gridworld.env import make_env
    from gridworld.pictures import view_picture

    with make_env("MiniGrid-DoorKey-5x5-v0") as env:
        view = view_picture(env.reset(seed=0))
    assert view.shape == (112, 112, 3) and view.dtype == np.uint8
    assert np.abs(view[..., 0].astype(int) - view[..., 1].astype(int)).max() > 100  # the red agent, a yellow key


def test_pyramid_holds_the_24_rooms_of_level_one():
    from montezuma.pictures import PYRAMID, ROOM_CELLS

    rooms = [r for row in PYRAMID for r in row if r >= 0]
    assert sorted(rooms) == list(range(24)) and [sum(r >= 0 for r in row) for row in PYRAMID] == [3, 5, 7, 9]
    assert ROOM_CELLS[1] == (0, 4)  # the start room: the top row's middle


def room_colours(image: np.ndarray) -> dict:
    """room -> the colour near its square's top right corner (no text there) in a ``draw_rooms`` picture."""
    from montezuma.pictures import room_boxes

    out = {}
    for room, (y0, y1, x0, x1) in room_boxes((image.shape[1], image.shape[0])).items():
        out[room] = tuple(int(v) for v in image[y0 + (y1 - y0) // 8, x1 - (x1 - x0) // 8])
    return out


def coloured_rooms(image: np.ndarray) -> set:
    from montezuma.pictures import UNVISITED

    gray = tuple(round(255 * v) for v in UNVISITED)
    return {room for room, c in room_colours(image).items() if max(abs(a - b) for a, b in zip(c, gray)) > 3}


def test_room_map_colours_the_reached_rooms():
    from montezuma.pictures import MAP_SIZE, draw_rooms, room_table

    visited = {1: 2, 0: 7, 4: None, 12: 30, 99: 5}  # 4: from an old checkpoint; 99 is not a level-1 room
    table = room_table(visited, {1: 40, 0: 3, 12: 1}, current={1, 12})
    assert table["first_update"][[0, 1, 4, 12]].tolist() == [7, 2, 0, 30] and (table["first_update"] >= 0).sum() == 4
    image = draw_rooms(table)
    assert image.shape == (MAP_SIZE[1], MAP_SIZE[0], 3)
    assert coloured_rooms(image) == {0, 1, 4, 12}
    colours = room_colours(image)
    assert colours[1] != colours[0] != colours[12]  # 40, 3 and 1 episodes: three shades


def test_position_table_counts_and_averages_per_room_and_cell():
    from montezuma.pictures import CELL, GRID, draw_positions, mean_reward, position_table, rank_correlation

    rooms = [1, 1, 1, 0, 1, 1]
    cols = [0, 7, 8, 80, 159, -3]  # -3: off the screen, counted in the nearest cell
    rows = [0, 7, 0, 100, 209, 5]
    table = position_table(rooms, cols, rows, [1.0, 3.0, 5.0, 7.0, 9.0, 11.0])
    assert table["rooms"].tolist() == [1, 0] and table["visits"].shape == (2, *GRID) == (2, 27, 20)
    assert table["visits"][0, 0, 0] == 3 and table["reward_sum"][0, 0, 0] == 1.0 + 3.0 + 11.0
    assert table["visits"][0, 0, 1] == 1 and table["visits"][0, 209 // CELL, 159 // CELL] == 1
    assert table["visits"][1, 100 // CELL, 80 // CELL] == 1 and table["visits"].sum() == 6
    mean = mean_reward(table)
    assert mean[0, 0, 0] == 5.0 and np.isnan(mean[0, 5, 5])
    with pytest.raises(ValueError, match="lengths 2, 1"):
        position_table([1, 1], [0], [0, 0])
    # Spearman over the cells with enough states: reward falling with visits is -1, rising +1
    many = position_table([1] * 60, [0] * 10 + [8] * 20 + [16] * 30, [0] * 60, [3.0] * 10 + [2.0] * 20 + [1.0] * 30)
    assert rank_correlation(many) == pytest.approx(-1.0)
    many["reward_sum"] = -many["reward_sum"]
    assert rank_correlation(many) == pytest.approx(1.0)
    assert rank_correlation(table) is None  # fewer than 3 cells with 5 states
    image = draw_positions(many, {1: np.zeros((210, 160, 3), np.uint8)}, "t")
    assert image.ndim == 3 and image.std() > 10
    assert draw_positions(many, {}, with_reward=False).shape[1] < image.shape[1]  # one panel, not two


def test_place_share_is_the_variance_the_cell_explains():
    """Eta squared, checked by hand: a reward fixed per cell is all place (1), one that varies only inside
    the cells none (0); a mix gives between / total."""
    from montezuma.pictures import place_share, position_table

    cols = [0, 0, 8, 8]
    assert place_share(position_table([1] * 4, cols, [0] * 4, [1.0, 1.0, 3.0, 3.0])) == pytest.approx(1.0)
    assert place_share(position_table([1] * 4, cols, [0] * 4, [1.0, 3.0, 1.0, 3.0])) == pytest.approx(0.0)
    # cell means 1 and 3 around a grand mean 2: between 4 x 1 = 4; total (0, 2, 2, 4 -> -2, 0, 0, 2) = 8
    assert place_share(position_table([1] * 4, cols, [0] * 4, [0.0, 2.0, 2.0, 4.0])) == pytest.approx(0.5)
    # the room counts as part of the place: the same cell in two rooms is two places
    assert place_share(position_table([1, 1, 2, 2], [0] * 4, [0] * 4, [1.0, 1.0, 3.0, 3.0])) == pytest.approx(1.0)
    assert place_share(position_table([1, 1], [0, 8], [0, 0], [2.0, 2.0])) is None  # no variance


def test_rollout_positions_pair_each_novelty_with_its_state():
    """rnd: raw[t, n] scores s_{t+1}, whose place is records[t][n]; snd: raw[t, n] scores s_t, the state after
    step t - 1, unless env n's episode ended there (a reset state has no record)."""
    from common.run.game import Rollout
    from montezuma.pictures import rollout_positions

    records = [[(1, 10 * t, n) for n in range(2)] for t in range(3)]  # T = 3 steps x N = 2 envs
    raw = np.array([[0.0, 0.1], [1.0, 1.1], [2.0, 2.1]], np.float32)
    dones = np.array([[0, 1], [0, 0], [0, 0]], np.float32)  # env 1's episode ended at step 0
    rollout = Rollout(update=1, records=records, raw_int=raw, rewards_int=raw, dones=dones, intrinsic="rnd")
    rooms, cols, rows, rewards = rollout_positions(rollout, "rnd")
    assert cols.tolist() == [0, 0, 10, 10, 20, 20] and rows.tolist() == [0, 1] * 3
    np.testing.assert_allclose(rewards, raw.reshape(-1))
    rooms, cols, rows, rewards = rollout_positions(rollout, "snd")
    # s_1 of env 0 (after step 0) is scored by raw[1, 0]; env 1's s_1 is a reset state: left out
    assert list(zip(cols.tolist(), rows.tolist())) == [(0, 0), (10, 0), (10, 1)]
    np.testing.assert_allclose(rewards, [1.0, 2.0, 2.1])
    assert rooms.tolist() == [1, 1, 1]


def test_mario_bins_cover_every_position():
    from common.run.game import Rollout
    from mario.pictures import BIN, by_position, draw_by_position

    x = np.array([[40, 40], [52, 300], [70, 333], [1020, 90]])
    flag = np.zeros_like(x, bool)
    flag[3, 0] = True
    dones = np.zeros(x.shape, np.float32)
    dones[3, 0] = dones[2, 1] = 1
    rollout = Rollout(
        update=3,
        records=[[(int(x[t, n]), bool(flag[t, n])) for n in range(2)] for t in range(4)],
        raw_int=np.ones(x.shape, np.float32),
        rewards_int=np.arange(8, dtype=np.float32).reshape(4, 2),
        dones=dones,
        intrinsic="rnd",
    )
    data = by_position(rollout)
    edges = data["edges"]
    assert edges[0] == 0 and edges[-1] > x.max() and np.all(np.diff(edges) == BIN)
    assert data["steps"].sum() == x.size and data["steps"][40 // BIN] == 3
    assert data["mean_int"][40 // BIN] == pytest.approx((0 + 1 + 2) / 3)
    assert data["deaths"].tolist() == [333] and data["flags"].tolist() == [1020]
    assert draw_by_position(data, "t").shape == (460, 1000, 3)
    # 1-1 has a picture of the level (mario/levels/), drawn under the bars; 8-4 has none
    from mario.pictures import level_strip

    level = level_strip(1, 1)
    assert level.dtype == np.uint8 and level.shape[0] == 208 and level.shape[1] >= 3161 and level_strip(8, 4) is None
    plain, with_level = draw_by_position(data, "t"), draw_by_position(data, "t", level=level)
    assert with_level.shape == plain.shape and not np.array_equal(with_level, plain)
    sky = np.array([104, 136, 252])  # the level's sky shows only in the picture that has the level
    assert (np.abs(with_level.astype(int) - sky).sum(-1) == 0).sum() > 1000
    assert (np.abs(plain.astype(int) - sky).sum(-1) == 0).sum() == 0


# ------------------------------------------------------------------ short real runs
@pytest.mark.slow
def test_mario_run_draws_both_pictures(mario_run):
    runs, result = mario_run
    run_dir = runs / "mario_short"
    metrics = read_metrics(str(run_dir))
    lengths = dict(zip(*metrics["eval/length"]))
    totals = dict(zip(*metrics["Eval Intrinsic reward"]))
    for update in (1, 2):
        stem = run_dir / "eval_intrinsic" / f"update_{update:06d}"
        record = pictures.load_record(str(stem) + ".npz")
        check_along_episode(record, str(stem) + ".png", int(lengths[32 * update]), totals[update], (120, 128, 3))
        assert np.abs(record["frames"][..., 0].astype(int) - record["frames"][..., 2].astype(int)).mean() > 10  # RGB
        data = pictures.load_record(str(run_dir / "explore" / f"update_{update:06d}.npz"))
        x, edges = data["x"], data["edges"]
        assert x.shape == (16, 2) and edges[0] == 0 and edges[-1] > x.max() and data["steps"].sum() == x.size
        assert np.array_equal(np.bincount(x.ravel() // 32, minlength=len(edges) - 1), data["steps"])
        assert np.all(np.isfinite(data["mean_int"][data["steps"] > 0]))
        assert read_png(run_dir / "explore" / f"update_{update:06d}.png").shape == (460, 1000, 3)


def train_gridworld(tmp_path, intrinsic: str, **kw):
    from short_runs import tiny_grid_run

    return tiny_grid_run(
        tmp_path,
        intrinsic=intrinsic,
        eval_interval=1,
        video_interval=2,
        picture_interval=1,
        max_eval_steps=30,
        run_name=intrinsic,
        seed=3,
        **kw,
    )


@pytest.mark.slow
@pytest.mark.parametrize("intrinsic", ["snd-std", "snd-vic"])
def test_gridworld_run_draws_both_pictures(tmp_path, intrinsic):
    from gridworld.pictures import grid_size

    result = train_gridworld(tmp_path, intrinsic, eval_in_background=intrinsic == "snd-std")
    run_dir = result["run_dir"]
    metrics = read_metrics(run_dir)
    # the episode picture comes with the video (update 2); its frames are MiniGrid's view, drawn in colour
    assert sorted(os.listdir(os.path.join(run_dir, "eval_intrinsic"))) == ["update_000002.npz", "update_000002.png"]
    stem = os.path.join(run_dir, "eval_intrinsic", "update_000002")
    record = pictures.load_record(stem + ".npz")
    length, total = int(metrics["eval/length"][1][-1]), metrics["Eval Intrinsic reward"][1][-1]
    check_along_episode(record, stem + ".png", length, total, (112, 112, 3))
    width, height = grid_size("MiniGrid-DoorKey-5x5-v0")
    for update in (1, 2):
        data = pictures.load_record(os.path.join(run_dir, "explore", f"update_{update:06d}.npz"))
        visits = data["visits"]
        assert visits.shape == (height, width) and visits.sum() == 4 * 16  # every step of every env
        assert visits[0].sum() == visits[-1].sum() == visits[:, 0].sum() == visits[:, -1].sum() == 0  # walls
        assert np.array_equal(np.isfinite(data["mean_int"]), visits > 0)
        assert read_png(os.path.join(run_dir, "explore", f"update_{update:06d}.png")).shape == (420, 860, 3)
    # play.py --plot draws the same picture from the checkpoint
    png = tmp_path / "along.png"
    out = play(
        "gridworld", "--checkpoint", result["checkpoint"], "--output", str(tmp_path / "p.mp4"), "--plot", str(png)
    )
    assert out.returncode == 0, out.stderr[-3000:]
    steps = int(re.search(r"steps (\d+)", out.stdout).group(1))
    assert f"plot {png}" in out.stdout and read_png(png).shape == (560, 1000, 3)
    back = pictures.load_record(str(tmp_path / "along.npz"))
    assert back["rewards"].shape == (steps,) and back["frames"].shape[1:] == (112, 112, 3)
    check_peaks(back["rewards"], back["peaks"])


@pytest.mark.slow
def test_without_intrinsic_module_the_episode_picture_is_skipped(tmp_path):
    result = train_gridworld(tmp_path, "none", eval_in_background=False)
    run_dir = result["run_dir"]
    assert not os.path.exists(os.path.join(run_dir, "eval_intrinsic"))
    data = pictures.load_record(os.path.join(run_dir, "explore", "update_000002.npz"))
    assert data["visits"].sum() == 64  # where the agent was is drawn all the same, without intrinsic rewards
    assert read_png(os.path.join(run_dir, "explore", "update_000002.png")).shape == (420, 430, 3)
    png = tmp_path / "along.png"
    out = play(
        "gridworld", "--checkpoint", result["checkpoint"], "--output", str(tmp_path / "p.mp4"), "--plot", str(png)
    )
    assert out.returncode == 0 and "nothing to plot" in out.stdout and not png.exists()


@pytest.mark.slow
def test_montezuma_room_map_shows_the_rooms_the_run_reached(tmp_path):

    from common.ppo.trainer import Trainer
    from common.run.checkpoint import load_checkpoint, save_checkpoint
    from montezuma.pictures import MAP_SIZE, room_table
    from montezuma.train import SPEC, MontezumaConfig, main

    flags = ["--num-envs", "2", "--num-workers", "-1", "--num-local-steps", "16", "--batch-size", "2"]
    flags += ["--num-epochs", "1", "--num-global-steps", "64", "--obs-norm-steps", "1", "--max-eval-steps", "20"]
    flags += ["--eval-interval", "1", "--video-interval", "1", "--picture-interval", "1", "--histogram-interval", "0"]
    flags += ["--embedding-interval", "0", "--max-episode-steps", "8", "--intrinsic", "snd-v"]
    result = main(flags + ["--log-path", str(tmp_path), "--run-name", "mz"])
    run_dir = result["run_dir"]
    metrics = read_metrics(run_dir)
    state = load_checkpoint(result["checkpoint"])
    episodes = len(metrics["episode/rooms"][1])
    assert episodes >= 4  # 8-step episodes in 2 envs x 32 steps
    reached = set(state["visited"])
    assert reached and state["visit_counts"][1] == episodes  # every episode starts in room 1
    assert metrics["charts/rooms_visited_total"][1][-1] == len(reached)
    data = pictures.load_record(os.path.join(run_dir, "explore", "update_000002.npz"))
    assert set(np.flatnonzero(data["first_update"] >= 0).tolist()) == reached
    assert data["episodes"][1] == episodes and data["current"][1]
    image = read_png(os.path.join(run_dir, "explore", "update_000002.png"))
    assert image.shape[0] > MAP_SIZE[1] and coloured_rooms(image[: MAP_SIZE[1], : MAP_SIZE[0]]) == reached
    # ... and below the map, the rollout inside the rooms: every state of 2 envs x 16 steps, the raw novelty
    assert data["heat_visits"].sum() == 2 * 16 and data["heat_rooms"][0] == 1
    assert np.isfinite(data["heat_reward_sum"]).all() and data["heat_reward_sum"].sum() > 0
    # the greedy episode's picture, with Atari screens at half size
    stem = os.path.join(run_dir, "eval_intrinsic", "update_000002")
    length, total = int(metrics["eval/length"][1][-1]), metrics["Eval Intrinsic reward"][1][-1]
    check_along_episode(pictures.load_record(stem + ".npz"), stem + ".png", length, total, (105, 80, 3))

    # A checkpoint from before first visits were recorded (a list of rooms) loads, first visits unknown ...
    old = dict(state, visited=sorted(reached))
    del old["visit_counts"]
    old_path = str(tmp_path / "old.pdparams")
    save_checkpoint(old_path, old)
    cfg = MontezumaConfig(**{**state["config"], "resume": old_path, "run_name": "mz_resumed"})
    trainer = Trainer(SPEC, cfg)
    try:
        assert trainer.log.visited == dict.fromkeys(reached) and not trainer.log.visit_counts
        assert room_table(trainer.log.visited, {})["first_update"][1] == 0
    finally:
        trainer.close()
    # ... and play.py --map draws the run's map from either checkpoint
    for path in (result["checkpoint"], old_path):
        png = tmp_path / f"map_{os.path.basename(path)}.png"
        out = play("montezuma", "--checkpoint", path, "--output", str(tmp_path / "p.mp4"), "--map", str(png))
        assert out.returncode == 0, out.stderr[-3000:]
        assert f"map {png}" in out.stdout and coloured_rooms(read_png(png)) == reached
    # ... and --heatmap: where 40 sampled steps went in each room, and the module's reward there
    png = tmp_path / "heat.png"
    out = play(
        "montezuma",
        "--checkpoint",
        result["checkpoint"],
        "--output",
        str(tmp_path / "h.mp4"),
        "--heatmap",
        str(png),
        "--heatmap-steps",
        "40",
        "--seed",
        "3",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"heatmap {png}" in out.stdout and "rank correlation" in out.stdout
    assert "ccache" not in out.stderr  # no library banner (Paddle's, on import without a compiler cache)
    data = np.load(tmp_path / "heat.npz")
    assert data["visits"].sum() == 40 and 1 in data["rooms"].tolist()
    assert np.isfinite(data["reward_sum"]).all() and data["reward_sum"].sum() > 0
    assert data["episodes"] >= 4  # 8-step episodes, back to back
    assert data["screens"].shape == (min(len(data["rooms"]), 3), 210, 160, 3) and read_png(png).std() > 10
    bad = play("montezuma", "--checkpoint", result["checkpoint"], "--heatmap", str(png), "--heatmap-steps", "0")
    assert bad.returncode == 2 and "--heatmap-steps 0 is invalid" in bad.stderr
