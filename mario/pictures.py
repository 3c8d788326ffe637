"""Mario's picture of where the agent has been: the intrinsic reward along the level.

``rollout_picture(cfg, rollout)`` bins one rollout's steps (all envs) by Mario's ``x_pos`` after
the step, ``BIN`` pixels a bin from x = 0, and draws the mean scaled intrinsic reward of each bin
(the novelty the advantages saw there), with where episodes ended: deaths (red) and flags (green).
Below, how many steps each bin holds, and, for a level with a picture in ``mario/levels/``
(``level_picture.py`` makes them; 1-1 is committed), the level itself, x for x. Logged every
``--picture-interval`` updates, the pictures show the novelty frontier: high rewards where Mario
rarely goes, moving right as he gets further.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from common.pictures import figure_image, new_figure

BIN = 32  # pixels of x_pos per bin: two 16-px tiles (a screen is 256 px)
LEVELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "levels")


@functools.lru_cache(maxsize=4)
def level_strip(world: int, stage: int) -> np.ndarray | None:
    """The picture of level ``world-stage`` (uint8[H, W, 3], column x = x_pos) from ``mario/levels/``, or
    None where there is none."""
    path = os.path.join(LEVELS, f"{int(world)}-{int(stage)}.png")
    if not os.path.exists(path):
        return None
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def show_level(ax, level: np.ndarray, right: int) -> None:
    """Draw ``level`` (``level_strip``) on ``ax`` from x_pos 0 to ``right``, squeezed to the axes' height."""
    shown = level[:, : min(right, level.shape[1])]
    ax.imshow(shown, extent=(0, shown.shape[1], 0, shown.shape[0]), aspect="auto", interpolation="nearest")
    ax.set_xlim(0, right)
    ax.set_yticks([])


def step_record(info: dict):
    """(x_pos, flag reached) after a step."""
    return int(info.get("x_pos", 0)), bool(info.get("flag_get", False))


def by_position(rollout, bin_px: int = BIN) -> dict:
    """The rollout binned by x_pos.

    Returns ``x`` int64[T, N] (x_pos after each step), ``edges`` int64[B+1] (``edges[0] = 0`` and
    ``edges[-1] > x.max()``: every step falls in a bin), ``steps`` int64[B] (steps per bin),
    ``mean_int`` / ``mean_raw`` float32[B] (mean scaled / raw intrinsic reward per bin, NaN in an
    empty bin), ``deaths`` and ``flags`` int64[*] (x_pos where an episode ended without / with
    the flag).
    """
    x = np.asarray([[rec[0] for rec in row] for row in rollout.records], np.int64)
    flag = np.asarray([[rec[1] for rec in row] for row in rollout.records], bool)
    ended = np.asarray(rollout.dones) > 0
    edges = np.arange(0, (max(int(x.max()), 0) // bin_px + 2) * bin_px, bin_px, dtype=np.int64)
    which = np.clip(x // bin_px, 0, len(edges) - 2).ravel()
    steps = np.bincount(which, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = {
            name: (np.bincount(which, np.asarray(r, np.float64).ravel(), len(edges) - 1) / steps).astype(np.float32)
            for name, r in (("mean_int", rollout.rewards_int), ("mean_raw", rollout.raw_int))
        }
    return {
        "x": x,
        "edges": edges,
        "steps": steps.astype(np.int64),
        **means,
        "deaths": x[ended & ~flag],
        "flags": x[ended & flag],
    }


def draw_by_position(data: dict, title: str = "", intrinsic: bool = True, level: np.ndarray | None = None):
    """The binned rollout (``by_position``), above ``level`` (``level_strip``) if given: uint8[460, 1000, 3]."""
    edges, steps = data["edges"], data["steps"]
    fig = new_figure(1000, 460)
    rows = [2.2, 1.0] + ([0.7] if level is not None else [])
    grid = fig.add_gridspec(len(rows), 1, height_ratios=rows, hspace=0.08, left=0.1, right=0.98, top=0.9)
    top, bottom = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    if intrinsic:
        top.stairs(np.nan_to_num(data["mean_int"]), edges, fill=True, color="C1", alpha=0.75)
        top.set_ylabel("mean scaled\nintrinsic reward")
    else:
        top.set_ylabel("(no intrinsic module)")
    low = top.get_ylim()[0]
    top.scatter(
        data["deaths"],
        np.full(len(data["deaths"]), low),
        marker="x",
        color="C3",
        s=40,
        zorder=3,
        label=f"deaths ({len(data['deaths'])})",
    )
    top.scatter(
        data["flags"],
        np.full(len(data["flags"]), low),
        marker="^",
        color="C2",
        s=70,
        zorder=3,
        label=f"flags ({len(data['flags'])})",
    )
    top.legend(fontsize=8, loc="upper right")
    top.tick_params(labelbottom=False)
    bottom.stairs(steps, edges, fill=True, color="C0", alpha=0.7)
    bottom.set_ylabel("steps")
    right = max(edges[-1], 256)
    for ax in (top, bottom):
        ax.set_xlim(0, right)
        ax.grid(alpha=0.3)
    if level is not None:  # the level under the bars, x for x (squeezed in height)
        bottom.tick_params(labelbottom=False)
        bottom = fig.add_subplot(grid[2])
        show_level(bottom, level, right)
    bottom.set_xlabel(f"x_pos (bins of {edges[1] - edges[0]} px)")
    if title:
        fig.suptitle(title, fontsize=11)
    return figure_image(fig)


def rollout_picture(cfg, rollout):
    """``GameSpec.rollout_picture``: the intrinsic reward along x_pos of one rollout."""
    data = by_position(rollout)
    title = (
        f"Mario {cfg.world}-{cfg.stage}, update {rollout.update}: intrinsic reward along the level "
        f"({rollout.dones.size} steps, all envs)"
    )
    level = level_strip(cfg.world, cfg.stage)
    return draw_by_position(data, title, intrinsic=rollout.intrinsic != "none", level=level), data
