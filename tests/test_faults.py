"""The fault suite: each fault injected for real, what the run does, what is kept.

Real parts throughout: real MiniGrid envs in real worker processes (killed with SIGKILL
or hung for real), real Paddle updates, a real full disk (a tmpfs of a few hundred KB,
mounted when the tests run as root), real command lines. ``FAULTS`` describes each case;
``benchmarks/reliability.py`` runs this file and writes ``docs/reliability.md`` from the
outcome of every test, so the table says what was checked, not what was hoped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import paddle
import pytest

from common.ppo.trainer import NonFiniteLossError, RunStoppedError, Trainer
from common.run import tensorfile
from common.run.checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    LegacyCheckpointError,
    load_checkpoint,
    nonfinite_tensors,
    save_checkpoint,
)
from common.run.convert import ConversionError, convert
from common.run.errors import UsageError
from common.run.logger import read_metrics
from gridworld.train import SPEC as GRID
from gridworld.train import GridConfig

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}

#: test name -> (fault, what the run does, what is kept): the rows of docs/reliability.md
FAULTS = {}


def fault(what: str, does: str, kept: str):
    def mark(fn):
        FAULTS[fn.__name__] = (what, does, kept)
        return fn

    return mark


def grid_cfg(tmp_path, **kw):
    base = dict(
        num_processes=2,
        num_workers=-1,
        num_local_steps=8,
        batch_size=2,
        num_epochs=1,
        num_global_steps=48,
        obs_norm_steps=1,
        eval_interval=0,
        video_interval=0,
        save_interval=1,
        histogram_interval=0,
        embedding_interval=0,
        num_threads=1,
        log_path=str(tmp_path),
        run_name="g",
    )
    base.update(kw)
    return GridConfig(**base)


def script(path, *args, timeout=300, env=None):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or ENV,
        cwd=ROOT,
    )


def checkpoints(folder):
    return sorted(glob.glob(os.path.join(folder, "**", "*.pdparams"), recursive=True))


# ------------------------------------------------------------------------------- loading files
class _RunsACommand:
    """Unpickling this runs ``touch <marker>``: what a crafted .pdparams can do to plain pickle."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _evil_checkpoint(path, marker, game):
    with open(path, "wb") as f:  # looks like a checkpoint: the payload sits where the policy weights go
        pickle.dump({"format": 1, "game": game, "config": {}, "policy": _RunsACommand(marker)}, f, protocol=4)


def _write(path, state):
    """A checkpoint file as ``save_checkpoint`` writes one, without its checks (NaN weights pass)."""
    tensorfile.write(str(path), {"format": FORMAT_VERSION, **state})


ENTRY_POINTS = [
    ("mario/train.py", "mario", ["--resume"]),
    ("montezuma/train.py", "montezuma", ["--resume"]),
    ("gridworld/train.py", "gridworld", ["--resume"]),
    ("mario/play.py", "mario", ["--checkpoint"]),
    ("montezuma/play.py", "montezuma", ["--checkpoint"]),
    ("gridworld/play.py", "gridworld", ["--checkpoint"]),
    ("pong/train.py", "pong", ["--resume"]),
    ("pong/play.py", "pong", ["--checkpoint"]),
]


@fault(
    "a crafted .pdparams pickle whose unpickling runs a shell command (or any other pickle: the format of "
    "earlier versions), given to every entry point that loads a file (--resume of the four train.py, "
    "--checkpoint of the four play.py) and to the zoo's export",
    "refuses it unread, in one line naming the conversion command (python -m common.run.convert), exit 1; "
    "the converter refuses the crafted one too: 'refused ...: it asks to load posix.system'",
    "nothing runs; no run folder is created; a pickle is only ever read by the converter, in a capped child",
)
@pytest.mark.parametrize("entry, game, flag", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_malicious_checkpoint_is_refused_by_every_entry_point(entry, game, flag, tmp_path):
    evil, marker = tmp_path / "evil.pdparams", tmp_path / "pwned"
    _evil_checkpoint(evil, marker, game)
    t0 = time.perf_counter()
    res = (
        script(entry, *flag, str(evil), "--log-path", str(tmp_path / "runs"))
        if "train" in entry
        else script(entry, *flag, str(evil))
    )
    assert not marker.exists(), "the checkpoint ran its command"
    assert res.returncode == 1 and "is a pickle" in res.stderr, res.stderr[-2000:]
    assert "python -m common.run.convert" in res.stderr and "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1, res.stderr
    assert not (tmp_path / "runs").exists()
    assert time.perf_counter() - t0 < 60  # the interpreter's start-up and Paddle's import, nothing from the file
    if entry == "gridworld/train.py":  # the converter reads it in its capped child, and refuses it
        conv = subprocess.run(
            [sys.executable, "-m", "common.run.convert", str(evil)], cwd=ROOT, capture_output=True, text=True, env=ENV
        )
        assert conv.returncode == 1 and "system" in conv.stderr and not marker.exists(), conv.stderr
        zoo = subprocess.run(
            [sys.executable, "-m", "common.zoo", "export", "--game", game, "--checkpoint", str(evil), "--name", "x"],
            cwd=ROOT, capture_output=True, text=True, env=ENV,
        )  # fmt: skip
        assert zoo.returncode == 1 and "is a pickle" in zoo.stderr and "Traceback" not in zoo.stderr, zoo.stderr


@fault(
    "a checkpoint of an earlier version (a paddle.save pickle of a real gridworld run), converted with "
    "python -m common.run.convert",
    "the converted file holds the same values, tensors as Paddle tensors and arrays as arrays, and --resume "
    "continues from it",
    "the original is replaced only once the converted file is complete",
)
def test_a_checkpoint_of_an_earlier_version_converts_and_resumes(tmp_path):
    t = Trainer(GRID, grid_cfg(tmp_path, num_global_steps=16))
    path = t.train()["checkpoint"]
    ours = load_checkpoint(path)
    legacy = str(tmp_path / "legacy.pdparams")
    paddle.save({**ours, "format": 1}, legacy)  # what versions before this one wrote
    with pytest.raises(LegacyCheckpointError, match="python -m common.run.convert"):
        load_checkpoint(legacy)
    assert convert(legacy) == legacy
    converted = load_checkpoint(legacy)

    def same(a, b):
        if isinstance(a, dict):
            assert set(a) == set(b)
            for k in a:
                same(a[k], b[k])
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b) and type(a) is type(b)
            for x, y in zip(a, b):
                same(x, y)
        elif isinstance(a, paddle.Tensor):
            assert isinstance(b, paddle.Tensor) and a.dtype == b.dtype
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        elif isinstance(a, np.ndarray):
            assert isinstance(b, np.ndarray) and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b and type(a) is type(b)

    same(ours, converted)
    resumed = Trainer(GRID, grid_cfg(tmp_path / "r", run_name="resumed", num_global_steps=32, resume=legacy))
    assert resumed.update == ours["update"] and resumed.train()["update"] == 2


class _Eval:
    def __reduce__(self):
        return (eval, ("1 + 1",))


class _Crafted:
    """Pickles as ``callable(*args)`` followed by ``BUILD state``: how a crafted file spells an object."""

    def __init__(self, fn, args, state=None):
        self.reduced = (fn, args) if state is None else (fn, args, state)

    def __reduce__(self):
        return self.reduced


def _array(shape, data, dtype=None, dims_ok=True):
    """An ndarray as numpy pickles one, with any shape and buffer: numpy's own rebuilding would accept
    a huge shape over a tiny buffer when the dtype's itemsize is 0, and abort the process later."""
    from numpy.core.multiarray import _reconstruct

    return _Crafted(_reconstruct, (np.ndarray, (0,), b"b"), (1, shape, dtype or np.dtype("f4"), False, data))


def _laughs(depth):
    """Nested lists sharing references: a few hundred bytes that expand to 2**depth leaves."""
    a = ["lol"]
    for _ in range(depth):
        a = [a, a, a, a]
    return a


def _deep_tuple_key_pickle(depth) -> bytes:
    """A checkpoint-like pickle with a tuple nested ``depth`` deep as a dict key (opcodes spelled by hand:
    ``pickle`` itself cannot write it): hashing that key recursed in C and crashed the old loader."""
    head = pickle.dumps({"format": 1, "game": "gridworld", "config": {}, "policy": {}, "update": 0}, protocol=2)
    return head[:-1] + b")" + b"\x85" * depth + b"K\x01s."  # (), then TUPLE1 x depth, value 1, SETITEM, STOP


HOSTILE = {
    "huge shape, tiny buffer": {"w": _array((2**40,), b"\0" * 4)},
    "zero-itemsize dtype (zero strides)": {"w": _array((2**31, 2**31), b"", np.dtype("V0"))},
    "structured dtype": {"w": _array((4,), b"\0" * 16, np.dtype([("a", "f4")]))},
    "negative dimension": {"w": _array((-1, 4), b"\0" * 16)},
    "object dtype": {"w": _array((1,), b"\0" * 8, np.dtype("O"))},
    "billion laughs": {"visited": _laughs(60)},
    "eval": {"x": _Eval()},
}


@fault(
    "a small crafted pickle (146-300 bytes): an array with a huge shape over a tiny buffer, a zero-itemsize, "
    "structured or object dtype, a negative dimension, nested lists sharing references ('billion laughs'), a "
    "call of eval; and a tuple nested 100,000 deep as a dict key (the old loader's crash), given to the converter",
    "the loaders refuse every pickle unread; the converter refuses each in its child, within its memory and "
    "time caps, in one line naming the file, exit 1",
    "nothing is written; the machine's memory is not touched beyond the child's cap",
)
@pytest.mark.parametrize("case", [*HOSTILE, "deep tuple key"], ids=[*HOSTILE, "deep tuple key"])
def test_hostile_pickles_are_refused_by_the_converter(case, tmp_path):
    path = str(tmp_path / "hostile.pdparams")
    with open(path, "wb") as f:
        if case == "deep tuple key":
            f.write(_deep_tuple_key_pickle(100_000))
        else:
            pickle.dump(
                {"format": 1, "game": "gridworld", "config": {}, "policy": {}, "update": 0, **HOSTILE[case]},
                f,
                protocol=2,
            )
    original = open(path, "rb").read()
    t0 = time.perf_counter()
    with pytest.raises(LegacyCheckpointError, match="convert it once"):  # every loader: unread, at once
        load_checkpoint(path)
    assert time.perf_counter() - t0 < 1.0
    t0 = time.perf_counter()
    with pytest.raises(ConversionError, match="refused .*hostile.pdparams") as e:
        convert(path)
    assert time.perf_counter() - t0 < 30 and "\n" not in str(e.value)
    assert open(path, "rb").read() == original and len(os.listdir(tmp_path)) == 1  # nothing written


def _tensorfile_case(case) -> bytes:
    """A small crafted checkpoint in this version's format: its header lies, or its state does."""
    import json
    import struct

    good = tensorfile.dumps(
        {"format": FORMAT_VERSION, "game": "gridworld", "config": {}, "policy": {"w": np.ones(4, "f4")}}
    )
    (n,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8 : 8 + n])
    data = good[8 + n :]

    def build(h, body=data):
        raw = json.dumps(h).encode()
        return struct.pack("<Q", len(raw)) + raw + body

    meta = header["__metadata__"]
    state = json.loads(meta["state"])
    if case == "header length past the file":
        return struct.pack("<Q", 2**60) + good[8:]
    if case == "huge shape on 16 bytes":
        return build({**header, "policy/w": {"dtype": "F32", "shape": [2**39], "data_offsets": [0, 16]}})
    if case == "unknown dtype":
        return build({**header, "policy/w": {"dtype": "O", "shape": [4], "data_offsets": [0, 16]}})
    if case == "overlapping tensors":
        extra = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
        state["policy"]["v"] = {"__array__": "policy/v"}
        return build({**header, "policy/v": extra, "__metadata__": {**meta, "state": json.dumps(state)}})
    if case == "JSON nested 100,000 deep":
        return build({**header, "__metadata__": {**meta, "state": "[" * 100_000 + "]" * 100_000}})
    if case == "a 100,000-digit number":
        return build(
            {**header, "__metadata__": {**meta, "state": json.dumps({"update": 0}).replace("0", "9" * 100_000)}}
        )
    if case == "a tensor referenced twice":
        state["config"] = {"again": {"__array__": "policy/w"}}
        return build({**header, "__metadata__": {**meta, "state": json.dumps(state)}})
    if case == "NaN weights":
        return build(header, np.full(4, np.nan, "f4").tobytes())
    if case == "not a checkpoint":
        return build({"policy/w": header["policy/w"]})
    raise AssertionError(case)


TENSORFILE_CASES = {  # case -> what the refusal names
    "header length past the file": "header claims",
    "huge shape on 16 bytes": "does not fill its 16 bytes",
    "unknown dtype": "dtype 'O' is not one of",
    "overlapping tensors": "gap or an overlap",
    "JSON nested 100,000 deep": "nests deeper than 64",
    "a 100,000-digit number": "number longer than 64",
    "a tensor referenced twice": "twice",
    "NaN weights": "NaN or an infinity",
    "not a checkpoint": "not a checkpoint of this project",
}


@fault(
    "a small crafted checkpoint in this version's format (safetensors + JSON): a header length past the file, "
    "a huge shape over 16 bytes, an unknown dtype, overlapping tensors, JSON nested 100,000 deep, a "
    "100,000-digit number, a tensor referenced twice, NaN weights, a plain safetensors file",
    "refused within a second and a few MB, in one line naming the file and the entry, exit 1 at an entry point",
    "nothing is allocated beyond the file's own size; no run folder is created",
)
@pytest.mark.parametrize("case", TENSORFILE_CASES, ids=list(TENSORFILE_CASES))
def test_hostile_checkpoints_are_refused_fast(case, tmp_path):
    import resource

    path = str(tmp_path / "hostile.pdparams")
    with open(path, "wb") as f:
        f.write(_tensorfile_case(case))
    before, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(CheckpointError, match=re.escape(TENSORFILE_CASES[case])) as e:
        load_checkpoint(path)
    assert time.perf_counter() - t0 < 1.0 and path in str(e.value) and len(str(e.value)) < 400
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KB: no big allocation
    if case in ("huge shape on 16 bytes", "JSON nested 100,000 deep"):  # and at an entry point
        res = script("gridworld/play.py", "--checkpoint", path)
        assert res.returncode == 1 and TENSORFILE_CASES[case] in res.stderr and "Traceback" not in res.stderr


@fault(
    "a checkpoint without its 'optimizer' or 'config' entry given to --resume",
    "CheckpointError naming the file and the missing entries, exit 1",
    "no run folder is created",
)
def test_incomplete_checkpoint_is_named(tmp_path):
    t = Trainer(GRID, grid_cfg(tmp_path, num_global_steps=16))
    state = load_checkpoint(t.train()["checkpoint"])
    for key in ("optimizer", "config"):
        partial = {k: v for k, v in state.items() if k != key}
        path = str(tmp_path / f"no_{key}.pdparams")
        save_checkpoint(path, partial)
        with pytest.raises(CheckpointError, match=f"incomplete: it has no '{key}'"):
            Trainer(GRID, grid_cfg(tmp_path / "x", run_name=key, resume=path))
        assert not (tmp_path / "x").exists()  # a refused --resume leaves no empty run folder


def _tamper(state, case):
    """A copy of a real gridworld checkpoint's state, changed as a careless or hostile hand would."""
    import copy

    state = copy.copy(state)
    policy = dict(state["policy"])
    first = next(iter(policy))
    if case == "update is a string":
        state["update"] = "5"
    elif case == "nan_total is a string":
        state["nan_total"] = "0"
    elif case == "world_size is a string":
        state["world_size"] = "1"
    elif case == "negative update":
        state["update"] = -5
    elif case == "weight as float64":
        policy[first] = paddle.cast(policy[first], "float64")
    elif case == "weight as int32":
        policy[first] = paddle.cast(policy[first], "int32")
    elif case == "policy entry a float":
        policy[first] = 0.5
    elif case == "NaN weight":
        w = policy[first].numpy().copy()
        w.flat[0] = np.nan
        policy[first] = paddle.to_tensor(w)
    elif case == "optimizer key for a missing parameter":
        state["optimizer"] = {**state["optimizer"], "@param99_moment1_0": paddle.zeros([3])}
    elif case == "optimizer moment of the wrong shape":
        key = next(k for k in state["optimizer"] if "moment1" in k)
        state["optimizer"] = {**state["optimizer"], key: paddle.zeros([7, 7])}
    elif case == "intrinsic weight of the wrong shape":
        predictor = dict(state["intrinsic"]["predictor"])
        name = next(iter(predictor))
        predictor[name] = paddle.zeros([*predictor[name].shape[:-1], predictor[name].shape[-1] + 1])
        state["intrinsic"] = {**state["intrinsic"], "predictor": predictor}
    elif case == "format 99":
        state["format"] = 99
    elif case == "config a list":
        state["config"] = [1, 2]
    elif case == "another game's checkpoint":
        state = {"format": FORMAT_VERSION, "game": "pong", "config": {}, "policy": {}}
    state["policy"] = policy if case != "another game's checkpoint" else state["policy"]
    return state


TAMPERED = {  # case -> what the error names
    "update is a string": "entry 'update' is '5'",
    "nan_total is a string": "entry 'nan_total'",
    "world_size is a string": "entry 'world_size'",
    "negative update": "entry 'update' is -5",
    "weight as float64": "dtype",
    "weight as int32": "dtype",
    "policy entry a float": "checkpoint a float vs run",
    "NaN weight": "tensor 'policy/features.0.weight' holds a NaN or an infinity",
    "optimizer key for a missing parameter": "the optimizer has parameters 0 to",
    "optimizer moment of the wrong shape": "its parameter's is",
    "intrinsic weight of the wrong shape": "intrinsic/predictor",
    "format 99": "checkpoint format 99",
    "config a list": "entry 'config' is a list",
    "another game's checkpoint": "written by game 'pong'; this is 'gridworld'",
}


@fault(
    "a checkpoint tampered with but harmless: counters as strings or negative, a weight as float64 / int32 or "
    "a float, NaN weights, an optimizer entry for a parameter that does not exist or of the wrong shape, "
    "intrinsic weights of the wrong shape, format 99, config a list, another game's checkpoint",
    "CheckpointError naming the file and the entry (no traceback, no silently fresh weights), exit 1",
    "nothing is trained or saved from it; no run folder is created",
)
@pytest.mark.parametrize("case", TAMPERED, ids=list(TAMPERED))
def test_tampered_checkpoints_are_named(case, tmp_path, tampered_source):
    path = str(tmp_path / "tampered.pdparams")
    _write(path, _tamper(tampered_source, case))
    with pytest.raises(CheckpointError, match=re.escape(TAMPERED[case])) as e:
        Trainer(GRID, grid_cfg(tmp_path / "runs", run_name="resumed", resume=path))
    assert path in str(e.value)
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def tampered_source(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("source")
    return load_checkpoint(Trainer(GRID, grid_cfg(tmp, num_global_steps=16)).train()["checkpoint"])


def test_a_folder_or_a_device_given_as_a_checkpoint_is_named_as_such(tmp_path):
    with pytest.raises(CheckpointError, match="is a folder: give the .pdparams file in it"):
        Trainer(GRID, grid_cfg(tmp_path / "runs", run_name="r", resume=str(tmp_path)))
    with pytest.raises(CheckpointError, match="is not a regular file"):
        Trainer(GRID, grid_cfg(tmp_path / "runs", run_name="r", resume="/dev/zero"))
    with pytest.raises(CheckpointError, match="does not exist"):
        Trainer(GRID, grid_cfg(tmp_path / "runs", run_name="r", resume=str(tmp_path / "missing.pdparams")))


def test_a_gridworld_checkpoint_given_to_pong_is_named_another_games(tmp_path, tampered_source):
    path = str(tmp_path / "grid.pdparams")
    save_checkpoint(path, tampered_source)
    res = script("pong/train.py", "--resume", path, "--log-path", str(tmp_path / "runs"))
    assert res.returncode == 1 and "error: --resume: " in res.stderr, res.stderr[-1500:]
    assert "written by game 'gridworld'; this is 'pong'" in res.stderr, res.stderr[-1500:]


def test_tampered_checkpoints_are_named_at_play(tmp_path, tampered_source):
    for case in ("config a list", "weight as float64", "NaN weight"):
        path = str(tmp_path / f"{case.replace(' ', '_')}.pdparams")
        _write(path, _tamper(tampered_source, case))
        res = script("gridworld/play.py", "--checkpoint", path, "--output", str(tmp_path / "x.mp4"))
        assert res.returncode == 1 and TAMPERED[case] in res.stderr and "Traceback" not in res.stderr, res.stderr


# ------------------------------------------------------------------------------- run folders
@fault(
    "--run-name ../../x, an absolute --run-name, or one of 300 characters",
    "refused by the flag check: '--run-name ... is invalid: expected a plain folder name', exit 2",
    "nothing is written outside --log-path",
)
def test_run_names_cannot_escape_the_log_path(tmp_path):
    for name in ("../../escaped", str(tmp_path / "abs"), "a/b", "..", "x" * 300):
        res = script("gridworld/train.py", "--run-name", name, "--log-path", str(tmp_path / "runs"))
        assert res.returncode == 2 and "--run-name" in res.stderr and "plain folder name" in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "abs").exists()


@fault(
    "a new run given the --run-name of an earlier run",
    "refused before anything is written: 'run folder ... already holds a run: ... or continue that run with "
    "--resume', exit 2; --resume of one of its checkpoints continues in that folder (without --run-name too)",
    "the earlier run's checkpoints, config.json and metrics.jsonl are untouched",
)
def test_a_run_folder_is_never_reused_by_a_new_run(tmp_path):
    first = Trainer(GRID, grid_cfg(tmp_path, run_name="same", num_global_steps=16)).train()
    run_dir = first["run_dir"]
    before = {f: os.path.getmtime(os.path.join(run_dir, f)) for f in ("config.json", "metrics.jsonl")}
    with pytest.raises(UsageError, match="already holds a run"):
        Trainer(GRID, grid_cfg(tmp_path, run_name="same", num_global_steps=16))
    assert before == {f: os.path.getmtime(os.path.join(run_dir, f)) for f in before}
    res = script("gridworld/train.py", "--run-name", "same", "--log-path", str(tmp_path))
    assert res.returncode == 2 and "already holds a run" in res.stderr and "--resume" in res.stderr, res.stderr
    # a resume continues its own folder, named or not
    resumed = Trainer(GRID, grid_cfg(tmp_path, run_name="", num_global_steps=32, resume=first["checkpoint"])).train()
    assert resumed["run_dir"] == run_dir and resumed["update"] == 2
    with pytest.raises(UsageError, match="belongs to another run folder"):
        other = Trainer(GRID, grid_cfg(tmp_path, run_name="other", num_global_steps=16)).train()
        Trainer(GRID, grid_cfg(tmp_path, run_name="same", num_global_steps=48, resume=other["checkpoint"]))


@fault(
    "resuming a run whose metrics.jsonl ends in a torn line (killed mid-write), or whose folder holds a "
    "partial .tmp_*.pdparams of a save that was SIGKILLed",
    "the torn line is cut (a warning names it) before new records are appended; the stale temporary file "
    "is removed at start",
    "every complete record; read_metrics reads the whole file",
)
def test_resume_repairs_a_torn_metrics_tail_and_removes_stale_temporaries(tmp_path):
    first = Trainer(GRID, grid_cfg(tmp_path, run_name="torn", num_global_steps=16)).train()
    run_dir = first["run_dir"]
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        f.write('{"tag": "perf/steps_per_sec", "st')
    stale = os.path.join(run_dir, "models", ".tmp_abc123.pdparams")
    open(stale, "wb").write(b"\0" * 1000)
    with pytest.warns(RuntimeWarning, match="torn last line"):
        Trainer(GRID, grid_cfg(tmp_path, run_name="torn", num_global_steps=32, resume=first["checkpoint"])).train()
    assert not os.path.exists(stale)
    steps, _ = read_metrics(run_dir)["perf/steps_per_sec"]  # no error: every line is whole
    assert len(steps) == 2


@fault(
    "--seed -1 or 2**64+1 (every train.py, play.py), --intrinsic-frames 0 or 99, --ray-address without "
    "--vec-env ray, play.py --output / --plot in a read-only folder",
    "refused naming the flag, the value and what is accepted, exit 2",
    "nothing is started; a play refused for its checkpoint leaves no empty --output folder",
)
def test_careless_values_are_named(tmp_path, capsys):
    from gridworld.train import main as gridworld
    from mario.train import main as mario
    from pong.train import main as pong

    def refused(main, *flags):  # in this process: train.py calls main() and nothing else
        with pytest.raises(SystemExit) as stop:
            main([*flags, "--log-path", str(tmp_path / "runs")])
        return stop.value.code, capsys.readouterr().err

    for main in (gridworld, mario, pong):
        for seed in ("-1", str(2**64 + 1)):
            code, err = refused(main, "--seed", seed)
            assert code == 2 and f"--seed {seed} is invalid" in err, (main.__module__, err[-500:])
    for frames in ("0", "99"):
        code, err = refused(gridworld, "--intrinsic-frames", frames)
        assert code == 2 and f"--intrinsic-frames {frames} is invalid" in err, err[-500:]
    code, err = refused(gridworld, "--intrinsic-frames", "4")
    assert code == 2 and "expected 1 to 3" in err, err[-500:]
    code, err = refused(gridworld, "--ray-address", "auto")
    assert code == 2 and "--ray-address 'auto' is invalid" in err, err[-500:]
    assert not (tmp_path / "runs").exists()
    ckpt = Trainer(GRID, grid_cfg(tmp_path, run_name="p", num_global_steps=16)).train()["checkpoint"]
    res = script("gridworld/play.py", "--checkpoint", ckpt, "--seed", "-1")
    assert res.returncode == 2 and "--seed -1 is invalid" in res.stderr
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for flag in ("--output", "--plot"):  # a parent that is a file: unusable for anyone, root included
        res = script("gridworld/play.py", "--checkpoint", ckpt, flag, str(a_file / "x.png"))
        assert res.returncode == 2 and flag in res.stderr and "not a folder" in res.stderr, res.stderr[-500:]
    res = script("gridworld/play.py", "--checkpoint", str(a_file), "--output", str(tmp_path / "new" / "x.mp4"))
    assert res.returncode != 0 and "a_file" in res.stderr, res.stderr[-500:]
    assert not (tmp_path / "new").exists()  # a refused checkpoint leaves no empty output folder
    res = script("gridworld/play.py", "--checkpoint", ckpt, "--output", str(tmp_path / "made" / "sub" / "x.mp4"))
    assert res.returncode == 0 and (tmp_path / "made" / "sub" / "x.mp4").is_file(), res.stderr[-500:]
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # (root may write anywhere: then this part cannot be made)
            res = script("gridworld/play.py", "--checkpoint", ckpt, "--output", str(locked / "x.mp4"))
            assert res.returncode == 2 and "not writable" in res.stderr, res.stderr[-500:]
    finally:
        locked.chmod(0o700)


@fault(
    "flags whose size would exhaust memory or overflow later: --num-local-steps 1000000000, --num-processes "
    "1000000, --worker-timeout 1e308, --max-eval-steps 10**20; a rollout, or Pong's replay memory "
    "(--memory-capacity 10000000000), larger than the machine's memory",
    "refused naming the flag and the bound ('at most ...', or the rollout's or replay's size against the memory), "
    "exit 2",
    "nothing is allocated or started",
)
def test_flags_too_large_for_the_machine_are_named(tmp_path):
    for flag, value, needle in (
        ("--num-local-steps", "1000000000", "at most 1,000,000"),
        ("--num-processes", "1000000", "at most 4,096"),
        ("--worker-timeout", "1e308", "at most 86,400"),
        ("--max-eval-steps", str(10**20), "at most 10,000,000"),
    ):
        res = script("gridworld/train.py", flag, value, "--log-path", str(tmp_path / "runs"))
        assert res.returncode == 2 and f"{flag} " in res.stderr and needle in res.stderr, res.stderr[-500:]
    res = script(
        "montezuma/train.py",
        "--num-local-steps",
        "900000",
        "--num-processes",
        "4096",
        "--log-path",
        str(tmp_path / "r"),
    )
    assert res.returncode == 2 and "the rollout needs" in res.stderr and "GB" in res.stderr, res.stderr[-500:]
    res = script("pong/train.py", "--memory-capacity", "10000000000", "--log-path", str(tmp_path / "p"))
    assert res.returncode == 2 and "--memory-capacity 10000000000 is invalid here: the replay memory" in res.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "r").exists() and not (tmp_path / "p").exists()


IMPOSSIBLE = {  # what is changed -> what the refusal names
    "int_rms var negative": ("int_rms", "var is negative"),
    "int_rms mean an infinity": ("int_rms", "NaN or an infinity"),
    "obs_rms count negative": ("intrinsic/obs_rms", "count is -3.0"),
    "int_filter gamma 5": ("int_filter", "gamma is 5"),
    "update 2**63": ("update", "entry 'update' is 9223372036854775808"),
    "visited a string": ("visited", "entry 'visited' is a str"),
    "visited holds a list": ("visited", "entry 'visited' holds"),
    "env_state a string": ("env_state", "env_state is not a list"),
    "gate_memory holds floats": ("gate_memory", "gate_memory is not a list of int64"),
    "rank_state a bad generator": ("rank_state", "rank_state is not a list of"),
}


@fault(
    "a checkpoint whose numbers are impossible: a negative or infinite running variance/mean of the intrinsic "
    "return, a negative observation count, a discount of 5, update 2**63, visited rooms of the wrong type, "
    "episodes in progress that are not a list of episodes, a first-visit gate's memory of floats, a rank's "
    "random stream that is not a generator state",
    "CheckpointError naming the file and the entry, exit 1",
    "nothing is trained or saved from it; no loop runs through 2**63 updates",
)
@pytest.mark.parametrize("case", IMPOSSIBLE, ids=list(IMPOSSIBLE))
def test_impossible_numbers_in_a_checkpoint_are_named(case, tmp_path, tampered_source):
    state = {k: v for k, v in tampered_source.items()}
    if case == "int_rms var negative":
        state["int_rms"] = {**state["int_rms"], "var": np.array(-1.0)}
    elif case == "int_rms mean an infinity":
        state["int_rms"] = {**state["int_rms"], "mean": np.array(np.inf)}
    elif case == "obs_rms count negative":
        state["intrinsic"] = {**state["intrinsic"], "obs_rms": {**state["intrinsic"]["obs_rms"], "count": -3.0}}
    elif case == "int_filter gamma 5":
        state["int_filter"] = {**state["int_filter"], "gamma": 5.0}
    elif case == "update 2**63":
        state["update"] = 2**63
    elif case == "visited a string":
        state["visited"] = "rooms"
    elif case == "visited holds a list":
        state["visited"] = {1: [2]}
    elif case == "env_state a string":
        state["env_state"] = "episodes"
    elif case == "gate_memory holds floats":
        state["gate_memory"] = [np.zeros(3, np.float64) for _ in state["env_state"]]
    elif case == "rank_state a bad generator":
        n = len(state["env_state"])
        state["rank_state"] = [{"filter": np.zeros(n), "rngs": [{"bit_generator": "MT19937", "state": 5}]}]
    path = str(tmp_path / "impossible.pdparams")
    if case == "int_rms mean an infinity":  # the format itself refuses it: written by hand around the check
        _write(path, {**state, "int_rms": {**state["int_rms"], "mean": np.array(1.0)}})
        raw = open(path, "rb").read()
        marker = np.array(1.0).tobytes()
        assert raw.count(marker) >= 1
        with open(path, "wb") as f:  # the last float64 1.0 written is the mean: made an infinity
            i = raw.rfind(marker)
            f.write(raw[:i] + np.array(np.inf).tobytes() + raw[i + 8 :])
    else:
        _write(path, state)
    entry, needle = IMPOSSIBLE[case]
    with pytest.raises(CheckpointError) as e:
        Trainer(GRID, grid_cfg(tmp_path / "runs", run_name="resumed", resume=path))
    message = str(e.value)
    assert path in message and (needle in message or "NaN or an infinity" in message), message
    assert not (tmp_path / "runs").exists()


CARELESS_CONFIG = {  # config field -> (value, what the refusal names)
    "world": (9, "--world 9 is invalid"),
    "stage": ("1", "--stage '1' is invalid: expected a int"),
    "action_type": ("diagonal", "--action-type 'diagonal' is invalid"),
    "max_actions": (-5, "--max-actions -5 is invalid"),
}


@fault(
    "a checkpoint whose config a play script uses is careless: world 9, stage '1' (a string), action type "
    "'diagonal', max_actions -5; a MiniGrid one with an unknown env id",
    "play.py refuses it with the train script's own check, naming the file and the flag, exit 1",
    "nothing is played or recorded",
)
def test_careless_configs_in_a_checkpoint_are_named_at_play(tmp_path):
    from mario.train import SPEC as MARIO
    from mario.train import MarioConfig

    cfg = MarioConfig(world=1, stage=1, num_processes=1, num_workers=-1, num_local_steps=8, batch_size=1)
    trainer = Trainer(MARIO, MarioConfig(**{**cfg.to_dict(), "log_path": str(tmp_path), "run_name": "m"}))
    state = trainer.state_dict()
    trainer.close()
    for field, (value, needle) in CARELESS_CONFIG.items():
        path = str(tmp_path / f"{field}.pdparams")
        save_checkpoint(path, {**state, "config": {**state["config"], field: value}})
        res = script("mario/play.py", "--checkpoint", path, "--output", str(tmp_path / "x.mp4"))
        assert res.returncode == 1 and needle in res.stderr and path in res.stderr, (field, res.stderr[-800:])
        assert "Traceback" not in res.stderr
    grid = load_checkpoint(Trainer(GRID, grid_cfg(tmp_path, run_name="g2", num_global_steps=16)).train()["checkpoint"])
    path = str(tmp_path / "env.pdparams")
    save_checkpoint(path, {**grid, "config": {**grid["config"], "env_id": "MiniGrid-Nowhere-v0"}})
    res = script("gridworld/play.py", "--checkpoint", path, "--output", str(tmp_path / "y.mp4"))
    assert res.returncode == 1 and "MiniGrid-Nowhere-v0" in res.stderr and "Traceback" not in res.stderr, res.stderr


@fault(
    "run folders misused: a new run's --saved-path pointing at another run's checkpoints, two runs of the same "
    "name started at once, a run with --saved-path resumed, a run folder whose models/ is a symlink into "
    "another run, --log-path ''",
    "refused naming the folder ('holds another run's checkpoints', 'in use by another run right now', 'leads "
    "out of it', '--log-path '' is invalid'), exit 2; the --saved-path run resumes in its own run folder",
    "no run writes into another run's folders",
)
def test_run_folders_are_never_shared(tmp_path):
    first = Trainer(GRID, grid_cfg(tmp_path, run_name="a", num_global_steps=16)).train()
    with pytest.raises(UsageError, match="holds another run's checkpoints"):
        Trainer(GRID, grid_cfg(tmp_path, run_name="b", saved_path=os.path.dirname(first["checkpoint"])))
    # a run with its checkpoints elsewhere: resumed, it continues in its own run folder
    elsewhere = tmp_path / "ckpts"
    own = Trainer(GRID, grid_cfg(tmp_path, run_name="c", num_global_steps=16, saved_path=str(elsewhere))).train()
    assert own["checkpoint"].startswith(str(elsewhere))
    resumed = Trainer(GRID, grid_cfg(tmp_path, run_name="", num_global_steps=32, resume=own["checkpoint"],
                                     saved_path=str(elsewhere)))  # fmt: skip
    assert resumed.run_dir == str(tmp_path / "c")
    resumed.close()
    # two runs of one name at once: the second is refused while the first holds its folder
    holder = Trainer(GRID, grid_cfg(tmp_path, run_name="d", num_global_steps=16))
    for f in ("config.json", "metrics.jsonl"):  # as if the second had checked the folder before these existed
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp_path / "d" / f)
    try:
        code = (
            "import sys; sys.path.insert(0, '.')\n"
            "from gridworld.train import SPEC, GridConfig\nfrom common.ppo.trainer import Trainer\n"
            f"Trainer(SPEC, GridConfig(log_path={str(tmp_path)!r}, run_name='d', num_workers=-1))"
        )
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=ENV)
        assert res.returncode != 0 and "in use by another run right now" in res.stderr, res.stderr[-800:]
    finally:
        holder.close()
    # a models/ that is a symlink into another run's folder is never followed
    (tmp_path / "e").mkdir()
    os.symlink(os.path.dirname(first["checkpoint"]), tmp_path / "e" / "models")
    with pytest.raises(UsageError, match="leads out of it"):
        Trainer(GRID, grid_cfg(tmp_path, run_name="e"))
    res = script("gridworld/train.py", "--log-path", "")
    assert res.returncode == 2 and "--log-path '' is invalid" in res.stderr, res.stderr[-500:]


@fault(
    "a metrics.jsonl whose record in the middle is malformed (a missing step, a string value), read by a "
    "report or a notebook (read_metrics)",
    "ValueError naming the file and the line",
    "the records before it are not silently mixed with garbage",
)
def test_malformed_metrics_records_are_named_by_line(tmp_path):
    for bad in ('{"tag": "a", "value": 1.0}', '{"tag": "a", "step": 1, "value": "x"}', "[1, 2]"):
        (tmp_path / "metrics.jsonl").write_text(
            '{"tag": "a", "step": 0, "value": 1.0}\n' + bad + '\n{"tag": "a", "step": 2, "value": 3.0}\n'
        )
        with pytest.raises(ValueError, match=r"metrics.jsonl, line 2: expected"):
            read_metrics(str(tmp_path))


@fault(
    "a zoo card edited by hand: its file outside zoo/ ('../../etc/passwd'), a negative agent_steps, an episode "
    "seed that is a string, a card that is not JSON",
    "CardError naming the card and the entry when the zoo is read (table, notebooks, tests)",
    "nothing outside zoo/ is opened as an agent",
)
def test_careless_zoo_cards_are_named(tmp_path):
    import json as _json

    from common import zoo

    card = zoo.cards()[0]
    shutil.copy(os.path.join(zoo.ZOO, card["file"]), tmp_path / card["file"])
    for entry, value, needle in (
        ("file", "../../etc/passwd", "entry 'file' is invalid"),
        ("agent_steps", -5, "entry 'agent_steps' is invalid"),
        ("episode", {**card["episode"], "seed": "0"}, "entry 'episode/seed' is invalid"),
    ):
        (tmp_path / "x.json").write_text(_json.dumps({**card, entry: value}))
        with pytest.raises(zoo.CardError, match=re.escape(needle)) as e:
            zoo.cards(str(tmp_path))
        assert "x.json" in str(e.value)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(zoo.CardError, match="is not JSON"):
        zoo.cards(str(tmp_path))


@fault(
    "the zoo's export given --hours -1 or nan, --seed -1, or a --zoo that is a file",
    "refused naming the flag, the value and what is accepted, exit 2",
    "nothing is written: no weights without a card",
)
def test_zoo_export_refuses_bad_input_before_writing_anything(tmp_path, capsys):
    from common import zoo

    checkpoint = os.path.join(ROOT, "zoo", "keycorridor-s3r2-rnd.pdparams")
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    base = ["export", "--game", "gridworld", "--checkpoint", checkpoint, "--name", "x", "--zoo"]
    cases = [
        ([str(tmp_path / "zoo"), "--hours", "-1"], "--hours -1.0 is invalid: expected the run's wall hours"),
        ([str(tmp_path / "zoo"), "--hours", "nan"], "--hours nan is invalid"),
        ([str(tmp_path / "zoo"), "--seed", "-1"], "--seed -1 is invalid: expected an integer from 0"),
        ([str(blocker)], f"--zoo '{blocker}' is unusable: {blocker} is not a folder"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit):
            zoo.main(base + args)
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "zoo").exists()


@fault(
    "a long-run suite (benchmarks/mario_no_reward.py, montezuma_snd.py, mario_flag.py) given a misspelt flag "
    "of its own (--report-onyl) or a bad trainer flag, --report-only with a --results or --docs folder that is "
    "not there, a summary that is not JSON, a report page without its markers",
    "refused in one line naming the flag or file before any run starts (a misspelt flag was passed on to the "
    "trainers, which started the plan); exit 2 or 1",
    "the report page is not rewritten (it would have been emptied)",
)
def test_a_suite_refuses_bad_input_before_anything_runs_or_is_written(tmp_path, capsys):
    """lanes.suite_main: a misspelt flag of the suite is not passed on to the trainer (which would start the
    plan), and the report is not rebuilt from a folder that is not there (it would empty the page)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import mario_no_reward as bench

    page = tmp_path / "docs" / "mario_no_reward.md"
    page.parent.mkdir()
    shutil.copy(os.path.join(ROOT, "docs", "mario_no_reward.md"), page)
    before = page.read_text()
    cases = [
        (["--report-onyl"], "--report-onyl: neither a flag of this suite nor of mario/train.py"),
        (["--status", "--num-global-steps", "x"], "mario/train.py: argument --num-global-steps: invalid int value"),
        (["--report-only", "--results", str(tmp_path / "nosuch")], "is not a folder: expected the folder of the runs'"),
        (["--report-only", "--docs", str(tmp_path / "nodocs")], "is not a folder: expected the folder of the report"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            bench.main(argv + (["--docs", str(page.parent)] if "--docs" not in argv else []))
        assert message in capsys.readouterr().err, argv
    broken = tmp_path / "results"
    broken.mkdir()
    (broken / "mario11_noreward_rnd_seed0.json").write_text("{not json")
    with pytest.raises(SystemExit, match="mario11_noreward_rnd_seed0.json is not a run summary"):
        bench.main(["--report-only", "--results", str(broken), "--docs", str(page.parent)])
    page.write_text(before.replace("<!-- mario-no-reward-results:end -->", ""))
    with pytest.raises(SystemExit, match="lacks the report's markers"):
        bench.main(["--report-only", "--docs", str(page.parent)])
    assert not list(page.parent.glob(".tmp_*"))  # a refused report leaves no temporary file


# ------------------------------------------------------------------------------- updates
@fault(
    "--lr inf, --lr nan, --target-lr inf",
    "refused by the flag check: '--lr inf is invalid: expected a finite number', exit 2",
    "nothing is started",
)
def test_nonfinite_learning_rates_are_refused():
    for flag, value in (("--lr", "inf"), ("--lr", "nan"), ("--target-lr", "inf"), ("--lr", "-1")):
        res = script("gridworld/train.py", flag, value)
        assert res.returncode == 2 and f"{flag} {value if value != '-1' else '-1.0'}" in res.stderr, res.stderr


@fault(
    "--lr 1e30: every update's steps push weights to inf/NaN",
    "each update is rolled back as a whole (policy, optimizer, intrinsic module) and counted in "
    "charts/nonfinite_skipped; after --max-nan-updates in a row the run stops with an error naming the last good "
    "checkpoint, exit 1",
    "a finite checkpoint of the last good state (here the initial one); no non-finite checkpoint is ever written",
)
def test_exploding_updates_are_rolled_back_and_never_saved(tmp_path):
    t = Trainer(GRID, grid_cfg(tmp_path, lr=1e30, max_nan_updates=2, num_global_steps=160))
    start = [p.numpy().copy() for p in t.policy.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(NonFiniteLossError, match=r"2 consecutive updates.*Last good checkpoint: (\S+)") as err:
            t.train()
    path = str(err.value).split("Last good checkpoint: ")[1].split(" (update")[0]
    state = load_checkpoint(path)
    assert state["update"] == 1 and state["nan_total"] == 2  # update 1 was rolled back (its rollout is spent)
    assert not nonfinite_tensors(state)
    for a, b in zip(start, [state["policy"][k].numpy() for k in t.policy.state_dict()]):
        np.testing.assert_array_equal(a, b)  # rolled back to the weights before the first update
    assert all(not nonfinite_tensors(load_checkpoint(p)) for p in checkpoints(tmp_path))
    steps, values = read_metrics(t.run_dir)["charts/nonfinite_skipped"]
    assert values.max() == 2  # the update that stopped the run is counted


@fault(
    "a run whose updates go non-finite fewer times than --max-nan-updates",
    "the bad updates are rolled back, the run finishes, exit 0",
    "every checkpoint finite",
)
def test_a_rolled_back_update_leaves_the_state_exactly_as_before(tmp_path):
    t = Trainer(GRID, grid_cfg(tmp_path, num_global_steps=32))
    t.train()
    before = [p.numpy().copy() for p in t.policy.parameters()] + [
        p.numpy().copy() for p in t.intrinsic.predictor.parameters()
    ]
    opt_before = {k: v.numpy().copy() for k, v in t.ppo.optimizer.state_dict().items() if isinstance(v, paddle.Tensor)}
    t2 = Trainer(
        GRID,
        grid_cfg(tmp_path, run_name="r", resume=t.last_checkpoint, num_global_steps=64, lr=1e30, max_nan_updates=5),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = t2.train()
    assert result["update"] == 4 and t2.nonfinite.total == 2  # updates 3 and 4 exploded and were rolled back
    after = [p.numpy() for p in t2.policy.parameters()] + [p.numpy() for p in t2.intrinsic.predictor.parameters()]
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    opt_after = {k: v.numpy() for k, v in t2.ppo.optimizer.state_dict().items() if isinstance(v, paddle.Tensor)}
    assert len(opt_after) == len(opt_before)
    for a, b in zip(opt_before.values(), opt_after.values()):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------- the DQN trainer (Pong)
def pong_cfg(tmp_path, **kw):
    from pong.train import PongConfig

    base = dict(
        agent="snd",
        memory_capacity=300,
        memory_warmup_size=100,
        batch_size=8,
        max_points=1,
        eval_interval=0,
        log_interval=10,
        save_interval=0,
        train_steps=40,
        num_threads=1,
        log_path=str(tmp_path),
        run_name="p",
    )
    base.update(kw)
    return PongConfig(**base)


@fault(
    "Pong's DQN: train steps that leave a weight NaN (injected right after real optimizer steps, 3 in a row)",
    "each bad step is taken back (Q and target networks, optimizers, SND networks restored to the last finite "
    "state, kept every --log-interval steps); after --max-nan-updates in a row the run stops with an error naming "
    "the last good checkpoint, exit 1",
    "a finite checkpoint of the last good state; no non-finite checkpoint is ever written",
)
def test_dqn_nonfinite_steps_are_taken_back_and_never_saved(tmp_path):
    from common.dqn.trainer import DQNTrainer
    from pong.train import SPEC as PONG

    t = DQNTrainer(PONG, pong_cfg(tmp_path, train_steps=1000))
    learn, calls = t.learner.learn, [0]

    def learn_then_break_a_weight(*args):
        out = learn(*args)
        calls[0] += 1
        if calls[0] >= 25:  # steps 25, 26, 27: a weight goes NaN after the real step
            w = t.learner.q_net.parameters()[0]
            w.set_value(np.full(w.shape, np.nan, np.float32))
        return out

    t.learner.learn = learn_then_break_a_weight
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(NonFiniteLossError, match=r"3 consecutive train steps.*Last good checkpoint: (\S+)") as err:
            t.train()
    path = str(err.value).split("Last good checkpoint: ")[1].split(" (train step")[0]
    state = load_checkpoint(path)
    assert not nonfinite_tensors(state) and state["nan_total"] == 3
    assert state["learner"]["train_count"] == 20  # the last state kept (every 10 steps) before step 25
    assert all(not nonfinite_tensors(load_checkpoint(p)) for p in checkpoints(tmp_path))


@fault(
    "Pong's DQN: the environment raises an error (OSError) in the middle of training",
    "the run saves and stops with an error naming the file and how to --resume, exit 1",
    "the state at the last train step (networks, optimizers, SND, replay memory)",
)
def test_dqn_env_fault_saves_the_state_and_names_the_file(tmp_path):
    import dataclasses

    from common.dqn.trainer import DQNTrainer
    from pong.train import SPEC as PONG

    def breaking_env_factory(cfg, record_path=None):
        make = PONG.env_factory(cfg, record_path)

        def build():
            env, steps = make(), [0]
            step = env.step

            def step_or_fail(action):
                steps[0] += 1
                if steps[0] > 130:
                    raise OSError("the emulator's ROM went away")
                return step(action)

            env.step = step_or_fail
            return env

        return build

    t = DQNTrainer(dataclasses.replace(PONG, env_factory=breaking_env_factory), pong_cfg(tmp_path))
    with pytest.raises(RunStoppedError, match="OSError: the emulator's ROM went away") as err:
        t.train()
    assert os.path.exists(err.value.checkpoint) and f"--resume {err.value.checkpoint}" in str(err.value)
    state = load_checkpoint(err.value.checkpoint)
    assert state["env_steps"] == 130 and state["learner"]["train_count"] == 31 and state["replay"] is not None


@fault(
    "Pong's DQN: a checkpoint without its 'rng' entry, or an unwritable --log-path",
    "CheckpointError naming the file and the missing entry; the path as a flag error ('--log-path ... is "
    "unusable'), exit 2",
    "no run folder is created",
)
def test_dqn_incomplete_checkpoint_and_bad_log_path(tmp_path):
    from common.dqn.trainer import DQNTrainer
    from pong.train import SPEC as PONG

    res = DQNTrainer(PONG, pong_cfg(tmp_path, train_steps=5)).train()
    state = load_checkpoint(res["checkpoint"])
    path = str(tmp_path / "no_rng.pdparams")
    save_checkpoint(path, {k: v for k, v in state.items() if k != "rng"})
    with pytest.raises(CheckpointError, match="incomplete: it has no 'rng'"):
        DQNTrainer(PONG, pong_cfg(tmp_path / "x", resume=path))
    assert not (tmp_path / "x").exists()
    (tmp_path / "file").write_text("not a folder")
    out = script("pong/train.py", "--log-path", str(tmp_path / "file" / "runs"))
    assert out.returncode == 2 and "--log-path" in out.stderr and "unusable" in out.stderr, out.stderr[-2000:]


@fault(
    "a power cut just after a checkpoint (PPO and Pong's DQN)",
    "the records of every step the checkpoint holds reached the disk before it (metrics.jsonl fsynced, then "
    "the checkpoint written and fsynced, then its folder)",
    "the checkpoint and every record up to it",
)
def test_a_checkpoint_never_reaches_the_disk_before_its_records(tmp_path, monkeypatch):
    """A power cut cannot be staged in a test; what decides its outcome can be recorded: the order in which
    records and checkpoints are forced to the disk, in real PPO and DQN runs."""
    from common.dqn.trainer import DQNTrainer
    from common.run import files
    from common.run.logger import Logger
    from pong.train import SPEC as PONG

    events, real_flush, real_write = [], Logger.flush, files.write_atomic

    def flush(self, durable=False):
        real_flush(self, durable)
        if durable:
            events.append(("records", sum(1 for _ in open(self.metrics_path, encoding="utf-8"))))

    def write_atomic(path, data):
        if path.endswith(".pdparams"):
            events.append(("checkpoint", os.path.basename(path)))
        return real_write(path, data)

    monkeypatch.setattr(Logger, "flush", flush)
    monkeypatch.setattr("common.run.checkpoint.write_atomic", write_atomic)
    ppo = Trainer(GRID, grid_cfg(tmp_path, num_global_steps=3 * 16)).train()  # a checkpoint every update
    Trainer(GRID, grid_cfg(tmp_path, run_name="f", save_interval=0, num_global_steps=2 * 16)).train()  # the final one
    dqn = DQNTrainer(PONG, pong_cfg(tmp_path, train_steps=40, save_interval=20)).train()
    DQNTrainer(PONG, pong_cfg(tmp_path, run_name="q", train_steps=30, save_interval=0)).train()
    saves = [i for i, (kind, _) in enumerate(events) if kind == "checkpoint"]
    numbers = [events[i][1].rsplit("_", 1)[-1].removesuffix(".pdparams") for i in saves]
    assert numbers == ["1", "2", "3", "2", "20", "40", "30"], events
    for i in saves:  # each checkpoint comes right after a durable flush that had the run's records in it
        assert i > 0 and events[i - 1][0] == "records" and events[i - 1][1] > 0, events
    assert os.path.basename(ppo["checkpoint"]) == events[saves[2]][1]
    assert os.path.basename(dqn["checkpoint"]) == events[saves[5]][1]


@fault(
    "a stop while the evaluation of the update just saved is played (background or in process)",
    "the evaluation is dropped at the stop and played again, with its own seed, when the run resumes from that "
    "update's checkpoint; an evaluation already logged is not played twice",
    "the eval curve's point of the update the run resumes from (an earlier eval still in flight, which takes "
    "longer than an update, is lost)",
)
@pytest.mark.parametrize("background", [False, True])
def test_an_eval_cut_off_by_a_stop_is_played_again_at_the_resume(tmp_path, background):
    kw = dict(eval_interval=2, eval_in_background=background, num_local_steps=8)
    first = Trainer(GRID, grid_cfg(tmp_path, num_global_steps=2 * 16, **kw)).train()
    metrics = os.path.join(first["run_dir"], "metrics.jsonl")
    logged = read_metrics(first["run_dir"])["eval/return"]
    assert list(logged[0]) == [32]  # the eval of update 2, at its agent step
    with open(metrics, encoding="utf-8") as f:
        kept = [line for line in f if '"eval/' not in line]  # as if the stop had dropped it
    with open(metrics, "w", encoding="utf-8") as f:
        f.writelines(kept)
    resume = dict(resume=first["checkpoint"], num_global_steps=3 * 16, **kw)
    Trainer(GRID, grid_cfg(tmp_path, **resume)).train()
    again = read_metrics(first["run_dir"])["eval/return"]
    assert list(again[0]) == [32] and again[1][0] == logged[1][0]  # played again, the same episode
    Trainer(GRID, grid_cfg(tmp_path, run_name="h", **resume)).train()  # a new folder: no eval of update 2 there
    assert list(read_metrics(str(tmp_path / "h"))["eval/return"][0]) == [32]
    Trainer(GRID, grid_cfg(tmp_path, **resume)).train()  # logged this time: not played twice
    assert list(read_metrics(first["run_dir"])["eval/return"][0]) == [32]


# ------------------------------------------------------------------------------- workers
@fault(
    "an env worker process killed (SIGKILL) mid-rollout, restarts disabled (--max-worker-restarts 0)",
    "EnvWorkerError naming the worker, its envs and the signal; the run saves and stops with an error naming the "
    "file and how to --resume, exit 1",
    "the state of the last completed update",
)
def test_dead_worker_without_restarts_saves_the_last_update(tmp_path, monkeypatch):
    from fault_envs import flaky_spec

    monkeypatch.setenv("FAULT_MARKER", str(tmp_path / "died"))
    t = Trainer(
        flaky_spec("die", at_step=20),
        grid_cfg(tmp_path, num_workers=1, max_worker_restarts=0, save_interval=0, num_global_steps=160),
    )
    with pytest.raises(RunStoppedError, match=r"EnvWorkerError.*died.*SIGKILL") as err:
        t.train()
    assert (tmp_path / "died").exists()
    state = load_checkpoint(err.value.checkpoint)
    assert f"saved to {err.value.checkpoint}" in str(err.value) and "--resume" in str(err.value)
    assert state["update"] == t.update == 2  # env step 20 falls in update 3 (8 steps per update)


@fault(
    "an env worker process killed (SIGKILL) mid-rollout (default --max-worker-restarts 3)",
    "the worker is replaced (its envs start fresh episodes, the lost step ends them), logged as "
    "charts/worker_restarts; the run goes on and finishes, exit 0",
    "everything",
)
def test_dead_worker_is_replaced_and_the_run_goes_on(tmp_path, monkeypatch):
    from fault_envs import flaky_spec

    monkeypatch.setenv("FAULT_MARKER", str(tmp_path / "died"))
    t = Trainer(flaky_spec("die", at_step=20), grid_cfg(tmp_path, num_workers=1, num_global_steps=64))
    result = t.train()
    assert (tmp_path / "died").exists() and result["update"] == 4
    _, restarts = read_metrics(t.run_dir)["charts/worker_restarts"]
    assert restarts[-1] == 1


@fault(
    "an env worker that hangs in a step (--worker-timeout 3)",
    "after the timeout the worker is killed and replaced, logged as charts/worker_restarts; the run finishes",
    "everything",
)
def test_hung_worker_is_replaced(tmp_path, monkeypatch):
    from fault_envs import flaky_spec

    monkeypatch.setenv("FAULT_MARKER", str(tmp_path / "hung"))
    t = Trainer(
        flaky_spec("hang", at_step=12), grid_cfg(tmp_path, num_workers=1, worker_timeout=3.0, num_global_steps=48)
    )
    start = time.monotonic()
    result = t.train()
    assert (tmp_path / "hung").exists() and result["update"] == 3
    assert time.monotonic() - start < 120
    assert read_metrics(t.run_dir)["charts/worker_restarts"][1][-1] == 1


@fault(
    "env workers that keep dying, more often than --max-worker-restarts",
    "replaced --max-worker-restarts times, then the run saves and stops with an error saying the restarts are "
    "used up, exit 1",
    "the state of the last completed update",
)
def test_restart_budget_runs_out(tmp_path, monkeypatch):
    from fault_envs import flaky_spec

    t = Trainer(
        flaky_spec("die-always", at_step=11),
        grid_cfg(tmp_path, num_workers=1, max_worker_restarts=2, save_interval=0, num_global_steps=160),
    )
    with pytest.raises(RunStoppedError, match="after 2 worker restarts, the most allowed") as err:
        t.train()
    assert load_checkpoint(err.value.checkpoint)["update"] == t.update


# ------------------------------------------------------------------------------- disk
@pytest.fixture
def tiny_disk(tmp_path):
    """A real 512 KB filesystem (tmpfs; needs root, as CI runs)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


@fault(
    "the disk fills up during a run (a 512 KB filesystem as --log-path)",
    "the run stops with an error naming the file that could not be written and the flag that chose its folder "
    "(--log-path), exit 1",
    "what was written before; metrics.jsonl stays readable (a truncated last line is skipped with a warning)",
)
def test_full_disk_names_the_file_and_the_flag(tiny_disk):
    res = script(
        "gridworld/train.py",
        "--num-processes",
        "2",
        "--num-local-steps",
        "64",
        "--batch-size",
        "2",
        "--num-epochs",
        "1",
        "--num-global-steps",
        "100000",
        "--eval-interval",
        "0",
        "--video-interval",
        "0",
        "--save-interval",
        "1",
        "--obs-norm-steps",
        "1",
        "--num-threads",
        "1",
        "--log-path",
        str(tiny_disk),
        "--run-name",
        "full",
        timeout=600,
    )
    assert res.returncode == 1, res.stderr[-2000:]
    err = res.stderr
    assert "No space left on device" in err and str(tiny_disk / "full") in err, err[-2000:]
    assert "--log-path" in err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        metrics = read_metrics(str(tiny_disk / "full"))
    assert "losses/total" in metrics


@fault(
    "metrics.jsonl cut in the middle of its last line (a full disk, a killed run), read by the notebooks",
    "common.run.logger.read_metrics skips that line with a warning naming it; a broken line elsewhere is an error",
    "every complete line",
)
def test_read_metrics_skips_only_a_truncated_last_line(tmp_path):
    good = '{"tag": "a", "step": 1, "value": 2.0}\n'
    (tmp_path / "metrics.jsonl").write_text(good * 3 + '{"tag": "a", "ste')
    with pytest.warns(RuntimeWarning, match="truncated last line 4"):
        steps, values = read_metrics(str(tmp_path))["a"]
    assert list(values) == [2.0, 2.0, 2.0]
    (tmp_path / "metrics.jsonl").write_text(good + '{"tag": "a", "ste\n' + good)
    with pytest.raises(ValueError, match="line 2"):
        read_metrics(str(tmp_path))


# ------------------------------------------------------------------------------- flags, signals, files
@fault(
    "--log-path that cannot be used (/proc/x, a read-only folder, a file)",
    "a flag error: 'error: --log-path '/proc/x' is unusable: ...', exit 2",
    "nothing is created",
)
def test_unusable_log_path_is_a_flag_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    a_file = tmp_path / "f"
    a_file.write_text("")
    for bad in ("/proc/x", str(a_file / "sub")) + ((str(ro / "runs"),) if os.geteuid() != 0 else ()):
        res = script("gridworld/train.py", "--log-path", bad, "--num-global-steps", "16")
        assert res.returncode == 2 and f"--log-path {bad!r} is unusable" in res.stderr, res.stderr[-1500:]
        assert "Traceback" not in res.stderr


@fault(
    "Ctrl-C (SIGINT) or SIGTERM while an evaluation plays in the background; the same signal twice; SIGTERM "
    "then SIGINT (a shutdown reaches a benchmark suite's run and the suite, which passes a SIGINT on)",
    "the step finishes, a checkpoint is saved, workers and the eval process end quietly (no FatalError), "
    "exit 130 (SIGINT) or 143 (SIGTERM); the same signal again stops at once without saving, says so, same "
    "status, no traceback; the first signal of the other kind is the same stop (it saves), and says so",
    "the state of the last completed update",
)
@pytest.mark.parametrize(
    "sig, code, second",
    [
        (signal.SIGINT, 130, None),
        (signal.SIGTERM, 143, None),
        (signal.SIGTERM, 143, signal.SIGTERM),
        (signal.SIGTERM, 143, signal.SIGINT),
    ],
    ids=["SIGINT", "SIGTERM", "SIGTERM twice", "SIGTERM then SIGINT"],
)
def test_signals_save_and_exit_with_the_shells_status(sig, code, second, tmp_path):
    args = [
        "--num-processes",
        "2",
        "--num-workers",
        "1",
        "--num-local-steps",
        "32",
        "--batch-size",
        "2",
        "--num-epochs",
        "1",
        "--num-global-steps",
        "10000000",
        "--eval-interval",
        "1",
        "--max-eval-steps",
        "300",
        "--save-interval",
        "0",
        "--obs-norm-steps",
        "1",
        "--log-path",
        str(tmp_path),
        "--run-name",
        "s",
    ]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "gridworld/train.py"), *args],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = tmp_path / "s" / "metrics.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and not (metrics.exists() and "eval/return" in metrics.read_text()):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.3)
    proc.send_signal(sig)
    seen = ""
    if second:  # sent once the first is being handled
        while "received:" not in seen and proc.poll() is None:
            seen += proc.stdout.readline()
        proc.send_signal(second)
    out, _ = proc.communicate(timeout=120)
    out = seen + out
    assert proc.returncode == code, out[-3000:]
    assert "FatalError" not in out and "Traceback" not in out, out[-3000:]
    if second == sig:  # the same signal again aborts at once: same status, a line saying so
        assert "SIGTERM again: stopped at once, without saving" in out, out[-3000:]
        assert "leaked" not in out, out[-3000:]  # the shared memory was freed
        return
    if second:  # the other kind: the same stop, which saves below
        assert "SIGINT after SIGTERM: the same stop" in out and "stopped at once" not in out, out[-3000:]
    state = load_checkpoint(checkpoints(tmp_path / "s")[-1])
    assert state["update"] >= 1


@fault(
    "Ctrl-C (or SIGTERM) in the middle of an update: a MiniGrid run whose update takes ~10-20 s "
    "(1,500 epochs), signalled 1.5 CPU-seconds into its second update",
    "stops at the next minibatch: the update under way is dropped (rolled back), the last completed update "
    "is saved, exit 130, within seconds rather than at the update's end",
    "the checkpoint holds update 1 exactly: the same weights as that update's own checkpoint",
)
def test_a_stop_during_an_update_saves_the_last_completed_one_within_seconds(tmp_path):
    import psutil

    # update 1 in this process with one epoch; the long update is the resumed run's update 2
    cfg = grid_cfg(tmp_path, run_name="u", num_local_steps=64, intrinsic="rnd", num_global_steps=128)
    first = Trainer(GRID, cfg).train()["checkpoint"]
    kept = load_checkpoint(first)
    args = ["--num-processes", "2", "--num-local-steps", "64", "--batch-size", "2", "--num-epochs", "1500"]
    args += ["--num-global-steps", "100000", "--eval-interval", "0", "--save-interval", "1", "--obs-norm-steps", "1"]
    args += ["--log-path", str(tmp_path), "--run-name", "u", "--intrinsic", "rnd", "--num-threads", "1"]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "gridworld/train.py"), *args, "--resume", first],
        env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    # Past its start (imports, the resume, the env workers) the run's own CPU time is the update's: its
    # collection takes ~0.1 s, so 1.5 CPU-seconds more are well inside the 3,000 minibatch steps.
    deadline = time.time() + 300

    def wait_until(condition):
        while not condition():
            ended = proc.poll() is not None
            assert not ended and time.time() < deadline, proc.stdout.read() if ended else "slow"
            time.sleep(0.1)

    config = tmp_path / "u" / "config.json"
    started = os.path.getmtime(config)  # the first run's
    wait_until(lambda: config.exists() and os.path.getmtime(config) > started)
    run = psutil.Process(proc.pid)
    cpu = lambda: sum(run.cpu_times()[:2])  # noqa: E731  user + system, this process only
    at_start = cpu()
    wait_until(lambda: cpu() >= at_start + 1.5)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    stopped_in = time.perf_counter() - t0
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    saved = load_checkpoint(checkpoints(tmp_path / "u")[-1])
    assert saved["update"] == 1 == kept["update"]
    for name, w in kept["policy"].items():
        np.testing.assert_array_equal(saved["policy"][name].numpy(), w.numpy())
    assert stopped_in < 5, f"{stopped_in:.1f} s to stop"  # an update of 1,500 epochs takes far longer here


@fault(
    "the background evaluation process SIGSTOPped (hung) or SIGKILLed during a run",
    "the lost evaluation is skipped with a message, a new evaluation process takes over (at most "
    "--max-worker-restarts times), charts/evals_lost counts it; a stopped one is found by --worker-timeout",
    "the run goes on to its end; later evaluations are logged",
)
@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["SIGSTOP", "SIGKILL"])
def test_a_lost_background_evaluation_is_skipped_and_replaced(sig, tmp_path):
    import psutil

    args = [
        *("--num-processes", "2", "--num-workers", "-1", "--num-local-steps", "32", "--batch-size", "2"),
        *("--num-epochs", "1", "--num-global-steps", "2560", "--eval-interval", "1", "--max-eval-steps", "200"),
        *("--save-interval", "0", "--obs-norm-steps", "1", "--worker-timeout", "10", "--video-interval", "0"),
        *("--log-path", str(tmp_path), "--run-name", "e"),
    ]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "gridworld/train.py"), *args],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    victim, deadline = None, time.time() + 180
    while victim is None and time.time() < deadline and proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):  # the eval process is the spawned one; others come and go
                cmdline = " ".join(child.cmdline())
                if "multiprocessing" in cmdline and "resource_tracker" not in cmdline:
                    victim = child
        time.sleep(0.2)
    assert victim is not None, "no evaluation process appeared"
    time.sleep(1.0)
    victim.send_signal(sig)
    out, _ = proc.communicate(timeout=300)
    with contextlib.suppress(psutil.Error):
        victim.kill()  # a stopped one the trainer failed to end
    assert proc.returncode == 0, out[-3000:]
    assert "was lost and is skipped" in out and "a new evaluation process takes over" in out, out[-3000:]
    metrics = read_metrics(str(tmp_path / "e"))
    assert metrics["charts/evals_lost"][1].max() >= 1
    lost_at = metrics["charts/evals_lost"][0].min()
    assert (metrics["eval/return"][0] > lost_at).any()  # evaluations went on after the loss


@fault(
    "checkpoint files and the umask",
    "written with the umask's mode (0644 under umask 022), like any file the user makes, not mkstemp's 0600",
    "-",
)
def test_checkpoints_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = Trainer(GRID, grid_cfg(tmp_path, num_global_steps=16)).train()["checkpoint"]
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644


@fault(
    "an alias flag with a bad value (Montezuma --num-envs 0)",
    "the error names the flag as typed: '--num-envs 0 is invalid', exit 2",
    "-",
)
def test_alias_errors_name_the_alias():
    res = script("montezuma/train.py", "--num-envs", "0")
    assert res.returncode == 2 and "--num-envs 0 is invalid" in res.stderr, res.stderr


@fault(
    "the envs of a replaced worker, as the trainer sees them",
    "each ends its episode at once (done, reward 0, the old episode not counted) and starts afresh; the "
    "pipelined half-groups keep their order",
    "-",
)
def test_vec_env_restart_keeps_the_contract(tmp_path, monkeypatch):
    """A restarted worker's envs: fresh first frames, reward 0, done, no fake episode; pipelined groups too."""
    import functools

    from fault_envs import make_flaky

    from common.envs.subproc import SubprocVecEnv

    monkeypatch.setenv("FAULT_MARKER", str(tmp_path / "died"))
    fns = [functools.partial(make_flaky, "MiniGrid-Empty-5x5-v0", "die", 3)] * 4
    with SubprocVecEnv(fns, num_workers=1, seed=0, max_restarts=1) as venv:
        venv.reset()
        groups = venv.pipeline_groups
        assert groups == [(0, 2), (2, 4)]
        for _ in range(2):
            for a, b in groups:
                venv.step_async([2] * (b - a), a, b)
            for a, b in groups:
                venv.step_wait(a, b)
        for a, b in groups:  # step 3 of env 0 kills the worker: both halves in flight are lost
            venv.step_async([2] * (b - a), a, b)
        out = [venv.step_wait(a, b) for a, b in groups]
        assert venv.restarts == 1 and (tmp_path / "died").exists()
        for obs, rew, done, infos in out:
            assert obs.dtype == np.uint8 and (rew == 0).all() and done.all()
            assert all("worker_restart" in i and "episode" not in i and "final_observation" not in i for i in infos)
        obs, rew, done, infos = venv.step([2, 2, 2, 2])  # and it steps on
        assert obs.shape == (4, 3, 7, 7)


def test_reliability_page_lists_every_fault():
    """docs/reliability.md is generated from this suite (benchmarks/reliability.py): each fault has its row."""
    page = open(os.path.join(ROOT, "docs", "reliability.md"), encoding="utf-8").read()
    missing = [name for name in FAULTS if f"(`{name}`)" not in page]
    assert not missing, f"docs/reliability.md lacks {missing}: run python benchmarks/reliability.py"
    assert "FAILED" not in page and "not run" not in page


HEAP_CORRUPTION = """
import ctypes, sys, threading
import paddle
if sys.argv[1] == "entry":
    from common.run.launch import die_on_native_crash
    die_on_native_crash()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def corrupt():
    p = libc.malloc(4000)
    libc.malloc(32)  # keeps p off the top chunk
    libc.free(p)  # into the unsorted bin: its first 16 bytes are now the bin's links
    ctypes.memset(p, 0x41, 16)  # a use after free overwrites them
    libc.malloc(4000)  # glibc finds the broken links inside malloc, holding the arena's lock
t = threading.Thread(target=corrupt, name="cpu-shard_0")
t.start()
t.join()
print("survived")
"""


@fault(
    "a heap corruption that glibc finds inside malloc on a worker thread (a use after free in a subprocess "
    "set up as the train.py entry points set themselves up; a Montezuma lane run met a real one once)",
    "the process dies of its signal within seconds, every thread's Python stack on stderr (faulthandler); "
    "before, Paddle's signal handler allocated inside the broken heap and the run hung forever",
    "the newest checkpoint; the lane's scheduler sees the exit status",
)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap checks")
def test_a_heap_corruption_ends_the_process_instead_of_hanging_it(tmp_path):
    """A heap corruption found inside malloc on a worker thread (as a Montezuma lane run met once): with
    Paddle's signal handler the process waited forever for malloc's lock; what the entry points set up
    (``die_on_native_crash``) lets it die, with every thread's Python stack on stderr."""
    script = tmp_path / "corrupt.py"
    script.write_text(HEAP_CORRUPTION)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), "entry"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode < 0 or proc.returncode >= 128, proc.returncode  # killed by its signal
    assert "survived" not in proc.stdout
    assert "Fatal Python error" in proc.stderr and "in corrupt" in proc.stderr
    assert time.monotonic() - t0 < 60
