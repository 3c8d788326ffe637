"""Reading a ``paddle.save`` pickle without running code from it, in time and memory bounded by its size.

``paddle.load`` unpickles with no restriction: a crafted ``.pdparams`` can run any command.
``unpickle`` reads the same bytes with an unpickler that rebuilds only plain containers and numpy
arrays of plain numeric dtypes (the allow-list ``SAFE_GLOBALS``; the approach of the Python docs'
"Restricting Globals" and of PyTorch's ``weights_only=True``) and refuses anything else *before*
it is called. Three more doors a small file could open are shut:

* numpy's own array and dtype rebuilding is not used: an array's state is checked first (a plain
  little- or big-endian number or bool dtype, a shape of non-negative ints, a buffer of exactly
  shape x itemsize bytes) and the array is then built as an owned copy of that buffer, so no
  array can claim more memory than its bytes in the file (no zero strides, no views, no huge
  shape on a tiny buffer). All arrays together may hold at most as many bytes as the file;
* the structure is walked once, by identity (``resolve``): a container shared by many parents is
  converted once, and the number of references the walk follows may not exceed the file's size
  (each reference costs at least a byte of pickle), so a "billion laughs" file of nested shared
  lists is refused in linear time instead of being expanded;
* unpickling itself is linear in the file: without globals a pickle can only build what its bytes spell.

The loaded value is what ``paddle.load`` returns for the same file: Paddle's ``(name, ndarray)``
tensor records become tensors and other arrays stay arrays (files in Paddle 2.0's format, with no
records, get every array as a tensor).
"""

from __future__ import annotations

import io
import math
import pickle

import numpy as np

#: the numpy dtypes an array in a checkpoint may have (float16 and bfloat16 tensors are saved as f2 / u2)
SAFE_DTYPES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"})
MAX_DIMS = 32


class UnsafeFileError(ValueError):
    """The file asks for something a checkpoint never needs: refused, nothing in it was run."""


class _DType:
    """What ``numpy.dtype(name, align, copy)`` rebuilds while unpickling: checked in ``__setstate__``."""

    def __init__(self, name, align=False, copy=True):
        if not isinstance(name, str) or name not in SAFE_DTYPES:
            raise UnsafeFileError(f"it holds an array of dtype {name!r} (accepted: {', '.join(sorted(SAFE_DTYPES))})")
        self.dtype = np.dtype(name)

    def __setstate__(self, state):
        # numpy's dtype state: (version, byte order, subarray, names, fields, itemsize, alignment, flags[, meta])
        if not (isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4)):
            raise UnsafeFileError(f"it holds a malformed dtype state {str(state)[:80]!r}")
        order, subarray, names, fields = state[1:5]
        if subarray is not None or names is not None or fields is not None or order not in ("<", ">", "|", "="):
            raise UnsafeFileError("it holds a structured or sub-array dtype, which a checkpoint never does")
        if order == ">":
            self.dtype = self.dtype.newbyteorder(">")


class _Array:
    """What ``numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')`` rebuilds while unpickling; its
    ``__setstate__`` checks the state and builds the array as an owned copy of the file's bytes."""

    def __init__(self, loader: "_Unpickler"):
        self.loader, self.array = loader, None

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 5:
            state = state[1:]  # (version, shape, dtype, is_fortran, data)
        if not (isinstance(state, tuple) and len(state) == 4):
            raise UnsafeFileError(f"it holds a malformed array state {str(state)[:80]!r}")
        shape, dtype, fortran, data = state
        if not (isinstance(shape, tuple) and len(shape) <= MAX_DIMS):
            raise UnsafeFileError(f"it holds an array of shape {str(shape)[:80]}")
        if not all(type(d) is int and d >= 0 for d in shape):
            raise UnsafeFileError(f"it holds an array of shape {str(shape)[:80]} (dimensions must be ints >= 0)")
        if not isinstance(dtype, _DType) or not isinstance(fortran, bool) or not isinstance(data, (bytes, bytearray)):
            raise UnsafeFileError("it holds an array whose dtype, order or data is not a plain one")
        size = math.prod(shape) * dtype.dtype.itemsize
        if size != len(data):
            raise UnsafeFileError(
                f"it holds an array of shape {shape} {dtype.dtype} ({size} bytes) with a buffer of {len(data)} bytes"
            )
        self.loader.spend(size, "array bytes")
        array = np.ndarray(shape, dtype.dtype, buffer=data, order="F" if fortran else "C")
        # an owned copy, in the machine's byte order (Paddle's tensors take no other)
        self.array = array.astype(dtype.dtype.newbyteorder("="), order="A", copy=True)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.budget = {"array bytes": len(data)}

    def spend(self, amount: int, what: str) -> None:
        self.budget[what] -= amount
        if self.budget[what] < 0:
            raise UnsafeFileError(f"its {what} add up to more than the file's own size")

    def find_class(self, module: str, name: str):
        if (module, name) not in SAFE_GLOBALS:
            raise UnsafeFileError(
                f"it asks to load {module}.{name}, which a checkpoint never needs (the file may be crafted to run code)"
            )
        if name == "_reconstruct":
            return self._reconstruct
        if name == "scalar":
            return self._scalar
        if name == "dtype":
            return _DType
        if name == "ndarray":
            return np.ndarray  # only ever handed to _reconstruct, which checks it
        return super().find_class(module, name)

    def _reconstruct(self, cls, shape, typecode):
        if cls is not np.ndarray or shape != (0,) or typecode != b"b":
            raise UnsafeFileError("it rebuilds an array in a way numpy's pickles never do")
        return _Array(self)

    def _scalar(self, dtype, data):
        if not isinstance(dtype, _DType) or not isinstance(data, bytes) or len(data) != dtype.dtype.itemsize:
            raise UnsafeFileError("it holds a malformed numpy scalar")
        return np.frombuffer(data, dtype.dtype)[0].copy()

    def persistent_load(self, pid):
        raise UnsafeFileError("it uses pickle persistent ids, which checkpoints never do")


#: (module, name) pairs the unpickler may rebuild: containers and numpy arrays, nothing that runs code
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


def unpickle(data: bytes):
    """The pickle ``data`` as plain containers, leaves and placeholders for arrays (``resolve`` turns them
    into arrays); raises ``UnsafeFileError`` on anything a checkpoint never holds."""
    try:
        return _Unpickler(data).load()
    except UnsafeFileError:
        raise
    except RecursionError:
        raise UnsafeFileError("it nests containers deeper than Python can follow") from None


def _is_tensor_record(obj) -> bool:
    # paddle.save writes each Tensor as (name, ndarray) (paddle.framework.io._transformed_from_varbase)
    return isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], _Array)


def _has_tensor_record(obj) -> bool:
    """Is there a tensor record anywhere in ``obj``? (one pass by identity, no recursion)"""
    stack, visited = [obj], set()
    while stack:
        x = stack.pop()
        if id(x) in visited:
            continue
        visited.add(id(x))
        if _is_tensor_record(x):
            return True
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return False


def resolve(obj, max_references: int, to_tensor=None):
    """``obj`` from ``unpickle`` with its arrays built, walked once by identity.

    ``to_tensor(ndarray)`` (e.g. ``paddle.to_tensor``) converts Paddle's tensor records, or every
    array where there is no record (Paddle 2.0's format); None keeps arrays. A container reached
    again is converted once and shared again, as in the file; when the walk would follow more than
    ``max_references`` references (shared containers expanding), ``UnsafeFileError``."""
    every_array = to_tensor is not None and not _has_tensor_record(obj)  # Paddle 2.0's format
    return _Resolver(max_references, to_tensor, every_array).walk(obj)[0]


_LEAVES = (str, bytes, int, float, bool, type(None), np.generic)


class _Resolver:
    """``resolve``'s walk: each object converted once (by identity), with the count of entries it stands
    for when its shared parts are counted each time."""

    def __init__(self, max_references: int, to_tensor, every_array: bool):
        self.max_references, self.to_tensor, self.every_array = max_references, to_tensor, every_array
        self.seen = {}  # id -> (converted, expanded size)

    def walk(self, o, depth=0):
        """(o converted, the number of entries o stands for)."""
        if depth > 200:
            raise UnsafeFileError("it nests containers more than 200 deep")
        if isinstance(o, _LEAVES):
            return o, 1
        key = id(o)
        if key in self.seen:
            return self.seen[key]
        out, size = self._convert(o, depth)
        if size > self.max_references:
            raise UnsafeFileError(
                f"its shared references would expand it past {self.max_references:,} entries (a 'billion laughs' file)"
            )
        self.seen[key] = (out, size)
        return out, size

    def _convert(self, o, depth):
        if isinstance(o, _Array):
            if o.array is None:
                raise UnsafeFileError("it holds an array without its data")
            return (self.to_tensor(o.array) if self.every_array else o.array), 1
        if isinstance(o, _DType):
            return o.dtype, 1
        if _is_tensor_record(o) and self.to_tensor is not None:
            return self.to_tensor(o[1].array), 1
        if isinstance(o, dict):
            out, size = type(o)(), 1
            for k, v in o.items():
                (k2, a), (v2, b) = self.walk(k, depth + 1), self.walk(v, depth + 1)
                out[k2] = v2
                size += a + b
            return out, size
        if isinstance(o, (list, tuple, set, frozenset)):
            parts = [self.walk(v, depth + 1) for v in o]
            return type(o)(p for p, _ in parts), 1 + sum(n for _, n in parts)
        raise UnsafeFileError(f"it holds a {type(o).__name__}, which a checkpoint never does")
