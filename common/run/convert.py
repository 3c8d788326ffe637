"""Convert checkpoints of earlier versions (``paddle.save`` pickles) to this version's format, in place.

    python -m common.run.convert runs/<run>/models/mario_1_1_100.pdparams [more files]

Checkpoints are data-only files now (``common.run.tensorfile``: safetensors + JSON); every loader
refuses a pickle with a one-line message that names this command. A pickle is read only here, and
only in a child process held to a memory cap (``RLIMIT_AS``: a few times the file's size), a CPU-time
cap and a wall-clock timeout, by the restricted reader of earlier versions (``common.run.safe_pickle``:
plain containers and arrays, no globals called), which imports neither Paddle nor anything else
that could be reached from the file. A file that would cost more, crash the reader or take too long
is refused with one line naming it; nothing is written then. Convert only files you mean to keep:
the converted file replaces the original (written to a temporary file first, then renamed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from common.run import files, tensorfile

#: the child's memory: room for its interpreter and numpy, plus this many times the file
MEMORY_BASE, MEMORY_PER_BYTE = 400 * 2**20, 8
TIMEOUT_BASE, TIMEOUT_PER_MB = 20.0, 0.5  # seconds of wall clock (and of CPU time)

_CHILD = r"""
import resource, sys
limit, cpu, src, dst = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
from common.run import safe_pickle, tensorfile

class PaddleTensor:  # a Paddle tensor record of the old file: written back as a Paddle tensor
    def __init__(self, array):
        self.array = array
    def numpy(self):
        return self.array

data = open(src, "rb").read()
try:
    state = safe_pickle.resolve(safe_pickle.unpickle(data), len(data) + 1000, PaddleTensor)
    if not isinstance(state, dict) or "format" not in state or "game" not in state:
        raise ValueError("not a checkpoint of this project (a dict with 'format' and 'game')")
    if state["format"] != 1:
        raise ValueError(f"format {str(state['format'])[:20]!r}: only format 1 pickles are converted")
    state["format"] = 2
    out = tensorfile.dumps(state)
except (ValueError, TypeError, KeyError, EOFError, RecursionError, OverflowError, MemoryError) as e:
    print(f"{type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
    sys.exit(3)
with open(dst, "wb") as f:
    f.write(out)
"""


class ConversionError(ValueError):
    """The file could not be converted; nothing was written."""


def is_pickle(head: bytes) -> bool:
    """Whether the first bytes of a file are a pickle's (protocol 2 or later: ``paddle.save``'s). A
    safetensors file can start with the same byte (its header's length): ask ``tensorfile.is_tensorfile``
    first."""
    return head[:1] == b"\x80"


def convert(path: str) -> str:
    """Replace the legacy checkpoint ``path`` with the same state in this version's format; returns ``path``.

    Raises ``ConversionError`` (one line, naming the file) when it cannot be done within the caps."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ConversionError(f"cannot read {path}: {e.strerror}") from None
    if tensorfile.is_tensorfile(head) or not is_pickle(head):
        raise ConversionError(f"{path} is not a pickle: nothing to convert")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".pdparams", dir=folder)
    os.close(fd)
    limit = MEMORY_BASE + MEMORY_PER_BYTE * size
    seconds = TIMEOUT_BASE + TIMEOUT_PER_MB * size / 2**20
    env = dict(os.environ, PYTHONPATH=root, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    argv = [sys.executable, "-c", _CHILD, str(limit), str(int(seconds) + 1), os.path.abspath(path), tmp]
    try:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds)
        except subprocess.TimeoutExpired:
            raise ConversionError(f"refused {path}: reading it took more than {seconds:.0f} s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [""])[-1][:300]
            why = f"the reader died (exit {done.returncode})" if done.returncode != 3 else last
            if done.returncode < 0 or "MemoryError" in last:
                why = f"reading it needed more than {limit / 2**20:.0f} MB or crashed ({why})"
            raise ConversionError(f"refused {path}: {why}")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # (the child wrote it) on the disk before it replaces the original
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        files.sync_folder(folder)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0 if args else 2
    status = 0
    for path in args:
        try:
            convert(path)
            print(f"converted {path}")
        except ConversionError as e:
            print(e, file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
