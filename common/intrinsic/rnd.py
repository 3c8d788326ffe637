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

from common.intrinsic.base import distillation_state, load_distillation_state
from common.intrinsic.inputs import CHUNK, NormalizedInputModule, checked_step, subset
from common.intrinsic.registry import register
from common.optim import adam
from common.run.checkpoint import optimizer_state, set_optimizer_state
from common.run.distributed import NO_SYNC


class DistillationModule(NormalizedInputModule):
    """Predictor distilled from a target network on normalized observations.

    The novelty is ``||target(x) - predictor(x)||^2 / 2`` (``error`` "half_sum"), or the mean of the
    squared differences over the features ("mean": the SND authors' for their targets).
    ``use_authors_scale`` switches a module to the SND authors' input and error (``AUTHORS_SCALE``),
    which ``--int-reward snd`` needs: there the reward is ``clip(eta x error, 0, 1)`` with no
    normalisation, so the error's own scale is what the agent is paid.

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
        super().__init__(obs_shape, input_channels)
        self.target, self.predictor = target, predictor
        self.update_proportion = float(update_proportion)
        self.lr, self.max_grad_norm = lr, max_grad_norm
        self.predictor_opt = self._adam(lr, predictor.parameters())
        self.rng = np.random.default_rng(seed)
        self.grad_sync = NO_SYNC  # gradient averaging over data-parallel ranks (common.run.distributed)
        self.error = "half_sum"

    #: (input scale, error) of the SND authors' code for this kind of module: their RND reads the latest
    #: frame in [0, 1] minus its running mean and pays half the summed squared error (Iskandor/SND,
    #: ``RNDModelAtari``)
    AUTHORS_SCALE = ("center", "half_sum")

    def use_authors_scale(self, value_max=255.0) -> None:
        """Read inputs and measure the error as the SND authors' code does (``AUTHORS_SCALE``)."""
        scale, self.error = self.AUTHORS_SCALE
        self.set_input_scale(scale, value_max)

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, settings):
        target, predictor = make_networks(input_channels)
        return cls(target, predictor, **cls._common(obs_shape, input_channels, settings))

    @staticmethod
    def _common(obs_shape, input_channels, s) -> dict:
        """The constructor arguments every distillation module takes, from a run's ``ModuleSettings``."""
        return dict(
            obs_shape=obs_shape,
            input_channels=input_channels,
            lr=s.lr,
            update_proportion=s.update_proportion,
            max_grad_norm=s.max_grad_norm,
            seed=s.seed,
        )

    def _adam(self, lr: float, parameters) -> paddle.optimizer.Adam:
        return adam(parameters, lr, grad_clip=nn.ClipGradByGlobalNorm(self.max_grad_norm))

    def reset_optimizers(self) -> None:
        """Fresh optimizers (no moments), as before the first update."""
        self.predictor_opt = self._adam(self.lr, self.predictor.parameters())

    def networks(self) -> list:
        heads = getattr(self, "heads", None)  # SND's extra target-side layers
        return [self.target, self.predictor] + ([heads] if heads is not None else [])

    # ---- reward ---------------------------------------------------------------------
    def _target_features(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.target(x)

    @paddle.no_grad()
    def reward(self, obs: np.ndarray) -> np.ndarray:
        out = []
        for i in range(0, len(obs), CHUNK):
            x = self.normalize(obs[i : i + CHUNK])
            err = self._target_features(x) - self.predictor(x)
            squared = err * err
            out.append(squared.mean(axis=1).numpy() if self.error == "mean" else squared.sum(axis=1).numpy() / 2.0)
        return np.concatenate(out).astype(np.float32)

    @paddle.no_grad()
    def features(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [self._target_features(self.normalize(obs[i : i + CHUNK])).numpy() for i in range(0, len(obs), CHUNK)]
        ).astype(np.float32)

    # ---- training -------------------------------------------------------------------
    def _subset(self, n: int) -> np.ndarray:
        """A random ``update_proportion`` share of ``n`` indices (at least one)."""
        return subset(self.rng, n, self.update_proportion)

    def distill(self, next_obs: np.ndarray) -> float:
        """One predictor step on a random share of uint8[B, C, H, W]; returns the MSE."""
        x = self.normalize(next_obs[self._subset(len(next_obs))])
        with paddle.no_grad():
            target = self._target_features(x)
        loss = ((self.predictor(x) - target) ** 2).mean()
        # a non-finite loss (on any rank) is reported by the trainer, never applied
        return checked_step(loss, self.predictor_opt, self.predictor.parameters(), self.grad_sync)

    def update(self, batch: dict) -> dict:
        return {"forward": self.distill(batch["next_obs"])}

    # ---- checkpointing --------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            **distillation_state(self, predictor_opt=optimizer_state(self.predictor_opt)),
            **self.normalizer_state(),
        }

    def set_state_dict(self, state: dict) -> None:
        load_distillation_state(self, state)
        if state["predictor_opt"]:
            set_optimizer_state(self.predictor_opt, state["predictor_opt"])
        else:  # saved before the first update (e.g. the snapshot an update is rolled back to)
            self.reset_optimizers()
        self.load_normalizer_state(state)


@register("rnd")
class RND(DistillationModule):
    """RND: the target is a fixed random network; no gradient ever reaches it."""

    summary = "Random Network Distillation: a trained predictor of a fixed random network"
    snd_convention = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.target.eval()
        for p in self.target.parameters():
            p.stop_gradient = True
