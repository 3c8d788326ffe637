"""SND-V as the SND article builds it on a Double DQN (``snd_article.ja.txt``, SRL v0.16.1).

The article's SND-V differs from the SND authors' (``common/intrinsic/snd.py``,
``SNDV``, used with PPO) in every detail below; this module reproduces the article:

* **Target** (``target_step``): contrastive on states sampled from the replay memory
  (the article's ``memory_snd``): ``states1`` = B states, ``states2`` = B/2 more; the
  first B/2 pairs are ``(states1[i], states1[i])`` with tau 0, the last B/2
  ``(states1[B/2 + i], states2[i])`` with tau 1. Loss
  ``sum_n (tau_n - sum_k (z1_nk - z2_nk)^2)^2`` (``article_contrastive_loss``): squared
  distances and a *sum* over the batch, no magnitude regularizer.
* **Augmentation**: the article's full listing adds uniform noise U(-noise, noise) to
  both samples on the [0, 1] input scale (its comments skip the random convolution and
  the tile mask; the excerpt earlier in the text adds nothing: ``noise=0``). The noise
  is drawn once per sampled state *before* the pairs are formed, so a tau-0 pair is two
  bit-identical inputs: its distance is 0 and it contributes nothing (only the tau-1
  half trains the target), as in the article.
* **Intrinsic reward** (``reward``): ``sum_k (target(s)_k - predictor(s)_k)^2`` on the raw
  [0, 1] input: no observation normalizer, no /2, no reward normalization.
* **Predictor** (``distill``): Keras' ``MeanSquaredError`` (mean over features and batch)
  between ``target(next_state)`` (no gradient) and ``predictor(x)`` on the Q batch
  (all of it, not a 25 % share). ``distill_pairing="same"`` (default): ``x = next_state``,
  the article's full listing and the SND paper (the predictor learns the target on the
  state it is rewarded for); ``"shifted"``: ``x = state``, the article's Trainer excerpt
  (predictor(s_t) regressed on target(s_{t+1})). See docs/deviations.md (the SND article's list).
* Both networks and their Adam optimizers (Keras defaults, epsilon 1e-7; no gradient
  clipping) use the same learning rate as the Q network in the article.

Observations arrive uint8 ``[B, C, H, W]`` (the stacked window, all channels) and are
scaled by 1/255 (SRL's ``ImageProcessor(enable_norm=True)``).
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn

from common.dqn.learner import to_float
from common.intrinsic.base import IntrinsicModule, distillation_state, load_distillation_state
from common.optim import adam
from common.run.checkpoint import optimizer_state, set_optimizer_state

DISTILL_PAIRINGS = ("same", "shifted")
_CHUNK = 256
_KERAS_ADAM_EPSILON = 1e-7


def article_contrastive_loss(z1: paddle.Tensor, z2: paddle.Tensor, tau: paddle.Tensor) -> paddle.Tensor:
    """The article's SND-V target loss: ``sum_n (tau_n - sum_k (z1_nk - z2_nk)^2)^2``.

    z1, z2: float32[N, D] target features of the pair members; tau: float32[N] (0 same, 1 different).
    Returns a 0-D tensor.
    """
    d = ((z1 - z2) ** 2).sum(axis=1)
    return ((tau - d) ** 2).sum()


def article_pairs(states1: np.ndarray, states2: np.ndarray):
    """The article's pair layout: ``(a, b, tau)`` with a = states1 [B, ...],
    b = concat(states1[:B/2], states2) and tau = [0] * B/2 + [1] * B/2 (float32[B]).

    ``states2`` must hold exactly B/2 states (B even).
    """
    n = len(states1)
    half = n // 2
    if n < 2 or n % 2 or len(states2) != half:
        raise ValueError(
            f"SND-V pairs need an even batch of states1 (got {n}) and half as many states2 (got {len(states2)})"
        )
    b = np.concatenate([states1[:half], states2], axis=0)
    tau = np.concatenate([np.zeros(half, np.float32), np.ones(half, np.float32)])
    return states1, b, tau


class SNDVArticle(IntrinsicModule):
    """SND-V on a replay memory, the article's version (see the module docstring).

    Args:
        target, predictor: ``nn.Layer`` float32[B, C, H, W] in [0, 1] -> float32[B, D].
        lr: Adam learning rate of both networks (the article: the Q network's, 0.0005).
        noise: amplitude of the uniform input noise of the target's pairs (0: none).
        distill_pairing: "same" (predictor(s') -> target(s')) or "shifted" (predictor(s) -> target(s')).
        seed: seeds the noise (its generator state is checkpointed).
    """

    name = "snd-v-dqn"

    def __init__(
        self,
        target: nn.Layer,
        predictor: nn.Layer,
        *,
        lr: float,
        noise: float = 0.2,
        distill_pairing: str = "same",
        seed: int = 0,
    ):
        if distill_pairing not in DISTILL_PAIRINGS:
            raise ValueError(f"distill_pairing must be one of {', '.join(DISTILL_PAIRINGS)}, got {distill_pairing!r}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        self.target, self.predictor = target, predictor
        self.noise = float(noise)
        self.distill_pairing = distill_pairing
        self.lr = lr
        self.reset_optimizers()
        self.rng = np.random.default_rng(seed)

    def reset_optimizers(self) -> None:
        """Fresh optimizers (no moments), as before the first step."""
        self.target_opt = adam(self.target.parameters(), self.lr, epsilon=_KERAS_ADAM_EPSILON)
        self.predictor_opt = adam(self.predictor.parameters(), self.lr, epsilon=_KERAS_ADAM_EPSILON)

    # ------------------------------------------------------------------ inputs
    def _noisy(self, obs: np.ndarray) -> paddle.Tensor:
        """uint8 states -> float32 in [0, 1] plus U(-noise, noise) (drawn from ``self.rng``)."""
        x = to_float(obs)
        if self.noise > 0:
            u = self.rng.random(obs.shape, dtype=np.float32)
            x = x + paddle.to_tensor(u * np.float32(2 * self.noise) - np.float32(self.noise))
        return x

    # ------------------------------------------------------------------ interface
    def observe(self, obs: np.ndarray) -> None:
        """No observation normalizer in the article's version: nothing to do."""

    @paddle.no_grad()
    def reward(self, obs: np.ndarray) -> np.ndarray:
        """``sum_k (target(s) - predictor(s))^2`` of uint8[B, C, H, W] -> float32[B]."""
        out = []
        for i in range(0, len(obs), _CHUNK):
            x = to_float(obs[i : i + _CHUNK])
            err = self.target(x) - self.predictor(x)
            out.append((err * err).sum(axis=1).numpy())
        return np.concatenate(out).astype(np.float32)

    @paddle.no_grad()
    def features(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [self.target(to_float(obs[i : i + _CHUNK])).numpy() for i in range(0, len(obs), _CHUNK)]
        ).astype(np.float32)

    def contrastive_inputs(self, states1: np.ndarray, states2: np.ndarray):
        """The article's pairs as network inputs: ``(x_a, x_b, tau)``, float32 tensors [B, C, H, W] twice and
        float32[B] numpy. The noise is drawn once per sampled state (states1, then states2), before pairing."""
        n = len(states1)
        a, b, tau = article_pairs(np.arange(n), np.arange(n, n + len(states2)))  # validates the sizes
        x = self._noisy(np.concatenate([states1, states2]))
        return x[:n], paddle.gather(x, paddle.to_tensor(b)), tau

    def target_step(self, states1: np.ndarray, states2: np.ndarray) -> float:
        """One contrastive step of the target on uint8 states1 [B, ...] and states2 [B/2, ...]; returns the
        article's loss over all B pairs (the step is not applied when it is non-finite).

        A tau-0 pair is two identical inputs (the same state with the same noise), so its distance is 0 and
        its term ``(0 - 0)^2`` and gradient are exactly zero: only the B/2 tau-1 pairs are computed (half
        the work, the same loss and update as computing all B pairs; ``tests/test_dqn.py`` checks it).
        """
        x_a, x_b, tau = self.contrastive_inputs(states1, states2)
        half = len(tau) // 2
        z = self.target(paddle.concat([x_a[half:], x_b[half:]]))  # the tau-1 members, one pass
        loss = article_contrastive_loss(z[:half], z[half:], paddle.to_tensor(tau[half:]))
        value = float(loss)
        self.target_opt.clear_grad()
        if np.isfinite(value):
            loss.backward()
            self.target_opt.step()
            self.target_opt.clear_grad()
        return value

    def distill(self, obs: np.ndarray, next_obs: np.ndarray) -> float:
        """One predictor step on a Q batch (uint8 [B, ...] each); returns the MSE (not applied when non-finite)."""
        with paddle.no_grad():
            z_t = self.target(to_float(next_obs))
        z_p = self.predictor(to_float(next_obs if self.distill_pairing == "same" else obs))
        loss = ((z_p - z_t) ** 2).mean()
        value = float(loss)
        self.predictor_opt.clear_grad()
        if np.isfinite(value):
            loss.backward()
            self.predictor_opt.step()
            self.predictor_opt.clear_grad()
        return value

    def update(self, batch: dict) -> dict:
        """The article's SND part of one train step.

        ``batch``: ``states1`` uint8[B, ...] and ``states2`` uint8[B/2, ...] (sampled observations,
        for the target; either may be absent: no target step), ``obs`` / ``next_obs`` uint8[B, ...]
        (the Q batch, for the predictor; absent: no predictor step). The target steps first.
        Returns ``{"snd_target": ..., "forward": ...}`` for the steps taken.
        """
        out = {}
        if batch.get("states1") is not None:
            out["snd_target"] = self.target_step(batch["states1"], batch["states2"])
        if batch.get("obs") is not None:
            out["forward"] = self.distill(batch["obs"], batch["next_obs"])
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return distillation_state(
            self, target_opt=optimizer_state(self.target_opt), predictor_opt=optimizer_state(self.predictor_opt)
        )

    def set_state_dict(self, state: dict) -> None:
        load_distillation_state(self, state)
        if not (state["target_opt"] and state["predictor_opt"]):  # a state from before the first step
            self.reset_optimizers()
        if state["target_opt"]:
            set_optimizer_state(self.target_opt, state["target_opt"])
        if state["predictor_opt"]:
            set_optimizer_state(self.predictor_opt, state["predictor_opt"])
