"""The command line of every game's ``train.py``: ``run(SPEC)`` parses the flags, trains, exits.

Exit status: 0 when the run finished; 1 with a message when it stopped on an error (the
state of the last completed update is saved and named); 2 for a bad flag (argparse's
convention, also for an unusable ``--log-path``); 130 / 143 after SIGINT / SIGTERM (a
checkpoint is saved first), so scripts can tell.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys

from common.run.config import parse_config
from common.run.errors import UsageError
from common.run.game import GameSpec

#: exit status of a run stopped by a signal (the shell's 128 + signal number)
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def abort_workers(trainer) -> None:
    """A second Ctrl-C / SIGTERM: kill the run's child processes (env workers, the eval process) at once and
    free the vec env's shared memory; nothing is saved."""
    import multiprocessing as mp

    for child in mp.active_children():
        child.kill()
    abort = getattr(getattr(trainer, "envs", None), "abort", None)
    if abort is not None:
        abort()


def start_lines(spec: GameSpec, cfg, trainer) -> list[str]:
    """What a run prints as it starts: what runs (game, level, method, length), where its folder is and how
    to watch it. Every setting is in the folder's ``config.json``, not on the terminal.

    Read from the config and the trainer's public attributes only: PPO trainers count updates
    (``num_updates``, ``steps_per_update``), the DQN ones train steps (``cfg.train_steps``).
    """
    method = f"agent {cfg.agent}" if hasattr(cfg, "agent") else f"intrinsic {cfg.intrinsic}"
    if hasattr(trainer, "num_updates") and hasattr(trainer, "steps_per_update"):
        length = f"{trainer.num_updates:,} updates of {trainer.steps_per_update:,} agent steps"
    else:
        length = f"{cfg.train_steps:,} train steps"
    resumed = f", resumed from {cfg.resume}" if cfg.resume else ""
    logs = os.path.dirname(os.path.normpath(trainer.run_dir)) or "."
    try:  # VisualDL wants a relative --logdir (docs/visualdl.md)
        logs = os.path.relpath(logs)
    except ValueError:  # another drive (Windows): no relative path leads there
        pass
    return [
        f"{spec.name} {spec.level_name(cfg)}, {method}, seed {cfg.seed}: {length}{resumed}",
        f"run folder: {trainer.run_dir} (every setting in its config.json)",
        f"watch it:   visualdl --logdir {shlex.quote(logs)} --language en",  # a command to paste
    ]


def die_on_native_crash() -> None:
    """Let a crash in native code end the process, with the Python stacks on stderr.

    Paddle's own handler for SIGABRT / SIGSEGV allocates memory to print its C++ stack; after a heap
    corruption (glibc aborts from inside ``malloc``, holding its lock) it waits for that lock forever,
    and a training run hangs instead of ending. Without it the signal kills the process (its scheduler
    sees the exit status and resumes from the last checkpoint); ``faulthandler`` prints every thread's
    Python stack first, without allocating."""
    import faulthandler

    import paddle

    paddle.disable_signal_handler()
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)


def run(spec: GameSpec, trainer_cls, argv=None) -> dict:
    """What each game's train.py runs (through ``common.ppo.trainer.run`` or ``common.dqn.trainer.run``):
    parse flags, build the trainer, print what runs and where (``start_lines``), train.

    ``trainer_cls(spec, cfg)`` builds the trainer (PPO's ``Trainer``, the DQN games' ``DQNTrainer``);
    this module knows neither. Exits with a message (status 1) when the
    run stops on an error, and with 130 / 143 after SIGINT / SIGTERM (the checkpoint is saved
    first), so scripts can tell.
    """
    from common.run.checkpoint import CheckpointError
    from common.run.errors import NonFiniteLossError, RunStoppedError

    cfg = parse_config(spec.config_cls, argv, description=spec.config_cls.__doc__)
    die_on_native_crash()
    try:
        trainer = trainer_cls(spec, cfg)
    except UsageError as e:  # a flag's value (e.g. an unusable --log-path): reported as argparse reports bad flags
        print(f"{os.path.basename(sys.argv[0]) or spec.name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except CheckpointError as e:  # the only file a trainer loads as it starts is --resume's
        raise SystemExit(f"error: --resume: {e}") from None
    if getattr(getattr(trainer, "world", None), "is_main", True):  # data-parallel ranks: rank 0 alone
        print("\n".join(start_lines(spec, cfg, trainer)), flush=True)
    trainer.stop.on_abort.append(lambda: abort_workers(trainer))
    try:
        result = trainer.train()
    except (RunStoppedError, NonFiniteLossError) as e:
        raise SystemExit(f"error: {e}") from None
    if result["stopped_by_signal"]:
        sys.stdout.flush()
        raise SystemExit(SIGNAL_EXIT.get(trainer.stop.signum, 1))
    return result
