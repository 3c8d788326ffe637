"""The MiniGrid game (gridworld/): env contract, policy/intrinsic shapes, one tiny run per intrinsic module."""

import os

import numpy as np
import pytest

from gridworld.env import CHANNEL_SIZES, GridEnv, make_env, state_key, validate_env_id

SMALL = "MiniGrid-DoorKey-5x5-v0"


def test_env_shapes_dtype_and_info():
    with make_env(SMALL) as env:
        obs = env.reset(seed=3)
        assert obs.shape == env.observation_shape == (3, 7, 7) and obs.dtype == np.uint8
        assert env.num_actions == 7
        for c, n in enumerate(CHANNEL_SIZES):
            assert obs[c].max() < n
        obs, reward, done, info = env.step(2)
        assert obs.shape == (3, 7, 7) and obs.dtype == np.uint8
        assert isinstance(reward, float) and isinstance(done, bool)
        assert set(info) >= {"success", "steps", "TimeLimit.truncated", "carrying", "agent_pos"}
        with pytest.raises(ValueError):
            env.step(7)


def _rollout(seed, n=60):
    rng = np.random.default_rng(0)
    out = []
    with make_env(SMALL) as env:
        out.append(env.reset(seed=seed))
        for _ in range(n):
            obs, r, done, _ = env.step(int(rng.integers(7)))
            out.append(obs)
            if done:
                out.append(env.reset())
    return np.stack(out)


def test_same_seed_same_layout_and_trajectory():
    a, b = _rollout(5), _rollout(5)
    assert np.array_equal(a, b)
    layouts = {make_env(SMALL).reset(seed=s).tobytes() for s in range(6)}
    assert len(layouts) > 1  # different seeds give different layouts


def test_an_episode_in_progress_replays_in_another_env():
    """``get_state`` / ``set_state``: another env continues the episode exactly (the same observations,
    rewards and infos), on into the next episodes, whose layouts come from the same generator state."""
    rng = np.random.default_rng(4)
    actions = rng.integers(7, size=400)
    with make_env(SMALL, state_keys=True) as a, make_env(SMALL, state_keys=True) as b:
        a.reset(seed=9)
        for action in actions[:30]:
            obs, _, done, _ = a.step(int(action))
            assert not done
        state = a.get_state()
        assert state["actions"].dtype == np.uint8 and len(state["actions"]) == 30
        b.reset(seed=1)  # another layout first: the replay must not depend on it
        np.testing.assert_array_equal(b.set_state(state), obs)
        ends = 0
        for action in actions[30:]:
            (oa, ra, da, ia), (ob, rb, db, ib) = a.step(int(action)), b.step(int(action))
            np.testing.assert_array_equal(oa, ob)
            assert (ra, da, ia) == (rb, db, ib)
            if da:
                ends += 1
                np.testing.assert_array_equal(a.reset(), b.reset())
        assert ends >= 1
        with pytest.raises(ValueError, match="cannot be replayed in MiniGrid-DoorKey-5x5-v0"):
            b.set_state({**state, "task": "MiniGrid-DoorKey-8x8-v0"})


@pytest.mark.parametrize(
    "env_id",
    [
        "MiniGrid-DoorKey-5x5-v0",
        "MiniGrid-DoorKey-8x8-v0",
        "MiniGrid-KeyCorridorS3R2-v0",
        "MiniGrid-KeyCorridorS3R3-v0",
        "MiniGrid-Empty-5x5-v0",  # sees through walls
    ],
)
def test_fast_view_equals_minigrids_own_observation(env_id):
    """gridworld.fast_view computes the partial view without building grids: equal to MiniGrid's gen_obs
    at every step of random play (doors opened, keys carried and dropped, walls off the map, every heading)."""
    import gymnasium
    from minigrid.minigrid_env import MiniGridEnv

    from gridworld.fast_view import agent_view

    env = gymnasium.make(env_id).unwrapped
    assert env.see_through_walls == env_id.startswith("MiniGrid-Empty")
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    carried, headings = 0, set()
    for _ in range(3000):
        np.testing.assert_array_equal(agent_view(env), MiniGridEnv.gen_obs(env)["image"])
        # turn and walk often, pick up / toggle / drop often enough to open doors and carry keys
        _, _, terminated, truncated, _ = env.step(int(rng.choice(7, p=[0.2, 0.2, 0.3, 0.1, 0.05, 0.15, 0.0])))
        carried += env.carrying is not None
        headings.add(env.agent_dir)
        if terminated or truncated:
            env.reset()
    assert headings == {0, 1, 2, 3}
    assert carried > 0 or env_id.startswith("MiniGrid-Empty")


def test_grid_env_uses_the_fast_view():
    env = GridEnv("MiniGrid-KeyCorridorS3R2-v0")
    assert env.unwrapped.gen_obs.func.__module__ == "gridworld.fast_view"
    env.close()


def test_episode_ends_with_time_limit_and_no_success_for_idle_agent():
    with make_env(SMALL) as env:
        env.reset(seed=0)
        done, steps = False, 0
        while not done:
            _, r, done, info = env.step(6)  # "done" action: a no-op in DoorKey
            steps += 1
        assert steps == env.unwrapped.max_steps and info["TimeLimit.truncated"] and not info["success"] and r == 0.0
        with pytest.raises(RuntimeError):
            env.step(0)


@pytest.mark.parametrize("bad", ["MiniGrid-Nope-v0", "CartPole-v1", "", 3])
def test_unknown_env_id_lists_examples(bad):
    with pytest.raises(ValueError, match="MiniGrid-DoorKey-5x5-v0"):
        validate_env_id(bad)
    with pytest.raises(ValueError):
        GridEnv(bad)


def test_bad_env_id_flag_is_rejected(capsys):
    from common.run.config import parse_config
    from gridworld.train import GridConfig

    with pytest.raises(SystemExit):
        parse_config(GridConfig, ["--env-id", "MiniGrid-Nope-v0"])
    assert "MiniGrid-DoorKey-5x5-v0" in capsys.readouterr().err


@pytest.mark.slow
def test_recording_writes_an_mp4(tmp_path):
    path = tmp_path / "ep.mp4"
    with make_env(SMALL, record_path=str(path)) as env:
        env.reset(seed=0)
        for _ in range(5):
            env.step(0)
    assert path.exists() and path.stat().st_size > 0


def test_policy_undoes_the_uint8_scaling_and_one_hot_encodes():
    import paddle

    from common.cpu import unit_floats as obs_to_tensor
    from gridworld.model import GridPolicy, OneHotCodes
    from gridworld.rnd_model import make_rnd_networks

    obs = np.stack([make_env(SMALL).reset(seed=s) for s in range(4)])
    oh = OneHotCodes()(obs_to_tensor(obs)).numpy()
    np.testing.assert_array_equal(OneHotCodes().forward_numpy(obs.astype(np.float32) / 255.0), oh)
    assert oh.shape == (4, sum(CHANNEL_SIZES), 7, 7)
    assert np.all(oh.sum(1) == 3)  # one category per channel
    assert np.all(oh[:, :11].argmax(1) == obs[:, 0])
    logits, v_ext, v_int = GridPolicy(7)(obs_to_tensor(obs))
    assert logits.shape == [4, 7] and v_ext.shape == [4] and v_int.shape == [4]
    target, predictor = make_rnd_networks(3)
    z, fmap = target.forward_with_map(paddle.randn([4, 3, 7, 7]))
    assert z.shape == [4, 128] and fmap.shape[0] == 4 and fmap.shape[2:] == [5, 5]
    assert predictor(paddle.randn([4, 3, 7, 7])).shape == [4, 128]


@pytest.mark.slow
@pytest.mark.parametrize("intrinsic", ["none", "rnd", "snd-v", "snd-std", "snd-vic"])
def test_tiny_training_run(tmp_path, intrinsic):
    from short_runs import tiny_grid_run

    from common.run.logger import read_metrics

    result = tiny_grid_run(tmp_path, intrinsic=intrinsic, eval_interval=2, run_name=intrinsic)
    assert result["update"] == 2 and os.path.exists(result["checkpoint"])
    metrics = read_metrics(result["run_dir"])
    assert "perf/steps_per_sec" in metrics and "eval/return" in metrics
    if intrinsic != "none":
        assert np.all(np.isfinite(metrics["intrinsic/raw_reward_mean"][1]))


@pytest.mark.slow
def test_play_records_the_greedy_episode(tmp_path):
    from short_runs import tiny_grid_run

    from gridworld.play import main as play_main

    ckpt = tiny_grid_run(
        tmp_path,
        intrinsic="none",
        num_processes=2,
        num_local_steps=8,
        batch_size=1,
        num_global_steps=16,
        obs_norm_steps=32,
        run_name="p",
        seed=2,
    )["checkpoint"]
    out = tmp_path / "play.mp4"
    result = play_main(["--checkpoint", ckpt, "--output", str(out), "--max-steps", "20"])
    assert out.exists() and result["steps"] <= 20 and "success" in result


def test_norm_adv_makes_the_loss_invariant_to_the_advantage_scale():
    import paddle

    from common.ppo.update import PPO
    from gridworld.model import GridPolicy

    paddle.seed(0)
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.integers(0, 3, (8, 3, 7, 7)).astype(np.uint8),
        "actions": rng.integers(0, 7, 8),
        "log_probs": np.full(8, -np.log(7), np.float32) + rng.normal(0, 0.1, 8).astype(np.float32),
        "advantages": rng.normal(0, 1, 8).astype(np.float32),
        "ret_ext": np.zeros(8, np.float32),
        "ret_int": np.zeros(8, np.float32),
    }
    ppo = PPO(GridPolicy(7), lr=1e-3, epsilon=0.2, beta=0.0, vf_coef=0.0, max_grad_norm=0.5, norm_adv=True)
    a = float(ppo.loss(batch)[0])
    b = float(ppo.loss({**batch, "advantages": batch["advantages"] * 100 + 5})[0])
    assert abs(a - b) < 1e-4
    raw = PPO(GridPolicy(7), lr=1e-3, epsilon=0.2, beta=0.0, vf_coef=0.0, max_grad_norm=0.5)
    raw.policy.set_state_dict(ppo.policy.state_dict())
    assert abs(float(raw.loss({**batch, "advantages": batch["advantages"] * 100})[0]) - a) > 1e-3


def test_full_grid_observations():
    """--observation full: the whole grid with the agent (its direction in the state channel), padded to
    7x7; view+full: the plain view, then that grid; a grid larger than 7x7 and a bad value are refused."""
    from gridworld.env import OBJECT_AGENT, full_grid
    from gridworld.train import GridConfig

    actions = np.random.default_rng(1).integers(0, 3, 40)  # turns and moves: the agent's cell and direction change
    envs = {o: GridEnv("MiniGrid-KeyCorridorS3R3-v0", observation=o) for o in ("view", "full", "view+full")}
    small = GridEnv(SMALL, observation="full")
    try:
        obs = {o: env.reset(seed=2) for o, env in envs.items()}
        seen = set()
        for a in actions:
            u = envs["full"].unwrapped
            x, y = u.agent_pos
            seen.add((x, y, u.agent_dir))
            assert obs["full"].shape == (3, 7, 7) and obs["view+full"].shape == (6, 7, 7)
            np.testing.assert_array_equal(obs["full"], full_grid(u).transpose(2, 1, 0))  # a 7x7 task: no padding
            assert obs["full"][0, y, x] == OBJECT_AGENT and obs["full"][2, y, x] == u.agent_dir
            np.testing.assert_array_equal(obs["view+full"][:3], obs["view"])
            np.testing.assert_array_equal(obs["view+full"][3:], obs["full"])
            obs = {o: env.step(int(a))[0] for o, env in envs.items()}
        assert len({d for *_, d in seen}) == 4 and len({(x, y) for x, y, _ in seen}) > 1
        grid = small.reset(seed=1)  # a 5x5 task: unseen (0) beyond its grid
        assert (grid[:, 5:] == 0).all() and (grid[:, :, 5:] == 0).all() and (grid[0, :5, :5] > 0).all()
    finally:
        for env in (*envs.values(), small):
            env.close()
    stacked = GridEnv(SMALL, frame_stack=2, observation="view+full")
    try:
        assert stacked.reset(seed=0).shape == stacked.observation_shape == (9, 7, 7)
    finally:
        stacked.close()
    with pytest.raises(ValueError, match="DoorKey-8x8-v0's grid is 8x8"):
        GridEnv("MiniGrid-DoorKey-8x8-v0", observation="full")
    with pytest.raises(ValueError, match="--observation 'view\\+full' is invalid: expected view for Mini.*8x8"):
        GridConfig(observation="view+full", env_id="MiniGrid-DoorKey-8x8-v0").validate()
    with pytest.raises(ValueError, match="observation must be one of view, full, view\\+full, got 'grid'"):
        GridEnv(SMALL, observation="grid")


def test_with_view_and_full_grid_the_policy_reads_the_view_and_the_module_the_grid():
    """view+full: the policy's output does not depend on the grid channels, the intrinsic module's reward
    only on them; with full, the policy tells the agent's four directions apart; the picture draws the
    agent where the grid has it."""
    from common.cpu import unit_floats
    from common.intrinsic import intrinsic_for_run
    from gridworld.model import OneHotCodes
    from gridworld.pictures import view_picture
    from gridworld.train import SPEC, GridConfig, make_policy

    cfg = GridConfig(observation="view+full", intrinsic="rnd", env_id="MiniGrid-KeyCorridorS3R3-v0")
    shape, actions = SPEC.spaces(cfg)
    assert shape == (6, 7, 7)
    with GridEnv(cfg.env_id, observation="view+full") as env:
        obs = np.stack([env.reset(seed=s) for s in range(6)])
    other_grid, other_view = obs.copy(), obs.copy()
    other_grid[:, 3:] = obs[::-1, 3:]
    other_view[:, :3] = obs[::-1, :3]
    assert not np.array_equal(obs[:, 3:], other_grid[:, 3:]) and not np.array_equal(obs[:, :3], other_view[:, :3])
    policy = make_policy(cfg, shape, actions)
    out, same_view = policy(unit_floats(obs)), policy(unit_floats(other_grid))
    for a, b in zip(out, same_view):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(out[0].numpy(), policy(unit_floats(other_view))[0].numpy())
    module = intrinsic_for_run(SPEC, cfg, shape)
    module.observe(obs)
    np.testing.assert_array_equal(module.reward(obs), module.reward(other_view))
    assert not np.allclose(module.reward(obs), module.reward(other_grid))

    # the SND authors' input scale divides by each channel's largest code: the grid's direction (3) too
    authors = GridConfig(observation="view+full", intrinsic="snd-vic", int_reward="snd", int_first_visit=False)
    scaled = intrinsic_for_run(SPEC, authors, shape).normalize(obs).numpy()
    assert scaled.max() == 1.0 and np.isclose(scaled[:, 2].max(), obs[:, 5].max() / 3)

    # one largest code per observation channel, the grid's last (the module takes its last channels)
    from gridworld.train import obs_value_max

    assert obs_value_max(GridConfig()) == (10.0, 5.0, 2.0)
    assert obs_value_max(GridConfig(observation="view+full", frame_stack=2)) == (10.0, 5.0, 2.0) * 2 + (10.0, 5.0, 3.0)

    sizes = make_policy(GridConfig(observation="full"), (3, 7, 7), 7).channel_sizes
    codes = np.zeros((4, 3, 7, 7), np.uint8)
    codes[:, 0, 2, 2], codes[:, 2, 2, 2] = 10, np.arange(4)  # the agent facing each of its four ways
    hot = OneHotCodes(sizes).forward_numpy(codes / 255.0)
    assert len({hot[i].tobytes() for i in range(4)}) == 4
    picture = view_picture(obs[0])  # the agent's tile holds its red triangle
    y, x = np.argwhere(obs[0, 3] == 10)[0]
    tile = picture[16 * y : 16 * (y + 1), 16 * x : 16 * (x + 1)]
    fy, fx = np.argwhere(obs[0, 3] == 1)[0]  # an empty floor cell
    floor = picture[16 * fy : 16 * (fy + 1), 16 * fx : 16 * (fx + 1)]
    assert (tile[..., 0].astype(int) - tile[..., 1]).max() > 100 >= (floor[..., 0].astype(int) - floor[..., 1]).max()


def test_config_flags_have_help_and_round_trip():
    import dataclasses

    from common.run.config import parse_config
    from gridworld.train import GridConfig

    cfg = parse_config(GridConfig, ["--env-id", "MiniGrid-DoorKey-8x8-v0", "--no-norm-adv", "--snd-max-pairs", "64"])
    assert cfg.env_id == "MiniGrid-DoorKey-8x8-v0" and not cfg.norm_adv and cfg.snd_max_pairs == 64
    assert GridConfig.from_dict(cfg.to_dict()) == cfg
    from common.run.config import field_meta

    assert all(field_meta(GridConfig, f.name).get("help") for f in dataclasses.fields(GridConfig))


def test_state_keys_tell_apart_what_the_view_cannot():
    """``info['state_key']`` keys the whole grid with the agent: the same state gives the same key, in any
    process; turning changes it; two cells whose 7x7 views are equal (an empty room's middle) differ."""
    env = GridEnv("MiniGrid-Empty-8x8-v0", state_keys=True)
    try:
        obs = env.reset(seed=0)
        _, _, _, turned = env.step(0)  # left
        _, _, _, back = env.step(1)  # right: the start state again
        assert turned["prev_state_key"] != turned["state_key"] == back["prev_state_key"]
        assert back["state_key"] == turned["prev_state_key"]
        _, _, _, ahead = env.step(2)  # forward one cell: the wall is one cell nearer, the view changes
        seen = {}
        u = env.unwrapped
        for x in range(1, 7):  # every cell and direction of the room: a view can repeat, a state key cannot
            for d in range(4):
                u.agent_pos, u.agent_dir = np.array([x, 3]), d
                seen.setdefault(state_key(u), (x, d))
        assert len(seen) == 6 * 4 and isinstance(ahead["state_key"], int)
        plain = GridEnv("MiniGrid-Empty-8x8-v0")
        plain.reset(seed=0)
        assert "state_key" not in plain.step(0)[3]  # computed only when asked for
        plain.close()
        assert state_key(u) == subprocess_state_key("MiniGrid-Empty-8x8-v0", 0, (6, 3), 3)  # not salted per process
    finally:
        env.close()
    assert obs.shape == (3, 7, 7)


def subprocess_state_key(env_id, seed, pos, direction):
    import subprocess
    import sys

    code = (
        "import numpy as np; from gridworld.env import GridEnv, state_key\n"
        f"e = GridEnv({env_id!r}); e.reset(seed={seed}); u = e.unwrapped\n"
        f"u.agent_pos, u.agent_dir = np.array({list(pos)}), {direction}; print(state_key(u))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_frame_stack_keeps_the_newest_view_last():
    env = GridEnv("MiniGrid-DoorKey-5x5-v0", frame_stack=3)
    try:
        first = env.reset(seed=1)
        assert first.shape == (9, 7, 7) and env.observation_shape == (9, 7, 7)
        assert (first[:3] == first[6:]).all() and (first[3:6] == first[6:]).all()  # the first view everywhere
        obs, _, _, _ = env.step(0)
        plain = GridEnv("MiniGrid-DoorKey-5x5-v0")
        plain.reset(seed=1)
        view, _, _, _ = plain.step(0)
        plain.close()
        np.testing.assert_array_equal(obs[6:], view)
        np.testing.assert_array_equal(obs[:6], first[3:])
    finally:
        env.close()
    with pytest.raises(ValueError, match="frame_stack"):
        GridEnv("MiniGrid-DoorKey-5x5-v0", frame_stack=0)


@pytest.mark.slow
def test_state_gate_episodic_return_and_a_memory_train(tmp_path):
    """The E3B ablation's switches in one tiny real run: the full-state gate, the episodic intrinsic
    return, a 4-view memory; and a game without state keys refuses the state gate by name."""
    from common.ppo.trainer import Trainer
    from common.run.errors import UsageError
    from gridworld.train import SPEC as GRID
    from gridworld.train import GridConfig
    from mario.train import SPEC, MarioConfig

    cfg = GridConfig(
        intrinsic="e3b", first_visit_key="state", int_episodic=True, frame_stack=4, int_coef=0.1,
        num_processes=4, num_local_steps=16, batch_size=2, num_epochs=1, num_global_steps=128, obs_norm_steps=2,
        eval_interval=0, video_interval=0, save_interval=0, log_path=str(tmp_path), run_name="ablation", seed=1,
    )  # fmt: skip
    trainer = Trainer(GRID, cfg)
    assert trainer.obs_shape == (12, 7, 7)
    assert trainer.train()["update"] == 2
    prev_keys, next_keys = trainer.buffer.state_keys  # the gate read the grid's state keys
    assert (prev_keys != 0).all() and (next_keys != 0).all() and (prev_keys[1:] == next_keys[:-1]).mean() > 0.9

    with pytest.raises(UsageError, match="--first-visit-key state is invalid for mario"):
        Trainer(SPEC, MarioConfig(first_visit_key="state", log_path=str(tmp_path), run_name="m"))


@pytest.mark.slow
def test_bootstrap_truncated_values_the_terminal_frames_of_time_limits(tmp_path, monkeypatch):
    """--bootstrap-truncated on a real run whose episodes hit a 10-step limit: the trainer asks the
    policy for the values of exactly the rollout's truncated terminal frames (and without the flag, never)."""
    from short_runs import tiny_grid_run

    from common.ppo.actor import Actor
    from common.ppo.buffer import RolloutBuffer
    from gridworld.env import GridEnv

    built = GridEnv.__init__

    def short_episodes(self, *args, **kwargs):
        built(self, *args, **kwargs)
        self.unwrapped.max_steps = 10

    monkeypatch.setattr(GridEnv, "__init__", short_episodes)
    asked, truncations = [], []
    values, compute = Actor.values, RolloutBuffer.compute_returns_and_advantages

    def spy_values(self, obs):
        asked.append(len(obs))
        return values(self, obs)

    def spy_compute(self, *args, **kwargs):
        truncations.append(int(self.truncated.sum()))
        return compute(self, *args, **kwargs)

    monkeypatch.setattr(Actor, "values", spy_values)
    monkeypatch.setattr(RolloutBuffer, "compute_returns_and_advantages", spy_compute)
    tiny_grid_run(tmp_path, intrinsic="none", bootstrap_truncated=True, run_name="boot")
    # 4 envs x 16 steps with 10-step episodes: each update, the last values (4) and the truncated frames
    assert len(truncations) == 2 and all(k > 0 for k in truncations)
    assert sorted(asked) == sorted([4, 4] + truncations)
    asked.clear()
    tiny_grid_run(tmp_path, intrinsic="none", run_name="plain")
    assert asked == [4, 4]  # the last values of each update alone
