"""Random Network Distillation (Burda et al. 2018) and the shared distillation base.

``DistillationModule`` holds what RND and the SND variants share: the observation
normalizer, the predictor and its optimizer, the novelty reward
``||target(x) - predictor(x)||^2 / 2`` (the tutorial's definition) and the
predictor's distillation step on a random ``update_proportion`` share of each
minibatch. ``RND`` freezes its target; the SND variants (``snd.py``) train theirs.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn

from common import cpu
from common.intrinsic.base import IntrinsicModule, distillation_state, load_distillation_state
from common.intrinsic.normalize import RunningMeanStd
from common.optim import adam
from common.run.checkpoint import optimizer_state, set_optimizer_state
from common.run.distributed import NO_SYNC

OBS_CLIP = 5.0
_CHUNK = 256  # samples per forward pass when scoring a whole rollout


class DistillationModule(IntrinsicModule):
    """Predictor distilled from a target network on normalized observations.

    Args:
        target, predictor: ``nn.Layer`` mapping float32[B, k, H, W] -> float32[B, D].
        obs_shape: the stored observation shape (C, H, W); the module looks at the
            last ``input_channels`` channels (1 = only the latest frame, as in RND).
        lr: Adam learning rate of the predictor.
        update_proportion: share of each minibatch the predictor is trained on.
        max_grad_norm: global gradient-norm clip of the predictor.
        seed: seeds the subset sampling (its state is checkpointed).
    """

    def __init__(
        self,
        target: nn.Layer,
        predictor: nn.Layer,
        obs_shape,
        input_channels: int,
        lr: float,
        update_proportion: float,
        max_grad_norm: float,
        seed: int = 0,
    ):
        if not 0.0 < update_proportion <= 1.0:
            raise ValueError(f"update_proportion must be in (0, 1], got {update_proportion}")
        c, h, w = obs_shape
        if not 1 <= input_channels <= c:
            raise ValueError(f"input_channels must be in [1, {c}], got {input_channels}")
        self.target, self.predictor = target, predictor
        self.input_channels = input_channels
        self.update_proportion = float(update_proportion)
        self.obs_rms = RunningMeanStd(shape=(input_channels, h, w))
        self.lr, self.max_grad_norm = lr, max_grad_norm
        self.predictor_opt = self._adam(lr, predictor.parameters())
        self.rng = np.random.default_rng(seed)
        self.grad_sync = NO_SYNC  # gradient averaging over data-parallel ranks (common.run.distributed)
        self._norm_cache = None

    def _adam(self, lr: float, parameters) -> paddle.optimizer.Adam:
        return adam(parameters, lr, grad_clip=nn.ClipGradByGlobalNorm(self.max_grad_norm))

    def reset_optimizers(self) -> None:
        """Fresh optimizers (no moments), as before the first update."""
        self.predictor_opt = self._adam(self.lr, self.predictor.parameters())

    # ---- observation normalization ------------------------------------------------
    def _select(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, -self.input_channels :]

    def observe(self, obs: np.ndarray) -> None:
        """Update the running mean/std with uint8[B, C, H, W] frames (chunked: float64 copies are big)."""
        x = self._select(obs)
        for i in range(0, len(x), _CHUNK):
            chunk = x[i : i + _CHUNK].astype(np.float64)
            self.obs_rms.update_from_moments(chunk.mean(0), chunk.var(0), len(chunk))
        self._norm_cache = None

    def raw(self, obs: np.ndarray) -> paddle.Tensor:
        """uint8[B, C, H, W] -> float32[B, k, H, W] tensor of the looked-at channels, values unchanged."""
        return paddle.to_tensor(self._select(obs)).astype("float32")

    def normalize(self, obs: np.ndarray) -> paddle.Tensor:
        """uint8[B, C, H, W] -> float32[B, k, H, W] tensor, (x - mean) / std clipped to [-5, 5]."""
        return self.standardize(self.raw(obs), fresh=True)

    def standardize(self, x: paddle.Tensor, fresh: bool = False) -> paddle.Tensor:
        """float32[B, k, H, W] on the raw scale -> (x - mean) / std clipped to [-5, 5].

        ``fresh``: ``x`` is a temporary nobody else holds, so it may be overwritten."""
        if self._norm_cache is None:
            self._norm_cache = (
                paddle.to_tensor(self.obs_rms.mean.astype(np.float32)),
                paddle.to_tensor((1.0 / np.sqrt(self.obs_rms.var + 1e-8)).astype(np.float32)),
            )
        mean, inv_std = self._norm_cache
        return cpu.standardize(x, mean, inv_std, OBS_CLIP, in_place=fresh)

    # ---- reward ---------------------------------------------------------------------
    def _target_features(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.target(x)

    @paddle.no_grad()
    def reward(self, obs: np.ndarray) -> np.ndarray:
        out = []
        for i in range(0, len(obs), _CHUNK):
            x = self.normalize(obs[i : i + _CHUNK])
            err = self._target_features(x) - self.predictor(x)
            out.append((err * err).sum(axis=1).numpy() / 2.0)
        return np.concatenate(out).astype(np.float32)

    @paddle.no_grad()
    def features(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [self._target_features(self.normalize(obs[i : i + _CHUNK])).numpy() for i in range(0, len(obs), _CHUNK)]
        ).astype(np.float32)

    # ---- training -------------------------------------------------------------------
    def _subset(self, n: int) -> np.ndarray:
        """A random ``update_proportion`` share of ``n`` indices (at least one)."""
        k = max(1, int(round(self.update_proportion * n)))
        return np.sort(self.rng.choice(n, size=k, replace=False))

    def distill(self, next_obs: np.ndarray) -> float:
        """One predictor step on a random share of uint8[B, C, H, W]; returns the MSE."""
        x = self.normalize(next_obs[self._subset(len(next_obs))])
        with paddle.no_grad():
            target = self._target_features(x)
        loss = ((self.predictor(x) - target) ** 2).mean()
        value = float(loss)
        finite = bool(np.isfinite(value))
        self.predictor_opt.clear_grad()
        if finite:
            loss.backward()
        agreed = self.grad_sync(self.predictor.parameters(), finite)  # averaged over data-parallel ranks
        if agreed.step:  # a non-finite loss is reported by the trainer, never applied
            self.predictor_opt.step()
        return value if agreed.finite else float("nan")  # every rank reports another rank's NaN too

    def update(self, batch: dict) -> dict:
        return {"forward": self.distill(batch["next_obs"])}

    # ---- checkpointing --------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            **distillation_state(self, predictor_opt=optimizer_state(self.predictor_opt)),
            "obs_rms": self.obs_rms.state_dict(),
        }

    def set_state_dict(self, state: dict) -> None:
        load_distillation_state(self, state)
        if state["predictor_opt"]:
            set_optimizer_state(self.predictor_opt, state["predictor_opt"])
        else:  # saved before the first update (e.g. the snapshot an update is rolled back to)
            self.reset_optimizers()
        self.obs_rms.set_state_dict(state["obs_rms"])
        self._norm_cache = None


class RND(DistillationModule):
    """RND: the target is a fixed random network; no gradient ever reaches it."""

    name = "rnd"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.target.eval()
        for p in self.target.parameters():
            p.stop_gradient = True
