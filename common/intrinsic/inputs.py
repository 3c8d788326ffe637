"""What every learned intrinsic module does to its input first: pick channels, normalize.

``NormalizedInputModule`` keeps the running mean/std of the channels a module looks at and
turns the rollout's ``uint8[B, C, H, W]`` stacks into ``float32[B, k, H, W]`` tensors,
``(x - mean) / std`` clipped to [-5, 5] (the RND paper's input; the tutorial fed its RND the raw
frames in [0, 1]). RND, the SND variants, NovelD, ICM and E3B all read their observations
through it, so one warm-up of the normalizer (the trainer's random-agent steps) serves every
module, and the normalizer is part of each module's checkpoint.

Under the SND authors' reward convention (``--int-reward snd``) a module reads its input on their
scale instead (``input_scale``): ``unit``, the values divided by their largest (pixels in [0, 1]:
their SND targets), or ``center``, the same minus the running mean (their RND).
"""

from __future__ import annotations

import numpy as np
import paddle

from common import cpu
from common.intrinsic.base import IntrinsicModule
from common.intrinsic.normalize import RunningMeanStd

OBS_CLIP = 5.0
CHUNK = 256  # samples per forward pass when scoring a whole rollout
#: what ``standardize`` does: (x - mean) / std clipped (the RND paper), x / value_max, (x - mean) / value_max
INPUT_SCALES = ("standardize", "unit", "center")


class NormalizedInputModule(IntrinsicModule):
    """An intrinsic module that looks at the last ``input_channels`` channels of ``obs_shape`` (C, H, W),
    normalized by a running mean/std (``obs_rms``, float64[k, H, W])."""

    def __init__(self, obs_shape, input_channels: int):
        c, h, w = obs_shape
        if not 1 <= input_channels <= c:
            raise ValueError(f"input_channels must be in [1, {c}], got {input_channels}")
        self.input_channels = input_channels
        self.obs_rms = RunningMeanStd(shape=(input_channels, h, w))
        self._norm_cache = None
        self.input_scale, self.value_max = "standardize", 255.0

    def set_input_scale(self, scale: str, value_max=255.0) -> None:
        """Read inputs as ``scale`` (one of ``INPUT_SCALES``); ``value_max``: the largest raw value, a
        number or one per observation channel (the channels looked at are taken)."""
        if scale not in INPUT_SCALES:
            raise ValueError(f"input scale {scale!r} is unknown: expected one of {', '.join(INPUT_SCALES)}")
        vmax = np.asarray(value_max, np.float32)
        if vmax.ndim == 1:
            vmax = vmax[-self.input_channels :].reshape(-1, 1, 1)
        self.input_scale, self.value_max = scale, vmax
        self._norm_cache = None

    def _select(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, -self.input_channels :]

    def observe(self, obs: np.ndarray) -> None:
        """Update the running mean/std with uint8[B, C, H, W] frames (chunked: float64 copies are big)."""
        x = self._select(obs)
        for i in range(0, len(x), CHUNK):
            chunk = x[i : i + CHUNK].astype(np.float64)
            self.obs_rms.update_from_moments(chunk.mean(0), chunk.var(0), len(chunk))
        self._norm_cache = None

    def raw(self, obs: np.ndarray) -> paddle.Tensor:
        """uint8[B, C, H, W] -> float32[B, k, H, W] tensor of the looked-at channels, values unchanged."""
        return paddle.to_tensor(self._select(obs)).astype("float32")

    def normalize(self, obs: np.ndarray) -> paddle.Tensor:
        """uint8[B, C, H, W] -> float32[B, k, H, W] tensor, (x - mean) / std clipped to [-5, 5]."""
        return self.standardize(self.raw(obs), fresh=True)

    def standardize(self, x: paddle.Tensor, fresh: bool = False) -> paddle.Tensor:
        """float32[B, k, H, W] on the raw scale -> (x - mean) / std clipped to [-5, 5] (or the
        ``input_scale`` set: x / value_max, (x - mean) / value_max).

        ``fresh``: ``x`` is a temporary nobody else holds, so it may be overwritten."""
        if self.input_scale != "standardize":
            if self._norm_cache is None:
                inv = paddle.to_tensor((1.0 / np.asarray(self.value_max, np.float32)).astype(np.float32))
                centre = self.obs_rms.mean if self.input_scale == "center" else np.zeros_like(self.obs_rms.mean)
                self._norm_cache = (paddle.to_tensor(centre.astype(np.float32)), inv)
            mean, inv = self._norm_cache
            return (x - mean) * inv
        if self._norm_cache is None:
            self._norm_cache = (
                paddle.to_tensor(self.obs_rms.mean.astype(np.float32)),
                paddle.to_tensor((1.0 / np.sqrt(self.obs_rms.var + 1e-8)).astype(np.float32)),
            )
        mean, inv_std = self._norm_cache
        return cpu.standardize(x, mean, inv_std, OBS_CLIP, in_place=fresh)

    def normalizers(self) -> list:
        return [self.obs_rms]

    def normalizer_state(self) -> dict:
        return {"obs_rms": self.obs_rms.state_dict()}

    def load_normalizer_state(self, state: dict) -> None:
        try:
            self.obs_rms.set_state_dict(state["obs_rms"])
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"entry 'intrinsic/obs_rms': {e}") from None
        self._norm_cache = None


def subset(rng: np.random.Generator, n: int, proportion: float) -> np.ndarray:
    """A random ``proportion`` share of ``n`` indices (at least one), sorted: the samples of a
    minibatch an intrinsic module trains on (``update_proportion``)."""
    k = max(1, int(round(proportion * n)))
    return np.sort(rng.choice(n, size=k, replace=False))


def checked_step(loss: paddle.Tensor, optimizer, parameters, grad_sync) -> float:
    """One optimizer step on ``loss`` (0-D) unless it is non-finite on any data-parallel rank.

    Returns the loss as a float, NaN when any rank's loss was non-finite (then no rank steps: the
    trainer reports it and rolls the update back). ``grad_sync`` averages the gradients over the
    ranks (``common.run.distributed``; ``NO_SYNC`` on one process)."""
    value = float(loss)
    finite = bool(np.isfinite(value))
    optimizer.clear_grad()
    if finite:
        loss.backward()
    agreed = grad_sync(parameters, finite)
    if agreed.step:
        optimizer.step()
    return value if agreed.finite else float("nan")
