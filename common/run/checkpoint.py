"""Atomic checkpoints, loading that cannot run code, and the compatibility check.

A checkpoint is a nested dict: game, config, counters, networks, optimizers, intrinsic-module
state (networks, optimizers, normalizers), the intrinsic reward filter and RNG states, and (PPO)
the envs' episodes in progress (``common.ppo.episodes``). It is one
data-only file (``common.run.tensorfile``: the arrays as a safetensors file, the rest as JSON in its
header), written to a temporary file in the same folder and renamed over the final name, so a crash
or Ctrl-C while saving never leaves a truncated checkpoint behind; it is refused
(``CheckpointError``) if any tensor in it is not finite. The tutorial's file names are kept
(``mario_1_1_100.pdparams``), although the files are no longer ``paddle.save`` pickles.

Loading (``load_checkpoint``) reads that format only, with every size checked against the file
before anything is allocated. A pickle, the format of this project's earlier versions (and of
``paddle.save``), is refused with one line naming the command that converts it once
(``python -m common.run.convert``, which reads it in a child process under memory and time caps):
no loader here unpickles anything, so no file can run code or exhaust the machine by being loaded.
"""

from __future__ import annotations

import copy
import os
import re

import numpy as np
import paddle

from common.run import tensorfile
from common.run.convert import is_pickle
from common.run.files import write_atomic

#: 1: paddle.save pickles (read only by ``common.run.convert``); 2: ``common.run.tensorfile``
FORMAT_VERSION = 2


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for this run (other game, other network, unreadable)."""


#: the keys every checkpoint of this project holds (checked on load, named when missing); a loader
#: that needs more passes them as ``required``
REQUIRED_KEYS = ("format", "game", "config")


class LegacyCheckpointError(CheckpointError):
    """A pickle of an earlier version: refused unread; ``python -m common.run.convert`` converts it."""


def _leaves(state, prefix: str = ""):
    """``(path, value)`` of every non-container value in a nested state (``policy/fc.weight``)."""
    if isinstance(state, dict):
        for k, v in state.items():
            yield from _leaves(v, f"{prefix}{k}/")
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            yield from _leaves(v, f"{prefix}{i}/")
    else:
        yield prefix.rstrip("/"), state


def _nonfinite(value) -> bool:
    if isinstance(value, (paddle.Tensor, np.ndarray)) and 0 in tuple(value.shape):
        return False  # empty: nothing to check (Paddle 2.6's all() refuses a zero-size input)
    if isinstance(value, paddle.Tensor):
        if value.dtype in (paddle.float32, paddle.float64):
            return not bool(paddle.isfinite(value).all())
        if value.dtype in (paddle.float16, paddle.bfloat16):
            return not bool(paddle.isfinite(value.astype("float32")).all())
        return False
    return isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all()


def nonfinite_tensors(state, prefix: str = "") -> list[str]:
    """Paths (``policy/fc.weight``) of every float tensor or array in ``state`` with a NaN or inf."""
    return [path for path, value in _leaves(state, prefix) if _nonfinite(value)]


def all_finite(state) -> bool:
    """Whether every float32/float64 tensor in ``state`` is free of NaN and inf, in one pass each.

    A sum carries any NaN or inf it meets, so one sum per tensor and one check of the sums
    replace ``nonfinite_tensors``' two kernels and a host sync per tensor (the DQN trainer
    checks its weights after every train step). A sum can also overflow to inf from finite
    weights, at magnitudes (~1e38 / size) no trained network reaches; it would count as
    non-finite. Callers that need the names ask ``nonfinite_tensors`` after a False.
    """
    groups = {}  # one stack per place and dtype: Adam keeps its beta-pow accumulators on the CPU of a GPU run
    for _, v in _leaves(state):
        if isinstance(v, paddle.Tensor) and v.dtype in (paddle.float32, paddle.float64):
            groups.setdefault((str(v.place), str(v.dtype)), []).append(v.sum())
    return all(bool(paddle.isfinite(paddle.stack(sums)).all()) for sums in groups.values())


def save_checkpoint(path: str, state: dict) -> str:
    """Write ``state`` to ``path`` atomically (file mode from the umask); returns ``path``.

    Raises ``CheckpointError`` without writing anything when a tensor holds a NaN or inf,
    and ``OSError`` naming ``path`` when the disk refuses the write (e.g. it is full).
    """
    bad = nonfinite_tensors(state)
    if bad:
        raise CheckpointError(
            f"refusing to write {path}: non-finite values in {', '.join(bad[:5])}"
            f"{f' and {len(bad) - 5} more' if len(bad) > 5 else ''}"
        )
    try:
        data = tensorfile.dumps({"format": FORMAT_VERSION, **state})
    except tensorfile.TensorFileError as e:
        raise CheckpointError(f"refusing to write {path}: {e}") from None
    try:
        return write_atomic(path, data)
    except OSError as e:
        raise OSError(e.errno, f"cannot write checkpoint {path}: {e.strerror}") from e


def _read(path: str) -> bytes:
    """The bytes of checkpoint ``path``, or ``CheckpointError`` saying why there are none."""
    if os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path!r} is a folder: give the .pdparams file in it")
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} is not a regular file (a device or a pipe?)")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path!r}: {e.strerror}") from None


#: counters a checkpoint may hold: each an integer >= 0
COUNTERS = ("update", "global_step", "nan_total", "world_size", "env_steps", "episodes", "train_steps")


def _brief(value) -> str:
    """A file-controlled value for an error message, bounded: a string's first 40 characters, a number, or a type."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, (bool, int, float, type(None))):
        return repr(value)[:40]
    return f"a {type(value).__name__}"


def _check_contents(raw: dict, path: str, required, game) -> None:
    """``CheckpointError`` unless ``raw`` is a checkpoint of this project (of ``game``, if given), of this
    format, with every required key, counters that are integers >= 0 and a config that is a dict."""
    if "format" not in raw or "game" not in raw:
        raise CheckpointError(f"{path} is not a checkpoint of this project: expected a dict with 'game', 'policy', ...")
    if game is not None and raw["game"] != game:
        raise CheckpointError(f"{path} was written by game {_brief(raw['game'])}; this is {game!r}")
    if raw["format"] != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {_brief(raw['format'])}; this version reads {FORMAT_VERSION}")
    keys = list(dict.fromkeys([*REQUIRED_KEYS, *required]))
    missing = [k for k in keys if k not in raw]
    if missing:
        raise CheckpointError(
            f"{path!r} is incomplete: it has no {', '.join(repr(k) for k in missing)} (expected {', '.join(keys)})"
        )
    for key in COUNTERS:
        if key in raw and not (type(raw[key]) is int and 0 <= raw[key] < 2**62):
            raise CheckpointError(f"{path}: entry {key!r} is {_brief(raw[key])}: expected an integer >= 0")
    if not isinstance(raw["config"], dict):
        raise CheckpointError(f"{path}: entry 'config' is a {type(raw['config']).__name__}: expected a dict")


def load_checkpoint(path: str, required=(), game: str | None = None) -> dict:
    """A checkpoint written by ``save_checkpoint``, read without running code from the file.

    Raises ``CheckpointError`` (naming the file, and the entry where one is at fault) when it is
    missing, unreadable, a pickle of an earlier version (with the command that converts it), not a
    checkpoint of this project (``common.run.tensorfile`` checks every size, dtype and reference),
    of another ``game``, of another format version, lacks one of ``REQUIRED_KEYS`` or ``required``,
    holds a counter that is not an integer >= 0 or a config that is not a dict, or a tensor with a
    NaN or inf.
    """
    data = _read(path)
    if not tensorfile.is_tensorfile(data[:9]):  # asked first: a header length can start with byte 0x80 too
        if is_pickle(data[:1]):
            raise LegacyCheckpointError(
                f"{path} is a pickle, the format of this project's versions before 2026-12 (and of paddle.save); "
                f"convert it once with: python -m common.run.convert {path}"
            )
        raise CheckpointError(f"{path} is not a checkpoint of this project (not a safetensors file)")
    try:
        raw = tensorfile.loads(data, path)
    except tensorfile.TensorFileError as e:
        raise CheckpointError(str(e)) from None
    _check_contents(raw, path, required, game)
    return raw


def cast(value, src: str, dst: str):
    """``value`` (a tensor or array) as dtype ``dst`` if its dtype is ``src``; else unchanged. Cast by numpy
    (IEEE round to nearest even), the same on every Paddle: Paddle 2.6's own float16 cast rounds some
    values one step the other way."""
    if str(value.dtype).replace("paddle.", "") != src:
        return value
    if isinstance(value, paddle.Tensor):
        return paddle.to_tensor(value.numpy().astype(dst))
    return value.astype(dst)


def widen(state: dict) -> dict:
    """A loaded checkpoint whose policy was stored as float16 (a zoo file, ``common.zoo.weights_only``
    with ``half``: entry ``half`` 1) with that policy cast back to float32, the dtype of the network it
    is loaded into; any other checkpoint unchanged."""
    if type(state.get("half")) is not int or not state["half"] or not isinstance(state.get("policy"), dict):
        return state
    return {**state, "policy": {k: cast(v, "float16", "float32") for k, v in state["policy"].items()}}


def load_weights(layer, weights, what: str) -> None:
    """``layer.set_state_dict(weights)`` after checking that ``weights`` has exactly the layer's entries,
    each a tensor of the parameter's shape and dtype. Paddle itself only warns ("Skip loading") and
    keeps the fresh weights of a mismatched entry; here a ``ValueError`` names ``what`` and the entry."""
    if not isinstance(weights, dict):
        raise ValueError(f"{what}: a {type(weights).__name__} where the network's weights were expected")
    want = layer.state_dict()
    missing, extra = sorted(set(want) - set(weights)), sorted(set(weights) - set(want))
    parts = [f"missing {', '.join(missing[:5])}"] if missing else []
    parts += [f"unexpected {', '.join(extra[:5])}"] if extra else []
    if parts:
        raise ValueError(f"{what}: {'; '.join(parts)}")
    for name, param in want.items():
        value = weights[name]
        if not isinstance(value, (paddle.Tensor, np.ndarray)):
            raise ValueError(f"{what}/{name}: a {type(value).__name__} where a tensor was expected")
        if tuple(value.shape) != tuple(param.shape):
            raise ValueError(f"{what}/{name}: shape {tuple(value.shape)}, the network's is {tuple(param.shape)}")
        if str(value.dtype).replace("paddle.", "") != str(param.dtype).replace("paddle.", ""):
            raise ValueError(f"{what}/{name}: dtype {value.dtype}, the network's is {param.dtype}")
    layer.set_state_dict(weights)


def _shape(value):
    """A tensor's or array's shape as a tuple; what else it is, where it is neither."""
    return tuple(value.shape) if isinstance(value, (paddle.Tensor, np.ndarray)) else f"a {type(value).__name__}"


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
            mismatched = [
                f"{k}: checkpoint {_shape(have[k]) if k in have else 'missing'} vs run {tuple(v.shape)}"
                for k, v in want.items()
                if k not in have or _shape(have[k]) != tuple(v.shape)
            ]
            if mismatched or set(have) != set(want):
                extra = sorted(set(have) - set(want))
                raise CheckpointError(
                    f"{path}: the {key!r} network does not match this run's "
                    f"({'; '.join(mismatched[:5])}{'; unexpected ' + ', '.join(extra[:5]) if extra else ''}). "
                    "Was it trained with another action set, game or network?"
                )
        elif have != want:
            raise CheckpointError(f"{path}: {key} is {have!r} in the checkpoint but {want!r} in this run")


#: the counter Paddle's ``unique_name`` puts after an accumulator's name (``_0`` of ``moment1_0``)
_COUNTER = re.compile(r"_\d+$")


def _accumulators(optimizer, keys):
    """{(parameter position, accumulator): key} for the keys of ``optimizer``'s state that belong to a
    parameter; an accumulator is the key's end without Paddle's counter (``moment1`` of
    ``linear_3.w_0_moment1_0``)."""
    names = sorted(((p.name, i) for i, p in enumerate(optimizer._parameter_list)), key=lambda x: -len(x[0]))
    found = {}
    for key in keys:
        for name, i in names:
            if key.startswith(name + "_"):
                found[(i, _COUNTER.sub("", key[len(name) + 1 :]))] = key
                break
    return found


def _next_name(key: str) -> str:
    """The name Paddle's next ``unique_name.generate(key)`` will return. An optimizer names each moment
    when it makes it, at its first step: ``..._0``, or ``..._1`` for a second Adam over the same parameters."""
    try:
        from paddle.base import unique_name

        return f"{unique_name.generator.prefix}{key}_{unique_name.generator.ids.get(key, 0)}"
    except (ImportError, AttributeError):  # another Paddle: its first name
        return f"{key}_0"


def optimizer_state(optimizer) -> dict:
    """``optimizer.state_dict()`` keyed ``@param<position>_<accumulator>`` (``@param0_moment1``).

    Paddle keys optimizer state by generated names: the parameter's (``linear_3.w_0``), which differ
    between two copies of a network built in one process, then the accumulator's with a counter
    (``_moment1_0``), which is ``_1`` for the second Adam ever made over the same parameters (a
    reset optimizer) and ``_0`` again in the next process. Neither survives a resume; positions
    and accumulator names do.
    """
    state = optimizer.state_dict()
    ours = {key: f"@param{i}_{acc}" for (i, acc), key in _accumulators(optimizer, state).items()}
    return {ours.get(key, key): value for key, value in state.items()}


def without_optimizers(state):
    """``state`` (a checkpoint or a part of one) with every optimizer's state emptied, at any depth: the
    entries named ``optimizer``, ``opt`` or ``*_opt`` (also in files from before ``optimizer_state``'s
    keys) and any dict keyed ``@param...``. A module's ``set_state_dict`` then starts fresh optimizers."""
    if not isinstance(state, dict):
        return state
    return {k: {} if _is_optimizer_state(k, v) else without_optimizers(v) for k, v in state.items()}


def _is_optimizer_state(key, value) -> bool:
    if key in ("optimizer", "opt") or str(key).endswith("_opt"):
        return True
    return isinstance(value, dict) and any(str(k).startswith("@param") for k in value)


def set_optimizer_state(optimizer, state: dict) -> None:
    """Inverse of ``optimizer_state`` for this optimizer's parameters. A ``ValueError`` names an entry for a
    parameter the optimizer does not have, or a moment whose shape is not its parameter's."""
    if not isinstance(state, dict):
        raise ValueError(f"optimizer state: a {type(state).__name__} where a dict was expected")
    params = optimizer._parameter_list
    # an optimizer that has stepped has its accumulators' names; one that has not, the names it will make
    existing = _accumulators(optimizer, optimizer.state_dict())
    renamed = {}
    for key, value in state.items():
        if key.startswith("@param"):
            idx, _, rest = key[len("@param") :].partition("_")
            rest = _COUNTER.sub("", rest)  # files written before the counter was dropped
            if not idx.isdigit() or int(idx) >= len(params):
                raise ValueError(f"optimizer state {key!r}: the optimizer has parameters 0 to {len(params) - 1}")
            param = params[int(idx)]
            if not isinstance(value, (paddle.Tensor, np.ndarray)):
                raise ValueError(f"optimizer state {key!r}: a {type(value).__name__} where a tensor was expected")
            if "moment" in rest and tuple(value.shape) != tuple(param.shape):
                raise ValueError(
                    f"optimizer state {key!r}: shape {tuple(value.shape)}, its parameter's is {tuple(param.shape)}"
                )
            key = existing.get((int(idx), rest)) or _next_name(f"{param.name}_{rest}")
        renamed[key] = value
    optimizer.set_state_dict(renamed)


def copy_state(obj):
    """A copy of a (nested) state dict that later training steps cannot change."""
    if isinstance(obj, paddle.Tensor):
        return obj.detach().clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: copy_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(copy_state(v) for v in obj)
    return copy.deepcopy(obj)
