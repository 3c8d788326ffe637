"""Atomic checkpoints and the compatibility check on load.

A checkpoint is one ``paddle.save`` file holding a nested dict: game, config,
counters, networks, optimizers, intrinsic-module state (networks, optimizers,
normalizers), the intrinsic reward filter and RNG states. It is written to a
temporary file in the same folder and renamed over the final name, so a crash
or Ctrl-C while saving never leaves a truncated checkpoint behind.
"""
from __future__ import annotations

import os
import tempfile

import paddle

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for this run (other game, other network, unreadable)."""


def save_checkpoint(path: str, state: dict) -> str:
    """Write ``state`` to ``path`` atomically; returns ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".pdparams", dir=folder)
    os.close(fd)
    try:
        paddle.save({"format": FORMAT_VERSION, **state}, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def load_checkpoint(path: str) -> dict:
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    try:
        state = paddle.load(path)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
        raise CheckpointError(f"cannot read checkpoint {path!r}: {e}") from e
    if not isinstance(state, dict) or "format" not in state or "game" not in state:
        raise CheckpointError(f"{path!r} is not a checkpoint of this project (a bare state dict, perhaps the "
                              "tutorial's policy weights?): expected a dict with 'game', 'policy', ...")
    return state


def check_compatible(state: dict, game: str, expected: dict, path: str = "checkpoint") -> None:
    """Refuse a checkpoint from another game or with other network shapes.

    ``expected`` maps a component name ("policy", "intrinsic_name", ...) to what this
    run has: a state dict (shapes compared) or a plain value (compared for equality).
    """
    if state.get("game") != game:
        raise CheckpointError(f"{path} was written by game {state.get('game')!r}; this is {game!r}")
    for key, want in expected.items():
        have = state.get(key)
        if isinstance(want, dict):
            if not isinstance(have, dict):
                raise CheckpointError(f"{path} has no {key!r} state")
            mismatched = [f"{k}: checkpoint {tuple(have[k].shape) if k in have else 'missing'} vs run {tuple(v.shape)}"
                          for k, v in want.items() if k not in have or tuple(have[k].shape) != tuple(v.shape)]
            if mismatched or set(have) != set(want):
                extra = sorted(set(have) - set(want))
                raise CheckpointError(
                    f"{path}: the {key!r} network does not match this run's "
                    f"({'; '.join(mismatched[:5])}{'; unexpected ' + ', '.join(extra[:5]) if extra else ''}). "
                    "Was it trained with another action set, game or network?")
        elif have != want:
            raise CheckpointError(f"{path}: {key} is {have!r} in the checkpoint but {want!r} in this run")


def optimizer_state(optimizer) -> dict:
    """``optimizer.state_dict()`` with parameter names replaced by positions.

    Paddle keys optimizer state by generated parameter names (``linear_3.w_0_moment1_0``),
    which differ between two copies of a network built in one process; positions do not.
    """
    names = sorted(((p.name, i) for i, p in enumerate(optimizer._parameter_list)), key=lambda x: -len(x[0]))
    out = {}
    for key, value in optimizer.state_dict().items():
        for name, i in names:
            if key.startswith(name + "_"):
                key = f"@param{i}" + key[len(name):]
                break
        out[key] = value
    return out


def set_optimizer_state(optimizer, state: dict) -> None:
    """Inverse of ``optimizer_state`` for this optimizer's parameters."""
    params = optimizer._parameter_list
    renamed = {}
    for key, value in state.items():
        if key.startswith("@param"):
            idx, rest = key[len("@param"):].split("_", 1)
            key = f"{params[int(idx)].name}_{rest}"
        renamed[key] = value
    optimizer.set_state_dict(renamed)
