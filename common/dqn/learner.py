"""Double DQN: the Q network, the TD targets, the update rule and the target sync.

The learner (``DoubleDQN``) is the update rule only, as PARL separates an
``Algorithm`` from its ``Agent``: it gets batches (numpy, uint8 observations) and
knows nothing of environments, replay memories or exploration; the loop that feeds
it lives in ``common/dqn/trainer.py``. It follows the SND article's system, SRL
v0.16.1's DQN (pocokhc/simple_distributed_rl, ``srl/algorithms/dqn``):

* TD target ``y = r + (1 - terminal) * discount * Q_target(s', argmax_a Q_online(s', a))``
  (double DQN: the online network picks the action, the target network values it;
  ``double=False`` is plain DQN's ``max_a Q_target(s', a)``). A terminated transition
  does not bootstrap; a truncated one does (SRL stores ``int(not terminated)``).
* loss: Huber (delta 1, Keras' ``Huber()``: mean over the batch) between ``y`` and
  ``Q_online(s, a)``; Adam (Keras' defaults: beta 0.9 / 0.999, epsilon 1e-7); no
  gradient clipping (SRL sets none).
* target sync: after the update whose 0-based index ``train_count`` is a multiple of
  ``target_update_interval`` (SRL: ``if train_count % interval == 0: sync;
  train_count += 1``), i.e. after updates 1, interval + 1, 2 * interval + 1, ...
  (1-based). The target starts as a copy of the online network.

Networks (``DQNConvNet``): the DQN image block Conv(32, 8x8/4) - Conv(64, 4x4/2) -
Conv(64, 3x3/1), ReLU each, then Dense(512) (+ ReLU and Dense(actions) for the Q
network), Keras' default initialization (Glorot uniform weights, zero biases).
``padding="same"`` is Keras' "same" exactly (output 21 -> 11 -> 11, TF's extra
padding row/column on the bottom/right of the second convolution): the article's
layers, 7,744 features into the dense layer. ``padding="valid"`` is the Nature-DQN /
RND geometry (20 -> 9 -> 7, 3,136 features) and costs ~1.7x fewer multiply-adds;
see ``docs/snd_dqn_pong.md`` for the speed of each.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from common import cpu
from common.nets import Net
from common.optim import adam
from common.run.checkpoint import load_weights, optimizer_state, set_optimizer_state
from common.run.device import host_floats

#: (out_channels, kernel, stride) of the DQN image block
DQN_BLOCK = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
PADDINGS = ("valid", "same")
KERAS_ADAM_EPSILON = 1e-7


def same_padding(size: int, kernel: int, stride: int) -> tuple[list, int]:
    """Keras/TensorFlow "same" padding of one spatial axis: ``([before, after], output size)``.

    TF pads ``max((out - 1) * stride + kernel - size, 0)`` in all, the odd one after.
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return [total // 2, total - total // 2], out


def block_geometry(input_hw: int, padding: str):
    """Per-convolution Paddle padding and the final map side for the DQN block on ``input_hw`` squares."""
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {', '.join(PADDINGS)}, got {padding!r}")
    pads, hw = [], input_hw
    for _, k, s in DQN_BLOCK:
        if padding == "valid":
            pads.append(0)
            hw = (hw - k) // s + 1
        else:
            (a, b), hw = same_padding(hw, k, s)
            pads.append(a if a == b else [a, b, a, b])  # Paddle: [top, bottom, left, right]
    return pads, hw


def keras_attrs():
    """(weight_attr, bias_attr) of Keras' defaults: Glorot (Xavier) uniform weights, zero biases."""
    return (
        paddle.ParamAttr(initializer=nn.initializer.XavierUniform()),
        paddle.ParamAttr(initializer=nn.initializer.Constant(0.0)),
    )


class DQNConvNet(Net):
    """The DQN image block and a dense head: float32[B, C, H, H] in [0, 1] -> float32[B, out_dim].

    ``hidden``: sizes of ReLU dense layers after the block (Q network: (512,), then
    ``out_dim`` = actions; SND target/predictor: () and ``out_dim`` 512, no activation).
    """

    def __init__(self, in_channels: int, out_dim: int, hidden=(512,), input_hw: int = 84, padding: str = "valid"):
        super().__init__()
        pads, hw = block_geometry(input_hw, padding)
        convs, c = [], in_channels
        for (out_c, k, s), p in zip(DQN_BLOCK, pads):
            w, b = keras_attrs()
            convs.append(nn.Conv2D(c, out_c, k, stride=s, padding=p, weight_attr=w, bias_attr=b))
            c = out_c
        self.convs = nn.LayerList(convs)
        layers, d = [], c * hw * hw
        self.flat_dim = d
        for h in hidden:
            w, b = keras_attrs()
            layers += [nn.Linear(d, h, weight_attr=w, bias_attr=b), nn.ReLU()]
            d = h
        w, b = keras_attrs()
        layers.append(nn.Linear(d, out_dim, weight_attr=w, bias_attr=b))
        self.head = nn.Sequential(*layers)
        self.flatten = nn.Flatten()
        self.out_dim = out_dim
        self.padding = padding
        self._trunk = [m for conv in self.convs for m in (conv, nn.ReLU())]  # a plain list: names stay convs.i.*

    def compute(self, x, run):
        return run(self.head, run(self.flatten, run(self._trunk, x)))


def to_float(obs: np.ndarray) -> paddle.Tensor:
    """uint8[B, C, H, W] -> float32 tensor in [0, 1] (SRL's ImageProcessor ``enable_norm``)."""
    obs = np.asarray(obs)
    if obs.dtype != np.uint8 or obs.ndim != 4:
        raise ValueError(f"observations must be uint8 [B, C, H, W], got {obs.dtype} {obs.shape}")
    return cpu.unit_floats(obs)


def double_dqn_targets(
    rewards: np.ndarray,
    terminals: np.ndarray,
    next_q_online: np.ndarray,
    next_q_target: np.ndarray,
    discount: float,
    double: bool = True,
) -> np.ndarray:
    """TD targets ``float32[B]``.

    Args:
        rewards: float32[B]; terminals: float32[B] (1 = terminated, no bootstrap).
        next_q_online, next_q_target: float32[B, A], Q(s', .) of the online and target nets.
        double: pick the next action with the online net and value it with the target net
            (van Hasselt et al. 2016); False: ``max_a Q_target(s', a)``.
    """
    if double:
        best = np.argmax(next_q_online, axis=1)
        next_v = next_q_target[np.arange(len(best)), best]
    else:
        next_v = next_q_target.max(axis=1)
    return (rewards + (1.0 - terminals) * discount * next_v).astype(np.float32)


class LinearSchedule:
    """Epsilon over env steps: ``initial`` at step 0, linearly to ``final`` at ``decay_steps``, then ``final``.

    ``decay_steps`` 0 (or ``initial == final``) is a constant, the SND article's 0.1 / 0.
    """

    def __init__(self, final: float, initial: float | None = None, decay_steps: int = 0):
        self.final = float(final)
        self.initial = self.final if initial is None else float(initial)
        self.decay_steps = int(decay_steps)
        for name, v in (("final", self.final), ("initial", self.initial)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"epsilon {name} must be in [0, 1], got {v}")
        if self.decay_steps < 0:
            raise ValueError(f"decay_steps must be >= 0, got {decay_steps}")

    def __call__(self, step: int) -> float:
        if self.decay_steps == 0 or step >= self.decay_steps:
            return self.final
        return self.initial + (self.final - self.initial) * step / self.decay_steps


def epsilon_greedy(q_values: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """With probability ``epsilon`` a uniformly random action, else ``argmax q_values`` (float[A])."""
    if epsilon > 0.0 and rng.random() < epsilon:
        return int(rng.integers(len(q_values)))
    return int(np.argmax(q_values))


class DoubleDQN:
    """The Double DQN update on an online network and its target copy.

    Args:
        q_net, target_net: ``nn.Layer`` float32[B, C, H, W] -> float32[B, A], same architecture;
            ``target_net`` is overwritten with ``q_net``'s weights here.
        lr: Adam learning rate. discount: gamma.
        target_update_interval: sync every this many updates (see the module docstring).
        double: double DQN targets (False: plain DQN).
        huber_delta: the Huber loss' delta (Keras' default 1).
    """

    def __init__(
        self,
        q_net: nn.Layer,
        target_net: nn.Layer,
        *,
        lr: float,
        discount: float,
        target_update_interval: int,
        double: bool = True,
        huber_delta: float = 1.0,
    ):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {discount!r}")
        if (
            isinstance(target_update_interval, bool)
            or int(target_update_interval) != target_update_interval
            or target_update_interval < 1
        ):
            raise ValueError(f"target_update_interval must be a positive integer, got {target_update_interval!r}")
        self.q_net, self.target_net = q_net, target_net
        self.discount = float(discount)
        self.target_update_interval = int(target_update_interval)
        self.double = bool(double)
        self.huber_delta = float(huber_delta)
        self.lr = lr
        self.optimizer = adam(q_net.parameters(), lr, epsilon=KERAS_ADAM_EPSILON)
        for p in self.target_net.parameters():
            p.stop_gradient = True
        self.target_net.eval()
        self.sync_target()
        self.train_count = 0  # updates done (SRL's train_count)
        self.sync_count = 0  # target syncs done by ``learn``

    def sync_target(self) -> None:
        self.target_net.set_state_dict(self.q_net.state_dict())

    @paddle.no_grad()
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Online Q values of uint8[B, C, H, W] -> float32[B, A]."""
        return self.q_net(to_float(obs)).numpy()

    @paddle.no_grad()
    def targets(self, rewards, terminals, next_obs: np.ndarray) -> np.ndarray:
        """TD targets float32[B] of a batch (``double_dqn_targets`` on both networks' Q(s', .))."""
        x = to_float(next_obs)
        if self.double:  # two independent passes: side by side when there are two CPU threads
            q_target, q_online = cpu.together([lambda: self.target_net(x).numpy(), lambda: self.q_net(x).numpy()])
        else:
            q_target = q_online = self.target_net(x).numpy()
        return double_dqn_targets(
            np.asarray(rewards, np.float32),
            np.asarray(terminals, np.float32),
            q_online,
            q_target,
            self.discount,
            self.double,
        )

    def learn(
        self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminals: np.ndarray, next_obs: np.ndarray
    ) -> dict:
        """One update on a batch; returns ``{"q": Huber loss, "q_mean": mean Q(s, a), "target_mean": mean y,
        "synced": 1.0 if the target was synced after it}``.

        obs, next_obs: uint8[B, C, H, W]; actions: int[B]; rewards, terminals: float32[B].
        A non-finite loss is not applied (returned as is; the caller counts it), and
        ``train_count`` does not advance.
        """
        targets = self.targets(rewards, terminals, next_obs)  # float32[B], made on the host
        y = paddle.to_tensor(targets)
        q = self.q_net(to_float(obs))
        q_a = paddle.take_along_axis(q, paddle.to_tensor(np.asarray(actions, np.int64)[:, None]), axis=1)[:, 0]
        loss = F.smooth_l1_loss(q_a, y, reduction="mean", delta=self.huber_delta)  # = Huber(delta), mean
        value, q_mean = host_floats([loss, q_a.mean()])
        out = {"q": value, "q_mean": q_mean, "target_mean": float(targets.mean()), "synced": 0.0}
        self.optimizer.clear_grad()
        if not np.isfinite(value):
            return out
        loss.backward()
        self.optimizer.step()
        self.optimizer.clear_grad()
        if self.train_count % self.target_update_interval == 0:
            self.sync_target()
            self.sync_count += 1
            out["synced"] = 1.0
        self.train_count += 1
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {
            "q_net": self.q_net.state_dict(),
            "target_net": self.target_net.state_dict(),
            "optimizer": optimizer_state(self.optimizer),
            "train_count": self.train_count,
            "sync_count": self.sync_count,
        }

    def set_state_dict(self, state: dict) -> None:
        load_weights(self.q_net, state["q_net"], "policy")
        load_weights(self.target_net, state["target_net"], "learner/target_net")
        if state["optimizer"]:
            set_optimizer_state(self.optimizer, state["optimizer"])
        else:  # a state from before the first step (what a bad first step is taken back to): fresh moments
            self.optimizer = adam(self.q_net.parameters(), self.lr, epsilon=KERAS_ADAM_EPSILON)
        self.train_count = int(state["train_count"])
        self.sync_count = int(state["sync_count"])
