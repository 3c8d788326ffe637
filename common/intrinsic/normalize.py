"""Running statistics used by RND-style intrinsic rewards (numpy only, no Paddle).

* ``RunningMeanStd``: mean/variance of a stream of batches (parallel algorithm of
  Chan et al.), used to normalize observations and intrinsic rewards.
* ``RewardForwardFilter``: the discounted intrinsic return, accumulated along time
  separately for each env; RND divides intrinsic rewards by the running std of it.
"""

from __future__ import annotations

import hashlib

import numpy as np


class RunningMeanStd:
    """Mean and variance over every batch seen so far, per element of ``shape``.

    ``update(x)`` takes ``x`` of shape ``[B, *shape]`` (any numeric dtype); the
    statistics are kept in float64 so that long runs do not drift. ``sync``, when set
    (``common.run.distributed.World.pooled_moments``), turns a batch's moments into those of every
    data-parallel rank's batch together, so that every rank keeps the same statistics.
    """

    sync = None

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        # A tiny prior count keeps the first update well defined (as in RND's code).
        self.count = float(epsilon)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64)
        if x.shape[0] == 0:
            return
        self.update_from_moments(x.mean(axis=0), x.var(axis=0), x.shape[0])

    def update_from_moments(self, batch_mean, batch_var, batch_count: int) -> None:
        if self.sync is not None:
            batch_mean, batch_var, batch_count = self.sync(batch_mean, batch_var, batch_count)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean, self.var, self.count = new_mean, m2 / total, total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def state_dict(self) -> dict:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def set_state_dict(self, state: dict) -> None:
        """Restore ``state_dict``'s values; a ``ValueError`` names what is impossible in them (a shape, a
        NaN or inf, a negative variance, a count that is not positive)."""
        mean, var = np.asarray(state["mean"], np.float64), np.asarray(state["var"], np.float64)
        if mean.shape != self.mean.shape or var.shape != self.mean.shape:
            raise ValueError(
                f"RunningMeanStd shape mismatch: checkpoint has mean {mean.shape} and var {var.shape}, "
                f"expected {self.mean.shape}"
            )
        if not (np.isfinite(mean).all() and np.isfinite(var).all()):
            raise ValueError("mean/var hold a NaN or an infinity")
        if (var < 0).any():
            raise ValueError(f"var is negative ({float(var.min()):.3g}): a variance is >= 0")
        count = state["count"]
        if isinstance(count, bool) or not isinstance(count, (int, float)) or not (0 < count < float("inf")):
            raise ValueError(f"count is {str(count)[:40]}: expected a positive finite number")
        self.mean, self.var, self.count = mean, var, float(count)


class RewardForwardFilter:
    """Discounted sum of rewards along time, one accumulator per env.

    ``update(r_t)`` with ``r_t`` float[N] (one reward per env at step t) returns the
    running discounted return ``R_t = gamma * R_{t-1} + r_t`` for each env. Feed it the
    rollout one time step at a time (``filter_rollout`` does that); feeding it a
    flattened [T*N] batch would mix envs and times, a known bug in RND ports.
    """

    def __init__(self, gamma: float, num_envs: int):
        self.gamma = float(gamma)
        self.rewems = np.zeros(num_envs, dtype=np.float64)

    def update(self, rews: np.ndarray) -> np.ndarray:
        self.rewems = self.rewems * self.gamma + np.asarray(rews, dtype=np.float64)
        return self.rewems.copy()

    def filter_rollout(self, rews: np.ndarray) -> np.ndarray:
        """``rews`` float[T, N] -> discounted returns float64[T, N], along time."""
        return np.stack([self.update(r) for r in rews])

    def state_dict(self) -> dict:
        return {"gamma": self.gamma, "rewems": self.rewems.copy()}

    def set_state_dict(self, state: dict) -> None:
        rewems = np.asarray(state["rewems"], np.float64)
        if rewems.shape != self.rewems.shape:
            raise ValueError(
                f"RewardForwardFilter has shape {rewems.shape} in the checkpoint, this run {self.rewems.shape}"
            )
        gamma = state["gamma"]
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma is {str(gamma)[:40]}: expected a discount in [0, 1]")
        if float(gamma) != self.gamma:  # the run's --int-gamma is the truth; its returns were summed with the file's
            raise ValueError(
                f"the checkpoint's intrinsic return was discounted with gamma {gamma}, this run's --int-gamma is "
                f"{self.gamma}: resume with --int-gamma {gamma}"
            )
        if not np.isfinite(rewems).all():
            raise ValueError("rewems hold a NaN or an infinity")
        self.rewems = rewems


def keys_or_none(k) -> bool:
    """Whether ``k`` is one env's memory in ``FirstVisitGate.episode_state``: int64[k] or None."""
    return k is None or (isinstance(k, np.ndarray) and k.dtype == np.int64 and k.ndim == 1)


class FirstVisitGate:
    """Episodic restriction of the intrinsic reward: 1 for the first visit of an observation
    within an episode, 0 for a revisit (BeBold, Zhang et al. 2020, arXiv 2012.08621, "ERIR";
    kept in NovelD, Zhang et al. 2021).

    A curious agent can farm a non-episodic novelty bonus by cycling between a few
    observations whose novelty decays slowly (MiniGrid: picking up and dropping the key,
    opening and closing a door, standing still). With the gate a cycle pays only once per
    episode. Observations are identified by their exact bytes (a hash of the uint8 frame
    stack), so the gate needs nothing from the game; on Atari-like screens, which rarely
    repeat exactly, it is almost always 1. Instead of frames it can be given the game's own
    state keys (int64, ``--first-visit-key state``: MiniGrid's full grid with the agent, as the
    NovelD authors count states). One set of seen keys per env, kept across rollouts (episodes
    span rollouts) and cleared when the env's episode ends; the first state of every episode
    counts as visited. ``episode_state`` / ``set_episode_state`` carry the sets over a resume that
    continues the episodes (``common.ppo.episodes``).
    """

    def __init__(self, num_envs: int):
        self.seen: list[set] | None = None
        self.num_envs = int(num_envs)

    @staticmethod
    def _key(frame: np.ndarray) -> int:
        # blake2b, not hash(): Python salts hash() per process, and a checkpoint holds these keys
        return int.from_bytes(hashlib.blake2b(frame.tobytes(), digest_size=8).digest(), "little", signed=True)

    def episode_state(self) -> list | None:
        """Each env's keys seen in its episode in progress, int64[k] (None where its next state begins an
        episode), or None before the first rollout."""
        if self.seen is None:
            return None
        return [None if keys is None else np.array(sorted(keys), np.int64) for keys in self.seen]

    def set_episode_state(self, state: list | None) -> None:
        """Continue the episodes of ``episode_state``."""
        if state is not None:
            if not (isinstance(state, list) and len(state) == self.num_envs and all(map(keys_or_none, state))):
                raise ValueError(f"the first-visit gate's memory is not {self.num_envs} int64[k] arrays or None")
            state = [None if keys is None else set(keys.tolist()) for keys in state]
        self.seen = state

    def gate_rollout(self, prev_obs: np.ndarray, next_obs: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """Gate values float32[T, N] for one rollout.

        Args:
            prev_obs: [T, N, ...], s_t as the env showed it (the next episode's first observation
                where step t-1 ended one); read where an episode starts (the first step of a run, or
                after an end), whose first state then counts as visited.
            next_obs: [T, N, ...], s_{t+1}, with the true terminal observation where an episode ended.
            dones: float or bool [T, N].
        ``prev_obs`` and ``next_obs`` are uint8 frames or int64 state keys [T, N].
        """
        T, N = dones.shape
        if N != self.num_envs:
            raise ValueError(f"FirstVisitGate was built for {self.num_envs} envs, got a rollout of {N}")
        if self.seen is None:
            self.seen = [None] * N
        gate = np.zeros((T, N), dtype=np.float32)
        for t in range(T):
            for i in range(N):
                if self.seen[i] is None:  # an episode starts: its first state is visited
                    self.seen[i] = {self._key(prev_obs[t, i])}
                key = self._key(next_obs[t, i])
                if key not in self.seen[i]:
                    gate[t, i] = 1.0
                    self.seen[i].add(key)
                if dones[t, i]:
                    self.seen[i] = None
        return gate

    def reset(self) -> None:
        """Forget every episode (the envs were reset, e.g. on resume)."""
        self.seen = None


class IntrinsicRewardScale:
    """What the agent is paid for novelty: RND's scaling, with the optional first-visit gate, or
    the SND authors' clipping.

    ``scale(raw, ...)`` takes the raw novelty of a rollout, float[T, N], multiplies it by
    the ``FirstVisitGate`` (when ``first_visit``), and divides it by the running std of the
    discounted intrinsic return, computed along time per env (``RewardForwardFilter`` +
    ``RunningMeanStd``), as the RND paper does. With ``clip_eta`` set (``--int-reward snd``)
    it pays ``clip(clip_eta * raw, 0, 1)`` instead, as the SND authors' code does, with no
    normalisation; the running std is still kept, for the logs only. Its state (filter and
    statistics) is checkpointed as ``{"int_filter", "int_rms"}``; the gate's memory of the episodes
    in progress goes with them (``common.ppo.episodes``).
    """

    def __init__(self, gamma: float, num_envs: int, first_visit: bool = False, clip_eta: float | None = None):
        if clip_eta is not None and first_visit:
            raise ValueError("the SND authors' clipped reward (clip_eta) has no first-visit gate")
        self.filter = RewardForwardFilter(gamma, num_envs)
        self.rms = RunningMeanStd(())
        self.gate = FirstVisitGate(num_envs) if first_visit else None
        self.gate_share = None  # the last rollout's gate values float32[T, N] (with the gate)
        self.clip_eta = clip_eta

    def scale(self, raw: np.ndarray, prev_obs, next_obs, dones) -> np.ndarray:
        """float32[T, N] rewards for raw novelty float[T, N]; the observations (or state keys) are the
        gate's (``FirstVisitGate.gate_rollout``)."""
        if self.clip_eta is not None:  # the SND authors': eta x error, clipped, no normalisation
            paid = np.clip(self.clip_eta * np.asarray(raw, np.float32), 0.0, 1.0)
            self.rms.update(self.filter.filter_rollout(paid).ravel())  # the logged return std only
            return paid.astype(np.float32)
        paid = raw
        if self.gate is not None:  # revisits within an episode earn nothing
            self.gate_share = self.gate.gate_rollout(prev_obs, next_obs, dones)
            paid = raw * self.gate_share
        self.rms.update(self.filter.filter_rollout(paid).ravel())
        return (paid / np.sqrt(self.rms.var + 1e-8)).astype(np.float32)

    def episode_state(self) -> list | None:
        """The gate's memory of the episodes in progress (``FirstVisitGate.episode_state``), or None."""
        return None if self.gate is None else self.gate.episode_state()

    def set_episode_state(self, state: list | None) -> None:
        """Give the gate its memory of the episodes in progress (a run without a gate has none to take)."""
        if self.gate is not None:
            self.gate.set_episode_state(state)

    @property
    def return_std(self) -> float:
        return float(np.sqrt(self.rms.var))

    def state_dict(self) -> dict:
        return {"int_filter": self.filter.state_dict(), "int_rms": self.rms.state_dict()}

    def set_state_dict(self, state: dict) -> None:
        for key, part in (("int_filter", self.filter), ("int_rms", self.rms)):
            try:
                part.set_state_dict(state[key])
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"entry {key!r}: {e}") from None
