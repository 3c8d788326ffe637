"""common/run/tensorfile.py: the data-only checkpoint format, by hand-made cases."""

import json
import struct

import numpy as np
import paddle
import pytest

from common.run import tensorfile
from common.run.tensorfile import TensorFileError, dumps, loads


def test_every_kind_of_value_round_trips_as_it_was():
    state = {
        "config": {"lr": 1e-4, "name": "run", "flag": True, "none": None, "items": [1, 2.5, "x"]},
        "policy": {"fc.weight": paddle.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))},
        "obs_rms": {"mean": np.zeros((2, 2)), "count": 1e-4, "var": np.array(2.0)},
        "rng": {"state": {"state": 2**127 + 5, "inc": 3}, "bit_generator": "PCG64"},
        "visited": {1: 5, 7: None},  # int keys: kept
        "pair": (1, (2.5, "a")),
        "__odd": {"__tensor__": 3},  # a key that looks like a marker
        "small": {"b": np.array([True, False]), "h": np.arange(3, dtype="f2"), "i": np.arange(2, dtype="i8")},
    }
    back = loads(dumps(state))
    assert back["config"] == state["config"] and back["rng"] == state["rng"]
    assert back["visited"] == {1: 5, 7: None} and back["pair"] == (1, (2.5, "a")) and back["__odd"] == {"__tensor__": 3}
    assert isinstance(back["policy"]["fc.weight"], paddle.Tensor)
    np.testing.assert_array_equal(back["policy"]["fc.weight"].numpy(), state["policy"]["fc.weight"].numpy())
    for k in ("b", "h", "i"):
        a = back["small"][k]
        assert isinstance(a, np.ndarray) and a.dtype == state["small"][k].dtype and a.flags.writeable
        np.testing.assert_array_equal(a, state["small"][k])
    assert back["obs_rms"]["var"].shape == () and back["obs_rms"]["count"] == 1e-4


def test_the_official_safetensors_reader_reads_the_tensors():
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    data = dumps({"w": np.arange(4, dtype="f4"), "nested": {"b": np.ones((2, 2), "f8")}})
    tensors = safetensors_numpy.load(data)
    np.testing.assert_array_equal(tensors["w"], np.arange(4, dtype="f4"))
    assert tensors["nested/b"].shape == (2, 2)


def test_a_header_length_starting_with_byte_0x80_is_read_as_a_tensorfile(tmp_path):
    """A safetensors file's first byte is its header length's lowest: 0x80 for 1 in 256 files, which is
    also a pickle's first byte; such a checkpoint must still load."""
    for pad in range(0, 400, 8):
        data = dumps({"format": 2, "game": "g", "config": {"x": "y" * pad}})
        if data[0] == 0x80:
            break
    assert data[0] == 0x80
    path = tmp_path / "c.pdparams"
    path.write_bytes(data)
    from common.run.checkpoint import load_checkpoint

    assert load_checkpoint(str(path))["config"]["x"] == "y" * pad


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_numbers_are_refused_both_ways(bad):
    with pytest.raises(TensorFileError, match="finite"):
        dumps({"x": bad})
    good = dumps({"format": 2, "x": 1.5})
    (n,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8 : 8 + n])
    header["__metadata__"]["state"] = '{"format": 2, "x": NaN}'
    raw = json.dumps(header).encode()
    with pytest.raises(TensorFileError, match="NaN: a checkpoint holds finite numbers only"):
        loads(struct.pack("<Q", len(raw)) + raw)


def test_a_value_of_another_kind_is_named_at_save():
    with pytest.raises(TensorFileError, match="entry 'config/when' is a set"):
        dumps({"config": {"when": {1, 2}}})
    with pytest.raises(TensorFileError, match="dtype complex64"):
        dumps({"w": np.zeros(2, np.complex64)})


def test_read_and_write_use_files(tmp_path):
    path = str(tmp_path / "x.pdparams")
    tensorfile.write(path, {"a": np.ones(3, "f4")})
    np.testing.assert_array_equal(tensorfile.read(path)["a"], np.ones(3, "f4"))
    with open(path, "ab") as f:
        f.write(b"tail")
    with pytest.raises(TensorFileError, match=r"x.pdparams: the data section holds 4 bytes that no tensor owns"):
        tensorfile.read(path)
