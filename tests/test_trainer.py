"""The shared trainer on the real Mario emulator: resume, seeds, NaN guard, bad checkpoints, bad flags."""

import dataclasses
import json
import warnings

import numpy as np
import paddle
import pytest

from common.ppo.trainer import NonFiniteLossError, Trainer
from common.run.checkpoint import CheckpointError, load_checkpoint
from common.run.config import parse_config
from common.run.runtime import code_commit
from gridworld.train import SPEC as GRID
from gridworld.train import GridConfig
from mario.train import SPEC as MARIO
from mario.train import MarioConfig
from montezuma.train import SPEC as MONTEZUMA
from montezuma.train import MontezumaConfig

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers


def tiny(tmp_path, **kw):
    base = dict(
        world=1,
        stage=1,
        num_processes=2,
        num_workers=-1,
        num_local_steps=16,
        batch_size=2,
        num_epochs=1,
        num_global_steps=32,
        obs_norm_steps=2,
        eval_interval=0,
        video_interval=0,
        save_interval=1,
        histogram_interval=0,
        embedding_interval=0,
        log_path=str(tmp_path),
        run_name="a",
    )
    base.update(kw)
    return MarioConfig(**base)


def params(layer):
    return [p.numpy().copy() for p in layer.parameters()]


def fill_fixed_rollout(trainer, seed=123):
    """Identical synthetic rollout content for two trainers (so that the update alone is compared)."""
    rng = np.random.default_rng(seed)
    buf = trainer.buffer
    buf.obs[:] = rng.integers(0, 255, size=buf.obs.shape, dtype=np.uint8)
    buf.actions[:] = rng.integers(0, trainer.num_actions, size=buf.actions.shape)
    buf.log_probs[:] = -np.log(trainer.num_actions)
    buf.rewards_ext[:] = rng.normal(size=buf.rewards_ext.shape)
    buf.dones[:] = 0
    buf.values_ext[:] = rng.normal(size=buf.values_ext.shape)
    buf.values_int[:] = rng.normal(size=buf.values_int.shape)
    buf.terminal_obs = {}
    trainer.intrinsic_rewards()
    buf.compute_returns_and_advantages(np.zeros(2), np.zeros(2), 0.9, 1.0, 0.99, 1.0, 0.5)


def test_resume_gives_the_same_next_update_as_an_uninterrupted_run(tmp_path, capsys):
    a = Trainer(MARIO, tiny(tmp_path, num_global_steps=64))
    result = a.train()
    assert result["update"] == 2 and result["checkpoint"].endswith("mario_1_1_2.pdparams")
    capsys.readouterr()
    b = Trainer(MARIO, tiny(tmp_path, run_name="b", resume=result["checkpoint"]))
    said = [line for line in capsys.readouterr().out.splitlines() if "settings other than its run's" in line]
    # named; its folder and --resume are not settings it learns with
    assert len(said) == 1 and said[0].endswith("settings other than its run's: --num-global-steps 64 -> 32")
    assert (b.update, b.global_step) == (2, 64)
    assert b.folder.commits == load_checkpoint(result["checkpoint"])["code_commits"] == [code_commit()]
    for t in (a, b):
        fill_fixed_rollout(t)
        t.learn()
    for pa, pb in zip(
        params(a.policy) + params(a.intrinsic.predictor), params(b.policy) + params(b.intrinsic.predictor)
    ):
        np.testing.assert_array_equal(pa, pb)
    np.testing.assert_array_equal(a.buffer.rewards_int, b.buffer.rewards_int)  # normalizers and filter restored
    b.close()


def tiny_montezuma(tmp_path, **kw):
    base = dict(
        num_processes=2, num_workers=-1, num_local_steps=16, batch_size=2, num_epochs=1, num_global_steps=96,
        obs_norm_steps=2, eval_interval=0, video_interval=0, save_interval=1, histogram_interval=0,
        embedding_interval=0, picture_interval=0, log_path=str(tmp_path), run_name="a",
    )  # fmt: skip
    base.update(kw)
    return MontezumaConfig(**base)


def tiny_gridworld(tmp_path, **kw):
    base = dict(
        num_processes=2, num_local_steps=16, batch_size=2, num_epochs=1, num_global_steps=96, obs_norm_steps=2,
        eval_interval=0, video_interval=0, save_interval=1, histogram_interval=0, picture_interval=0,
        log_path=str(tmp_path), run_name="a",
    )  # fmt: skip
    base.update(kw)
    return GridConfig(**base)


RESUMABLE = {  # game -> (spec, a tiny config of 3 updates)
    "montezuma": (MONTEZUMA, tiny_montezuma),
    "mario": (MARIO, lambda tmp_path, **kw: tiny(tmp_path, num_global_steps=96, **kw)),
    "gridworld": (GRID, tiny_gridworld),  # with its first-visit gate, whose memory must carry over too
}


@pytest.mark.parametrize(
    "game, workers",
    [("montezuma", -1), ("montezuma", 1), ("mario", -1), ("gridworld", -1)],
    ids=["montezuma", "worker process", "mario", "gridworld"],
)
def test_a_resumed_run_continues_its_episodes_and_repeats_the_unbroken_run(tmp_path, game, workers):
    """The checkpoint holds the envs' episodes in progress (each game's replay them) and the first-visit
    gate's memory of them, so a run stopped inside its second rollout and resumed ends where the unbroken
    run ends, weights and episodes alike."""
    spec, config = RESUMABLE[game]
    unbroken = Trainer(spec, config(tmp_path, num_workers=workers))
    unbroken.train()
    # no periodic checkpoint: the one resumed is the stop's own, written after the rollback
    stopped = Trainer(spec, config(tmp_path, run_name="b", num_workers=workers, save_interval=0))
    calls, act = [0], stopped.actor.act

    def act_then_stop(*args):  # a stop arrives a few steps into the second rollout
        calls[0] += stopped.update == 1
        if calls[0] == 5:
            stopped.stop.signum = 2
        return act(*args)

    stopped.actor.act = act_then_stop
    result = stopped.train()
    assert result["update"] == 1 and result["stopped_by_signal"]
    state = load_checkpoint(result["checkpoint"])
    saved = state["env_state"]
    assert len(saved) == 2 and all(0 < len(s["env"]["actions"]) <= 16 + 2 for s in saved)  # after update 1
    if game == "gridworld":  # the gate's keys of each episode so far
        assert [len(k) > 0 for k in state["gate_memory"]] == [True, True]
    resumed = Trainer(spec, config(tmp_path, run_name="c", num_workers=workers, resume=result["checkpoint"]))
    resumed.train()
    assert resumed.update == unbroken.update == 3
    for pa, pb in zip(params(unbroken.policy) + params(unbroken.intrinsic.predictor),
                      params(resumed.policy) + params(resumed.intrinsic.predictor)):  # fmt: skip
        np.testing.assert_array_equal(pa, pb)
    a, c = (load_checkpoint(t.last_checkpoint)["env_state"] for t in (unbroken, resumed))
    assert [s["length"] for s in a] == [s["length"] for s in c] and [s["length"] for s in a] != [0, 0]
    for sa, sc in zip(a, c):
        np.testing.assert_array_equal(sa["env"]["actions"], sc["env"]["actions"])


def same_weights(a, b) -> bool:
    pairs = zip(params(a.policy) + params(a.intrinsic.predictor), params(b.policy) + params(b.intrinsic.predictor))
    return all(np.array_equal(pa, pb) for pa, pb in pairs)


def test_a_stop_in_the_warm_up_resumes_into_the_unbroken_run(tmp_path):
    """Stopped while the observation normalizer warms up (before update 0), the run saves the envs as they
    were before it, and the resumed run warms up afresh from there: the unbroken run again."""
    unbroken = Trainer(MONTEZUMA, tiny_montezuma(tmp_path, num_global_steps=64))
    unbroken.train()
    stopped = Trainer(MONTEZUMA, tiny_montezuma(tmp_path, run_name="b", num_global_steps=64))
    observe = stopped.intrinsic.observe

    def observe_then_stop(*args):
        stopped.stop.signum = 2
        return observe(*args)

    stopped.intrinsic.observe = observe_then_stop
    result = stopped.train()
    state = load_checkpoint(result["checkpoint"])
    assert result["update"] == 0 and not state["obs_norm_ready"]
    assert [s["length"] for s in state["env_state"]] == [0, 0]
    resumed = Trainer(
        MONTEZUMA, tiny_montezuma(tmp_path, run_name="c", num_global_steps=64, resume=result["checkpoint"])
    )
    resumed.train()
    assert resumed.update == unbroken.update == 2 and same_weights(unbroken, resumed)


def test_episodes_that_cannot_be_replayed_give_way_to_new_ones(tmp_path, capsys):
    """A checkpoint whose episodes in progress do not replay (here: played with another --max-episode-steps)
    resumes with new episodes, saying why; its learned state is kept."""
    first = Trainer(MONTEZUMA, tiny_montezuma(tmp_path, num_global_steps=32, num_workers=1))
    ckpt = first.train()["checkpoint"]
    other = tiny_montezuma(tmp_path, run_name="b", num_workers=1, max_episode_steps=900, resume=ckpt)
    resumed = Trainer(MONTEZUMA, other)
    resumed.train()
    out = capsys.readouterr()
    assert "new episodes: the checkpoint's episodes in progress could not be replayed" in out.out + out.err
    assert "cannot be replayed with [0.25, 900]" in out.out + out.err
    assert resumed.update == 3 and [s["length"] for s in load_checkpoint(resumed.last_checkpoint)["env_state"]]


def test_a_checkpoint_is_written_after_its_updates_records(tmp_path):
    """Were the process killed right after a save, the metrics up to that checkpoint are on disk."""
    t = Trainer(MARIO, tiny(tmp_path, num_global_steps=64))
    save, seen = t.folder.save, []

    def save_and_look(name, state):
        with open(t.logger.metrics_path, encoding="utf-8") as f:
            seen.append((state["global_step"], {json.loads(line)["step"] for line in f}))
        return save(name, state)

    t.folder.save = save_and_look
    t.train()
    assert [step for step, _ in seen] == [32, 64] and all(step in steps for step, steps in seen)


def test_same_seed_repeats_exactly(tmp_path):
    """Also when the second run saves, logs and draws more often: those settings say when the run writes,
    not what it learns (``HOW_NOT_WHAT``: a resume that changes them is not told)."""
    runs, cfgs = [], []
    more_often = dict(save_interval=1, save_minutes=0.001, histogram_interval=1, embedding_interval=1)
    more_often.update(picture_interval=1, max_nan_updates=9)
    for name, cadence in (("s1", dict(save_interval=0)), ("s2", more_often)):
        cfgs.append(tiny(tmp_path, run_name=name, num_global_steps=16, **cadence))
        t = Trainer(MARIO, cfgs[-1])
        t.train()
        runs.append(params(t.policy) + params(t.intrinsic.predictor))
    for pa, pb in zip(*runs):
        np.testing.assert_array_equal(pa, pb)
    saved = json.loads(json.dumps(cfgs[0].to_dict()))
    assert cfgs[1].changed_since(saved) == []
    # a checkpoint older than a flag: its absence is no change while the run keeps the default
    older = {k: v for k, v in saved.items() if k not in ("ext_coef", "beta")}
    assert cfgs[1].changed_since(older) == []
    assert dataclasses.replace(cfgs[1], beta=0.5).changed_since(older) == ["--beta '(none)' -> 0.5"]


def test_nonfinite_losses_are_skipped_then_stop_the_run(tmp_path):
    t = Trainer(MARIO, tiny(tmp_path, num_global_steps=160, max_nan_updates=2, save_interval=0))
    w = t.policy.actor.weight
    w.set_value(paddle.full(w.shape, float("nan")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(
            NonFiniteLossError,
            match="2 consecutive updates.*No good state could be saved.*non-finite values in policy/actor.weight",
        ):
            t.train()
    assert sum("non-finite loss" in str(c.message) for c in caught) == 2
    assert t.nonfinite.total == 2
    assert not list((tmp_path / "a" / "models").glob("*.pdparams"))  # NaN weights are never written


def test_checkpoints_from_another_game_or_network_are_refused(tmp_path):
    ckpt = Trainer(MARIO, tiny(tmp_path, num_global_steps=16)).train()["checkpoint"]
    with pytest.raises(CheckpointError, match="game 'mario'; this is 'montezuma'"):
        Trainer(MONTEZUMA, MontezumaConfig(num_processes=2, num_workers=-1, log_path=str(tmp_path), resume=ckpt))
    with pytest.raises(CheckpointError, match="network does not match"):
        Trainer(MARIO, tiny(tmp_path, run_name="c", action_type="complex", resume=ckpt))
    with pytest.raises(CheckpointError, match="intrinsic_name"):
        Trainer(MARIO, tiny(tmp_path, run_name="d", intrinsic="snd-v", resume=ckpt))
    state = load_checkpoint(ckpt)
    assert {"policy", "optimizer", "intrinsic", "int_filter", "int_rms", "rng", "config", "update"} <= set(state)
    assert {"obs_rms", "predictor_opt", "target", "predictor"} <= set(state["intrinsic"])


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--num-global-steps", "-5"], "--num-global-steps -5 is invalid"),
        (["--world", "9"], "invalid choice: 9"),
        (["--stage", "0"], "invalid choice: 0"),
        (["--action-type", "jump"], "invalid choice: 'jump'"),
        (["--intrinsic", "ngu"], "invalid choice: 'ngu'"),
        (["--update-proportion", "0"], "--update-proportion 0.0 is invalid"),
        (["--num-local-steps", "10", "--num-processes", "3", "--batch-size", "4"], "a divisor of"),
    ],
)
def test_bad_flags_are_rejected_with_the_value_and_what_is_accepted(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(MarioConfig, argv)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


def test_config_fields_all_have_help_and_round_trip():
    from common.ppo.config import TrainConfig
    from common.run.config import field_meta
    from gridworld.train import GridConfig

    base = {f.name: field_meta(TrainConfig, f.name)["help"] for f in dataclasses.fields(TrainConfig)}
    for cls in (MarioConfig, MontezumaConfig, GridConfig):
        for f in dataclasses.fields(cls):
            help_text = field_meta(cls, f.name).get("help")
            assert help_text, f"{cls.__name__}.{f.name} has no help text"
            if f.name in base:  # a game overrides the default only: the shared text is inherited, never copied
                assert help_text.startswith(base[f.name]), f"{cls.__name__}.{f.name} rewrote the help text"
                own = f.name in vars(cls).get("__annotations__", {})  # declared again in the game's config
                assert not own or "help" not in f.metadata, f.name
        cfg = parse_config(cls, ["--seed", "7"])
        assert cls.from_dict(cfg.to_dict()) == cfg


def test_pipelined_collection_matches_one_batched_loop(tmp_path, monkeypatch):
    """With 2 env workers, collection steps each worker's halves in turn (policy on one half while
    its worker steps the other); the rollout equals the plain act-then-step loop over the whole
    batch, with the same seed."""
    from rollouts import assert_same_rollout, montezuma_rollout

    from common.envs.subproc import SubprocVecEnv

    groups = []

    def record(tr):
        assert isinstance(tr.envs, SubprocVecEnv)
        groups.append(tr.envs.pipeline_groups)

    piped = montezuma_rollout(tmp_path, "piped", record, num_local_steps=24, num_global_steps=96, seed=5)
    assert groups == [[(0, 1), (1, 2), (2, 3), (3, 4)]]
    monkeypatch.setattr(SubprocVecEnv, "pipeline_groups", property(lambda self: [(0, self.num_envs)]))
    plain = montezuma_rollout(tmp_path, "plain", num_local_steps=24, num_global_steps=96, seed=5)
    assert_same_rollout(piped, plain)  # the policy ran on batches of 1 instead of 4


def test_intrinsic_step_on_a_side_thread_changes_nothing(tmp_path):
    """learn() runs the RND step on a second thread (CPU, num_threads > 1): same parameters, bit for bit."""
    results = []
    for side in (True, False):
        t = Trainer(
            MARIO,
            tiny(
                tmp_path,
                run_name=f"side{side}",
                num_threads=2,
                num_processes=2,
                batch_size=2,
                num_local_steps=16,
                seed=9,
            ),
        )
        assert t._side is not None
        if not side:
            t._side = None  # learn() runs the intrinsic step on this thread
        fill_fixed_rollout(t)
        with t.math_threads():
            losses = t.learn()
        results.append((losses, params(t.policy) + params(t.intrinsic.predictor)))
        t.close()
    (la, pa), (lb, pb) = results
    assert la == lb
    for x, y in zip(pa, pb):
        np.testing.assert_array_equal(x, y)


def _weights_after_one_learn(tmp_path, name, ext_coef, reward_scale):
    t = Trainer(MARIO, tiny(tmp_path, run_name=name, ext_coef=ext_coef, int_coef=1.0, seed=4, norm_adv=True))
    fill_fixed_rollout(t)
    t.buffer.rewards_ext *= reward_scale
    logged = t.buffer.rewards_ext.copy()
    t.buffer.compute_returns_and_advantages(0.5, 0.5, 0.9, 1.0, 0.99, ext_coef, 1.0)
    with t.math_threads():
        t.learn()
    np.testing.assert_array_equal(t.buffer.rewards_ext, logged)  # kept for "Training Reward" and the logs
    weights = params(t.policy)
    t.close()
    return weights


def test_with_ext_coef_0_the_game_reward_reaches_no_gradient(tmp_path):
    """--ext-coef 0 (curiosity alone): two trainers on the same rollout with different game rewards learn
    the same weights, bit for bit (policy and both value heads); with ext_coef 1 they do not."""
    same = [_weights_after_one_learn(tmp_path, f"none{k}", 0.0, scale) for k, scale in enumerate((1.0, -50.0))]
    for a, b in zip(*same):
        np.testing.assert_array_equal(a, b)
    differ = [_weights_after_one_learn(tmp_path, f"ext{k}", 1.0, scale) for k, scale in enumerate((1.0, -50.0))]
    assert any(not np.array_equal(a, b) for a, b in zip(*differ))


def _same_state(a: dict, b: dict, where="checkpoint"):
    """Every tensor, array and number of two (nested) states equal."""
    assert set(a) == set(b), f"{where}: {sorted(set(a) ^ set(b))}"
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            _same_state(x, y, f"{where}/{k}")
        elif hasattr(x, "shape"):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{where}/{k}")
        else:
            assert x == y, f"{where}/{k}: {x!r} != {y!r}"


SAVED = ("update", "global_step", "policy", "optimizer", "intrinsic", "int_filter", "int_rms", "rng", "obs_norm_ready")


@pytest.mark.parametrize("how", ["stop", "error"])
@pytest.mark.parametrize("where", ["warm-up", "collection", "update"])
def test_a_stop_or_an_error_anywhere_saves_exactly_the_last_completed_update(where, how, tmp_path):
    """A stop or an error (an env worker's, say) in the normalizer's warm-up, in a rollout or in an update
    drops that phase whole: the file holds the same state as the last completed update's own checkpoint,
    the run's generator included, so a resume goes on as the run would have (a half warm-up would be
    warmed up again on top)."""
    import signal

    from common.run.errors import RunStoppedError

    done = 0 if where == "warm-up" else 1
    ref = Trainer(MARIO, tiny(tmp_path, run_name="ref", num_global_steps=32, save_interval=0))
    if done:
        ref.train()
    else:
        ref.close()
    t = Trainer(MARIO, tiny(tmp_path, run_name="cut", num_global_steps=96, save_interval=0))
    calls = [0]

    def then_stop(original, phase):
        def wrapped(*args, **kw):
            if phase == where and t.update == done:
                calls[0] += 1
                if calls[0] == 2 and how == "error":  # after a first step of the phase
                    raise OSError("injected: an env worker's pipe broke")
                if calls[0] == 1 and how == "stop":
                    t.stop.signum = signal.SIGINT
            return original(*args, **kw)

        return wrapped

    t.intrinsic.observe = then_stop(t.intrinsic.observe, "warm-up")
    t.actor.act = then_stop(t.actor.act, "collection")
    t.ppo.step = then_stop(t.ppo.step, "update")
    if how == "error":
        with pytest.raises(RunStoppedError, match="injected"):
            t.train()
    else:
        result = t.train()
        assert result["stopped_by_signal"] and result["update"] == done
    assert calls[0] >= (2 if how == "error" else 1) and t.update == done
    cut = load_checkpoint(t.last_checkpoint)
    expected = load_checkpoint(ref.last_checkpoint) if done else ref.state_dict()
    _same_state({k: expected[k] for k in SAVED}, {k: cut[k] for k in SAVED})


def test_what_is_logged_never_changes_what_is_trained(tmp_path):
    """The embedding projector's sample is drawn from a generator of its own, not the run's."""
    runs = []
    for every in (0, 1):
        t = Trainer(MARIO, tiny(tmp_path, run_name=f"e{every}", embedding_interval=every, save_interval=0))
        t.train()
        runs.append(params(t.policy) + params(t.intrinsic.predictor) + [t.rng.bit_generator.state["state"]["state"]])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
