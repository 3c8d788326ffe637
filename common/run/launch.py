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


def run(spec: GameSpec, trainer_cls, argv=None) -> dict:
    """What each game's train.py runs (through ``common.ppo.trainer.run`` or ``common.dqn.trainer.run``):
    parse flags, print the config, train.

    ``trainer_cls(spec, cfg)`` builds the trainer (PPO's ``Trainer``, the DQN games' ``DQNTrainer``);
    this module knows neither. Exits with a message (status 1) when the
    run stops on an error, and with 130 / 143 after SIGINT / SIGTERM (the checkpoint is saved
    first), so scripts can tell.
    """
    from common.run.checkpoint import CheckpointError
    from common.run.errors import NonFiniteLossError, RunStoppedError

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
