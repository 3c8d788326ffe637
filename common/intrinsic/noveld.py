"""NovelD (Zhang et al. 2021, arXiv 2101.08152): pay for crossing into novelty, not for being in it.

RND measures how novel a state is, ``N(s)``: here, as in the NovelD authors' code
(``tianjunz/NovelD``, ``src/algos/bebold.py``), the L2 norm of the predictor's error
``||target(s) - predictor(s)||`` (RND's own reward is half its square). NovelD pays for the
*difference* along a transition::

    r(s_t, a_t, s_{t+1}) = max(N(s_{t+1}) - alpha * N(s_t), 0) * 1[s_{t+1} first seen in this episode]

with alpha = 0.5 (the paper's value on MiniGrid). The agent earns where it steps from the known
into the less known, the frontier, and nothing for standing in a novel region or walking back
into the known. The episodic restriction, the indicator, is the paper's "ERIR"; here it is the
trainer's ``FirstVisitGate`` (observations identified by their exact bytes, or with
``--first-visit-key state`` by the game's full-state key; one memory per env cleared at each
episode's end), which NovelD turns on whatever ``--int-first-visit`` says.
The MiniGrid games already use that gate by default with RND; NovelD is then RND's gated
reward with N(s_{t+1}) replaced by the clipped difference.

The networks, normalizer and predictor step are exactly RND's (``common.intrinsic.rnd``); only
the reward differs, so NovelD costs RND's per frame plus one more novelty per rollout row. (The runs of
suite v3, up to commit efbc167, took N as half the squared error, RND's reward: the same ordering
of states, another threshold for alpha.)
"""

from __future__ import annotations

import numpy as np

from common.intrinsic.registry import register
from common.intrinsic.rnd import RND

#: the paper's scaling factor of the novelty of s_t
NOVELD_ALPHA = 0.5


def novelty_difference(novelty_next: np.ndarray, novelty_now: np.ndarray, alpha: float = NOVELD_ALPHA) -> np.ndarray:
    """max(N(s_{t+1}) - alpha * N(s_t), 0) elementwise, float32 of the inputs' shape."""
    return np.maximum(novelty_next - alpha * novelty_now, 0.0).astype(np.float32)


@register("noveld")
class NovelD(RND):
    """RND's networks and training, NovelD's reward (the episodic gate is the trainer's)."""

    summary = "RND's novelty difference along a transition, first visits only"
    first_visit_gate = True
    snd_convention = False

    def __init__(self, *args, alpha: float = NOVELD_ALPHA, **kwargs):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"NovelD's alpha must be in [0, 1], got {alpha}")
        super().__init__(*args, **kwargs)
        self.alpha = float(alpha)

    def novelty(self, obs: np.ndarray) -> np.ndarray:
        """N(s) = ||target(s) - predictor(s)||_2 of uint8[B, C, H, W] observations -> float32[B]."""
        return np.sqrt(2.0 * self.reward(obs)).astype(np.float32)  # reward(): half the squared norm

    def rollout_reward(self, obs, next_obs, actions, dones):
        T, N = dones.shape
        # N(s) of every row of the rollout: obs[t] is s_t and, where no episode ended, obs[t+1] is s_{t+1}
        novelty = self.novelty(obs.reshape((T + 1) * N, *obs.shape[2:])).reshape(T + 1, N)
        novelty_next = novelty[1:].copy()
        ended = np.flatnonzero(dones.reshape(-1))
        if len(ended):  # s_{t+1} of those steps is the terminal frame, not the reset frame in obs[t+1]
            terminal = next_obs.reshape(T * N, *next_obs.shape[2:])[ended]
            novelty_next.reshape(-1)[ended] = self.novelty(terminal)
        return novelty_difference(novelty_next, novelty[:-1], self.alpha)
