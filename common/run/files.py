"""Files written whole or not at all, and on the disk once written.

A run lives for days and is stopped by signals, full disks and power cuts. Every file the project
replaces (checkpoints, ``config.json``, summaries, a cut ``metrics.jsonl``) goes through
``write_atomic`` (``common.run.convert``, whose file a child process writes, takes the same steps): a
temporary file beside the target, flushed to the disk, renamed over it, and the folder's entry flushed
too. A stop at any point leaves the old file or the new one, never an empty or half-written one, also
on filesystems that do not order a rename after the data it renames (XFS, or ext4 mounted with
``noauto_da_alloc``).
"""

from __future__ import annotations

import os
import tempfile


def process_umask() -> int:
    """The process umask, read without setting it (``os.umask`` can only swap it, a race with threads
    that create files meanwhile): Linux's /proc, else the value seen when this module was imported."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _UMASK_AT_IMPORT


_UMASK_AT_IMPORT = os.umask(0o022)
os.umask(_UMASK_AT_IMPORT)


def sync_folder(folder: str) -> None:
    """Flush ``folder``'s entries (a rename or a new file in it) to the disk; a no-op where folders cannot
    be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder: the data itself was synced
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes | str) -> str:
    """Replace ``path`` by ``data`` (``str`` is written as UTF-8) whole or not at all; returns ``path``.

    The file gets the mode the umask gives an ordinary new file. On any error or interruption the
    temporary file is removed and the old ``path``, if any, is left as it was."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # named .tmp_*<extension>: what RunFolder.create sweeps after a killed save
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=os.path.splitext(path)[1], dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())  # on the disk before the rename: a power cut leaves the old file, not an empty one
        os.chmod(tmp, 0o666 & ~process_umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    sync_folder(folder)
    return path
