"""A picture of a whole Mario level, stitched from the screens of an agent that plays it through.

    python mario/level_picture.py                                   # 1-1 with the zoo's PPO agent
    python mario/level_picture.py --checkpoint PATH --out level.png  # the level of another checkpoint

``mario/levels/<world>-<stage>.png`` holds the levels drawn so far (1-1, this script's default run);
``mario/pictures.py`` draws a level that has one under the ``explore/`` pictures of its runs.

The NES shows 256 px of a level at a time. ``play_through`` plays a checkpoint greedily and keeps each
agent step's screen (at most ``PER_PLACE`` per place) with the level x of its left edge
(``screen_left``: x_pos minus Mario's x on the screen, from the game's RAM); ``stitch`` gives each
column of the level the median of the screens that showed it, so the moving sprites (Mario, enemies)
fall out and the scenery stays. A column of the picture is an x_pos, so what is measured in x_pos (where
episodes ended, docs/mario_no_reward.md) can be drawn on it. Only the part of the level the agent
scrolled through is drawn: use an agent that reaches the flag (the zoo's ``mario-1-1-ppo`` does on 1-1).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_CHECKPOINT = os.path.join(ROOT, "zoo", "mario-1-1-ppo.pdparams")
HUD_ROWS = 32  # the score line at the top of the screen, which does not scroll with the level
SCREEN_WIDTH = 256
PER_PLACE = 4  # screens kept per left edge: an agent that stands still adds neither memory nor its sprite


def screen_left(ram) -> int:
    """The level x of the screen's left edge: Mario's level x (RAM 0x6D page, 0x86 x) minus his x on the
    screen ((0x86 - 0x71C) mod 256, the screen edge's x on the page), as gym-super-mario-bros computes
    x_pos and Mario's screen position."""
    mario_x = int(ram[0x6D]) * 256 + int(ram[0x86])
    return mario_x - (int(ram[0x86]) - int(ram[0x71C])) % 256


def stitch(screens: np.ndarray, lefts) -> np.ndarray:
    """screens uint8[N, H, W, 3] whose left edges sit at level x ``lefts`` (N ints >= 0) -> the level
    uint8[H, max(lefts) + W, 3]: each column the per-pixel median of the screens that show it (columns
    that none shows stay black)."""
    screens, lefts = np.asarray(screens), np.asarray(lefts, dtype=np.int64)
    if screens.ndim != 4 or len(screens) != len(lefts) or not len(lefts) or lefts.min() < 0:
        raise ValueError(f"stitch: {screens.shape} screens with {len(lefts)} left edges (need N >= 1, lefts >= 0)")
    n, h, w, c = screens.shape
    level = np.zeros((h, int(lefts.max()) + w, c), dtype=np.uint8)
    for x in range(level.shape[1]):
        shown = np.nonzero((lefts <= x) & (x < lefts + w))[0]
        if len(shown):
            level[:, x] = np.median(screens[shown, :, x - lefts[shown]], axis=0).astype(np.uint8)
    return level


def play_through(checkpoint: str, max_steps: int = 5_000, device: str = "cpu"):
    """Play ``checkpoint`` greedily from the level's start (the emulator is deterministic) for at most
    ``max_steps`` agent steps. Returns (screens uint8[N, 240, 256, 3], lefts int64[N], last info): the
    screen and its left edge at the start and after every step but the last (the last screen of an
    episode that ends is the game's, often a black death or level-end frame), at most ``PER_PLACE``
    screens per left edge."""
    from common.run.device import require_paddle

    paddle = require_paddle()  # quietly (Paddle's import warns of a missing compiler cache)
    from common.cpu import unit_floats
    from common.ppo.play import load_policy
    from mario.env import make_env
    from mario.train import SPEC

    _, cfg, policy = load_policy(SPEC, checkpoint, device)
    env = make_env(cfg.world, cfg.stage, cfg.action_type)
    screens, lefts, info, seen = [], [], {}, {}
    try:
        obs = env.reset(seed=0)
        policy.eval()
        with paddle.no_grad():
            for _ in range(max_steps):
                left = screen_left(env.unwrapped.ram)
                seen[left] = seen.get(left, 0) + 1
                if seen[left] <= PER_PLACE:
                    screens.append(env.rgb_frame())
                    lefts.append(left)
                logits, _, _ = policy(unit_floats(obs[None]))
                obs, _, done, info = env.step(int(logits.numpy()[0].argmax()))
                if done:
                    break
    finally:
        env.close()
    return np.stack(screens), np.asarray(lefts, dtype=np.int64), info


def level_picture(checkpoint: str, path: str, max_steps: int = 5_000) -> dict:
    """Play ``checkpoint`` through its level and write the stitched level (HUD cut off) as a PNG at
    ``path``. Returns what was drawn: width and height in px, the screens used, the last x_pos and flag."""
    from common.pictures import save_png

    screens, lefts, info = play_through(checkpoint, max_steps)
    level = stitch(screens[:, HUD_ROWS:], lefts)
    os.replace(save_png(path + ".tmp.png", level), path)  # whole or not at all
    return {
        "width": level.shape[1],
        "height": level.shape[0],
        "screens": len(lefts),
        "x_pos": info.get("x_pos"),
        "flag": bool(info.get("flag_get", False)),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help="a Mario checkpoint (default: the zoo's 1-1 agent)")
    p.add_argument("--out", default="level.png", help="where the PNG goes")
    p.add_argument("--max-steps", type=int, default=5_000, help="agent steps at most")
    args = p.parse_args(argv)
    from common.ppo.play import check_play_args

    check_play_args(p, args, positive=("max_steps",), paths=("out",))
    drawn = level_picture(args.checkpoint, args.out, args.max_steps)  # its loader names a missing file or a folder
    reached = "reached the flag" if drawn["flag"] else f"stopped at x_pos {drawn['x_pos']} (the rest is not drawn)"
    print(f"{args.out}: {drawn['width']} x {drawn['height']} px from {drawn['screens']} screens; the agent {reached}")
    return drawn


if __name__ == "__main__":
    main()
