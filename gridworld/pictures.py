"""MiniGrid's pictures: the symbolic view in colour, and where the agent has been in a rollout.

* ``view_picture(obs)``: the agent's 7x7 symbolic view uint8[3, 7, 7] (or the full grid) drawn by MiniGrid's own
  renderer (``Grid.decode`` + ``Grid.render``, as ``MiniGridEnv.get_pov_render`` draws it: the
  agent at the bottom centre facing up, unseen cells dark): the frames of the greedy episode's
  intrinsic-reward picture, since the env renders RGB only when it records a video (with
  ``--observation view+full`` it draws the grid, the last channels, not the policy's view).
* ``rollout_picture(cfg, rollout)``: the cells the agent stood on during one rollout, over all
  envs (each env's layout is its own, the grid's size is the task's), as a heat map of visits,
  and beside it the mean scaled intrinsic reward of the steps that ended on each cell.
"""

from __future__ import annotations

import functools

import numpy as np

from common.pictures import figure_image, new_figure

TILE = 16  # pixels per cell of a rendered view: 7 x 16 = 112


def view_picture(obs: np.ndarray, tile: int = TILE) -> np.ndarray:
    """The symbolic view uint8[3, 7, 7] ([channel, y, x]; of a stack of views, the newest: the last 3
    channels) -> uint8[7 * tile, 7 * tile, 3] RGB. A full grid (``--observation full`` or
    ``view+full``, whose last 3 channels hold the agent's own code) is drawn with the agent where it
    stands, facing its way."""
    from minigrid.core.grid import Grid

    from gridworld.env import OBJECT_AGENT

    codes = np.asarray(obs, np.uint8)[-3:].transpose(2, 1, 0)  # MiniGrid's [x, y, channel]
    grid, seen = Grid.decode(codes)
    agent = np.argwhere(codes[:, :, 0] == OBJECT_AGENT)
    if len(agent):  # a full grid: the agent's cell holds its direction
        x, y = (int(v) for v in agent[0])
        return grid.render(tile, agent_pos=(x, y), agent_dir=int(codes[x, y, 2]), highlight_mask=seen)
    view = codes.shape[0]
    return grid.render(tile, agent_pos=(view // 2, view - 1), agent_dir=3, highlight_mask=seen)


@functools.lru_cache(maxsize=8)
def grid_size(env_id: str) -> tuple[int, int]:
    """(width, height) in cells of the task ``env_id``, from one env (its walls included)."""
    from gridworld.env import make_env

    with make_env(env_id) as env:
        return int(env.unwrapped.width), int(env.unwrapped.height)


def step_record(info: dict):
    """Where the agent stands after a step: (x, y), or None when the info lacks it."""
    pos = info.get("agent_pos")
    return None if pos is None else (int(pos[0]), int(pos[1]))


def visits(rollout, width: int, height: int) -> dict:
    """The rollout's steps counted per cell: ``visits`` int64[height, width] (rows are y), and the
    mean scaled intrinsic reward of the steps that ended there, ``mean_int`` float32[height, width]
    (NaN where none did)."""
    count = np.zeros((height, width), np.int64)
    total = np.zeros((height, width), np.float64)
    for t, row in enumerate(rollout.records):
        for n, pos in enumerate(row):
            if pos is None:
                continue
            x, y = pos
            count[y, x] += 1
            total[y, x] += rollout.rewards_int[t, n]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)
    return {"visits": count, "mean_int": mean}


def draw_visits(data: dict, title: str = "", intrinsic: bool = True) -> np.ndarray:
    """Heat maps of ``visits`` (and ``mean_int`` when ``intrinsic``): uint8[H, W, 3]."""
    panels = [("steps on each cell", data["visits"].astype(np.float64), "viridis")]
    if intrinsic:
        panels.append(("mean scaled intrinsic reward", data["mean_int"], "magma"))
    fig = new_figure(430 * len(panels), 420)
    for k, (name, values, cmap) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        shown = np.ma.masked_where(~np.isfinite(values) | (data["visits"] == 0), values)
        im = ax.imshow(shown, cmap=cmap, interpolation="nearest")
        ax.set_facecolor("0.85")  # cells never stood on
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return figure_image(fig)


def rollout_picture(cfg, rollout):
    """``GameSpec.rollout_picture``: the heat map of one rollout's visits (and intrinsic rewards)."""
    width, height = grid_size(cfg.env_id)
    data = visits(rollout, width, height)
    steps = rollout.dones.size
    title = f"{cfg.env_id}, update {rollout.update}: where the agent was ({steps} steps, all envs)"
    return draw_visits(data, title, intrinsic=rollout.intrinsic != "none"), data
