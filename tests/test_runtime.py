"""The pieces both training loops share (common.run.runtime, common.run.config.RunConfig): fast, no training."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import warnings

import pytest

from common.dqn.config import DQNConfig
from common.ppo.config import TrainConfig
from common.run.checkpoint import CheckpointError
from common.run.config import RunConfig, UnusablePathError, build_parser, field_meta
from common.run.errors import NonFiniteLossError
from common.run.runtime import NonFiniteSteps, RunFolder, StopSignals, code_commit, run_commits


def test_nonfinite_steps_stop_at_the_limit_in_a_row_only():
    steps = NonFiniteSteps(limit=2, unit="update")
    with pytest.warns(RuntimeWarning, match=r"update 5: non-finite loss or weights, taken back \(1 in a row"):
        steps.taken_back(5)
    steps.ok()  # a good step in between: the streak starts again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        steps.taken_back(7)
        with pytest.raises(NonFiniteLossError, match="2 consecutive updates"):
            steps.taken_back(8)
    assert steps.total == 3 and steps.streak == 2


def test_run_commits_lists_the_commits_a_run_came_from_once_each_oldest_first():
    here = code_commit()  # "unknown" outside a git checkout: the same rules hold
    assert run_commits((), here) == [here] == run_commits([here], here)  # resumed at the same commit: listed once
    assert run_commits(["a1b2c3"], here) == ["a1b2c3", here]  # resumed at a newer commit: appended
    for bad in ([""], [7], ["x" * 65], ["a"] * 1001, "a1b2c3", {"a": 1}):
        with pytest.raises(CheckpointError, match="run.pdparams: entry 'code_commits' is invalid"):
            run_commits(bad, here, "run.pdparams")


def test_stop_signals_first_asks_second_aborts_and_handlers_come_back(capsys):
    before = signal.getsignal(signal.SIGINT)
    with StopSignals("finishing this step") as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is before
    assert "SIGTERM received: finishing this step" in capsys.readouterr().out


def test_a_signal_of_the_other_kind_after_the_first_is_the_same_stop_once(capsys):
    """A shutdown sends SIGTERM to a trainer and to the suite that started it, which passes a SIGINT on:
    that SIGINT must not turn the stop into an abort without saving. A signal after it does abort."""
    with StopSignals("finishing this step") as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # absorbed: no KeyboardInterrupt
        assert stop.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert "SIGINT after SIGTERM: the same stop, still finishing this step" in capsys.readouterr().out


def test_once_its_parent_has_ended_no_signal_aborts_the_stop(monkeypatch, capsys):
    """A suite's runs get SIGTERM when the suite ends (benchmarks/lanes.py): after the suite's own SIGINT
    that must not abort the save the SIGINT asked for."""
    with StopSignals("finishing this step") as stop:
        os.kill(os.getpid(), signal.SIGINT)
        started_by = os.getppid()
        monkeypatch.setattr(os, "getppid", lambda: -started_by)  # the parent has ended (another parent now)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # no abort: no KeyboardInterrupt
        assert stop.signum == signal.SIGINT
    assert "SIGTERM as the process that started this one ended: the same stop" in capsys.readouterr().out


def test_run_folder_is_checked_at_once_and_made_only_on_create(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UnusablePathError, match=r"--saved-path .* is not a folder"):
        RunFolder(TrainConfig(log_path=str(tmp_path), saved_path=str(blocker / "models")), "run")
    cfg = TrainConfig(log_path=str(tmp_path / "runs"))
    folder = RunFolder(cfg, "run")
    assert not os.path.exists(folder.run_dir)  # nothing made before a resume is accepted
    folder.create(cfg)
    assert os.path.isfile(os.path.join(folder.run_dir, "config.json")) and os.path.isdir(folder.saved_path)


@pytest.mark.parametrize("cls", [TrainConfig, DQNConfig])
def test_the_run_flags_have_one_help_text_for_both_loops(cls):
    """seed, device, folders and --resume are declared once (RunConfig): the PPO and DQN help cannot drift."""
    for f in dataclasses.fields(RunConfig):
        base = field_meta(RunConfig, f.name)["help"]
        assert field_meta(cls, f.name)["help"].startswith(base), f.name
    assert "replay memory" in field_meta(DQNConfig, "resume")["help"]  # the DQN loop's note, appended
    text = " ".join(build_parser(cls).format_help().split())
    assert "--seed" in text
    # an empty default is not shown: the help says what empty means, in words
    assert "(default: game, settings, seed and time)" in text and "(default: )" not in text


def test_run_config_checks_name_the_flag():
    with pytest.raises(ValueError, match=r"--train-steps 0 is invalid: expected a positive integer"):
        DQNConfig(train_steps=0).validate()
    with pytest.raises(ValueError, match=r"--device 'tpu' is invalid: expected one of cpu, gpu"):
        TrainConfig(device="tpu").validate()
    with pytest.raises(ValueError, match=r"--lr nan is invalid: expected a finite number"):
        DQNConfig(lr=float("nan")).validate()


class _StubTrainer:
    """Just enough of a trainer for ``launch.run``: its folder, its length, a stop flag, a ``train``."""

    def __init__(self, spec, cfg):
        self.run_dir = os.path.join(cfg.log_path, cfg.run_name)
        if hasattr(cfg, "num_global_steps"):  # a PPO trainer counts updates
            self.steps_per_update = cfg.num_envs * cfg.num_local_steps
            self.num_updates = cfg.num_global_steps // self.steps_per_update
        self.stop = type("Stop", (), {"on_abort": [], "signum": None})()

    def train(self):
        return {"stopped_by_signal": False}


@pytest.mark.parametrize("cls", [TrainConfig, DQNConfig])
def test_a_run_starts_with_what_runs_its_folder_and_how_to_watch_it(cls, tmp_path, monkeypatch, capsys):
    """Three lines, not the whole config (that is the run folder's config.json): game, level, method and
    length; the folder; the VisualDL command, with a relative --logdir (VisualDL's cache mixes up an absolute
    one: docs/visualdl.md)."""
    from common.run import launch
    from common.run.game import GameSpec

    spec = GameSpec(
        name="toy",
        config_cls=cls,
        env_factory=None,
        spaces=None,
        make_policy=None,
        make_intrinsic_networks=None,
        level_name=lambda cfg: "1-2",
        checkpoint_name=None,
    )
    logs = tmp_path / "my runs"
    monkeypatch.chdir(tmp_path)
    argv = ["--log-path", str(logs), "--run-name", "r", "--seed", "7"]
    if cls is TrainConfig:
        argv += ["--num-processes", "2", "--num-local-steps", "8", "--num-global-steps", "64"]
    else:
        argv += ["--agent", "snd", "--train-steps", "1234"]
    launch.run(spec, _StubTrainer, argv)
    lines = capsys.readouterr().out.splitlines()
    length = "4 updates of 16 agent steps" if cls is TrainConfig else "agent snd, seed 7: 1,234 train steps"
    assert lines[0].startswith("toy 1-2, ") and lines[0].endswith(length), lines
    if cls is TrainConfig:
        assert ", intrinsic rnd, seed 7: " in lines[0]
    assert lines[1].startswith(f"run folder: {logs / 'r'} ") and "config.json" in lines[1]
    assert lines[2] == "watch it:   visualdl --logdir 'my runs' --language en"  # quoted: a command to paste
    assert len(lines) == 3 and "{" not in "".join(lines)  # the config is not printed


def test_a_paddle_older_than_the_minimum_is_refused_naming_its_version(monkeypatch):
    import paddle

    from common.run import device

    assert device.paddle_version_ok(paddle.__version__)  # this machine's Paddle passes
    refused = ("1.8.5", "2.5.2", "2.5.2.post117")
    accepted = ("2.6.0", "2.6.2", "2.6.0.post112", "3.0.0b2", "3.0.0rc1", "0.0.0", "develop")  # develop: unreadable
    assert {v: device.paddle_version_ok(v) for v in refused + accepted} == {
        v: v in accepted for v in refused + accepted
    }
    monkeypatch.setattr(paddle, "__version__", "2.5.2")
    with pytest.raises(SystemExit, match=r"PaddlePaddle 2\.5\.2 is installed; this project needs 2\.6 or newer"):
        device.require_paddle()


def test_write_atomic_leaves_the_old_file_and_no_temporary_when_the_disk_refuses(tmp_path, monkeypatch):
    from common.run import files

    path = tmp_path / "summary.json"
    path.write_text("old")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        files.write_atomic(str(path), "new")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc (what each fsync was given, the umask)")
def test_write_atomic_syncs_the_data_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """What makes a power cut leave the old file or the new one (L6 of the lanes' review): data synced,
    renamed, then the folder's entry synced."""
    from common.run import files

    events = []
    real_replace = os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}"))))
    monkeypatch.setattr(files.os, "replace", lambda a, b: (events.append(("replace", None)), real_replace(a, b)))
    old = os.umask(0o022)
    try:
        files.write_atomic(str(tmp_path / "config.json"), "{}")
    finally:
        os.umask(old)
    assert events == [("fsync", False), ("replace", None), ("fsync", True)]
    assert (tmp_path / "config.json").read_text() == "{}"
    assert os.stat(tmp_path / "config.json").st_mode & 0o777 == 0o644  # the umask's mode, not mkstemp's 0600
