"""One rank of a data-parallel gridworld run, for tests/test_distributed.py (started by
``python -m paddle.distributed.launch --nproc_per_node 2 tests/distributed_run.py <gridworld flags>``).

Besides training, each rank prints to its own log (the launcher's ``workerlog.N``):

* ``PID rank=R pid=P`` at start;
* ``DIGEST rank=R update=K params=... stats=... rollout=...`` after every update: sha256 of the
  policy's and the intrinsic module's parameters (and optimizer moments), of the statistics that
  scale the rewards (observation normalizer, intrinsic-return running std), and of the rollout's
  observations (which must differ between ranks: each rank has its own envs);
* ``WRITES rank=R count=N first=PATH`` at exit: the files it opened for writing (or folders it
  made) under ``--log-path``, seen through a Python audit hook.

With ``DIST_TEST_NAN_UPDATE=K`` in the environment, rank 1's PPO loss is NaN throughout update K
(rank 0's stays finite): every rank must roll that update back.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _rank() -> int:
    return int(os.environ.get("PADDLE_TRAINER_ID", "0"))


def watch_writes(root: str) -> list:
    """Paths under ``root`` this process opens for writing or creates as folders (audit hook)."""
    root = os.path.abspath(root)
    seen: list = []

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path, mode, flags = args[0], args[1], args[2] if len(args) > 2 else 0
            writing = any(c in str(mode) for c in "wax+") if mode is not None else bool(flags & WRITE_FLAGS)
        elif event in ("os.mkdir", "os.rename", "os.replace") and args:
            path, writing = args[0], True
        else:
            return
        path = os.fsdecode(path) if not isinstance(path, str) else path
        if writing and os.path.abspath(path).startswith(root):
            seen.append(path)

    sys.addaudithook(hook)
    return seen


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(memoryview(a).cast("B") if a.flags.c_contiguous else a.copy(order="C").tobytes())
    return h.hexdigest()[:16]


def flat_arrays(state) -> list:
    """Every tensor / array in a nested state dict, as numpy, in a fixed order."""
    import numpy as np
    import paddle

    out = []
    if isinstance(state, dict):
        for k in sorted(state, key=str):
            out += flat_arrays(state[k])
    elif isinstance(state, (list, tuple)):
        for v in state:
            out += flat_arrays(v)
    elif isinstance(state, paddle.Tensor):
        out.append(np.ascontiguousarray(state.numpy()))
    elif isinstance(state, np.ndarray):
        out.append(np.ascontiguousarray(state))
    elif isinstance(state, (int, float)):
        out.append(np.asarray([state], np.float64))
    return out


def main(argv: list) -> None:
    log_path = argv[argv.index("--log-path") + 1]
    writes = watch_writes(log_path)
    rank = _rank()
    print(f"PID rank={rank} pid={os.getpid()}", flush=True)
    atexit.register(lambda: print(f"WRITES rank={rank} count={len(writes)} first={writes[:1]}", flush=True))

    from common.ppo import trainer as trainer_module

    run = trainer_module.run
    from gridworld.train import SPEC

    original = trainer_module.Trainer._update
    nan_update = int(os.environ.get("DIST_TEST_NAN_UPDATE", "0"))  # rank 1's PPO loss is NaN in that update

    def update_and_report(self, snapshot):
        if rank == 1 and self.update + 1 == nan_update:
            loss = self.ppo.loss
            self.ppo.loss = lambda batch: (lambda total, terms: (total * float("nan"), terms))(*loss(batch))
            try:
                losses = original(self, snapshot)
            finally:
                self.ppo.loss = loss
        else:
            losses = original(self, snapshot)
        learned = self.learned_state()  # networks and optimizers; not the per-rank random streams
        learned["intrinsic"] = {k: v for k, v in learned["intrinsic"].items() if k != "rng"}
        stats = [self.int_scale.rms.mean, self.int_scale.rms.var, self.int_scale.rms.count]
        if hasattr(self.intrinsic, "obs_rms"):
            rms = self.intrinsic.obs_rms
            stats += [rms.mean, rms.var, rms.count]
        print(
            f"DIGEST rank={rank} update={self.update + 1} params={digest(*flat_arrays(learned))} "
            f"stats={digest(*flat_arrays(stats))} rollout={digest(self.buffer.obs)} kept={losses is not None}",
            flush=True,
        )
        return losses

    trainer_module.Trainer._update = update_and_report
    run(SPEC, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
