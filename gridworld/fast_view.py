"""MiniGrid's partial view, computed without building grids: the same array as ``gen_obs()["image"]``.

MiniGrid's ``gen_obs`` slices a 7x7 ``Grid`` out of the world (a new ``Wall`` object for
every cell off the map), rotates it ``agent_dir + 1`` times (a new ``Grid`` each time),
walks the occlusion rule over it and encodes it: most of a MiniGrid step (profiled on
KeyCorridorS3R2; the numbers are in docs/performance.md). Here
each view cell is mapped straight to its world cell, the occlusion rule runs on plain
lists in MiniGrid's own order, and only the visible cells are encoded. The result is equal
element for element (``tests/test_gridworld.py`` compares it with MiniGrid's own on random
play of every suite task); envs that define their own ``gen_obs`` keep it.

``install(env)`` replaces ``env.gen_obs`` (the unwrapped ``MiniGridEnv``) with this one.
"""

from __future__ import annotations

import functools

import numpy as np

EMPTY = 1  # minigrid.core.constants.OBJECT_TO_IDX["empty"]


@functools.lru_cache(maxsize=None)
def _sources(view: int, turns: int) -> tuple:
    """For each view cell (x, y), row-major in x, the cell (i, j) of the unrotated slice it shows after
    ``turns`` of MiniGrid's ``rotate_left`` (which puts old (i, j) at new (j, view - 1 - i))."""
    out = []
    for x in range(view):
        for y in range(view):
            i, j = x, y
            for _ in range(turns):  # undo one rotation: new (x, y) came from old (view - 1 - y, x)
                i, j = view - 1 - j, i
            out.append((i, j))
    return tuple(out)


def _visible(cells: list, view: int) -> list:
    """MiniGrid's ``Grid.process_vis`` on ``cells[x][y]`` from the agent's cell (view // 2, view - 1)."""
    mask = [[False] * view for _ in range(view)]
    mask[view // 2][view - 1] = True
    for j in reversed(range(view)):
        for i in range(view - 1):
            if not mask[i][j]:
                continue
            cell = cells[i][j]
            if cell and not cell.see_behind():
                continue
            mask[i + 1][j] = True
            if j > 0:
                mask[i + 1][j - 1] = True
                mask[i][j - 1] = True
        for i in reversed(range(1, view)):
            if not mask[i][j]:
                continue
            cell = cells[i][j]
            if cell and not cell.see_behind():
                continue
            mask[i - 1][j] = True
            if j > 0:
                mask[i - 1][j - 1] = True
                mask[i][j - 1] = True
    return mask


def agent_view(env) -> np.ndarray:
    """uint8 ``[view, view, 3]`` indexed ``[x, y, channel]``: ``env.gen_obs()["image"]`` of MiniGrid."""
    from minigrid.core.world_object import Wall

    view = env.agent_view_size
    top_x, top_y, _, _ = env.get_view_exts()
    grid = env.grid
    width, height, world = grid.width, grid.height, grid.grid
    wall = Wall()  # off the map MiniGrid puts a new Wall in each cell: they all encode and occlude alike
    flat = []
    for i, j in _sources(view, (env.agent_dir + 1) % 4):
        gx, gy = top_x + i, top_y + j
        flat.append(world[gy * width + gx] if 0 <= gx < width and 0 <= gy < height else wall)
    cells = [flat[x * view : (x + 1) * view] for x in range(view)]
    if env.see_through_walls:
        mask = [[True] * view for _ in range(view)]
    else:
        mask = _visible(cells, view)
    cells[view // 2][view - 1] = env.carrying  # the agent sees what it carries in its own cell
    image = np.zeros((view, view, 3), dtype=np.uint8)
    for x in range(view):
        for y in range(view):
            if mask[x][y]:
                v = cells[x][y]
                image[x, y] = v.encode() if v is not None else (EMPTY, 0, 0)
    return image


def _gen_obs(env) -> dict:
    return {"image": agent_view(env), "direction": env.agent_dir, "mission": env.mission}


def install(env) -> bool:
    """Give the unwrapped MiniGrid env ``env`` this ``gen_obs``; False (nothing changed) for an env
    class that defines its own."""
    from minigrid.minigrid_env import MiniGridEnv

    if type(env).gen_obs is not MiniGridEnv.gen_obs:
        return False
    env.gen_obs = functools.partial(_gen_obs, env)
    return True
