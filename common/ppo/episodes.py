"""Episodes that survive a resume: the envs' episodes in progress at the last completed update are
saved with its checkpoint, and a resumed run continues them instead of starting new ones.

Without this a resume drops every episode in flight, and for a while only episodes shorter than
the steps since the resume can end, which biases whatever is measured per episode (Montezuma's
episodes run to 4,500 steps: docs/montezuma.md, "Correction"). It needs envs whose game can
say its episode (``GameEnv.get_state``: Montezuma, Mario, MiniGrid) and one process (a data-parallel
run's ranks would all read rank 0's episodes); otherwise a resumed run starts new episodes, as before.
The first-visit gate's memory of those episodes (``FirstVisitGate``) is kept with them, so that a
continued episode's revisits stay unpaid.
"""

from __future__ import annotations

import math

from tqdm import tqdm

from common.envs.contract import EnvWorkerError
from common.intrinsic.normalize import keys_or_none


class EpisodeKeeper:
    """Holds the envs' state at the last completed update (``mark``) for its checkpoint (``entry``),
    and puts a resumed run's envs back there (``start``)."""

    def __init__(self, world_size: int, scale):
        """``scale``: the run's ``IntrinsicRewardScale`` (its first-visit gate's memory goes with the episodes)."""
        self.enabled = world_size == 1  # and, after a get_state that answered None, False
        self.scale = scale
        self.at_update: list | None = None  # VecEnv.get_state() after the last completed update
        self.gate_at_update: list | None = None  # and the gate's memory of those episodes
        self.to_restore: list | None = None  # a loaded checkpoint's, until the envs exist
        self.gate_to_restore: list | None = None

    def load(self, state: dict) -> None:
        """Keep a checkpoint's ``env_state`` (checked: one dict per env with its episode's return and length)
        and ``gate_memory``."""
        saved = state.get("env_state")
        if saved is None:
            return
        if not isinstance(saved, list) or not all(_is_env_state(s) for s in saved):
            raise ValueError("env_state is not a list of {'env': dict, 'return': number, 'length': int >= 0}")
        gate = state.get("gate_memory")
        if gate is not None and not (isinstance(gate, list) and all(map(keys_or_none, gate))):
            raise ValueError("gate_memory is not a list of int64[k] arrays or None")
        self.to_restore, self.gate_to_restore = saved, gate

    def start(self, envs, remake):
        """``(envs, first observations)``: the loaded checkpoint's episodes where they can be continued,
        else new ones (said why); ``remake()`` builds new envs when a failed replay left ``envs`` unusable."""
        saved, self.to_restore = self.to_restore, None
        if saved is None:
            return envs, envs.reset()
        why = (
            "need one process" if not self.enabled
            else f"are of {len(saved)} envs, not {envs.num_envs}" if len(saved) != envs.num_envs
            else f"cannot be given to {type(envs).__name__}" if not envs.can_restore
            else ""
        )  # fmt: skip
        if not why:
            self.at_update = saved  # should the start fail, the checkpoint it saves still holds them
            try:
                obs = envs.set_state(saved)
                tqdm.write(f"continuing the checkpoint's {len(saved)} episodes in progress (replayed)")
                self._restore_gate()
                return envs, obs
            except (EnvWorkerError, ValueError, TypeError, OverflowError) as e:
                self.at_update = None
                envs.close()
                envs = remake()
                why = f"could not be replayed ({str(e).strip().splitlines()[-1]})"
        tqdm.write(f"new episodes: the checkpoint's episodes in progress {why}")
        return envs, envs.reset()

    def _restore_gate(self) -> None:
        gate, self.gate_to_restore = self.gate_to_restore, None
        self.gate_at_update = gate
        try:
            self.scale.set_episode_state(gate)
        except ValueError as e:
            self.gate_at_update = None
            tqdm.write(f"the first-visit gate starts the continued episodes with an empty memory: {e}")

    def mark(self, envs) -> None:
        """After an update (or the start, or a completed warm-up): what a checkpoint of it holds (None
        where the envs cannot say)."""
        self.at_update = self.gate_at_update = None  # never a state of another update, should get_state fail
        if self.enabled:
            self.at_update = envs.get_state()
            self.enabled = self.at_update is not None  # a game that cannot say it is not asked again
            self.gate_at_update = self.scale.episode_state() if self.enabled else None

    def entry(self) -> dict:
        """The checkpoint's ``env_state`` and ``gate_memory`` entries (empty when there is nothing to continue)."""
        if self.at_update is None:
            return {}
        gate = {} if self.gate_at_update is None else {"gate_memory": self.gate_at_update}
        return {"env_state": self.at_update, **gate}


def _is_env_state(s) -> bool:
    return (
        isinstance(s, dict)
        and isinstance(s.get("env"), dict)
        and isinstance(s.get("return"), (int, float))
        and not isinstance(s["return"], bool)
        and math.isfinite(s["return"])
        and isinstance(s.get("length"), int)
        and not isinstance(s["length"], bool)
        and 0 <= s["length"] < 2**31
    )
