"""common/ppo/episodes.py's EpisodeKeeper on its own: what a checkpoint holds when a mark or a resume fails
(the trainer-level tests of exact resumes are in tests/test_trainer.py and tests/test_distributed.py)."""

import numpy as np
import pytest

from common.intrinsic.normalize import IntrinsicRewardScale
from common.ppo.episodes import EpisodeKeeper


class Envs:
    """Two envs whose episodes are their step counts; ``get_state`` raises once ``broken``."""

    num_envs, can_restore = 2, True

    def __init__(self):
        self.steps, self.broken = 0, False

    def get_state(self):
        if self.broken:
            raise RuntimeError("the worker is gone")
        return [{"env": {"t": np.array(self.steps)}, "return": 0.0, "length": self.steps} for _ in range(2)]


class World:
    """``ranks`` ranks that all hold what rank 0 holds; the gather raises once ``lost``."""

    def __init__(self, ranks=1):
        self.size, self.rank, self.lost = ranks, 0, False

    def gather_objects(self, items):
        if self.lost:
            raise RuntimeError("the collective operation 'gather' failed")
        return list(items) * self.size


def keeper(world):
    scale = IntrinsicRewardScale(0.99, 2, first_visit=True)
    scale.gate.gate_rollout(np.zeros((1, 2, 1)), np.ones((1, 2, 1)), np.zeros((1, 2)))  # a memory to keep
    rng = np.random.default_rng(0)
    return EpisodeKeeper(world, scale, lambda: (rng, None))


def test_a_mark_that_fails_after_an_update_keeps_nothing_of_the_update_before():
    world, envs = World(ranks=2), Envs()
    k = keeper(world)
    envs.steps = 16
    k.mark(envs, 1)
    assert set(k.entry()) == {"env_state", "gate_memory", "rank_state"} and len(k.entry()["env_state"]) == 4
    envs.steps, world.lost = 32, True  # update 2's gather fails: its checkpoint must not hold update 1's state
    with pytest.raises(RuntimeError):
        k.mark(envs, 2)
    assert k.entry() == {}


def test_a_resume_that_fails_before_its_first_mark_saves_the_files_state_again():
    envs = Envs()
    envs.steps = 7
    original = keeper(World())
    original.mark(envs, 5)
    state = {"update": 5, **original.entry()}
    resumed = keeper(World())
    resumed.load(state)
    envs.broken = True
    with pytest.raises(RuntimeError):  # e.g. the envs of the resumed run fail before the first update
        resumed.mark(envs, 5)
    assert resumed.entry()["env_state"] is state["env_state"]
    assert resumed.entry()["gate_memory"] is state["gate_memory"]
    with pytest.raises(RuntimeError):  # after an update, though, the file's state is that of an older one
        resumed.mark(envs, 6)
    assert resumed.entry() == {}
