"""The command line of every game's ``train.py``: ``run(SPEC)`` parses the flags, trains, exits.

Exit status: 0 when the run finished; 1 with a message when it stopped on an error (the
state of the last completed update is saved and named); 2 for a bad flag (argparse's
convention, also for an unusable ``--log-path``); 130 / 143 after SIGINT / SIGTERM (a
checkpoint is saved first), so scripts can tell.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from common.config import parse_config
from common.errors import UsageError
from common.game import GameSpec

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


def run(spec: GameSpec, argv=None, trainer_cls=None) -> dict:
    """Entry point used by each game's train.py: parse flags, print the config, train.

    ``trainer_cls(spec, cfg)`` builds the trainer (default: PPO's ``common.trainer.Trainer``; the
    DQN games pass ``common.dqn_trainer.DQNTrainer``). Exits with a message (status 1) when the
    run stops on an error, and with 130 / 143 after SIGINT / SIGTERM (the checkpoint is saved
    first), so scripts can tell.
    """
    from common.checkpoint import CheckpointError
    from common.errors import NonFiniteLossError, RunStoppedError

    if trainer_cls is None:
        from common.trainer import Trainer as trainer_cls

    cfg = parse_config(spec.config_cls, argv, description=spec.config_cls.__doc__)
    print(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
    try:
        trainer = trainer_cls(spec, cfg)
    except UsageError as e:  # a flag's value (e.g. an unusable --log-path): reported as argparse reports bad flags
        print(f"{os.path.basename(sys.argv[0]) or spec.name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except CheckpointError as e:
        raise SystemExit(f"error: {e}") from None
    trainer.stop.on_abort.append(lambda: abort_workers(trainer))
    try:
        result = trainer.train()
    except (RunStoppedError, NonFiniteLossError) as e:
        raise SystemExit(f"error: {e}") from None
    if result["stopped_by_signal"]:
        sys.stdout.flush()
        raise SystemExit(SIGNAL_EXIT.get(trainer.stop.signum, 1))
    return result
