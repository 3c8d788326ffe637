"""What the long-run benchmarks share: numbered checkpoints, resuming, run summaries on disk.

A long benchmark (``snd_dqn_pong.py``, ``mario_flag.py``, ``exploration.py``) runs trainers as
subprocesses, from a separate clone, for hours. Each run resumes from its newest numbered checkpoint after a stop
(its ``metrics.jsonl`` cut back to that checkpoint first, so nothing is logged twice), only the
newest few checkpoints are kept, and each run's small summary is written atomically as JSON.
Stopping a benchmark, with Ctrl-C or with ``kill`` (SIGTERM), stops its runs with it: each gets SIGINT,
saves, and is waited for, so no run goes on as an orphan.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import tempfile
import time

import numpy as np

from common.run import logger as tags
from common.run.config import process_umask
from common.run.runtime import code_commit  # noqa: F401  (the checkout's commit: every summary records it)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_json_atomic(path, obj):
    """Write ``obj`` as indented JSON to ``path`` through a temporary file and a rename (mode as umask says)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".json", dir=os.path.dirname(os.path.abspath(path)))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o666 & ~process_umask())  # mkstemp makes 0600; a summary is an ordinary file
    os.replace(tmp, path)


def carry_nice_into_session(pid=None):
    """Give the CPU-time group of a session the nice value of its process; returns the value set, or None.

    Linux shares CPU time between sessions first ("autogroup") and only then between the processes
    of a session, so a lane started with ``setsid nice -n 5 ...`` (or a run the lane starts in a session
    of its own) competes at full weight with a test suite in another terminal: its nice value counts only
    against its own session's processes. Writing the value into ``/proc/<pid>/autogroup`` makes the whole
    session yield as ``nice`` promised. ``pid`` None means this process, and then only when it leads its
    own session (an interactive terminal's group is left alone). Nothing happens at nice <= 0 or where
    the kernel has no autogroup.
    """
    if pid is None:
        if os.getsid(0) != os.getpid():
            return None
        pid = os.getpid()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, pid)
        if nice <= 0:
            return None
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:  # no autogroup (other kernels, other systems), or the process has gone
        return None
    return nice


def interrupt_on_sigterm():
    """Make SIGTERM raise ``KeyboardInterrupt`` in this (main) thread, as Ctrl-C does.

    A benchmark stopped with ``kill`` would otherwise die at once and leave its runs going on as
    orphans, holding the CPU with no one to summarize them; this way the benchmark's own
    ``except KeyboardInterrupt`` passes the stop on (``stop_runs``) and waits for them."""

    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, _interrupt)


def stop_runs(procs):
    """Send SIGINT to each ``subprocess.Popen`` still running (a trainer finishes its step, saves and
    exits 130), then wait for all of them; returns their return codes. A second Ctrl-C or SIGTERM
    while waiting does not cut the wait short (each run still gets to save)."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait())
        except KeyboardInterrupt:
            codes.append(proc.wait())
    return codes


def numbered_checkpoints(run_dir, prefix):
    """``[(number, path)]`` of ``run_dir/models/<prefix>_<number>.pdparams``, oldest first."""
    found = []
    for path in glob.glob(os.path.join(run_dir, "models", f"{prefix}_*.pdparams")):
        try:
            found.append((int(os.path.splitext(path)[0].rsplit("_", 1)[1]), path))
        except ValueError:
            continue
    return sorted(found)


def newest_checkpoint(run_dir, prefix):
    """(path, number) of the newest numbered checkpoint in a run folder, or (None, 0)."""
    found = numbered_checkpoints(run_dir, prefix)
    return (found[-1][1], found[-1][0]) if found else (None, 0)


def prune_checkpoints(run_dir, prefix, keep=2):
    """Delete all but the ``keep`` newest numbered checkpoints of a run."""
    for _, path in numbered_checkpoints(run_dir, prefix)[:-keep]:
        os.remove(path)


#: the tutorial's tags, which every PPO game logs against the update number rather than the agent step
PPO_UPDATE_TAGS = frozenset(
    {tags.TRAINING_REWARD, tags.EVAL_EXTRINSIC, tags.EVAL_INTRINSIC, tags.TOTAL_LOSS, tags.FORWARD_LOSS}
)


def resume_ppo_run(run_dir, prefix):
    """(newest numbered checkpoint ``<prefix>_<update>.pdparams``, its update) of a PPO run folder, or
    (None, 0). The folder's ``metrics.jsonl`` is first cut back to that checkpoint (the update tags at the
    update, the rest at update x samples per update, from its ``config.json``), so nothing is logged twice."""
    ckpt, update = newest_checkpoint(run_dir, prefix)
    if ckpt is None:
        return None, 0
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    step = update * cfg["num_processes"] * cfg["num_local_steps"]
    cut_metrics(run_dir, lambda r: r["step"] <= (update if r["tag"] in PPO_UPDATE_TAGS else step))
    return ckpt, update


def segment_event(out, name, **event):
    """Append one start/end event (UTC time first) to ``<out>/<name>.segments.jsonl``."""
    with open(os.path.join(out, name + ".segments.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **event}) + "\n")


def read_segments(out, name) -> list:
    """The events ``segment_event`` wrote for run ``name``, oldest first ([] if none)."""
    path = os.path.join(out, name + ".segments.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cut_metrics(run_dir, keep):
    """Keep only the records of ``run_dir/metrics.jsonl`` for which ``keep(record)`` is true (a resumed
    run logs the rest again); a torn last line (the run was killed mid-write) is dropped too."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f.read().split("\n") if line.strip()]
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise ValueError(f"{path}, line {n}: not a JSON record") from None
        if keep(record):
            kept.append(line + "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(kept)


def binned(steps, values, edges):
    """Mean of ``values`` whose step falls in each (edges[i], edges[i+1]]; None where empty."""
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (steps > lo) & (steps <= hi)
        out.append(round(float(values[sel].mean()), 4) if sel.any() else None)
    return out


def logged_seconds(rate_steps, rate, upto=None) -> float | None:
    """Wall seconds of a run from its logged steps/s: the sum over log intervals of steps / rate, up to
    step ``upto`` (default: all); None if nothing was logged.

    Unlike a benchmark's own clock this covers every segment of a resumed run (a resume cuts the
    metrics back to its checkpoint first), with warm-up and evaluations, without the start-ups."""
    rate_steps, rate = np.asarray(rate_steps, float), np.asarray(rate, float)
    if upto is not None:
        rate, rate_steps = rate[rate_steps <= upto], rate_steps[rate_steps <= upto]
    if not len(rate):
        return None
    spans = np.diff(np.concatenate([[0.0], rate_steps]))
    return float(np.sum(spans / np.maximum(rate, 1e-9)))


def logged_hours(rate_steps, rate, upto=None) -> float | None:
    """``logged_seconds`` in hours, to 3 decimals."""
    seconds = logged_seconds(rate_steps, rate, upto)
    return None if seconds is None else round(seconds / 3600, 3)
