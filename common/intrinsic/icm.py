"""ICM, the Intrinsic Curiosity Module (Pathak et al. 2017, arXiv 1705.05363).

The agent is curious where it cannot predict the consequence of its own action. In the
feature space phi learned by inverse dynamics (``common.intrinsic.dynamics``), a forward
model predicts phi(s_{t+1}) from phi(s_t) and the one-hot action a_t; its error is the reward::

    r_t = 1/2 * || f(phi(s_t), a_t) - phi(s_{t+1}) ||^2          (summed over the D features)

Trained together, with the paper's weighting beta = 0.2 of the forward loss against the
inverse loss::

    L = (1 - beta) * L_inverse + beta * L_forward,   L_forward = mean over the batch of 1/2 ||f - phi(s')||^2

The forward loss trains the forward model only: phi is learned by the inverse model alone (the
forward model sees it through a stop-gradient), as in Burda et al.'s large-scale curiosity study
(arXiv 1808.04355, "IDF" features), not as in the ICM paper's code, where the forward loss also
trains the encoder. Under this project's reward scaling (the running std of the discounted
intrinsic return over the whole run) that gradient is fatal: it shrinks the features, and with
them the raw reward, by orders of magnitude within the first updates, and the early,
large rewards then hold the running std so high that the scaled reward all but vanishes
(docs/intrinsic_modules.md gives the measurement). The paper's remaining constants belong
to its A3C agent, not to ICM: the reward scale eta = 0.01 is replaced here by the trainer's
normalization (the running std of the discounted intrinsic return, as for every module), and
its lambda = 0.1 (policy loss against ICM loss in one objective) does not arise because the
module has its own optimizer. Its Mario agent (42x42 grey frames, four stacked, A3C with 20
workers) learned from curiosity alone; here the game's usual input and PPO are kept.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F

from common.intrinsic.dynamics import InverseDynamicsModule, mlp
from common.intrinsic.inputs import CHUNK
from common.intrinsic.registry import register

#: the paper's weight of the forward loss (1 - beta on the inverse loss)
ICM_BETA = 0.2


def forward_error(predicted: paddle.Tensor, phi_next: paddle.Tensor) -> paddle.Tensor:
    """1/2 * sum over features of (predicted - phi_next)^2: float32[B, D] pair -> float32[B]."""
    return 0.5 * paddle.square(predicted - phi_next).sum(axis=1)


@register("icm")
class ICM(InverseDynamicsModule):
    """Inverse model + forward model; the forward model's error is the reward. Losses are logged as
    ``losses/icm_inverse``, ``losses/icm_forward`` (raw terms) and ``losses/icm_total``."""

    summary = "forward-model error in inverse-dynamics features"

    def heads(self) -> dict:
        return {"forward_model": mlp(self.feature_dim + self.num_actions, self.feature_dim)}

    def predict_next(self, phi_now: paddle.Tensor, actions: paddle.Tensor) -> paddle.Tensor:
        """f(phi(s_t), a_t): float32[B, D] and int64[B] -> float32[B, D]."""
        one_hot = F.one_hot(actions, self.num_actions).astype(phi_now.dtype)
        return self.nets.forward_model(paddle.concat([phi_now, one_hot], axis=1))

    def losses(self, phi_now, phi_next, actions, inverse):
        # the forward model fits the features; it does not move them (the encoder learns from ``inverse``)
        forward = forward_error(self.predict_next(phi_now.detach(), actions), phi_next.detach()).mean()
        total = (1.0 - ICM_BETA) * inverse + ICM_BETA * forward
        return total, {"inverse": inverse, "forward": forward, "total": total}

    @paddle.no_grad()
    def rollout_reward(self, obs, next_obs, actions, dones):
        T, N = dones.shape
        phi, phi_next = self.rollout_features(obs, next_obs, dones)
        now, nxt = phi[:-1].reshape(T * N, -1), phi_next.reshape(T * N, -1)
        acts = actions.reshape(T * N).astype("int64")
        out = []
        for i in range(0, T * N, CHUNK):
            part = slice(i, i + CHUNK)
            predicted = self.predict_next(paddle.to_tensor(now[part]), paddle.to_tensor(acts[part]))
            out.append(forward_error(predicted, paddle.to_tensor(nxt[part])).numpy())
        return np.concatenate(out).reshape(T, N).astype(np.float32)
