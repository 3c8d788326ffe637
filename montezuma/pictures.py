"""Montezuma's picture of where the agent has been: the map of the first level's rooms.

The first level is a pyramid of 24 rooms, numbered as the game numbers them in RAM byte 3 (the
env's ``room`` info): 3 rooms on top (the start room is 1, in the middle), then 5, 7 and 9.
``PYRAMID`` lays them out; walking off a room's left, right, top or bottom edge leads to the
neighbouring cell. Source: the Go-Explore authors' code (Ecoffet et al. 2019/2021;
uber-research/go-explore, ``robustified/goexplore_py/montezuma_env.py``, ``PYRAMID``), which moves
between rooms and draws its room maps with this table (docs/sources.md).

``draw_positions`` is the picture inside the rooms (``montezuma/play.py --heatmap``): where in each
room a policy's sampled episodes go (visits per 8x8-pixel cell of the screen, from Panama Joe's
position in RAM) and what the run's intrinsic module pays there (the mean novelty of the states
in each cell), over the room's screen.

``draw_rooms`` colours each room by how many finished training episodes reached it (log scale;
gray: never reached), labels it with the update of its first visit, and outlines the rooms the
latest rollout was in. The trainer logs it every ``--picture-interval`` updates, with the rollout
inside the rooms below it (``rollout_picture``), and ``montezuma/play.py --map PATH`` draws it from a checkpoint. Room
numbers repeat on later levels: a room reached on level 2 shows on level 1's map.
"""

from __future__ import annotations

import functools

import numpy as np

from common.pictures import figure_image, new_figure

#: the first level's rooms, top row first (-1: no room there)
PYRAMID = (
    (-1, -1, -1, 0, 1, 2, -1, -1, -1),
    (-1, -1, 3, 4, 5, 6, 7, -1, -1),
    (-1, 8, 9, 10, 11, 12, 13, 14, -1),
    (15, 16, 17, 18, 19, 20, 21, 22, 23),
)
ROOMS = 24
#: room -> (row, column) in ``PYRAMID``
ROOM_CELLS = {room: (r, c) for r, row in enumerate(PYRAMID) for c, room in enumerate(row) if room >= 0}

MAP_SIZE = (1000, 520)  # width, height of the picture in pixels
MAP_AXES = (0.02, 0.03, 0.84, 0.86)  # left, bottom, width, height of the pyramid, as figure fractions
ROOM_MARGIN = 0.05  # gap around each room, in rooms
UNVISITED = (0.88, 0.88, 0.88)  # never reached
CURRENT = "#1f4fd8"  # outline of the rooms of the latest rollout


def step_record(info: dict) -> tuple:
    """The room after a step (RAM byte 3) and Panama Joe's screen position there: ``(room, column, row)``."""
    column, row = info.get("position", (-1, -1))
    return int(info.get("room", -1)), int(column), int(row)


def room_boxes(size=MAP_SIZE) -> dict:
    """room -> (top, bottom, left, right) pixel box of its coloured square in a ``draw_rooms`` picture
    of ``size`` (width, height)."""
    width, height = size
    left, bottom, w, h = MAP_AXES
    cols, rows = len(PYRAMID[0]), len(PYRAMID)
    col_px, row_px = w * width / cols, h * height / rows
    top_px, left_px = (1 - bottom - h) * height, left * width
    boxes = {}
    for room, (r, c) in ROOM_CELLS.items():
        y0, x0 = top_px + (r + ROOM_MARGIN) * row_px, left_px + (c + ROOM_MARGIN) * col_px
        y1, x1 = top_px + (r + 1 - ROOM_MARGIN) * row_px, left_px + (c + 1 - ROOM_MARGIN) * col_px
        boxes[room] = (round(y0), round(y1), round(x0), round(x1))
    return boxes


def room_table(visited: dict, counts: dict, current=()) -> dict:
    """The map's values per room 0..23: ``first_update`` int64[24] (-1: never reached, 0: reached
    before first visits were recorded), ``episodes`` int64[24] (finished training episodes that
    reached it) and ``current`` bool[24] (in the latest rollout). Places outside 0..23 are left out."""
    first = np.full(ROOMS, -1, np.int64)
    episodes = np.zeros(ROOMS, np.int64)
    now = np.zeros(ROOMS, bool)
    for room, update in visited.items():
        if 0 <= int(room) < ROOMS:
            first[int(room)] = 0 if update is None else int(update)
    for room, n in counts.items():
        if 0 <= int(room) < ROOMS:
            episodes[int(room)] = int(n)
    for room in current:
        if 0 <= int(room) < ROOMS:
            now[int(room)] = True
    return {"rooms": np.arange(ROOMS, dtype=np.int64), "first_update": first, "episodes": episodes, "current": now}


def draw_rooms(table: dict, title: str = "") -> np.ndarray:
    """The pyramid of ``room_table``: uint8[MAP_SIZE[1], MAP_SIZE[0], 3]."""
    import matplotlib
    from matplotlib import cm, colors, ticker
    from matplotlib.patches import Rectangle

    fig = new_figure(*MAP_SIZE)
    ax = fig.add_axes(MAP_AXES)
    ax.set_xlim(0, len(PYRAMID[0]))
    ax.set_ylim(len(PYRAMID), 0)
    ax.axis("off")
    most = max(int(table["episodes"].max()), 1)
    norm = colors.LogNorm(vmin=1, vmax=max(most, 2))
    cmap = colors.LinearSegmentedColormap.from_list(
        "reached", matplotlib.colormaps["YlOrRd"](np.linspace(0.15, 1.0, 64))
    )
    for room, (r, c) in ROOM_CELLS.items():
        first, n = int(table["first_update"][room]), int(table["episodes"][room])
        face = UNVISITED if first < 0 else cmap(norm(max(n, 1)))
        edge, lw = (CURRENT, 3.0) if table["current"][room] else ("0.4", 0.8)
        side = 1 - 2 * ROOM_MARGIN
        ax.add_patch(Rectangle((c + ROOM_MARGIN, r + ROOM_MARGIN), side, side, facecolor=face, edgecolor=edge, lw=lw))
        ink = "white" if np.dot(colors.to_rgb(face), (0.299, 0.587, 0.114)) < 0.5 else "0.1"  # readable text
        ax.text(c + 0.12, r + 0.22, str(room), fontsize=9, weight="bold", color=ink)
        if first >= 0:
            ax.text(c + 0.5, r + 0.52, f"upd {first}" if first else "upd ?", fontsize=8, ha="center", color=ink)
            ax.text(c + 0.5, r + 0.78, f"{n} ep.", fontsize=7, ha="center", color=ink)
    bar = fig.add_axes((0.88, 0.12, 0.02, 0.7))
    ticks = [t for t in (10**k * m for k in range(9) for m in (1, 2, 5)) if t <= norm.vmax]
    scale = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), cax=bar, ticks=ticks, format="%d")
    scale.ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    scale.set_label("training episodes that reached the room")
    reached = int((table["first_update"] >= 0).sum())
    fig.text(
        0.02,
        0.93,
        f"{reached} of {ROOMS} rooms reached; label: update of the first visit; blue outline: rooms of the "
        "latest rollout",
        fontsize=9,
    )
    if title:
        fig.suptitle(title, fontsize=11, y=0.995)
    return figure_image(fig)


def rollout_picture(cfg, rollout):
    """``GameSpec.rollout_picture``: the room map of the run so far, the latest rollout's rooms outlined,
    and below it the rollout inside its most visited rooms (``draw_positions``: its visits, and the raw
    novelty of its states where the run has an intrinsic module). Returns the image and its values:
    the room map's (``room_table``) and the rollout's ``position_table`` with ``heat_`` before each name."""
    current = {record[0] for row in rollout.records for record in row}
    table = room_table(rollout.visited, rollout.visit_counts, current)
    title = f"Montezuma's Revenge, level 1, update {rollout.update}: the rooms training episodes reached"
    rooms_image = draw_rooms(table, title)
    heat = position_table(*rollout_positions(rollout, cfg.int_reward))
    with_reward = rollout.intrinsic != "none"
    what = "raw novelty of its states" if with_reward else "no intrinsic module"
    heat_title = f"inside the rooms, update {rollout.update}'s rollout: visits, {what}"
    heat_image = draw_positions(heat, {1: start_screen()}, heat_title, with_reward)
    return stack_images(rooms_image, heat_image), {**table, **{f"heat_{k}": v for k, v in heat.items()}}


@functools.cache
def start_screen() -> np.ndarray:
    """The first room's screen at the start of a game, uint8[210, 160, 3] (the background of the
    training pictures' room 1; made once per process with a fresh emulator)."""
    from montezuma.env import make_env

    with make_env() as env:
        env.reset(seed=0)
        return env.rgb_frame()


def rollout_positions(rollout, convention: str = "rnd") -> tuple:
    """``(rooms, columns, rows, raw novelty)`` of a rollout's states, one entry per state that is scored.

    ``rollout.raw_int[t, n]`` is the novelty of s_{t+1} under the ``rnd`` convention, whose position
    is ``records[t][n]``; under ``snd`` it is the novelty of s_t, the state after step t - 1 (a state
    just reset, and the rollout's first, have no record and are left out)."""
    records = np.asarray(rollout.records, np.int64).reshape(len(rollout.records), -1, 3)  # [T, N, 3]
    raw = np.asarray(rollout.raw_int, np.float64).reshape(records.shape[:2])
    if convention == "snd":
        keep = np.asarray(rollout.dones, np.float64).reshape(records.shape[:2])[:-1] == 0
        records, raw = records[:-1][keep], raw[1:][keep]
    else:
        records, raw = records.reshape(-1, 3), raw.reshape(-1)
    return records[:, 0], records[:, 1], records[:, 2], raw


def stack_images(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """Two uint8[H, W, 3] images one above the other, the narrower centred on white."""
    width = max(top.shape[1], bottom.shape[1])

    def pad(image):
        left = (width - image.shape[1]) // 2
        out = np.full((image.shape[0], width, 3), 255, np.uint8)
        out[:, left : left + image.shape[1]] = image
        return out

    return np.concatenate([pad(top), pad(bottom)])


# ------------------------------------------------------------------ inside the rooms
SCREEN = (210, 160)  # rows, columns of the RGB screen
CELL = 8  # pixels per side of a ``position_table`` cell
GRID = (-(-SCREEN[0] // CELL), -(-SCREEN[1] // CELL))  # 27 x 20 cells
HEAT_ROOMS = 3  # rooms drawn at most (the most visited)
HEAT_MIN_VISITS = 5  # a cell's mean reward is drawn when at least this many states fell in it


def position_table(rooms, cols, rows, rewards=None) -> dict:
    """Visits and intrinsic reward per room and screen cell, from one entry per state.

    ``rooms``, ``cols``, ``rows``: int[S] (``MontezumaEnv.player_position``), ``rewards``: float[S] or
    None. Returns ``rooms`` int64[R] (the rooms seen, most states first), ``visits`` int64[R, 27, 20],
    ``reward_sum`` and ``reward_sq_sum`` float64[R, 27, 20] (the rewards and their squares summed per
    cell; zeros without ``rewards``); a state off the screen counts in its nearest cell."""
    rooms, cols, rows = (np.asarray(a, np.int64).reshape(-1) for a in (rooms, cols, rows))
    rewards = np.zeros(len(rooms)) if rewards is None else np.asarray(rewards, np.float64).reshape(-1)
    if not len(rooms) == len(cols) == len(rows) == len(rewards):
        raise ValueError(f"position_table: lengths {len(rooms)}, {len(cols)}, {len(rows)}, {len(rewards)} differ")
    seen, counts = np.unique(rooms, return_counts=True)
    order = seen[np.argsort(-counts, kind="stable")]
    r = np.clip(rows // CELL, 0, GRID[0] - 1)
    c = np.clip(cols // CELL, 0, GRID[1] - 1)
    index = np.searchsorted(np.sort(order), rooms)
    slot = np.argsort(order)[index]  # each state's place in ``order``
    visits = np.zeros((len(order), *GRID), np.int64)
    reward_sum = np.zeros((len(order), *GRID), np.float64)
    reward_sq_sum = np.zeros((len(order), *GRID), np.float64)
    np.add.at(visits, (slot, r, c), 1)
    np.add.at(reward_sum, (slot, r, c), rewards)
    np.add.at(reward_sq_sum, (slot, r, c), rewards * rewards)
    return {"rooms": order.astype(np.int64), "visits": visits, "reward_sum": reward_sum, "reward_sq_sum": reward_sq_sum}


def place_share(table: dict) -> float | None:
    """The share of the reward's variance over all states that the place explains (room and cell: the
    between-cell sum of squares over the total, eta squared). Near 1: the module's reward is a map of the
    room; near 0: it varies as much at one place (the skull's position, the animation, the time) as
    between places. None without variance."""
    n, total, squares = table["visits"].sum(), table["reward_sum"].sum(), table["reward_sq_sum"].sum()
    if n == 0:
        return None
    spread = squares - total * total / n  # the total sum of squares around the mean
    between = (table["reward_sum"] ** 2 / np.maximum(table["visits"], 1)).sum() - total * total / n
    return float(between / spread) if spread > 1e-12 * max(squares, 1e-300) else None


def rank_correlation(table: dict, min_visits: int = HEAT_MIN_VISITS) -> float | None:
    """Spearman's rank correlation of the visits and the mean reward of the cells with at least
    ``min_visits`` states (all rooms); None with fewer than 3 such cells. Novelty that points away from
    where the policy goes is negative."""
    visits, mean = table["visits"].reshape(-1), mean_reward(table).reshape(-1)
    keep = visits >= min_visits
    if keep.sum() < 3:
        return None
    a, b = (np.argsort(np.argsort(v[keep], kind="stable"), kind="stable").astype(np.float64) for v in (visits, mean))
    a, b = a - a.mean(), b - b.mean()
    denominator = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else None


def mean_reward(table: dict) -> np.ndarray:
    """float64[R, 27, 20]: the mean reward per cell (NaN where no state fell)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(table["visits"] > 0, table["reward_sum"] / np.maximum(table["visits"], 1), np.nan)


def draw_positions(table: dict, screens: dict, title: str = "", with_reward: bool = True) -> np.ndarray:
    """Per room (the ``HEAT_ROOMS`` most visited, one row each) the visits per cell (log colours) and,
    ``with_reward``, the mean intrinsic reward per cell with at least ``HEAT_MIN_VISITS`` states, over
    ``screens[room]`` (uint8[210, 160, 3]; black when missing). Returns uint8[H, W, 3]."""
    from matplotlib import colors

    rooms = [int(r) for r in table["rooms"][:HEAT_ROOMS]]
    panels = 2 if with_reward else 1
    height = 400 * max(len(rooms), 1) + 70
    fig = new_figure(max(340 * panels + 110, 520), height)
    fig.subplots_adjust(top=1 - 75 / height, bottom=0.02, left=0.03, right=0.9, hspace=0.12, wspace=0.3)
    mean = mean_reward(table)
    extent = (0, GRID[1] * CELL, GRID[0] * CELL, 0)
    most = max(int(table["visits"].max()), 2)
    finite = mean[table["visits"] >= HEAT_MIN_VISITS]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    for i, room in enumerate(rooms):
        screen = screens.get(room, np.zeros((*SCREEN, 3), np.uint8))
        visits = table["visits"][i].astype(np.float64)
        layers = [
            (np.where(visits > 0, visits, np.nan), colors.LogNorm(1, most), "viridis", f"room {room}: visits"),
            (
                np.where(table["visits"][i] >= HEAT_MIN_VISITS, mean[i], np.nan),
                colors.Normalize(low, high if high > low else low + 1e-9),
                "magma",
                f"room {room}: mean intrinsic reward",
            ),
        ][:panels]
        for k, (values, norm, cmap, label) in enumerate(layers):
            ax = fig.add_subplot(len(rooms) or 1, panels, i * panels + k + 1)
            ax.imshow(screen, extent=(0, SCREEN[1], SCREEN[0], 0))
            image = ax.imshow(values, extent=extent, norm=norm, cmap=cmap, alpha=0.75, interpolation="nearest")
            ax.set_xlim(0, SCREEN[1])
            ax.set_ylim(SCREEN[0], 0)
            ax.set_title(label, fontsize=9)
            ax.axis("off")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    if title:
        fig.suptitle(title, fontsize=10)
    return figure_image(fig)
