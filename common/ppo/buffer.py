"""Rollout storage with two reward streams and GAE (numpy only).

Observations are stored once, as uint8, for T+1 time steps: ``obs[t]`` is s_t and
``obs[t+1]`` is s_{t+1}, so next observations cost nothing extra. Where an episode
ended at step t, ``obs[t+1]`` is already the first frame of the next episode; the
true terminal frame is kept in ``terminal_obs``. Both the intrinsic reward
(``next_obs_for_reward``) and the intrinsic module's training batches
(``minibatches``' ``next_obs``) use the true terminal frame, so under the default reward
convention the predictor learns exactly the frames it is rewarded for. (Under ``--int-reward
snd`` a step is paid for s_t, as in the SND authors' code, while the game's networks still learn
s_{t+1}; ``--snd-network authors`` learns s_t: docs/sources.md, section 4.1.)
Conversion to float happens per minibatch inside the networks, never for the
whole rollout.

``dones`` marks every episode end, ``truncated`` those of them that were a time limit (the env's
``info["TimeLimit.truncated"]``: Montezuma's 4,500 steps, MiniGrid's ``max_steps``; Mario's clock
is a death, not a limit). By default both stop the extrinsic return's bootstrap, as the RND
authors' PPO and the SND authors' do; ``bootstrap_truncated`` (``--bootstrap-truncated``) instead
continues the return at a time limit from the value of the true terminal frame, as if the episode
went on (Pardo et al. 2018; the Double DQN, ``common/dqn``, always does).
"""

from __future__ import annotations

import numpy as np


def gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray | None, gamma: float, lam: float) -> np.ndarray:
    """Generalized advantage estimation along time.

    Args:
        rewards: float32[T, N]; values: float32[T+1, N] (the last row bootstraps);
        dones: float32[T, N], 1 where step t ended an episode (no bootstrap across
            it); ``None`` for a non-episodic stream (RND's intrinsic rewards).
    Returns:
        advantages float32[T, N]; the returns are ``advantages + values[:-1]``.
    """
    T = rewards.shape[0]
    notdone = np.ones_like(rewards) if dones is None else 1.0 - dones
    adv = np.zeros_like(rewards, dtype=np.float32)
    last = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * values[t + 1] * notdone[t] - values[t]
        last = delta + gamma * lam * notdone[t] * last
        adv[t] = last
    return adv


def rollout_bytes(num_steps: int, num_envs: int, obs_shape) -> int:
    """Bytes a ``RolloutBuffer`` of that size holds: the uint8 observations and its ~15 per-step arrays."""
    return (num_steps + 1) * num_envs * int(np.prod(obs_shape)) + 60 * num_steps * num_envs


class RolloutBuffer:
    """One rollout of ``num_steps`` x ``num_envs`` transitions.

    Filled step by step with ``add``; ``compute_returns_and_advantages`` fills
    ``advantages``/``ret_ext``/``ret_int``; ``minibatches`` yields dicts of numpy
    arrays (see there).
    """

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple, state_keys: bool = False):
        T, N = num_steps, num_envs
        self.num_steps, self.num_envs, self.obs_shape = T, N, tuple(obs_shape)
        self.obs = np.zeros((T + 1, N, *obs_shape), dtype=np.uint8)
        self.actions = np.zeros((T, N), dtype=np.int64)
        self.log_probs = np.zeros((T, N), dtype=np.float32)
        self.values_ext = np.zeros((T + 1, N), dtype=np.float32)
        self.values_int = np.zeros((T + 1, N), dtype=np.float32)
        self.rewards_ext = np.zeros((T, N), dtype=np.float32)
        self.rewards_int = np.zeros((T, N), dtype=np.float32)
        self.dones = np.zeros((T, N), dtype=np.float32)
        self.truncated = np.zeros((T, N), dtype=bool)  # the dones that were a time limit (with a terminal frame)
        self.advantages = np.zeros((T, N), dtype=np.float32)
        self.ret_ext = np.zeros((T, N), dtype=np.float32)
        self.ret_int = np.zeros((T, N), dtype=np.float32)
        self.terminal_obs: dict[tuple[int, int], np.ndarray] = {}
        # the game's state keys of s_t and s_{t+1} (infos' prev_state_key / state_key), for a first-visit
        # gate that counts states rather than observations (--first-visit-key state)
        self.state_keys = (np.zeros((T, N), np.int64), np.zeros((T, N), np.int64)) if state_keys else None
        self.t = 0

    def start(self, obs: np.ndarray) -> None:
        """Begin a rollout from ``obs`` uint8[N, *obs_shape] (the envs' current observations: the last
        rollout's last ones)."""
        self.obs[0] = obs
        self.terminal_obs = {}
        self.truncated[:] = False
        self.t = 0

    def add(self, actions, log_probs, values_ext, values_int, rewards, dones, next_obs, infos=None) -> None:
        """Store transition t; ``infos[i]['final_observation']`` is kept where env i's episode ended, and
        ``infos[i]['TimeLimit.truncated']`` marks it a time limit."""
        t = self.t
        if t >= self.num_steps:
            raise IndexError(f"rollout is full ({self.num_steps} steps); call start() first")
        self.actions[t], self.log_probs[t] = actions, log_probs
        self.values_ext[t], self.values_int[t] = values_ext, values_int
        self.rewards_ext[t], self.dones[t] = rewards, dones
        self.obs[t + 1] = next_obs
        if infos is not None:
            for i in np.flatnonzero(dones):
                if "final_observation" in infos[i]:  # (absent where a restarted worker cut the episode)
                    self.terminal_obs[(t, int(i))] = infos[i]["final_observation"]
                    self.truncated[t, i] = bool(infos[i].get("TimeLimit.truncated", False))
            if self.state_keys is not None:
                for i, info in enumerate(infos):
                    self.state_keys[0][t, i], self.state_keys[1][t, i] = info["prev_state_key"], info["state_key"]
        self.t = t + 1

    @property
    def full(self) -> bool:
        return self.t == self.num_steps

    def next_obs_for_reward(self, t_slice=slice(None)) -> np.ndarray:
        """s_{t+1} for every transition, uint8[T, N, ...] with the true terminal frames in place."""
        nxt = self.obs[1:][t_slice].copy()
        for (t, i), o in self.terminal_obs.items():
            nxt[t, i] = o
        return nxt

    def next_frame(self, t: int, i: int) -> np.ndarray:
        """s_{t+1} of env ``i``'s step ``t``, uint8[*obs_shape]: the true terminal frame where it ended an episode."""
        return self.terminal_obs.get((t, i), self.obs[t + 1, i])

    def visit_frames(self, next_obs: np.ndarray):
        """What a first-visit gate reads of this rollout (``IntrinsicRewardScale.scale``): s_t as the envs
        showed it uint8[T, N, ...] (a new episode's first frame where one ended), ``next_obs``
        (``next_obs_for_reward()``) and the dones; or, where the buffer keeps state keys, the keys
        int64[T, N] of s_t and s_{t+1} in place of the frames."""
        if self.state_keys is not None:
            return self.state_keys[0], self.state_keys[1], self.dones
        return self.obs[:-1], next_obs, self.dones

    def clip_rewards(self) -> None:
        """The extrinsic rewards to their signs, in place (``--clip-reward``)."""
        np.sign(self.rewards_ext, out=self.rewards_ext)

    def store_intrinsic_rewards(self, rewards: np.ndarray) -> None:
        """The rollout's scaled intrinsic rewards, float32[T, N]."""
        self.rewards_int[:] = rewards

    def compute_returns_and_advantages(
        self,
        last_value_ext,
        last_value_int,
        gamma: float,
        lam: float,
        int_gamma: float,
        ext_coef: float,
        int_coef: float,
        int_episodic: bool = False,
        clip_reward: bool = False,
        value_of=None,
    ) -> None:
        """GAE per stream and A = ext_coef*A_ext + int_coef*A_int. The intrinsic stream runs on across
        episode ends (RND) unless ``int_episodic`` (the SND authors' code cuts it there too). With
        ``ext_coef`` 0 the extrinsic stream learns from zero rewards, not from ``rewards_ext`` (which
        keeps the game's reward for the logs): no game reward, not even through the value head.
        ``clip_reward``: the game's rewards to their signs first (in place: the logs see them clipped).
        ``value_of``: bootstrap at time limits (``--bootstrap-truncated``); a function of terminal frames
        uint8[K, *obs_shape] returning their values ``(v_ext, v_int)`` float32[K] (``Actor.values``);
        each truncated step's reward gets ``gamma * v`` of its terminal frame, in each stream that the
        episode end cuts."""
        if clip_reward:
            self.clip_rewards()
        self.values_ext[-1], self.values_int[-1] = last_value_ext, last_value_int
        ext_rewards = self.rewards_ext.copy() if ext_coef else np.zeros_like(self.rewards_ext)
        int_rewards = self.rewards_int.copy()
        if value_of is not None and self.truncated.any():
            ts, envs = np.nonzero(self.truncated)
            v_ext, v_int = value_of(np.stack([self.terminal_obs[(t, i)] for t, i in zip(ts.tolist(), envs.tolist())]))
            ext_rewards[ts, envs] += gamma * np.asarray(v_ext, np.float32)
            if int_episodic:
                int_rewards[ts, envs] += int_gamma * np.asarray(v_int, np.float32)
        adv_ext = gae(ext_rewards, self.values_ext, self.dones, gamma, lam)
        adv_int = gae(int_rewards, self.values_int, self.dones if int_episodic else None, int_gamma, lam)
        self.ret_ext = adv_ext + self.values_ext[:-1]
        self.ret_int = adv_int + self.values_int[:-1]
        self.adv_ext, self.adv_int = adv_ext, adv_int
        self.advantages = (ext_coef * adv_ext + int_coef * adv_int).astype(np.float32)

    def summary(self) -> dict:
        """What a log reads of this rollout, after ``compute_returns_and_advantages``: the tutorial's
        "Training Reward" (the sum over steps of the envs' mean reward), the intrinsic rewards' mean, max
        and share at the SND clip (>= 1), the advantages' means and the spread (std) of the combined
        advantages the policy gradient weighs (against the entropy bonus ``beta``), and the arrays the histograms and
        pictures draw: ``actions`` int64[T, N], ``rewards_int``, ``advantages``, ``dones`` float32[T, N]."""
        return {
            "training_reward": float(self.rewards_ext.mean(axis=1).sum()),
            "int_reward_mean": float(self.rewards_int.mean()),
            "int_reward_max": float(self.rewards_int.max()),
            "int_reward_clipped_share": float((self.rewards_int >= 1.0).mean()),
            "adv_ext_mean": float(self.adv_ext.mean()),
            "adv_int_mean": float(self.adv_int.mean()),
            "adv_std": float(self.advantages.std()),
            "actions": self.actions,
            "rewards_int": self.rewards_int,
            "advantages": self.advantages,
            "dones": self.dones,
        }

    def minibatches(self, num_minibatches: int, rng: np.random.Generator):
        """Yield ``num_minibatches`` dicts over a random permutation of all T*N samples.

        Keys: obs, next_obs uint8[B, *obs_shape]; actions int64[B]; log_probs,
        advantages, ret_ext, ret_int, dones float32[B]. ``next_obs`` is s_{t+1} with the
        true terminal frame where the episode ended at t (the frame that was scored), so
        ``(obs, next_obs)`` is a consecutive pair at every step, except where a restarted worker cut
        an episode (no terminal frame: ``next_obs`` is then the new episode's first frame).
        """
        T, N = self.num_steps, self.num_envs
        total = T * N
        size = total // num_minibatches
        perm = rng.permutation(total)
        obs_flat = self.obs.reshape(((T + 1) * N, *self.obs_shape))
        flat = {
            k: getattr(self, k).reshape(total)
            for k in ("actions", "log_probs", "advantages", "ret_ext", "ret_int", "dones")
        }
        for j in range(num_minibatches):
            idx = np.sort(perm[j * size : (j + 1) * size])  # sorted: contiguous reads from the big obs array
            batch = {k: v[idx] for k, v in flat.items()}
            batch["obs"] = obs_flat[idx]  # s_t   at flat index t*N + i
            batch["next_obs"] = obs_flat[idx + N]  # s_t+1 at flat index (t+1)*N + i
            for k in np.flatnonzero(batch["dones"]):  # the reset frame there: put the terminal frame back
                frame = self.terminal_obs.get(divmod(int(idx[k]), N))
                if frame is not None:
                    batch["next_obs"][k] = frame
            yield batch
