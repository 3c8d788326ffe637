"""Pictures of curiosity at work, as uint8 RGB arrays: the trainer logs them, the play scripts and
notebooks draw them too.

numpy and matplotlib only (no Paddle): figures are drawn on matplotlib's Agg canvas without
pyplot, so nothing here touches a notebook's backend or pyplot's global state.

* **The intrinsic reward along an episode** (the RND paper's Figure 1): ``along_episode``
  turns one episode's per-step intrinsic rewards and its frames into a record (a dict of
  arrays, saved as ``.npz`` by ``save_record``), ``draw_along_episode`` draws it: the curve,
  its highest peaks marked, the frames at those peaks and at the episode's end above their
  points, each joined to its point.
* **Helpers** for the games' own pictures (``mario/pictures.py``, ``montezuma/pictures.py``,
  ``gridworld/pictures.py``): ``new_figure``, ``figure_image``, ``save_png``.

Step convention: ``rewards[j]`` is the intrinsic reward of s_{j+1}, the state reached by the
episode's step ``j + 1`` (s_0 is the reset state, never rewarded); the frame "of step s" is the
screen after step s.
"""

from __future__ import annotations

import os

import numpy as np

#: how many peaks are marked (plus the episode's end)
PEAKS = 4


# ------------------------------------------------------------------ drawing helpers
def new_figure(width_px: int, height_px: int, dpi: int = 100):
    """A matplotlib ``Figure`` of ``width_px`` x ``height_px`` pixels on an Agg canvas (no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # + 0.01 px: 460 / 100 * 100 is 459.99999999999994 in floats, which matplotlib < 3.11 truncates to 459
    fig = Figure(figsize=((width_px + 0.01) / dpi, (height_px + 0.01) / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def figure_image(fig) -> np.ndarray:
    """Render ``fig`` (from ``new_figure``) to uint8[H, W, 3] RGB at its own size."""
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    return np.ascontiguousarray(rgba[:, :, :3])


def save_png(path: str, image: np.ndarray) -> str:
    """Write uint8[H, W, 3] (or [H, W]) as a PNG, making the folder; returns ``path``."""
    from PIL import Image

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Image.fromarray(np.asarray(image, np.uint8)).save(path)
    return path


def observation_rgb(obs: np.ndarray) -> np.ndarray:
    """uint8[C, H, W] stacked gray frames -> the latest one as uint8[H, W, 3] (gray)."""
    frame = np.asarray(obs)[-1]
    return np.repeat(frame[:, :, None], 3, axis=2).astype(np.uint8)


# ------------------------------------------------------------------ the intrinsic reward along an episode
def peak_indices(values: np.ndarray, count: int = PEAKS, min_gap: int | None = None) -> np.ndarray:
    """Indices of the ``count`` highest peaks of ``values`` float[L], highest first.

    The largest value, then the largest one farther than ``min_gap`` steps from every peak
    chosen so far, and so on (fewer when none is left). ``min_gap`` defaults to
    ``L // (3 * count)``, so the peaks spread over the episode instead of crowding on one
    burst of novelty. Returns int64[K], K <= count.
    """
    values = np.asarray(values, np.float64)
    if min_gap is None:
        min_gap = len(values) // (3 * max(count, 1))
    free = np.isfinite(values)
    picked = []
    while len(picked) < count and free.any():
        i = int(np.argmax(np.where(free, values, -np.inf)))
        picked.append(i)
        free[max(0, i - min_gap) : i + min_gap + 1] = False
    return np.asarray(picked, np.int64)


def episode_frames(stacks: np.ndarray, screens=None, observation_picture=None):
    """``frame_at(step) -> (frame step, uint8[h, w, 3])`` for one episode, for ``along_episode``.

    ``screens``: the env's RGB screens ``[(step, uint8[h, w, 3])]`` kept by
    ``common.ppo.play.greedy_episode`` (the kept screen nearest the step is used: exact while the
    episode is shorter than the number kept); without them, the observation ``stacks[step]``
    (uint8[L+1, C, H, W]) drawn by ``observation_picture`` (default ``observation_rgb``).
    """
    if screens:
        kept = np.asarray([s for s, _ in screens])

        def from_screens(step: int):
            j = int(np.argmin(np.abs(kept - step)))
            return int(kept[j]), screens[j][1]

        return from_screens
    draw = observation_picture or observation_rgb
    return lambda step: (int(step), np.asarray(draw(stacks[step]), np.uint8))


def along_episode(rewards: np.ndarray, frame_at, count: int = PEAKS) -> dict:
    """The record of the RND paper's Figure 1 for one episode (a dict of arrays, ``save_record``).

    Args:
        rewards: float[L], the intrinsic reward of s_1 .. s_L.
        frame_at: ``step -> (frame step, uint8[h, w, 3])`` (``episode_frames``).
    Returns ``steps`` int64[L] (1 .. L), ``rewards`` float32[L], ``peaks`` int64[K] (indices into
    ``rewards``, highest first), ``marked`` int64[M] (the steps shown with a frame, in order: the
    peaks' steps and the last step), ``frame_steps`` int64[M] (the step each frame was taken at,
    equal to ``marked`` where the episode's screens were all kept) and ``frames`` uint8[M, h, w, 3].
    """
    rewards = np.asarray(rewards, np.float32).ravel()
    peaks = peak_indices(rewards, count)
    marked = np.unique(np.append(peaks + 1, len(rewards))).astype(np.int64)
    shots = [frame_at(int(s)) for s in marked]
    return {
        "steps": np.arange(1, len(rewards) + 1, dtype=np.int64),
        "rewards": rewards,
        "peaks": peaks,
        "marked": marked,
        "frame_steps": np.asarray([s for s, _ in shots], np.int64),
        "frames": np.stack([f for _, f in shots]).astype(np.uint8),
    }


def draw_along_episode(record: dict, title: str = "", width_px: int = 1000, height_px: int = 560) -> np.ndarray:
    """Draw an ``along_episode`` record: uint8[height_px, width_px, 3].

    Below, the intrinsic reward of every step, the peaks marked in red; above, the frames of the
    marked steps left to right, each joined by a line to its point (titled with its step; "frame of
    step s'" when the nearest kept screen is another step's).
    """
    from matplotlib.patches import ConnectionPatch

    steps, rewards = np.asarray(record["steps"]), np.asarray(record["rewards"], np.float64)
    peaks, marked = np.asarray(record["peaks"], np.int64), np.asarray(record["marked"], np.int64)
    frames, frame_steps = record["frames"], np.asarray(record["frame_steps"])
    fig = new_figure(width_px, height_px)
    grid = fig.add_gridspec(2, max(len(marked), 1), height_ratios=[1.0, 1.25], hspace=0.32, left=0.07, right=0.98)
    curve = fig.add_subplot(grid[1, :])
    curve.plot(steps, rewards, color="C0", lw=1.2)
    curve.scatter(steps[peaks], rewards[peaks], color="C3", s=28, zorder=3, label=f"{len(peaks)} highest peaks")
    curve.scatter(steps[-1:], rewards[-1:], color="k", marker="s", s=24, zorder=3, label="episode end")
    curve.set_xlabel("step of the greedy episode")
    curve.set_ylabel("intrinsic reward")
    curve.set_xlim(0.5, max(steps[-1], 1) + 0.5)
    curve.grid(alpha=0.3)
    curve.legend(fontsize=8, loc="best")
    for k, (step, frame, shot) in enumerate(zip(marked, frames, frame_steps)):
        ax = fig.add_subplot(grid[0, k])
        ax.imshow(frame, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"step {step}" + (f" (frame of {shot})" if shot != step else ""), fontsize=9)
        h, w = frame.shape[:2]
        fig.add_artist(
            ConnectionPatch(
                xyA=(w / 2, h - 0.5),
                coordsA=ax.transData,
                xyB=(step, rewards[step - 1]),
                coordsB=curve.transData,
                color="C3" if step - 1 in peaks else "k",
                lw=0.8,
                alpha=0.7,
            )
        )
    if title:
        fig.suptitle(title, fontsize=11)
    return figure_image(fig)


def save_record(path: str, record: dict) -> str:
    """Write a record (dict of arrays) as a compressed ``.npz``, making the folder; returns ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:  # a file object: numpy would append ".npz" to another suffix
        np.savez_compressed(f, **{k: np.asarray(v) for k, v in record.items()})
    return path


def load_record(path: str) -> dict:
    """The dict of arrays ``save_record`` wrote (no pickled objects are read)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


__all__ = [
    "PEAKS",
    "along_episode",
    "draw_along_episode",
    "episode_frames",
    "figure_image",
    "load_record",
    "new_figure",
    "observation_rgb",
    "peak_indices",
    "save_png",
    "save_record",
]
