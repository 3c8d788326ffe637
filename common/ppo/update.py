"""PPO's update rule for an actor-critic with an extrinsic and an intrinsic value head.

This module owns the loss and the optimizer step only; acting (sampling actions,
values for bootstrapping) is ``common.ppo.actor.Actor``'s. The policy network contract:
``policy(x)`` with x float32[B, C, H, W] in [0, 1] returns
``(logits float32[B, A], v_ext float32[B], v_int float32[B])``.

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

from common import cpu
from common.optim import adam
from common.run.device import host_floats
from common.run.distributed import NO_SYNC


def log_prob_entropy(logits: paddle.Tensor, actions: paddle.Tensor):
    """log pi(a|s) float32[B] and entropy float32[B] from logits float32[B, A], actions int64[B]."""
    logp_all = F.log_softmax(logits, axis=-1)
    logp = paddle.take_along_axis(logp_all, actions.reshape([-1, 1]), axis=-1).squeeze(-1)
    entropy = -(paddle.exp(logp_all) * logp_all).sum(axis=-1)
    return logp, entropy


class PPO:
    """The update rule: clipped surrogate + value losses of both heads + entropy bonus.

    Args:
        policy: the actor-critic ``nn.Layer`` (contract above).
        lr, epsilon (clip range), beta (entropy coefficient), vf_coef, max_grad_norm.
        value_loss: "smooth_l1" (the tutorial's) or "mse" (0.5 * squared error, RND's).
        norm_adv: standardize the advantages of each minibatch (CleanRL's PPO); off by default.
    """

    def __init__(
        self,
        policy: nn.Layer,
        lr: float,
        epsilon: float,
        beta: float,
        vf_coef: float,
        max_grad_norm: float,
        value_loss: str = "smooth_l1",
        norm_adv: bool = False,
    ):
        if value_loss not in ("smooth_l1", "mse"):
            raise ValueError(f"value_loss must be 'smooth_l1' or 'mse', got {value_loss!r}")
        self.policy = policy
        self.epsilon, self.beta, self.vf_coef, self.value_loss = epsilon, beta, vf_coef, value_loss
        self.norm_adv = bool(norm_adv)
        self.lr, self.max_grad_norm = lr, max_grad_norm
        self.grad_sync = NO_SYNC  # gradient averaging over data-parallel ranks (common.run.distributed)
        self.reset_optimizer()

    @classmethod
    def from_config(cls, policy: nn.Layer, cfg) -> PPO:
        """The update rule with a run's settings (``cfg``: a ``TrainConfig``)."""
        keys = ("lr", "epsilon", "beta", "vf_coef", "max_grad_norm", "value_loss", "norm_adv")
        return cls(policy, **{k: getattr(cfg, k) for k in keys})

    def reset_optimizer(self) -> None:
        """A fresh Adam (no moments): the optimizer as it was before the first step."""
        self.optimizer = adam(self.policy.parameters(), self.lr, grad_clip=nn.ClipGradByGlobalNorm(self.max_grad_norm))

    def _value_loss(self, v, ret):
        if self.value_loss == "smooth_l1":
            return F.smooth_l1_loss(v, ret)
        return 0.5 * ((v - ret) ** 2).mean()

    def loss(self, batch: dict):
        """Total loss (0-D tensor) and a dict of its terms (tensors) for one minibatch of numpy arrays."""
        logits, v_ext, v_int = self.policy(cpu.unit_floats(batch["obs"]))
        actions = paddle.to_tensor(batch["actions"])
        adv = paddle.to_tensor(batch["advantages"])
        if self.norm_adv:
            adv = adv - adv.mean()
            adv = adv / (paddle.sqrt((adv * adv).mean()) + 1e-8)
        logp, entropy = log_prob_entropy(logits, actions)
        ratio = paddle.exp(logp - paddle.to_tensor(batch["log_probs"]))
        surrogate = paddle.minimum(ratio * adv, paddle.clip(ratio, 1.0 - self.epsilon, 1.0 + self.epsilon) * adv)
        actor_loss = -surrogate.mean()
        critic_loss = self._value_loss(v_ext, paddle.to_tensor(batch["ret_ext"])) + self._value_loss(
            v_int, paddle.to_tensor(batch["ret_int"])
        )
        entropy = entropy.mean()
        total = actor_loss + self.vf_coef * critic_loss - self.beta * entropy
        approx_kl = ((ratio - 1.0) - paddle.log(ratio)).mean()  # k3 estimator, always >= 0
        clipfrac = ((ratio - 1.0).abs() > self.epsilon).astype("float32").mean()
        return total, {
            "actor": actor_loss,
            "critic": critic_loss,
            "entropy": entropy,
            "approx_kl": approx_kl,
            "clipfrac": clipfrac,
        }

    def step(self, batch: dict):
        """One gradient step; returns a dict of floats, or None when the loss is not finite (skipped).

        Between backward and the optimizer step, ``grad_sync`` averages the gradients over the
        data-parallel ranks and says whether every rank's loss was finite (``common.run.distributed``;
        in one process it only passes the finiteness on).
        """
        total, terms = self.loss(batch)
        values = host_floats([total, *terms.values()])
        total_value = values[0]
        finite = bool(np.isfinite(total_value))
        self.optimizer.clear_grad()
        if finite:
            total.backward()
        if not self.grad_sync(self.policy.parameters(), finite).step:
            self.optimizer.clear_grad()
            return None
        self.optimizer.step()
        out = dict(zip(terms, values[1:]))
        out["total"] = total_value
        return out
