"""Episodes that survive a resume: the envs' episodes in progress at the last completed update are
saved with its checkpoint, and a resumed run continues them instead of starting new ones.

Without this a resume drops every episode in flight, and for a while only episodes shorter than
the steps since the resume can end, which biases whatever is measured per episode (Montezuma's
episodes run to 4,500 steps: docs/montezuma.md, "Correction"). It needs envs whose game can
say its episode (``GameEnv.get_state``: Montezuma, Mario, MiniGrid); otherwise a resumed run starts
new episodes, as before. The first-visit gate's memory of those episodes (``FirstVisitGate``) is kept
with them, so that a continued episode's revisits stay unpaid. In a data-parallel run every rank's
are gathered (rank order) into rank 0's checkpoint, and each rank continues its own share of them;
so is what else each rank holds for itself (``rank_state``: its envs' intrinsic-return filter and
its random streams, where the checkpoint's ``int_filter`` and ``rng`` are rank 0's), so that a run
resumed on as many ranks repeats the unbroken one.
"""

from __future__ import annotations

import math

import numpy as np
from tqdm import tqdm

from common.envs.contract import EnvWorkerError
from common.intrinsic.normalize import keys_or_none


class EpisodeKeeper:
    """Holds the envs' state at the last completed update (``mark``) for its checkpoint (``entry``),
    and puts a resumed run's envs back there (``start``). A loaded checkpoint's state counts as the
    current one until a ``mark`` replaces it, so that a resume that fails before its first ``mark``
    saves the file's episodes again rather than none; a state is never kept for a later update."""

    def __init__(self, world, scale, streams):
        """``world``: the run's ``World`` (its ranks); ``scale``: its ``IntrinsicRewardScale`` (the first-visit
        gate's memory goes with the episodes); ``streams()``: the rank's own random generators (or None)."""
        self.enabled = True  # until a get_state answers None
        self.world, self.scale, self.streams = world, scale, streams
        self.update: int | None = None  # the update the state below belongs to
        self.at_update: list | None = None  # VecEnv.get_state() after the last completed update
        self.gate_at_update: list | None = None  # and the gate's memory of those episodes
        self.ranks_at_update: list | None = None  # every rank's own state (_rank_state), with ranks > 1
        self.resuming = False  # the state above is a loaded checkpoint's, until start puts it back

    def load(self, state: dict) -> None:
        """Keep a checkpoint's ``env_state`` (checked: one dict per env with its episode's return and length),
        ``gate_memory`` and ``rank_state``, to restore at ``start`` and, until a ``mark``, to save again."""
        ranks, saved, gate = state.get("rank_state"), state.get("env_state"), state.get("gate_memory")
        n = len(self.scale.filter.rewems)
        if ranks is not None and not (isinstance(ranks, list) and all(_is_rank_state(r, n) for r in ranks)):
            raise ValueError(f"rank_state is not a list of {{'filter': float64[{n}], 'rngs': generator states}}")
        if saved is not None and not (isinstance(saved, list) and all(map(_is_env_state, saved))):
            raise ValueError("env_state is not a list of {'env': dict, 'return': number, 'length': int >= 0}")
        if gate is not None and not (isinstance(gate, list) and all(map(keys_or_none, gate))):
            raise ValueError("gate_memory is not a list of int64[k] arrays or None")
        self.update = int(state["update"])
        self.at_update, self.gate_at_update, self.ranks_at_update = saved, gate, ranks
        self.resuming = True

    def _rank_state(self) -> dict:
        """What this rank holds for itself: its envs' intrinsic-return filter and its random streams."""
        rngs = [None if g is None else g.bit_generator.state for g in self.streams()]
        return {"filter": self.scale.filter.rewems.copy(), "rngs": rngs}

    def _restore_rank(self, own: dict) -> None:
        self.scale.filter.set_state_dict({**self.scale.filter.state_dict(), "rewems": own["filter"]})
        for g, state in zip(self.streams(), own["rngs"]):
            if g is not None and state is not None:
                g.bit_generator.state = state

    def start(self, envs, remake):
        """``(envs, first observations)``: the loaded checkpoint's episodes where they can be continued,
        else new ones (said why); ``remake()`` builds new envs when a failed replay left ``envs`` unusable.
        Called once the rank's streams are its own (``common.ppo.replica``): they are set back here too."""
        resuming, self.resuming = self.resuming, False
        saved, gate, ranks = (self.at_update, self.gate_at_update, self.ranks_at_update) if resuming else (None,) * 3
        if ranks is not None and len(ranks) == self.world.size:  # (on another number of ranks: rank 0's, as documented)
            self._restore_rank(ranks[self.world.rank])
        if saved is None:
            return envs, envs.reset()
        n, rank, ranks = envs.num_envs, self.world.rank, self.world.size
        why = (
            f"are of {len(saved)} envs, not {n * ranks}" if len(saved) != n * ranks
            else f"cannot be given to {type(envs).__name__}" if not envs.can_restore
            else ""
        )  # fmt: skip
        if not why:
            try:
                obs = envs.set_state(saved[rank * n : (rank + 1) * n])  # this rank's share
                tqdm.write(f"continuing the checkpoint's {n} episodes in progress (replayed)")
                self._restore_gate(gate, rank * n, n, n * ranks)
                return envs, obs
            except (EnvWorkerError, ValueError, TypeError, OverflowError) as e:
                envs.close()
                envs = remake()
                why = f"could not be replayed ({str(e).strip().splitlines()[-1]})"
        tqdm.write(f"new episodes: the checkpoint's episodes in progress {why}")
        return envs, envs.reset()

    def _restore_gate(self, gate: list | None, first: int, n: int, total: int) -> None:
        """The gate's memory of this rank's ``n`` envs from ``first`` on, out of the checkpoint's ``total``."""
        try:
            if gate is not None and len(gate) != total:
                raise ValueError(f"it holds {len(gate)} envs' keys, not {total}")
            self.scale.set_episode_state(None if gate is None else gate[first : first + n])
        except ValueError as e:
            tqdm.write(f"the first-visit gate starts the continued episodes with an empty memory: {e}")

    def mark(self, envs, update: int) -> None:
        """After update ``update`` (or at the start, or after a completed warm-up): what a checkpoint of it
        holds (None where the envs cannot say). Should it fail, a state of an earlier update is not kept."""
        if update != self.update:
            self.at_update = self.gate_at_update = self.ranks_at_update = None
            self.update = update
        mine = envs.get_state() if self.enabled else None
        gate = self.scale.episode_state() if mine is not None else None
        ranks = self.world.size > 1
        parts = self.world.gather_objects([(mine, gate, self._rank_state() if ranks else None)])
        self.enabled = all(p is not None for p, _, _ in parts)  # a game that cannot say it is not asked again
        gates = [g for _, g, _ in parts]  # every rank's, in rank order (one process: its own)
        self.at_update = [s for p, _, _ in parts for s in p] if self.enabled else None
        self.gate_at_update = [keys for g in gates for keys in g] if self.enabled and None not in gates else None
        self.ranks_at_update = [r for _, _, r in parts] if ranks else None

    def entry(self) -> dict:
        """The checkpoint's ``env_state``, ``gate_memory`` and ``rank_state`` entries (those it has)."""
        entry = {} if self.ranks_at_update is None else {"rank_state": self.ranks_at_update}
        if self.at_update is not None:
            entry["env_state"] = self.at_update
            if self.gate_at_update is not None:
                entry["gate_memory"] = self.gate_at_update
        return entry


def _is_rank_state(r, n: int) -> bool:
    filt = r.get("filter") if isinstance(r, dict) else None
    ok = isinstance(filt, np.ndarray) and filt.dtype == np.float64 and filt.shape == (n,) and np.isfinite(filt).all()
    return ok and isinstance(r.get("rngs"), list) and all(g is None or _is_generator_state(g) for g in r["rngs"])


def _is_generator_state(state) -> bool:
    try:  # numpy checks it (a PCG64 state: two ints and flags)
        np.random.PCG64().state = state
    except (ValueError, TypeError, KeyError, OverflowError):
        return False
    return True


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
