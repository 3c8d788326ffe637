"""MP4 recording of RGB frames through imageio's ffmpeg backend (no Paddle).

``VideoRecorder(path, fps)`` encodes with libx264 in the yuv420p pixel format, which
every browser and player reads. yuv420p needs even width and height: frames with an
odd size are padded by one row/column (edge pixels repeated) instead of being
rescaled, so the picture is never resampled (ALE frames are 210x160, NES frames
240x256: both already even).

The file is written to ``path + ".tmp.mp4"`` and renamed to ``path`` only by
``close()``, so a video whose writer crashed half-way is never mistaken for a
complete one. Parent folders are created. Recording nothing writes no file.

    with VideoRecorder("videos/eval.mp4", fps=60) as rec:
        rec.add(frame)          # uint8 [H, W, 3]
"""

from __future__ import annotations

import os

import numpy as np


class VideoRecorder:
    """Append uint8 ``[H, W, 3]`` RGB frames; ``close()`` finalizes ``path``."""

    def __init__(self, path: str, fps: float = 60):
        if not path:
            raise ValueError("VideoRecorder needs a file path, got an empty one")
        if not fps or fps <= 0:
            raise ValueError(f"VideoRecorder fps must be positive, got {fps!r}")
        self.path = os.fspath(path)
        self.tmp_path = self.path + ".tmp.mp4"
        self.fps = float(fps)
        self.num_frames = 0
        self._shape = None
        self._writer = None
        self._closed = False
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)

    def _open(self):
        import imageio.v2 as imageio  # imported lazily: only recording processes pay for it

        self._writer = imageio.get_writer(
            self.tmp_path,
            format="FFMPEG",
            mode="I",
            fps=self.fps,
            codec="libx264",
            pixelformat="yuv420p",
            macro_block_size=1,  # we pad to even sizes ourselves; never let imageio rescale
            ffmpeg_log_level="error",
        )

    def add(self, frame_rgb: np.ndarray) -> None:
        if self._closed:
            raise RuntimeError(f"VideoRecorder for {self.path} is already closed")
        frame = np.asarray(frame_rgb)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"VideoRecorder.add expects a uint8 [H, W, 3] RGB frame, got {frame.dtype} {frame.shape}")
        if self._shape is None:
            self._shape = frame.shape
            self._open()
        elif frame.shape != self._shape:
            raise ValueError(f"frame size changed from {self._shape} to {frame.shape} in {self.path}")
        h, w = frame.shape[:2]
        if h % 2 or w % 2:
            frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
        # The writer copies the bytes into ffmpeg's pipe now, so callers may reuse or
        # mutate their buffer (nes-py's screen is a live view) after add() returns.
        self._writer.append_data(np.ascontiguousarray(frame))
        self.num_frames += 1

    def close(self) -> None:
        """Finish the file (waits for ffmpeg) and move it to ``path``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            os.replace(self.tmp_path, self.path)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "VideoRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VideoRecorder({self.path!r}, fps={self.fps:g}, frames={self.num_frames})"


def gif_from_mp4(mp4: str, gif: str, max_fps: float = 15.0, max_height: int = 160) -> str:
    """An animated GIF of ``mp4`` for a README: at most ``max_fps`` frames a second (every k-th frame of a
    faster video), halved while taller than ``max_height`` (pixels dropped, not blended: game screens stay
    crisp; NES 240x256 -> 120x128), looping. Returns ``gif``."""
    import imageio.v2 as imageio

    reader = imageio.get_reader(mp4, format="FFMPEG")
    try:
        fps = float(reader.get_meta_data().get("fps") or max_fps)
        every = max(1, round(fps / max_fps))
        frames = [np.asarray(f) for k, f in enumerate(reader) if k % every == 0]
    finally:
        reader.close()
    if not frames:
        raise ValueError(f"{mp4} holds no frames")
    while frames[0].shape[0] > max_height:
        frames = [f[::2, ::2] for f in frames]
    os.makedirs(os.path.dirname(os.path.abspath(gif)), exist_ok=True)
    imageio.mimsave(gif, frames, format="GIF", duration=1000.0 * every / fps, loop=0)
    return gif
