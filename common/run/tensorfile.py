"""Checkpoints as data only: one safetensors file whose header also carries the rest of the state as JSON.

A checkpoint is a nested state: dicts, lists and tuples of numbers, strings and arrays (network
weights, optimizer moments, normalizer statistics). ``write`` stores every array as a tensor of a
`safetensors <https://github.com/huggingface/safetensors>`_ file (named by its path in the state,
``policy/features.0.weight``) and the rest of the state, with a reference where each array was, as
JSON in the header's ``__metadata__``. There is no code and no object graph in such a file, so
``read`` cannot be made to run anything, and every size is known before anything is allocated:

* the header's length is checked against the file's size and a cap (``MAX_HEADER``) before it is
  read; its JSON against a nesting depth, a number length and a key count before it is parsed;
* each tensor's dtype must be one of ``DTYPES``, its shape a few non-negative integers whose
  product times the dtype's size is exactly its byte range, and the ranges must tile the data
  section exactly (no overlap, no gap, nothing past the end): no tensor can claim more memory than
  its bytes in the file;
* each tensor is referenced once in the state (no shared references to expand), and float tensors
  must be finite (checked once per tensor);
* every refusal is a ``TensorFileError`` naming the file and the entry; a message never quotes more
  than a few characters of what the file holds.

The files are plain safetensors (the ``safetensors`` package and its tools read their tensors); the
state JSON is this project's. Plain Python values round-trip as they are, with three markers where
JSON has no word: ``{"__tensor__": name}`` (a Paddle tensor), ``{"__array__": name}`` (a numpy
array), ``{"__tuple__": [...]}`` and ``{"__items__": [[key, value], ...]}`` (a dict whose keys are
not all plain strings, e.g. Montezuma's visited rooms).
"""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

#: safetensors dtype names -> numpy (little-endian); nothing else is read or written
DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NAMES = {v: k for k, v in DTYPES.items()}
MAGIC = "paddle-curiosity"  # __metadata__["format"]
MAX_HEADER = 64 * 2**20  # bytes of header JSON (the state of a checkpoint here is ~10-100 KB)
MAX_DEPTH = 64  # JSON nesting (a checkpoint nests ~8 deep)
MAX_NUMBER = 64  # characters of one JSON number (a 128-bit RNG state is 39 digits)
MAX_DIMS = 8
MAX_NAME = 1024  # characters of a tensor's name


class TensorFileError(ValueError):
    """The file is not a checkpoint this reader accepts; nothing in it was used."""


def _short(value, limit: int = 40) -> str:
    """A bounded description of a file-controlled value (never its full ``repr``)."""
    text = value if isinstance(value, str) else type(value).__name__
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


# ------------------------------------------------------------------------------------ writing
def _encode(value, path: str, tensors: dict):
    """The JSON form of ``value`` (at ``path`` in the state); arrays go into ``tensors``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise TensorFileError(f"entry {path!r} is {float(value)}: a checkpoint holds finite numbers only")
        return float(value)
    if isinstance(value, np.ndarray) or hasattr(value, "numpy"):  # numpy array, Paddle tensor
        return _encode_array(value, path, tensors)
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, f"{path}/{k}" if path else k, tensors) for k, v in value.items()}
        return {"__items__": [[_encode(k, path, {}), _encode(v, f"{path}/{k}", tensors)] for k, v in value.items()]}
    raise TensorFileError(f"entry {path!r} is a {type(value).__name__}: a checkpoint holds no such value")


def _encode_array(value, path: str, tensors: dict) -> dict:
    """A numpy array or Paddle tensor into ``tensors`` (named by its path), and its reference."""
    array = np.asarray(value if isinstance(value, np.ndarray) else value.numpy())
    if array.dtype.newbyteorder("<") not in _NAMES:
        raise TensorFileError(f"entry {path!r} has dtype {array.dtype}: expected one of {', '.join(DTYPES)}")
    name = path or "."
    tensors[name] = np.array(array, dtype=array.dtype.newbyteorder("<"), order="C")  # 0-d stays 0-d
    return {"__array__" if isinstance(value, np.ndarray) else "__tensor__": name}


def dumps(state: dict) -> bytes:
    """The bytes of ``state`` (a dict) as a checkpoint file."""
    tensors: dict[str, np.ndarray] = {}
    skeleton = json.dumps(_encode(state, "", tensors), separators=(",", ":"), allow_nan=False)
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {
            "dtype": _NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    header["__metadata__"] = {"format": MAGIC, "version": "1", "state": skeleton}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    return b"".join([struct.pack("<Q", len(raw)), raw, *(a.tobytes() for a in tensors.values())])


def is_tensorfile(head: bytes) -> bool:
    """Whether the first bytes of a file look like a safetensors file (a length, then a JSON object); a
    pickle (protocol 2+) has its 9th byte inside its first opcodes, never ``{`` for a checkpoint's dict."""
    return len(head) >= 9 and head[8:9] == b"{"


# ------------------------------------------------------------------------------------ reading
def _no_constant(name: str):
    """JSON's NaN and Infinity, which Python's parser accepts: a checkpoint holds finite numbers only."""
    raise TensorFileError(f"it holds {name}: a checkpoint holds finite numbers only")


def _check_json_text(text: str, what: str) -> None:
    """Refuse JSON text nested deeper than MAX_DEPTH or with a number longer than MAX_NUMBER, before parsing."""
    depth, run, i = 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = _string_end(text, i)
            run = 0
            continue
        run = run + 1 if ch in "0123456789+-.eE" else 0
        if run > MAX_NUMBER:
            raise TensorFileError(f"{what} has a number longer than {MAX_NUMBER} characters")
        depth += (ch in "[{") - (ch in "]}")
        if depth > MAX_DEPTH:
            raise TensorFileError(f"{what} nests deeper than {MAX_DEPTH}")
        i += 1


def _string_end(text: str, start: int) -> int:
    """The index after the JSON string that opens at ``text[start]`` (escapes skipped)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return i


def _tensor_spec(name: str, entry, data_len: int) -> tuple:
    """(numpy dtype, shape, begin, end) of one header entry, every field checked."""
    where = f"tensor {_short(name)}"
    if len(name) > MAX_NAME:
        raise TensorFileError(f"{where}: its name is longer than {MAX_NAME} characters")
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise TensorFileError(f"{where}: expected dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise TensorFileError(f"{where}: dtype {_short(dtype)} is not one of {', '.join(DTYPES)}")
    dims_ok = isinstance(shape, list) and len(shape) <= MAX_DIMS
    if not dims_ok or not all(type(n) is int and 0 <= n < 2**40 for n in shape):
        raise TensorFileError(f"{where}: shape must be at most {MAX_DIMS} integers in [0, 2**40)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)):
        raise TensorFileError(f"{where}: data_offsets must be two integers")
    begin, end = offsets
    if not 0 <= begin <= end <= data_len:
        raise TensorFileError(f"{where}: its bytes [{begin}, {end}) lie outside the data ({data_len} bytes)")
    if math.prod(shape) * DTYPES[dtype].itemsize != end - begin:
        raise TensorFileError(f"{where}: shape {shape} of {dtype} does not fill its {end - begin} bytes")
    return DTYPES[dtype], tuple(shape), begin, end


def _tensor_specs(header: dict, data_len: int) -> dict:
    """name -> (numpy dtype, shape, begin, end), every entry checked; the ranges tile [0, data_len)."""
    specs = {name: _tensor_spec(name, entry, data_len) for name, entry in header.items() if name != "__metadata__"}
    position = 0
    for name, (_, _, begin, end) in sorted(specs.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if begin != position:
            raise TensorFileError(f"tensor {_short(name)}: the data section has a gap or an overlap at byte {position}")
        position = end
    if position != data_len:
        raise TensorFileError(f"the data section holds {data_len - position} bytes that no tensor owns")
    return specs


def loads(data: bytes, what: str = "checkpoint") -> dict:
    """The state written by ``dumps``, from its bytes; ``TensorFileError`` (naming ``what``) on anything else."""
    try:
        return _loads(data)
    except TensorFileError as e:
        raise TensorFileError(f"{what}: {e}") from None


def _parse_json(text: str, what: str):
    """``text`` parsed, after ``_check_json_text``; JSON's NaN and Infinity refused."""
    _check_json_text(text, what)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except TensorFileError:
        raise
    except ValueError as e:
        raise TensorFileError(f"{what} is not JSON ({type(e).__name__} at {getattr(e, 'pos', '?')})") from None


def _header(data: bytes) -> tuple[dict, int]:
    """(the header as a dict, where the data section starts), its length checked against the file."""
    if len(data) < 8:
        raise TensorFileError("too short for a safetensors header")
    (length,) = struct.unpack("<Q", data[:8])
    if length > min(len(data) - 8, MAX_HEADER):
        raise TensorFileError(f"its header claims {length:,} bytes; the file has {len(data) - 8:,} after the length")
    try:
        text = data[8 : 8 + length].decode("utf-8")
    except UnicodeDecodeError:
        raise TensorFileError("its header is not UTF-8") from None
    header = _parse_json(text, "its header")
    if not isinstance(header, dict):
        raise TensorFileError("its header is not a JSON object")
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or meta.get("format") != MAGIC or not isinstance(meta.get("state"), str):
        raise TensorFileError(f"it is a safetensors file but not a checkpoint of this project (no {MAGIC} state)")
    if meta.get("version") != "1":
        raise TensorFileError(f"checkpoint version {_short(meta.get('version'))}: this version reads 1")
    return header, 8 + length


class _Arrays:
    """The file's tensors, each handed out once (``take``) as an owned array, checked finite."""

    def __init__(self, data: bytes, specs: dict, base: int):
        self.data, self.specs, self.base, self.used = data, specs, base, set()

    def take(self, name, as_tensor: bool):
        if not isinstance(name, str) or name not in self.specs:
            raise TensorFileError(f"its state refers to a tensor {_short(name)} the file does not hold")
        if name in self.used:
            raise TensorFileError(f"its state refers to tensor {_short(name)} twice")
        self.used.add(name)
        dtype, shape, begin, end = self.specs[name]
        a = np.frombuffer(self.data, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=self.base + begin)
        a = a.reshape(shape).astype(dtype.newbyteorder("="), copy=True)  # owned, writable, native order
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise TensorFileError(f"tensor {_short(name)} holds a NaN or an infinity")
        if as_tensor:
            import paddle

            return paddle.to_tensor(a)
        return a

    def unused(self) -> set:
        return set(self.specs) - self.used


def _decode(node, arrays: _Arrays):
    """The state from its JSON form (the markers of ``_encode`` turned back into values)."""
    if isinstance(node, list):
        return [_decode(v, arrays) for v in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((key, value),) = node.items()
        if key in ("__tensor__", "__array__"):
            return arrays.take(value, key == "__tensor__")
        if key == "__tuple__" and isinstance(value, list):
            return tuple(_decode(v, arrays) for v in value)
        if key == "__items__" and isinstance(value, list):
            return _decode_items(value, arrays)
    marker = next((k for k in node if k.startswith("__")), None)
    if marker is not None:
        raise TensorFileError(f"its state has an unknown marker {_short(marker)}")
    return {k: _decode(v, arrays) for k, v in node.items()}


def _decode_items(items: list, arrays: _Arrays) -> dict:
    out = {}
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (str, int, float, bool))):
            raise TensorFileError("its state has a malformed __items__ entry")
        out[item[0]] = _decode(item[1], arrays)
    return out


def _loads(data: bytes) -> dict:
    header, base = _header(data)
    arrays = _Arrays(data, _tensor_specs(header, len(data) - base), base)
    state = _decode(_parse_json(header["__metadata__"]["state"], "its state"), arrays)
    if not isinstance(state, dict):
        raise TensorFileError("its state is not a dict")
    unused = arrays.unused()
    if unused:
        raise TensorFileError(f"it holds {len(unused)} tensors its state never refers to (e.g. {_short(min(unused))})")
    return state


def write(path: str, state: dict) -> None:
    """Write ``state`` to ``path`` (not atomically: ``common.run.checkpoint.save_checkpoint`` is)."""
    data = dumps(state)
    with open(path, "wb") as f:
        f.write(data)


def read(path: str) -> dict:
    """``loads`` of the file at ``path``."""
    with open(path, "rb") as f:
        return loads(f.read(), os.fspath(path))
