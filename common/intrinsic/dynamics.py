"""Features learned by inverse dynamics: what ICM and E3B share.

An encoder phi maps an observation to ``float32[D]``; an inverse model reads
``(phi(s_t), phi(s_{t+1}))`` and predicts the action a_t that led from one to the other. Trained
on that classification, phi keeps what the agent's actions change and drops what they do not
(ICM's argument: a TV showing noise, leaves in the wind). ICM adds a forward model in that space;
E3B measures how new phi(s_{t+1}) is within the episode.

``InverseDynamicsModule`` is the shared base: the encoder (the game's intrinsic target network,
``spec.make_intrinsic_networks``, freshly initialised and trained here), the inverse head, one
Adam over every network of the module, the training step on a random ``update_proportion``
share of each PPO minibatch, the features of a whole rollout in one pass, and the checkpoint.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from common.intrinsic.inputs import CHUNK, NormalizedInputModule, checked_step, subset
from common.intrinsic.networks import param_attrs
from common.optim import adam
from common.run.checkpoint import load_weights, optimizer_state, set_optimizer_state
from common.run.device import host_floats
from common.run.distributed import NO_SYNC

#: hidden units of the inverse and forward models (ICM paper: one hidden layer of 256)
HEAD_HIDDEN = 256


def mlp(in_dim: int, out_dim: int, hidden: int = HEAD_HIDDEN) -> nn.Sequential:
    """Linear(in_dim, hidden) - ReLU - Linear(hidden, out_dim), orthogonal weights, zero biases."""
    w1, b1 = param_attrs("orthogonal")
    w2, b2 = param_attrs("orthogonal", gain=1.0)
    return nn.Sequential(
        nn.Linear(in_dim, hidden, weight_attr=w1, bias_attr=b1),
        nn.ReLU(),
        nn.Linear(hidden, out_dim, weight_attr=w2, bias_attr=b2),
    )


def inverse_loss(logits: paddle.Tensor, actions: paddle.Tensor) -> paddle.Tensor:
    """Cross-entropy of the inverse model: logits float32[B, A], actions int64[B] -> 0-D mean of
    ``-log softmax(logits)[a]``."""
    return F.cross_entropy(logits, actions.reshape([-1, 1])).mean()


class InverseDynamicsModule(NormalizedInputModule):
    """Encoder + inverse model, trained together; subclasses add their heads, losses and reward.

    Args:
        encoder: ``nn.Layer`` float32[B, k, H, W] -> float32[B, D], with ``out_dim`` = D.
        obs_shape, input_channels: as ``NormalizedInputModule``.
        num_actions: A, the size of the game's action set.
        lr, max_grad_norm: Adam learning rate and global-norm clip of the module's networks.
        update_proportion: share of each minibatch a training step uses.
        seed: seeds the share's sampling (its state is checkpointed).

    ``self.nets`` holds every network (``encoder``, ``inverse`` and the subclass's ``heads()``), so
    the checkpoint and the optimizer see one layer.
    """

    scores_states = False  # a transition's novelty: rollout_reward, never reward(obs)

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, s):
        """The encoder is the game's target network, freshly initialised and trained (its predictor is
        not used); the game's action count comes from ``s.num_actions``."""
        if s.num_actions is None:
            raise ValueError(f"--intrinsic {cls.name} predicts actions: it needs the game's action count (num_actions)")
        encoder, _ = make_networks(input_channels)
        return cls(
            encoder,
            obs_shape=obs_shape,
            input_channels=input_channels,
            num_actions=s.num_actions,
            lr=s.lr,
            update_proportion=s.update_proportion,
            max_grad_norm=s.max_grad_norm,
            seed=s.seed,
        )

    def __init__(
        self,
        encoder: nn.Layer,
        obs_shape,
        input_channels: int,
        num_actions: int,
        lr: float,
        update_proportion: float,
        max_grad_norm: float,
        seed: int = 0,
    ):
        if not 0.0 < update_proportion <= 1.0:
            raise ValueError(f"update_proportion must be in (0, 1], got {update_proportion}")
        if int(num_actions) < 2:
            raise ValueError(f"{self.name} needs at least 2 actions to learn inverse dynamics, got {num_actions}")
        super().__init__(obs_shape, input_channels)
        self.num_actions, self.feature_dim = int(num_actions), int(encoder.out_dim)
        self.nets = nn.Layer()
        self.nets.encoder = encoder
        self.nets.inverse = mlp(2 * self.feature_dim, self.num_actions)
        for name, layer in self.heads().items():
            setattr(self.nets, name, layer)
        self.update_proportion, self.lr, self.max_grad_norm = float(update_proportion), lr, max_grad_norm
        self.opt = self._adam()
        self.rng = np.random.default_rng(seed)
        self.grad_sync = NO_SYNC  # gradient averaging over data-parallel ranks (common.run.distributed)

    def heads(self) -> dict:
        """The subclass's extra networks, ``{name: nn.Layer}``."""
        return {}

    def _adam(self):
        return adam(self.nets.parameters(), self.lr, grad_clip=nn.ClipGradByGlobalNorm(self.max_grad_norm))

    def reset_optimizers(self) -> None:
        self.opt = self._adam()

    def networks(self) -> list:
        return [self.nets]

    # ---- features -------------------------------------------------------------------
    @paddle.no_grad()
    def features(self, obs: np.ndarray) -> np.ndarray:
        """phi of uint8[B, C, H, W] -> float32[B, D]."""
        return np.concatenate(
            [self.nets.encoder(self.normalize(obs[i : i + CHUNK])).numpy() for i in range(0, len(obs), CHUNK)]
        ).astype(np.float32)

    def rollout_features(self, obs: np.ndarray, next_obs: np.ndarray, dones: np.ndarray):
        """(phi of every ``obs`` row float32[T+1, N, D], phi of every s_{t+1} float32[T, N, D]), one
        encoder pass over the rollout plus one over its terminal frames (``rollout_reward``'s arguments)."""
        T, N = dones.shape
        phi = self.features(obs.reshape((T + 1) * N, *obs.shape[2:])).reshape(T + 1, N, -1)
        phi_next = phi[1:].copy()
        ended = np.flatnonzero(dones.reshape(-1))
        if len(ended):  # s_{t+1} of those steps is the terminal frame, not the reset frame in obs[t+1]
            terminal = next_obs.reshape(T * N, *next_obs.shape[2:])[ended]
            phi_next.reshape(T * N, -1)[ended] = self.features(terminal)
        return phi, phi_next

    def reward(self, obs):
        raise TypeError(f"{self.name} scores transitions (s_t, a_t, s_t+1), not observations: use rollout_reward")

    # ---- training -------------------------------------------------------------------
    def losses(self, phi_now, phi_next, actions, inverse: paddle.Tensor) -> tuple:
        """(total loss to minimize, ``{term: 0-D tensor}`` to log) from the share's features
        float32[B, D], actions int64[B] and the inverse loss; the subclass's objective."""
        raise NotImplementedError

    def update(self, batch: dict) -> dict:
        """One step on a random share of the minibatch's transitions (every one is a real
        (s_t, a_t, s_{t+1}): where an episode ended, ``next_obs`` is its terminal frame)."""
        idx = subset(self.rng, len(batch["obs"]), self.update_proportion)
        x = self.normalize(np.concatenate([batch["obs"][idx], batch["next_obs"][idx]]))
        phi_now, phi_next = paddle.split(self.nets.encoder(x), 2)  # one encoder pass for both
        actions = paddle.to_tensor(batch["actions"][idx].astype(np.int64))
        logits = self.nets.inverse(paddle.concat([phi_now, phi_next], axis=1))
        total, terms = self.losses(phi_now, phi_next, actions, inverse_loss(logits, actions))
        # a non-finite loss (on any rank) is reported by the trainer, never applied
        finite = np.isfinite(checked_step(total, self.opt, self.nets.parameters(), self.grad_sync))
        values = host_floats(terms.values()) if finite else [float("nan")] * len(terms)
        return {f"{self.name}_{k}": v for k, v in zip(terms, values)}

    # ---- checkpointing --------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "name": self.name,
            "nets": self.nets.state_dict(),
            "opt": optimizer_state(self.opt),
            "rng": self.rng.bit_generator.state,
            **self.normalizer_state(),
        }

    def set_state_dict(self, state: dict) -> None:
        self.check_state(state)
        load_weights(self.nets, state["nets"], f"intrinsic/{self.name}")
        if state["opt"]:
            set_optimizer_state(self.opt, state["opt"])
        else:  # saved before the first update
            self.reset_optimizers()
        self.rng.bit_generator.state = state["rng"]
        self.load_normalizer_state(state)
