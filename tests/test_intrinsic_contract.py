"""Every registered intrinsic module through one contract, a toy one defined here included: it registers
with ``@register`` alone and is then a ``--intrinsic`` choice, built by name, like the built-in ones (a
new file in the package is found with no edit elsewhere).

The contract: shapes and dtypes of the rewards and features, finite rewards and losses, the state
round trip through the checkpoint format (the restored module pays and learns exactly as the saved
one), determinism for a seed, and the hooks data-parallel training uses (``rng``, ``grad_sync``,
``normalizers()``, ``networks()``)."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

from common.intrinsic import make_intrinsic, names, register, registered
from common.intrinsic.base import IntrinsicModule
from common.intrinsic.normalize import RunningMeanStd
from common.ppo.buffer import RolloutBuffer
from common.run import tensorfile
from gridworld.rnd_model import make_rnd_networks

OBS = (3, 7, 7)  # MiniGrid's symbolic view: the cheapest game to build every module for
T, N, ACTIONS = 6, 2, 7


class ToyMean(IntrinsicModule):
    """A whole module in a few lines: pays the mean of the newest frame, learns nothing."""

    summary = "a test's toy: the mean of the frame"

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, settings):
        return cls()

    def observe(self, obs):
        pass

    def reward(self, obs):
        return obs[:, -1].reshape(len(obs), -1).mean(axis=1).astype(np.float32) / 255.0

    def update(self, batch):
        return {}

    def features(self, obs):
        return obs[:, -1].reshape(len(obs), -1).astype(np.float32)

    def state_dict(self):
        return {"name": self.name}

    def set_state_dict(self, state):
        if state.get("name") != self.name:
            raise ValueError("another module's state")


@pytest.fixture(scope="module", autouse=True)
def toy():
    from common.intrinsic import registry

    register("toy-mean")(ToyMean)  # the only edit a new method needs
    yield
    registry._REGISTRY.pop("toy-mean", None)


def build(name, seed=0):
    paddle.seed(seed)
    return make_intrinsic(
        name, make_rnd_networks, OBS, 3, lr=1e-3, update_proportion=0.5, max_grad_norm=0.5, seed=seed,
        max_pairs=16, target_proportion=1.0, value_max=(10.0, 5.0, 2.0), num_actions=ACTIONS,
    )  # fmt: skip


def rollout(seed=0) -> RolloutBuffer:
    rng = np.random.default_rng(seed)
    buf = RolloutBuffer(T, N, OBS)
    buf.start(rng.integers(0, 6, size=(N, *OBS), dtype=np.uint8))
    for t in range(T):
        dones = np.array([t == 3, False], np.float32)
        nxt = rng.integers(0, 6, size=(N, *OBS), dtype=np.uint8)
        infos = [{"final_observation": nxt[0] + 1} if d else {} for d in dones]
        zeros = np.zeros(N, np.float32)
        buf.add(rng.integers(0, ACTIONS, size=N), zeros, zeros, zeros, zeros, dones, nxt, infos)
    buf.compute_returns_and_advantages(0.0, 0.0, 0.99, 0.95, 0.99, 1.0, 1.0)
    return buf


def exercise(module, seed=0):
    """Rewards, features and one update of ``module`` on a fixed rollout."""
    buf = rollout(seed)
    module.observe(buf.obs[0])
    raw = module.rollout_reward(buf.obs, buf.next_obs_for_reward(), buf.actions, buf.dones)
    batch = next(buf.minibatches(1, np.random.default_rng(seed)))
    losses = module.update(batch)
    reward = module.reward(buf.obs[1]) if module.scores_states else raw[0]  # ICM, E3B: transitions only
    return raw, reward, module.features(buf.obs[1]), losses


def test_a_module_registered_anywhere_is_a_choice_of_the_command_line():
    from common.run.config import parse_config
    from gridworld.train import GridConfig

    assert "toy-mean" in names() and names()[0] == "none"
    assert parse_config(GridConfig, ["--intrinsic", "toy-mean"]).intrinsic == "toy-mean"
    assert isinstance(build("toy-mean"), ToyMean)
    with pytest.raises(ValueError, match="registered twice"):
        register("toy-mean")(type("Other", (ToyMean,), {}))


def test_a_new_file_in_the_package_registers_with_no_edit_elsewhere(tmp_path, monkeypatch):
    import sys

    import common.intrinsic
    from common.intrinsic import registry

    # a folder on the package's search path stands for common/intrinsic/: the repository stays untouched
    (tmp_path / "toy_file.py").write_text(
        "from common.intrinsic.base import IntrinsicModule\n"
        "from common.intrinsic.registry import register\n\n\n"
        '@register("toy-file")\n'
        "class ToyFile(IntrinsicModule):\n"
        '    summary = "a file dropped into the package"\n\n'
        "    @classmethod\n"
        "    def from_run(cls, make_networks, obs_shape, input_channels, settings):\n"
        "        return cls()\n"
    )
    monkeypatch.setattr(common.intrinsic, "__path__", [*common.intrinsic.__path__, str(tmp_path)])
    try:
        assert "common.intrinsic.toy_file" in registry._package_modules()
        assert names()[-1] == "toy-file" and names()[0] == "none"  # the built-in order stays first
        assert type(build("toy-file")).__name__ == "ToyFile"
    finally:
        registry._REGISTRY.pop("toy-file", None)
        sys.modules.pop("common.intrinsic.toy_file", None)


@pytest.mark.parametrize("name", sorted(registered()) + ["toy-mean"])
def test_every_module_keeps_the_contract(name):
    module = build(name)
    raw, reward, features, losses = exercise(module)
    assert raw.shape == (T, N) and raw.dtype == np.float32 and np.isfinite(raw).all() and (raw >= 0).all()
    assert reward.shape == (N,) and reward.dtype == np.float32 and np.isfinite(reward).all()
    assert features.ndim == 2 and len(features) == N and features.dtype == np.float32
    assert isinstance(losses, dict) and all(type(v) is float and np.isfinite(v) for v in losses.values())

    # the checkpoint's format holds the state, and the restored module pays and learns as the saved one
    saved = tensorfile.loads(tensorfile.dumps({"state": module.state_dict()}))["state"]
    twin = build(name, seed=5)
    twin.set_state_dict(saved)
    module.reset_episodes()  # an episodic memory (E3B's) is not state: it starts empty after a resume
    ahead = exercise(module, seed=1)
    again = exercise(twin, seed=1)
    np.testing.assert_allclose(again[0], ahead[0], rtol=1e-5, atol=1e-6)
    assert again[3] == pytest.approx(ahead[3], rel=1e-5)

    # one seed, one result
    a, b = exercise(build(name, seed=3)), exercise(build(name, seed=3))
    np.testing.assert_array_equal(a[0], b[0])
    assert a[3] == b[3]

    # what data-parallel ranks attach to (common.run.distributed.World.attach): declared, never probed
    assert module.rng is None or isinstance(module.rng, np.random.Generator)
    assert callable(module.grad_sync)
    assert all(isinstance(r, RunningMeanStd) for r in module.normalizers())
    assert all(isinstance(layer, paddle.nn.Layer) for layer in module.networks())
    module.reset_episodes()
