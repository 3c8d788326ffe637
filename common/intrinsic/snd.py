"""Self-supervised Network Distillation (Pecháč, Chovanec, Farkaš; arXiv 2302.11563).

SND is RND whose target is not frozen: the target is trained by a self-supervised
objective, so its feature space keeps separating states (RND's novelty signal fades
once the predictor has caught up with a fixed random target). The predictor is
distilled from the moving target exactly as in RND (``DistillationModule.distill``).

Three target objectives, one class each:

* ``SNDV``   ("snd-v"):   contrastive: pairs (s, s) -> distance 0, (s, s') -> 1,
                          both members augmented (``augment.snd_v_augment_for``).
* ``SNDSTD`` ("snd-std"): Spatio-Temporal DeepInfoMax on consecutive states.
* ``SNDVIC`` ("snd-vic"): VICReg on consecutive states.

Each ``update(batch)`` does one target step on a random ``target_proportion`` share
of the minibatch (own Adam with ``target_lr`` and the same global-norm clip as the
predictor; 1.0 = the whole minibatch, as the authors' code), then the predictor
step, and returns ``{"forward", "snd_target", "snd_target/<term>"...}`` (raw,
unweighted terms; ``snd_target`` is the weighted total that was minimized).

The loss terms are standalone functions so that they can be checked against numpy.
Constants are from the authors' code (Iskandor/SND: ``modules/encoders/EncoderAtari.py``
and ``modules/rnd_models/RNDModelAtari.py``); docs/sources.md (section 4) sets them out.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from common import cpu
from common.intrinsic.augment import snd_v_augment_for
from common.intrinsic.networks import param_attrs
from common.intrinsic.registry import register
from common.intrinsic.rnd import DistillationModule
from common.run.checkpoint import load_weights, optimizer_state, set_optimizer_state
from common.run.device import host_floats

# SND-V: the magnitude regularizer only acts above this mean squared feature size
# (authors' SNDVEncoderAtari.loss_function: relu(magnitude - 200)).
SNDV_MAGNITUDE_LIMIT = 200.0
# SND-STD regularizer weights beta1 (feature std) and beta2 (score size): the authors' code and the paper.
STDIM_BETA1 = 1e-4
STDIM_BETA2 = 1e-4
# SND-VIC weights (authors' VICRegEncoderAtari: la=1, mu=1, nu=1/25) and the std epsilon.
VICREG_LAMBDA = 1.0
VICREG_MU = 1.0
VICREG_NU = 1.0 / 25.0
VICREG_EPS = 1e-4
#: ``distil`` -> the minibatch key of the states the predictor learns
DISTIL_STATES = {"next": "next_obs", "current": "obs"}


# ---------------------------------------------------------------------------------
# loss terms (pure functions of tensors; paddle.square, not ** 2: Paddle's pow is slower on the CPU,
# the same values up to float rounding; docs/performance.md)
# ---------------------------------------------------------------------------------
def snd_v_terms(
    z_a: paddle.Tensor, z_b: paddle.Tensor, tau: paddle.Tensor, limit: float = SNDV_MAGNITUDE_LIMIT
) -> dict:
    """SND-V's contrastive loss terms.

    Args:
        z_a, z_b: float32[N, D] target features of the two members of each pair.
        tau: float32[N], 0 for a pair of the same state, 1 for different states.
    Returns:
        ``{"contrastive": mean_n (tau_n - d_n)^2 with d_n = mean_k (z_a - z_b)^2,
        "magnitude": relu(mean(z_a^2) + mean(z_b^2) - limit)}``, 0-D tensors.
    """
    d = paddle.square(z_a - z_b).mean(axis=1)
    contrastive = paddle.square(tau - d).mean()
    magnitude = F.relu(paddle.square(z_a).mean() + paddle.square(z_b).mean() - limit)
    return {"contrastive": contrastive, "magnitude": magnitude}


def vicreg_terms(z_a: paddle.Tensor, z_b: paddle.Tensor, eps: float = VICREG_EPS) -> dict:
    """VICReg terms for two branches z_a, z_b: float32[N, D], N >= 2.

    * invariance: mean over all elements of (z_a - z_b)^2 (MSE);
    * variance: sum over branches of mean_d relu(1 - sqrt(var_d + eps)), with the
      unbiased (N - 1) variance of each dimension over the batch;
    * covariance: sum over branches of sum of squared off-diagonal entries of the
      (N - 1)-normalized covariance matrix, divided by D.
    (The authors' code uses torch's unbiased var and /(n - 1) covariance.)
    """
    n, d = z_a.shape

    def var_cov(z):
        zc = z - z.mean(axis=0, keepdim=True)
        cov = paddle.matmul(zc, zc, transpose_x=True) / (n - 1)  # [D, D]
        var = paddle.diagonal(cov)
        var_term = F.relu(1.0 - paddle.sqrt(var + eps)).mean()
        off = cov * (1.0 - paddle.eye(d, dtype=cov.dtype))
        return var_term, paddle.square(off).sum() / d

    var_a, cov_a = var_cov(z_a)
    var_b, cov_b = var_cov(z_b)
    return {"invariance": paddle.square(z_a - z_b).mean(), "variance": var_a + var_b, "covariance": cov_a + cov_b}


def infonce_loss(scores: paddle.Tensor) -> paddle.Tensor:
    """InfoNCE with in-batch negatives.

    Args:
        scores: float32[P, N, N]; ``scores[p, i, j]`` scores anchor i against
            candidate j at location p; the positive of anchor i is candidate i.
    Returns:
        0-D: mean over p and i of ``-log softmax_j(scores[p, i, :])[i]``.
    """
    p, n, _ = scores.shape
    # = -mean(diagonal(log_softmax(scores))), as one fused cross-entropy: the same values up to float rounding,
    # faster forward + backward on the CPU than log_softmax + diagonal (docs/performance.md)
    labels = paddle.arange(n, dtype="int64").tile([p])
    return F.cross_entropy(scores.reshape([p * n, n]), labels)


def stdim_features(
    global_next: paddle.Tensor, local_t: paddle.Tensor, local_next: paddle.Tensor, gl_head: nn.Layer, ll_head: nn.Layer
):
    """What ST-DIM's bilinear scores multiply.

    Args:
        global_next: float32[N, D], global features of s_{t+1}.
        local_t, local_next: float32[N, C, H, W], mid feature maps of s_t and s_{t+1}.
        gl_head: ``Linear(D, C)``, the global-local bilinear form W_g.
        ll_head: ``Linear(C, C)``, the local-local bilinear form W_l.
    Returns:
        ``(g, h, lt)``: ``W_g(global_next)`` float32[N, C], ``W_l`` of each location of
        local_next float32[P, N, C] and local_t by location float32[P, N, C] (P = H*W).
    """
    n, c = local_t.shape[0], local_t.shape[1]
    lt = local_t.reshape([n, c, -1]).transpose([2, 0, 1])  # [P, N, C]
    ln = local_next.reshape([n, c, -1]).transpose([2, 0, 1])  # [P, N, C]
    return gl_head(global_next), ll_head(ln), lt


def stdim_scores(
    global_next: paddle.Tensor, local_t: paddle.Tensor, local_next: paddle.Tensor, gl_head: nn.Layer, ll_head: nn.Layer
):
    """ST-DIM's bilinear scores (arguments as ``stdim_features``).

    Returns:
        ``(scores_gl, scores_ll)``, float32[H*W, N, N]:
        ``scores_gl[p, i, j] = W_g(global_next[i]) . local_t[j, :, p]``,
        ``scores_ll[p, i, j] = W_l(local_next[i, :, p]) . local_t[j, :, p]``.
    """
    g, h, lt = stdim_features(global_next, local_t, local_next, gl_head, ll_head)
    scores_gl = paddle.matmul(g.unsqueeze(0).expand([lt.shape[0], *g.shape]), lt, transpose_y=True)
    scores_ll = paddle.matmul(h, lt, transpose_y=True)
    return scores_gl, scores_ll


def _row_std(z: paddle.Tensor) -> paddle.Tensor:
    """Unbiased std of each row of float32[N, D] -> float32[N] (``paddle.std`` logs a dtype-promotion warning)."""
    zc = z - z.mean(axis=1, keepdim=True)
    return paddle.sqrt(paddle.square(zc).sum(axis=1) / (z.shape[1] - 1))


def stdim_terms(scores_gl: paddle.Tensor, scores_ll: paddle.Tensor, z_t: paddle.Tensor) -> dict:
    """SND-STD's terms from ``stdim_scores`` and the global features z_t float32[N, D] of s_t.

    * global_local, local_local: ``infonce_loss`` of each score tensor;
    * std: -mean over samples of the (unbiased) std of each sample's D features
      (the authors' ``-torch.std(target, dim=1).mean()``), pushes features apart;
    * score_sq: mean(scores_gl^2) + mean(scores_ll^2), keeps the scores from growing
      without bound (the authors use the Frobenius norm per location; the mean of
      squares does not scale with the batch size).
    """
    return {
        "global_local": infonce_loss(scores_gl),
        "local_local": infonce_loss(scores_ll),
        "std": -_row_std(z_t).mean(),
        "score_sq": paddle.square(scores_gl).mean() + paddle.square(scores_ll).mean(),
    }


def contrastive_pairs(n: int, rng: np.random.Generator):
    """SND-V's pairs over a batch of n >= 2 states.

    Returns ``(idx_a, idx_b, tau)``: int64[n], int64[n], float32[n]. The first n // 2
    pairs are (s, s) with tau 0; the others (s, s') with tau 1 and s' a different
    batch index (a random non-zero shift), so the labels are never contradictory by
    construction (identical frames at two indices can still occur).
    """
    idx_a = rng.permutation(n)
    half = n // 2
    idx_b = idx_a.copy()
    idx_b[half:] = (idx_a[half:] + rng.integers(1, n, size=n - half)) % n
    tau = np.zeros(n, dtype=np.float32)
    tau[half:] = 1.0
    return idx_a, idx_b, tau


# ---------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------
class _SNDBase(DistillationModule):
    """A distillation module whose target (and optional extra heads) is trained too.

    Args:
        target_lr: Adam learning rate of the target (and extra heads).
        target_proportion: share of each minibatch the target step sees (at least 2
            samples), like ``update_proportion`` for the predictor.
        distil: the state the predictor learns the target's features of: "next" (s_t+1, as RND)
            or "current" (s_t, the state the SND convention pays for, as the authors' code).
        the rest: as ``DistillationModule`` (``max_grad_norm`` clips the target too).
    Subclasses implement ``_target_loss(batch) -> (total or None, {term: tensor})``
    (None: nothing to train on in this minibatch) and may return extra trainable
    layers from ``_make_heads``.
    """

    TERMS: tuple = ()
    #: their SND targets read the latest frame in [0, 1] as it is (``cnd_preprocess`` 0) and pay the mean
    #: squared error over the features (``k_distance(2, ..., 'mean')``; SND-V's ``error``)
    AUTHORS_SCALE = ("unit", "mean")

    def __init__(
        self,
        target: nn.Layer,
        predictor: nn.Layer,
        *,
        target_lr: float,
        obs_shape,
        input_channels: int,
        lr: float,
        update_proportion: float,
        max_grad_norm: float,
        seed: int = 0,
        target_proportion: float = 1.0,
        distil: str = "next",
    ):
        if not 0.0 < target_proportion <= 1.0:
            raise ValueError(f"target_proportion must be in (0, 1], got {target_proportion}")
        if distil not in DISTIL_STATES:
            raise ValueError(f"distil must be one of {', '.join(DISTIL_STATES)}, got {distil!r}")
        self.target_proportion = float(target_proportion)
        self.distil_key = DISTIL_STATES[distil]
        super().__init__(
            target,
            predictor,
            obs_shape=obs_shape,
            input_channels=input_channels,
            lr=lr,
            update_proportion=update_proportion,
            max_grad_norm=max_grad_norm,
            seed=seed,
        )
        self.target.train()
        for p in self.target.parameters():
            p.stop_gradient = False
        self.heads = self._make_heads()
        self.target_lr = target_lr
        self.target_opt = self._adam(target_lr, self._target_params())

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, s):
        target, predictor = make_networks(input_channels)
        target_lr = s.lr if s.target_lr is None else s.target_lr
        extra = cls._extra(s)
        common = cls._common(obs_shape, input_channels, s)
        return cls(
            target,
            predictor,
            target_lr=target_lr,
            target_proportion=s.target_proportion,
            distil=s.distil,
            **extra,
            **common,
        )

    @staticmethod
    def _extra(s) -> dict:
        """A variant's own constructor arguments from the run's ``ModuleSettings``."""
        return {}

    def _target_params(self) -> list:
        params = list(self.target.parameters())
        if self.heads is not None:
            params += list(self.heads.parameters())
        return params

    def reset_optimizers(self) -> None:
        super().reset_optimizers()
        self.target_opt = self._adam(self.target_lr, self._target_params())

    def _make_heads(self):
        return None

    def _target_loss(self, batch: dict):
        raise NotImplementedError

    def _target_share(self, batch: dict) -> dict:
        """A random ``target_proportion`` share of the minibatch (at least 2 samples), sorted."""
        n = len(batch["obs"])
        k = min(n, max(2, int(round(self.target_proportion * n))))
        if k == n:
            return batch
        idx = np.sort(self.rng.choice(n, size=k, replace=False))
        return {key: batch[key][idx] for key in ("obs", "next_obs", "dones")}

    def update(self, batch: dict) -> dict:
        total, terms = self._target_loss(self._target_share(batch))
        values = None if total is None else host_floats([total, *terms.values()])
        finite = values is None or bool(np.isfinite(values[0]))
        self.target_opt.clear_grad()
        if total is not None and finite:
            total.backward()
        # averaged over data-parallel ranks; a rank without pairs takes the others' step
        agreed = self.grad_sync(self._target_params(), finite, has_data=total is not None)
        if agreed.step:
            self.target_opt.step()
        self.target_opt.clear_grad()
        if not agreed.finite:  # reported (on every rank); the trainer rolls the update back
            out = {"snd_target": float("nan"), **{f"snd_target/{k}": float("nan") for k in self.TERMS}}
        elif total is None:  # no usable pairs here: report zeros
            out = {"snd_target": 0.0, **{f"snd_target/{k}": 0.0 for k in self.TERMS}}
        else:
            out = {"snd_target": values[0], **{f"snd_target/{k}": v for k, v in zip(terms, values[1:])}}
        return {"forward": self.distill(batch[self.distil_key]), **out}

    def _valid_pairs(self, batch: dict):
        """(obs, next_obs) restricted to consecutive transitions (dones == 0), or None if < 2."""
        valid = np.asarray(batch["dones"]).reshape(-1) == 0
        if valid.sum() < 2:  # InfoNCE needs negatives, VICReg an unbiased variance
            return None
        return batch["obs"][valid], batch["next_obs"][valid]

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["target_opt"] = optimizer_state(self.target_opt)
        if self.heads is not None:
            state["heads"] = self.heads.state_dict()
        return state

    def set_state_dict(self, state: dict) -> None:
        super().set_state_dict(state)  # checks the module name first (and resets every optimizer if unstepped)
        if state["target_opt"]:
            set_optimizer_state(self.target_opt, state["target_opt"])
        else:  # the target never stepped in that state
            self.target_opt = self._adam(self.target_lr, self._target_params())
        if self.heads is not None:
            load_weights(self.heads, state["heads"], "intrinsic/heads")


@register("snd-v")
class SNDV(_SNDBase):
    """SND-V: contrastive target training on augmented pairs of ``batch["obs"]``.

    ``augment(x: float32[B, k, H, W], rng) -> tensor`` works on the scale the target reads
    (after ``standardize``): [0, 1] under the SND authors' input scale (``--int-reward snd``),
    where the default pipeline is their noise and masks exactly, and z-scores under the default
    per-pixel standardization, where the same pipeline keeps a change bounded (on the raw scale
    a pixel that never changes has a standard deviation near 0, and any noise on it would land at
    the clip: docs/intrinsic_modules.md, SND-V). By default ``snd_v_augment_for`` sized to the
    observation's side. Each member of a pair is augmented independently.
    Loss: ``contrastive + magnitude`` (``snd_v_terms``).
    """

    summary = "SND, the target trained contrastively on augmented pairs"
    snd_convention = True
    TERMS = ("contrastive", "magnitude")

    def __init__(self, target, predictor, *, augment=None, **kwargs):
        super().__init__(target, predictor, **kwargs)
        self.augment = augment if augment is not None else snd_v_augment_for(int(self.obs_rms.mean.shape[-1]))

    def _target_loss(self, batch):
        obs = batch["obs"]
        if len(obs) < 2:
            return None, {}
        idx_a, idx_b, tau = contrastive_pairs(len(obs), self.rng)
        x = self.standardize(self.raw(obs), fresh=True)
        xa = self.augment(paddle.gather(x, paddle.to_tensor(idx_a)), self.rng)
        xb = self.augment(paddle.gather(x, paddle.to_tensor(idx_b)), self.rng)
        z = self.target(paddle.concat([xa, xb]))  # one pass for both members
        z_a, z_b = z[: len(obs)], z[len(obs) :]
        terms = snd_v_terms(z_a, z_b, paddle.to_tensor(tau))
        return terms["contrastive"] + terms["magnitude"], terms


@register("snd-std")
class SNDSTD(_SNDBase):
    """SND-STD: ST-DIM on consecutive (s_t, s_{t+1}) pairs of the minibatch.

    Needs ``target.forward_with_map(x) -> (float32[B, D], float32[B, C, H', W'])``
    (``ConvFeatureNet``: the map after the second convolution; the third with
    ``--snd-network authors``). The bilinear forms ``heads.global_local`` (Linear(D, C)) and
    ``heads.local_local`` (Linear(C, C)) are trained with the target. Loss:
    ``global_local + local_local + beta1 * std + beta2 * score_sq`` (``stdim_terms``).

    The scores are ``[H'*W', N, N]``, quadratic in the number of pairs N, so at most
    ``max_pairs`` valid pairs (a random subset) enter a target step: 512 is the
    official code's minibatch and keeps each score tensor near 85 MB for a 9x9 map.
    """

    summary = "SND, the target trained by Spatio-Temporal DeepInfoMax"
    snd_convention = True
    TERMS = ("global_local", "local_local", "std", "score_sq")

    @staticmethod
    def _extra(s) -> dict:
        return {"max_pairs": s.max_pairs}

    def __init__(self, target, predictor, *, max_pairs: int = 512, **kwargs):
        if max_pairs < 2:
            raise ValueError(f"max_pairs must be >= 2, got {max_pairs}")
        self.max_pairs = int(max_pairs)
        super().__init__(target, predictor, **kwargs)

    def _make_heads(self):
        # probe the target once for the feature sizes
        h, w = self.obs_rms.mean.shape[1:]
        with paddle.no_grad():
            z, fmap = self.target.forward_with_map(paddle.zeros([1, self.input_channels, h, w]))
        d, c = z.shape[1], fmap.shape[1]
        heads = nn.Layer()
        w1, b1 = param_attrs("orthogonal", gain=1.0)
        w2, b2 = param_attrs("orthogonal", gain=1.0)
        heads.global_local = nn.Linear(d, c, weight_attr=w1, bias_attr=b1)
        heads.local_local = nn.Linear(c, c, weight_attr=w2, bias_attr=b2)
        return heads

    def _target_loss(self, batch):
        pairs = self._valid_pairs(batch)
        if pairs is None:
            return None, {}
        obs, next_obs = pairs
        if len(obs) > self.max_pairs:
            keep = np.sort(self.rng.choice(len(obs), size=self.max_pairs, replace=False))
            obs, next_obs = obs[keep], next_obs[keep]
        z, fmap = self.target.forward_with_map(paddle.concat([self.normalize(obs), self.normalize(next_obs)]))
        z_t, z_next = paddle.split(z, 2)  # split, not slices: one cheap node in the backward pass
        map_t, map_next = paddle.split(fmap, 2)
        if cpu.fast_paths(z):  # the same terms, the score losses on numpy (common/cpu/stdim.py)
            g, h, lt = stdim_features(z_next, map_t, map_next, self.heads.global_local, self.heads.local_local)
            global_local, local_local, score_sq = cpu.stdim_losses(g, h, lt)
            terms = {
                "global_local": global_local,
                "local_local": local_local,
                "std": -_row_std(z_t).mean(),
                "score_sq": score_sq,
            }
        else:
            scores = stdim_scores(z_next, map_t, map_next, self.heads.global_local, self.heads.local_local)
            terms = stdim_terms(*scores, z_t)
        total = (
            terms["global_local"] + terms["local_local"] + STDIM_BETA1 * terms["std"] + STDIM_BETA2 * terms["score_sq"]
        )
        return total, terms


@register("snd-vic")
class SNDVIC(_SNDBase):
    """SND-VIC: VICReg with s_t and s_{t+1} as the two branches (consecutive pairs only).

    Loss: ``lambda * invariance + mu * variance + nu * covariance`` with
    lambda = mu = 1, nu = 1/25 (``vicreg_terms``).
    """

    summary = "SND, the target trained by VICReg"
    snd_convention = True
    TERMS = ("invariance", "variance", "covariance")

    def _target_loss(self, batch):
        pairs = self._valid_pairs(batch)
        if pairs is None:
            return None, {}
        obs, next_obs = pairs
        n = len(obs)
        z = self.target(paddle.concat([self.normalize(obs), self.normalize(next_obs)]))
        terms = vicreg_terms(z[:n], z[n:])
        total = VICREG_LAMBDA * terms["invariance"] + VICREG_MU * terms["variance"] + VICREG_NU * terms["covariance"]
        return total, terms


SND_VARIANTS = {cls.name: cls for cls in (SNDV, SNDSTD, SNDVIC)}
