"""common.envs.video.VideoRecorder: real encoding with imageio-ffmpeg, read back."""

import os

import imageio.v2 as imageio
import numpy as np
import pytest

from common.envs.video import VideoRecorder

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers


def read_all(path):
    reader = imageio.get_reader(path)
    try:
        return [f for f in reader], reader.get_meta_data()
    finally:
        reader.close()


def gradient_frames(n, h, w):
    return [np.full((h, w, 3), (17 * i) % 256, dtype=np.uint8) for i in range(n)]


def test_writes_all_frames_atomically(tmp_path):
    path = str(tmp_path / "a" / "b" / "clip.mp4")  # parents are created
    rec = VideoRecorder(path, fps=60)
    frames = gradient_frames(12, 240, 256)
    for f in frames:
        rec.add(f)
    assert rec.num_frames == 12
    assert os.path.exists(path + ".tmp.mp4") and not os.path.exists(path)
    rec.close()
    rec.close()  # idempotent
    assert os.path.exists(path) and not os.path.exists(path + ".tmp.mp4")
    got, meta = read_all(path)
    assert len(got) == 12 and got[0].shape == (240, 256, 3)
    assert meta["fps"] == 60 and meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p")
    # lossy, but flat gray levels survive closely and in order
    for f, g in zip(frames, got):
        assert abs(float(g.mean()) - float(f.mean())) < 4


def test_odd_size_is_padded_not_rescaled(tmp_path):
    path = str(tmp_path / "odd.mp4")
    with VideoRecorder(path, fps=30) as rec:
        for f in gradient_frames(5, 211, 161):
            rec.add(f)
    got, meta = read_all(path)
    assert len(got) == 5 and got[0].shape == (212, 162, 3)


def test_buffer_reuse_after_add_is_safe(tmp_path):
    # nes-py / ALE hand out live screen buffers: add() must consume the bytes at once
    path = str(tmp_path / "reuse.mp4")
    buf = np.zeros((64, 64, 3), np.uint8)
    with VideoRecorder(path, fps=60) as rec:
        for v in (0, 250, 0, 250):
            buf[:] = v
            rec.add(buf)
    got, _ = read_all(path)
    assert [round(float(g.mean()) / 250) for g in got] == [0, 1, 0, 1]


def test_no_frames_no_file_and_bad_input(tmp_path):
    path = str(tmp_path / "empty.mp4")
    with VideoRecorder(path, fps=60):
        pass
    assert not os.path.exists(path) and not os.path.exists(path + ".tmp.mp4")
    rec = VideoRecorder(str(tmp_path / "bad.mp4"), fps=60)
    with pytest.raises(ValueError, match="uint8"):
        rec.add(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match=r"\(8, 8\)"):
        rec.add(np.zeros((8, 8), np.uint8))
    rec.add(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="changed"):
        rec.add(np.zeros((10, 8, 3), np.uint8))
    rec.close()
    with pytest.raises(RuntimeError, match="closed"):
        rec.add(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="-1"):
        VideoRecorder(str(tmp_path / "x.mp4"), fps=-1)
