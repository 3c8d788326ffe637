"""Atomic checkpoints, loading that cannot run code, and the compatibility check.

A checkpoint is one ``paddle.save`` file holding a nested dict: game, config,
counters, networks, optimizers, intrinsic-module state (networks, optimizers,
normalizers), the intrinsic reward filter and RNG states. It is written to a
temporary file in the same folder and renamed over the final name, so a crash
or Ctrl-C while saving never leaves a truncated checkpoint behind, and it is
refused (``CheckpointError``) if any tensor in it is not finite.

Loading. ``paddle.save`` writes a pickle, and ``paddle.load`` unpickles it with no
restriction: a crafted ``.pdparams`` can run any command when loaded. Checkpoints
are shared (AI Studio datasets, the tutorial's ``.pdparams``), so ``load_checkpoint``
never calls ``paddle.load``: it reads the same pickle with an unpickler that only
rebuilds plain containers and numpy arrays (the allow-list ``SAFE_GLOBALS``, the
approach of the Python docs' "Restricting Globals" and of PyTorch's
``weights_only=True``), refuses anything else before it is called, and then turns
Paddle's ``(name, ndarray)`` tensor records into tensors exactly as ``paddle.load``
does. The files themselves are unchanged: plain ``paddle.load`` still reads them
(for files one trusts), and the tutorial's file names are kept.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import tempfile

import numpy as np
import paddle

from common.config import process_umask

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for this run (other game, other network, unreadable)."""


#: the keys every checkpoint of this project holds (checked on load, named when missing); a loader
#: that needs more passes them as ``required``
REQUIRED_KEYS = ("format", "game", "config")

#: (module, name) pairs the loader may rebuild: containers and numpy arrays, nothing that runs code
SAFE_GLOBALS = frozenset(
    {
        ("collections", "OrderedDict"),
        ("builtins", "tuple"),
        ("builtins", "list"),
        ("builtins", "dict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),  # numpy 2 pickles
    }
)


class UnsafeCheckpointError(CheckpointError):
    """The file asks the unpickler for something outside ``SAFE_GLOBALS``: refused, nothing was run."""


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
    sums = [
        v.sum()
        for _, v in _leaves(state)
        if isinstance(v, paddle.Tensor) and v.dtype in (paddle.float32, paddle.float64)
    ]
    return not sums or bool(paddle.isfinite(paddle.stack(sums)).all())


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
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".pdparams", dir=folder)
    os.close(fd)
    try:
        paddle.save({"format": FORMAT_VERSION, **state}, tmp)
        os.chmod(tmp, 0o666 & ~process_umask())  # mkstemp makes 0600; a checkpoint is an ordinary file
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise OSError(e.errno, f"cannot write checkpoint {path}: {e.strerror}") from e
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in SAFE_GLOBALS:
            raise UnsafeCheckpointError(
                f"it asks to load {module}.{name}, which a checkpoint never needs (the file may be crafted to run code)"
            )
        return super().find_class(module, name)

    def persistent_load(self, pid):
        raise UnsafeCheckpointError("it uses pickle persistent ids, which checkpoints never do")


def _is_tensor_record(obj) -> bool:
    # paddle.save writes each Tensor as (name, ndarray) (paddle.framework.io._transformed_from_varbase)
    return isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], np.ndarray)


def _contains(obj, pred) -> bool:
    if pred(obj):
        return True
    if isinstance(obj, dict):
        return any(_contains(v, pred) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_contains(v, pred) for v in obj)
    return False


def _to_tensors(obj, pred, convert):
    if pred(obj):
        return convert(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _to_tensors(v, pred, convert)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_to_tensors(v, pred, convert) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_tensors(v, pred, convert) for v in obj)
    return obj


def _check_arrays(obj) -> None:
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject:
        raise UnsafeCheckpointError("it holds a numpy array of Python objects")
    if isinstance(obj, dict):
        for v in obj.values():
            _check_arrays(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _check_arrays(v)


def safe_load(path: str):
    """What ``paddle.load(path)`` returns for a file of plain containers, tensors and arrays,
    without running any code from the file. Raises ``UnsafeCheckpointError`` otherwise."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        obj = _SafeUnpickler(io.BytesIO(data)).load()
    except UnsafeCheckpointError as e:
        raise UnsafeCheckpointError(f"refusing to load {path}: {e}") from None
    _check_arrays(obj)
    if _contains(obj, _is_tensor_record):  # as paddle.load: the records become tensors, other arrays stay
        return _to_tensors(obj, _is_tensor_record, lambda t: paddle.to_tensor(t[1]))
    return _to_tensors(obj, lambda a: isinstance(a, np.ndarray), paddle.to_tensor)  # paddle 2.0's format


def load_checkpoint(path: str, required=()) -> dict:
    """A checkpoint written by ``save_checkpoint``, read without running code from the file.

    Raises ``CheckpointError`` (naming the file) when it is missing, unreadable, unsafe,
    not a checkpoint of this project or lacks one of ``REQUIRED_KEYS`` or ``required``.
    """
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    try:
        state = safe_load(path)
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
        raise CheckpointError(f"cannot read checkpoint {path!r}: {type(e).__name__}: {e}") from e
    if not isinstance(state, dict) or "format" not in state or "game" not in state:
        raise CheckpointError(
            f"{path!r} is not a checkpoint of this project (a bare state dict, perhaps the "
            "tutorial's policy weights?): expected a dict with 'game', 'policy', ..."
        )
    keys = list(dict.fromkeys([*REQUIRED_KEYS, *required]))
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(
            f"{path!r} is incomplete: it has no {', '.join(repr(k) for k in missing)} (expected {', '.join(keys)})"
        )
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
            mismatched = [
                f"{k}: checkpoint {tuple(have[k].shape) if k in have else 'missing'} vs run {tuple(v.shape)}"
                for k, v in want.items()
                if k not in have or tuple(have[k].shape) != tuple(v.shape)
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
                key = f"@param{i}" + key[len(name) :]
                break
        out[key] = value
    return out


def set_optimizer_state(optimizer, state: dict) -> None:
    """Inverse of ``optimizer_state`` for this optimizer's parameters."""
    params = optimizer._parameter_list
    renamed = {}
    for key, value in state.items():
        if key.startswith("@param"):
            idx, rest = key[len("@param") :].split("_", 1)
            key = f"{params[int(idx)].name}_{rest}"
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
