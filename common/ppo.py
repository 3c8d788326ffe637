"""PPO for an actor-critic with an extrinsic and an intrinsic value head.

The policy network contract (both games): ``policy(x)`` with x float32[B, C, H, W]
in [0, 1] returns ``(logits float32[B, A], v_ext float32[B], v_int float32[B])``.

Log-probabilities use ``log_softmax`` + ``take_along_axis``: on Paddle 3,
``paddle.distribution.Categorical`` treats its input as probabilities in
``log_prob`` but as logits in ``sample``/``entropy``, and returns [N, N] for a
vector of actions (the tutorial's tril/triu trick took the diagonal of that).
"""
from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.utils.dlpack import from_dlpack

from common import onednn_conv


def obs_to_tensor(obs: np.ndarray) -> paddle.Tensor:
    """uint8[B, C, H, W] -> float32 tensor [B, C, H, W] in [0, 1] (the tutorial's /255, done per batch).

    On CPU with oneDNN (``common.onednn_conv``) the values are computed channels-last in numpy
    and handed over without a copy (DLPack); the tensor is their NCHW view, which the
    convolutions turn back into channels-last for free (Paddle's cast, divide and that
    transpose took ~10x longer). Same values either way.
    """
    if obs.ndim == 4 and paddle.get_device() == "cpu" and onednn_conv.available():
        return from_dlpack(onednn_conv.unit_floats_channels_last(obs)).transpose([0, 3, 1, 2])
    return paddle.to_tensor(obs).astype("float32") / 255.0


def log_prob_entropy(logits: paddle.Tensor, actions: paddle.Tensor):
    """log pi(a|s) float32[B] and entropy float32[B] from logits float32[B, A], actions int64[B]."""
    logp_all = F.log_softmax(logits, axis=-1)
    logp = paddle.take_along_axis(logp_all, actions.reshape([-1, 1]), axis=-1).squeeze(-1)
    entropy = -(paddle.exp(logp_all) * logp_all).sum(axis=-1)
    return logp, entropy


def sample_actions(logits: np.ndarray, rng: np.random.Generator):
    """Sample from softmax(logits) float32[B, A] with ``rng``; returns (int64[B], log-prob float32[B]).

    Sampling on the host with the trainer's numpy generator keeps runs
    reproducible and the generator state checkpointable.
    """
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    cdf = np.cumsum(np.exp(logp_all), axis=1)
    u = rng.random((len(z), 1)) * cdf[:, -1:]
    actions = (cdf < u).sum(axis=1).clip(0, z.shape[1] - 1).astype(np.int64)
    return actions, logp_all[np.arange(len(z)), actions].astype(np.float32)


class PPO:
    """The update rule: clipped surrogate + value losses of both heads + entropy bonus.

    Args:
        policy: the actor-critic ``nn.Layer`` (contract above).
        lr, epsilon (clip range), beta (entropy coefficient), vf_coef, max_grad_norm.
        value_loss: "smooth_l1" (the tutorial's) or "mse" (0.5 * squared error, RND's).
        norm_adv: standardize the advantages of each minibatch (RND's ``normadv``); off by default.
    """

    def __init__(self, policy: nn.Layer, lr: float, epsilon: float, beta: float, vf_coef: float,
                 max_grad_norm: float, value_loss: str = "smooth_l1", norm_adv: bool = False):
        if value_loss not in ("smooth_l1", "mse"):
            raise ValueError(f"value_loss must be 'smooth_l1' or 'mse', got {value_loss!r}")
        self.policy = policy
        self.epsilon, self.beta, self.vf_coef, self.value_loss = epsilon, beta, vf_coef, value_loss
        self.norm_adv = bool(norm_adv)
        self.lr, self.max_grad_norm = lr, max_grad_norm
        self.reset_optimizer()
        self.engine = None         # optional forward-only copy for act/values (common.inference)
        self._engine_fresh = False  # the engine holds the policy's current weights

    def reset_optimizer(self) -> None:
        """A fresh Adam (no moments): the optimizer as it was before the first step."""
        self.optimizer = paddle.optimizer.Adam(
            learning_rate=self.lr, parameters=self.policy.parameters(),
            grad_clip=nn.ClipGradByGlobalNorm(self.max_grad_norm))

    def use_engine(self, engine) -> None:
        """Run ``act``/``values`` on ``engine`` (``uint8 obs -> [logits, v_ext, v_int]`` numpy, e.g. a
        ``common.inference.InferenceEngine``) for batches of at least ``engine.min_batch``; it gets the
        policy's weights (``engine.refresh()``) on its first use after they changed."""
        self.engine, self._engine_fresh = engine, False

    def weights_changed(self) -> None:
        """Mark the engine stale after the policy's weights were changed outside ``step`` (a load)."""
        self._engine_fresh = False

    @paddle.no_grad()
    def forward_numpy(self, obs: np.ndarray):
        """(logits, v_ext, v_int) as numpy for uint8[N, C, H, W]: on the engine for large enough batches."""
        if self.engine is not None and len(obs) >= self.engine.min_batch:
            if not self._engine_fresh:
                self.engine.refresh()
                self._engine_fresh = True
            return tuple(self.engine(obs))
        return tuple(t.numpy() for t in self.policy(obs_to_tensor(obs)))

    def act(self, obs: np.ndarray, rng: np.random.Generator):
        """Sample actions for uint8[N, C, H, W]; returns numpy (actions, log_probs, v_ext, v_int)."""
        logits, v_ext, v_int = self.forward_numpy(obs)
        actions, logp = sample_actions(logits, rng)
        return actions, logp, v_ext, v_int

    def values(self, obs: np.ndarray):
        _, v_ext, v_int = self.forward_numpy(obs)
        return v_ext, v_int

    def _value_loss(self, v, ret):
        if self.value_loss == "smooth_l1":
            return F.smooth_l1_loss(v, ret)
        return 0.5 * ((v - ret) ** 2).mean()

    def loss(self, batch: dict):
        """Total loss (0-D tensor) and a dict of its terms (tensors) for one minibatch of numpy arrays."""
        logits, v_ext, v_int = self.policy(obs_to_tensor(batch["obs"]))
        actions = paddle.to_tensor(batch["actions"])
        adv = paddle.to_tensor(batch["advantages"])
        if self.norm_adv:
            adv = adv - adv.mean()
            adv = adv / (paddle.sqrt((adv * adv).mean()) + 1e-8)
        logp, entropy = log_prob_entropy(logits, actions)
        ratio = paddle.exp(logp - paddle.to_tensor(batch["log_probs"]))
        surrogate = paddle.minimum(ratio * adv, paddle.clip(ratio, 1.0 - self.epsilon, 1.0 + self.epsilon) * adv)
        actor_loss = -surrogate.mean()
        critic_loss = (self._value_loss(v_ext, paddle.to_tensor(batch["ret_ext"]))
                       + self._value_loss(v_int, paddle.to_tensor(batch["ret_int"])))
        entropy = entropy.mean()
        total = actor_loss + self.vf_coef * critic_loss - self.beta * entropy
        approx_kl = ((ratio - 1.0) - paddle.log(ratio)).mean()  # k3 estimator, always >= 0
        clipfrac = ((ratio - 1.0).abs() > self.epsilon).astype("float32").mean()
        return total, {"actor": actor_loss, "critic": critic_loss, "entropy": entropy,
                       "approx_kl": approx_kl, "clipfrac": clipfrac}

    def step(self, batch: dict):
        """One gradient step; returns a dict of floats, or None when the loss is not finite (skipped)."""
        total, terms = self.loss(batch)
        total_value = float(total)
        if not np.isfinite(total_value):
            self.optimizer.clear_grad()
            return None
        self.optimizer.clear_grad()
        total.backward()
        self.optimizer.step()
        self._engine_fresh = False
        out = {k: float(v) for k, v in terms.items()}
        out["total"] = total_value
        return out
