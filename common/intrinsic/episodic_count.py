"""An episodic count: within an episode, s_{t+1} pays ``1 / sqrt(n)``, n its visits in the episode so far,
this one included (so a first visit pays 1, a second 0.71, ...). States are the exact bytes of the
module's input channels: on MiniGrid the agent's view, or with ``--observation view+full`` the whole
grid with the agent. Nothing is learned and nothing generalises: two views that differ in one cell are
two states. Under the trainer's first-visit gate (MiniGrid's default) it pays first visits only, the
gate's own 0/1 signal; ``--no-int-first-visit`` lets revisits pay their 1/sqrt(n).

This is the count baseline of Henaff, Jiang and Raileanu 2023 ("A Study of Global and Episodic Bonuses
for Exploration in Contextual MDPs", arXiv 2306.03236; their code: facebookresearch/e3b,
``minihack/src/algos/count.py``, the same ``1/sqrt(N)`` counted in the episode), and what E3B's ellipse
becomes when every state has a feature direction of its own (E3B on one-hot features pays
``1 / (ridge + visits before)``: the same order of states, a steeper fall). The project uses it to ask
whether E3B's failure on MiniGrid lies in its learned features (docs/exploration.md).

The memory is one ``dict[bytes, int]`` per env, keyed by an 8-byte BLAKE2b digest of the state (so that
an Atari episode of thousands of 84x84 frames holds kilobytes, not megabytes, per env; two of an
episode's n states share a digest with odds of about n^2 / 2^65), reset when the env's episode ends.
The episode's first observation counts as visited without a bonus (as E3B and the first-visit gate
count it). The memory is episodic state, not learned state: not checkpointed, as E3B's (a resumed run
continues its episodes, but this memory of them starts empty, so their revisits are paid once more).
"""

from __future__ import annotations

import hashlib

import numpy as np

from common.intrinsic.base import IntrinsicModule
from common.intrinsic.registry import register


@register("episodic-count")
class EpisodicCount(IntrinsicModule):
    """``--intrinsic episodic-count``: 1/sqrt(visits in this episode) of the exact last ``input_channels``
    channels. No networks, no losses."""

    summary = "1/sqrt(visits) of exact states within the episode"
    scores_states = False  # the count needs the episode: rollout_reward, never reward(obs)

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, settings):
        return cls(obs_shape, input_channels)

    def __init__(self, obs_shape, input_channels: int):
        c = obs_shape[0]
        if not 1 <= input_channels <= c:
            raise ValueError(f"need 1 <= input_channels <= {c} (the observation's channels), got {input_channels}")
        self.input_channels = int(input_channels)
        self.counts: list[dict[bytes, int]] | None = None  # one per env, built at the first rollout

    def key(self, frame: np.ndarray) -> bytes:
        """The state of one uint8[C, H, W] observation: a digest of its last ``input_channels`` channels."""
        return hashlib.blake2b(np.ascontiguousarray(frame[-self.input_channels :]), digest_size=8).digest()

    def reset_episodes(self) -> None:
        self.counts = None

    def rollout_reward(self, obs, next_obs, actions, dones):
        T, N = dones.shape
        if self.counts is not None and len(self.counts) != N:
            raise ValueError(f"episodic-count holds the episodes of {len(self.counts)} envs, got a rollout of {N}")
        if self.counts is None:  # the episodes in progress begin here
            self.counts = [{self.key(obs[0, i]): 1} for i in range(N)]
        bonus = np.zeros((T, N), np.float32)
        for t in range(T):
            for i in range(N):
                seen = self.counts[i]
                key = self.key(next_obs[t, i])
                seen[key] = n = seen.get(key, 0) + 1
                bonus[t, i] = 1.0 / np.sqrt(n)
                if dones[t, i]:  # obs[t+1, i] is the next episode's first observation
                    self.counts[i] = {self.key(obs[t + 1, i]): 1}
        return bonus

    def reward(self, obs):
        raise TypeError(
            "episodic-count counts states within their episodes, not single observations: use rollout_reward"
        )

    def observe(self, obs: np.ndarray) -> None:
        pass  # nothing to normalise: the count reads exact bytes

    def update(self, batch: dict) -> dict:
        return {}  # nothing to learn

    def features(self, obs: np.ndarray) -> np.ndarray:
        """The counted channels as float32[B, input_channels * H * W] (for the embedding view)."""
        return obs[:, -self.input_channels :].reshape(len(obs), -1).astype(np.float32)

    def state_dict(self) -> dict:
        return {"name": self.name}  # the memory is episodic, not checkpointed (the module docstring)

    def set_state_dict(self, state: dict) -> None:
        self.check_state(state)
