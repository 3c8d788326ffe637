"""mario/level_picture.py: the screen's place in the level from the RAM, the median stitch, its errors, and
the real 1-1 picture (the zoo agent playing it through) that docs/mario_no_reward.md draws under its shares."""

import os

import numpy as np
import pytest

from mario import level_picture as lp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = os.path.join(ROOT, "mario", "levels", "1-1.png")


def test_screen_left_is_x_pos_minus_marios_place_on_the_screen():
    ram = np.zeros(0x800, dtype=np.uint8)
    ram[0x6D], ram[0x86], ram[0x71C] = 2, 0x40, 0x10  # x_pos 576, Mario 48 px right of the screen's edge
    assert lp.screen_left(ram) == 528
    ram[0x6D], ram[0x86], ram[0x71C] = 3, 0x05, 0xF0  # the edge still on the previous page: (5 - 240) mod 256
    assert lp.screen_left(ram) == 3 * 256 + 5 - 21


def test_stitch_rebuilds_the_level_and_drops_a_sprite_that_moves_with_the_screen():
    rng = np.random.default_rng(0)
    level = rng.integers(0, 200, size=(12, 600, 3), dtype=np.uint8)
    lefts = np.arange(0, 600 - 256 + 1, 7)
    lefts[-1] = 600 - 256  # the last screen ends at the level's end
    screens = np.stack([level[:, x : x + 256] for x in lefts])
    screens[:, 4:8, 100:104] = (255, 0, 255)  # Mario: always 100 px right of the screen's edge
    assert np.array_equal(lp.stitch(screens, lefts), level)
    # a column that no screen shows stays black
    gappy = lp.stitch(screens[[0, -1]], lefts[[0, -1]])
    assert gappy.shape == level.shape and not gappy[:, 300].any() and np.array_equal(gappy[:, :256], screens[0])


@pytest.mark.parametrize(
    "screens, lefts",
    [(np.zeros((2, 4, 8, 3), np.uint8), [0]), (np.zeros((1, 4, 8, 3), np.uint8), [-1]), (np.zeros((4, 8, 3)), [0])],
)
def test_stitch_names_what_it_was_given(screens, lefts):
    with pytest.raises(ValueError, match="left edges"):
        lp.stitch(screens, lefts)


def test_bad_arguments_are_named_before_anything_loads(tmp_path, capsys):
    with pytest.raises(SystemExit):
        lp.main(["--max-steps", "0"])
    assert "--max-steps 0" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="missing.pdparams' does not exist"):  # the checkpoint loader's words
        lp.main(["--checkpoint", str(tmp_path / "missing.pdparams")])
    with pytest.raises(SystemExit, match="is a folder: give the .pdparams file in it"):
        lp.main(["--checkpoint", str(tmp_path)])
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit):  # its folder is a file: named before ~4 s of play, not after
        lp.main(["--out", str(blocker / "level.png")])
    assert "--out" in capsys.readouterr().err


@pytest.mark.slow
def test_the_zoo_agent_draws_1_1_and_every_screen_sits_where_the_ram_says(tmp_path):
    screens, lefts, info = lp.play_through(lp.DEFAULT_CHECKPOINT)
    assert info["flag_get"] and len(screens) == len(lefts) > 100 and np.all(np.diff(lefts) >= 0)
    assert np.bincount(lefts).max() == lp.PER_PLACE  # the start (left edge 0) held more screens than that
    screens = screens[:, lp.HUD_ROWS :]
    level = lp.stitch(screens, lefts)
    sky = level[5, 5].astype(int)

    def agreement(shift):
        """Mean share of each screen's non-sky pixels equal to the level's at the screen's left edge + shift."""
        shares = []
        for screen, x in zip(screens, lefts + shift):
            if 0 <= x and x + lp.SCREEN_WIDTH <= level.shape[1]:
                s = screen.astype(int)
                seen = np.abs(s - sky).sum(-1) > 0
                shares.append((np.abs(level[:, x : x + lp.SCREEN_WIDTH].astype(int) - s).sum(-1) == 0)[seen].mean())
        return np.mean(shares)

    assert agreement(0) > 0.8 and agreement(4) < 0.65 and agreement(-8) < 0.65
    drawn = lp.main(["--out", str(tmp_path / "level.png")])
    assert drawn["flag"] and drawn["height"] == 240 - lp.HUD_ROWS and drawn["width"] == lefts[-1] + 256 >= 3161
    from PIL import Image

    # the report's picture is this one: the emulator and a CPU policy repeat exactly
    assert np.array_equal(np.array(Image.open(tmp_path / "level.png")), np.array(Image.open(COMMITTED)))
