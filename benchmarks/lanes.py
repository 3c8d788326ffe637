"""What the long-run benchmarks share: numbered checkpoints, resuming, run summaries on disk.

A long benchmark (``snd_dqn_pong.py``, ``mario_flag.py``, ``exploration.py``) runs trainers as
subprocesses, from a separate clone, for hours. Each run resumes from its newest numbered checkpoint after a stop
(its ``metrics.jsonl`` cut back to that checkpoint first, so nothing is logged twice), only the
newest few checkpoints are kept, and each run's small summary is written atomically as JSON.
Stopping a benchmark, with Ctrl-C or with ``kill`` (SIGTERM), stops its runs with it: each gets SIGINT,
saves, and is waited for, so no run goes on as an orphan.
"""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import typing

import numpy as np

from common.run import logger as tags
from common.run.files import write_atomic
from common.run.runtime import code_commit  # noqa: F401  (the checkout's commit: every summary records it)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(root=ROOT, **extra) -> dict:
    """The environment of a process a benchmark starts: this one's, with ``root`` (the checkout the
    benchmark runs from, e.g. a lane's own clone) first on ``PYTHONPATH``, so that the child imports that
    checkout's code rather than an installed copy of another, and ``extra`` variables."""
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **{k: str(v) for k, v in extra.items()}}


def write_json_atomic(path, obj):
    """Write ``obj`` as indented JSON to ``path``, whole or not at all (``common.run.files.write_atomic``)."""
    write_atomic(path, json.dumps(obj, indent=1) + "\n")


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
    """Make SIGTERM (and SIGHUP, a closed terminal) raise ``KeyboardInterrupt`` in this (main) thread, as
    Ctrl-C does.

    A benchmark stopped with ``kill`` would otherwise die at once and leave its runs going on as
    orphans, holding the CPU with no one to summarize them; this way the benchmark's own
    ``except KeyboardInterrupt`` passes the stop on (``stop_runs``) and waits for them.

    Paddle, when imported, installs a SIGTERM handler of its own that ends the process at once; a suite
    that imports it later (a restore from a pack reads checkpoints) would lose this one. So Paddle, where
    installed, is imported first and its handlers are turned off (``paddle.disable_signal_handler``)."""

    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    try:
        from common.run.device import require_paddle

        require_paddle().disable_signal_handler()
    except (ImportError, SystemExit):  # no Paddle here, or one too old: run_plan says so before a run starts
        pass
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # started under nohup: it asked to outlive the terminal
        signal.signal(signal.SIGHUP, _interrupt)


#: a tiny program that asks Linux to send its process SIGTERM when its parent ends (``PR_SET_PDEATHSIG``,
#: kept across exec), then becomes the command after it (a parent already gone: SIGTERM at once). SIGTERM,
#: not the SIGINT ``stop_runs`` sends, so that a suite killed after its stop is not the run's abort (and a
#: trainer whose parent has gone takes no signal as one: ``StopSignals``). Done in a fresh process, not in
#: ``Popen(preexec_fn=)``, which is unsafe where the parent has threads (Paddle's).
_STOP_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): os.kill(os.getpid(), signal.SIGTERM)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def stopped_with_this_process(argv) -> list:
    """``argv`` run so that it gets SIGTERM when this process ends, however it ends: a run whose suite was
    killed without a chance to stop it (SIGKILL, the OOM killer) then saves and exits, instead of training
    on unwatched with its checkpoints unpruned. Linux only; elsewhere ``argv`` as it is."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-c", _STOP_WITH_PARENT, str(os.getpid()), *argv]


#: seconds a run gets to finish its step and save once stopped (a Montezuma update takes ~140 s)
STOP_GRACE = 900.0


def stop_runs(procs, grace=STOP_GRACE):
    """Send SIGINT to each ``subprocess.Popen`` still running (a trainer finishes its step, saves and
    exits 130), then wait for all of them; returns their return codes. A second Ctrl-C or SIGTERM
    while waiting does not cut the wait short (each run still gets to save); a run still going after
    ``grace`` seconds is killed with its session (its env workers), said so, and never waited on forever."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    codes = []
    for proc in procs:
        while True:
            try:
                codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
                break
            except KeyboardInterrupt:
                continue
            except subprocess.TimeoutExpired:
                print(f"run {proc.pid} did not stop within {grace:.0f} s of the signal: killed", flush=True)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: the trainer and its workers
                codes.append(proc.wait())
                break
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


#: where this user's suites claim their runs for the whole machine: ``<suite folder's name>/<run>.claim``
#: (two clones' suites share both names; a check in a scratch folder of another name does not); the
#: environment variable moves it (the tests give each process its own)
MACHINE_CLAIMS = os.environ.get("CURIOSITY_RUN_CLAIMS") or os.path.join(
    os.path.expanduser("~"), ".cache", "paddle-curiosity", "run-claims"
)


class RunClaim:
    """The flocks a suite process holds on one run (the kernel drops them when the process ends)."""

    def __init__(self, fds):
        self.fds = fds

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _flock(path, note=None, make=True):
    """An flock on ``path`` holding ``note`` as its text, or None when another process holds it. ``make``:
    create the file if missing; else it is opened read-only (flock needs no more: a trainer's lock may
    belong to another user) and a missing file raises FileNotFoundError."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if make else os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if note is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, note.encode("utf-8"), 0)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _machine_claim_path(out, name):
    return os.path.join(MACHINE_CLAIMS, os.path.basename(os.path.abspath(out)), name + ".claim")


def _machine_claim(out, name):
    """``_flock`` of the machine claim of run ``name`` in suite folder ``out``; -1 (a warning, this clone's
    claims only) where the folder of machine claims cannot be used."""
    path = _machine_claim_path(out, name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return _flock(path, f"process {os.getpid()}, suite folder {os.path.abspath(out)}\n")
    except OSError as e:
        print(f"warning: {path}: {e.strerror or e}; {name} is claimed in this clone only", flush=True)
        return -1


def claim_run(out, name):
    """Claim run ``name`` of the suite folder ``out``: a ``RunClaim``, or None when another suite process
    or a trainer (an orphan, one started by hand) is at work on it, whose files must then not be cut,
    deleted or restored under it. Three locks decide: ``<out>/<name>.claim`` (suite processes of this
    clone), the machine's claim (``MACHINE_CLAIMS``: a suite in another clone of the repository, which
    would train the same run a second time in its own folder; ``claimed_by`` reads who holds it), and the
    run folder's own ``.lock`` (its trainer; probed, let go at once). ``close()`` lets go."""
    os.makedirs(out, exist_ok=True)
    fds = []
    try:
        here = _flock(os.path.join(out, name + ".claim"))
        if here is None:
            return None
        fds.append(here)
        machine = _machine_claim(out, name)
        if machine is None:
            return None
        if machine >= 0:  # (-1: no usable folder of machine claims)
            fds.append(machine)
        with contextlib.suppress(FileNotFoundError):  # no lock file: no trainer was ever started there
            trainer = _flock(os.path.join(out, name, ".lock"), make=False)
            if trainer is None:
                return None
            os.close(trainer)  # free: no trainer; let go at once
        claim, fds = RunClaim(fds), []
        return claim
    finally:
        for fd in fds:
            os.close(fd)


def claimed_by(out, name):
    """Who holds the machine claim of run ``name`` in suite folder ``out`` (``claim_run``'s note: process
    and suite folder), or "" when no process holds it (a note left by one that has ended is not read)."""
    path = _machine_claim_path(out, name)
    try:
        free = _flock(path, make=False)
        if free is not None:
            os.close(free)
            return ""
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


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
    """Append one start/end event (UTC time first) to ``<out>/<name>.segments.jsonl`` (a line torn by a
    stop mid-write is cut first: ``logger.repair_tail``)."""
    path = os.path.join(out, name + ".segments.jsonl")
    tags.repair_tail(path)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **event}) + "\n")


def read_segments(out, name) -> list:
    """The events ``segment_event`` wrote for run ``name``, oldest first ([] if none); a torn last line
    (a stop mid-write) is left out."""
    path = os.path.join(out, name + ".segments.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    return [json.loads(line) for line in lines]


def segment_pairs(events) -> list:
    """(start event, its end event or None) for every start in ``events`` (``read_segments``), oldest first.
    A start's end is the event right after it: a process killed outright (SIGKILL, a machine that stops)
    writes none, and the next start follows directly."""
    pairs = []
    for k, e in enumerate(events):
        if e.get("event") == "start":
            after = events[k + 1] if k + 1 < len(events) else {}
            pairs.append((e, after if after.get("event") == "end" else None))
    return pairs


def segment_facts(out, name):
    """(wall seconds of every process of run ``name`` that recorded its end, each start to its end; the
    commit of its last start; the updates it was resumed at) from its segments (``lanes.segment_event``)."""
    pairs = segment_pairs(read_segments(out, name))
    starts = [start for start, _ in pairs]

    def when(e):
        return calendar.timegm(time.strptime(e["time"], "%Y-%m-%dT%H:%M:%SZ"))  # UTC, as written

    seconds = sum(when(end) - when(start) for start, end in pairs if end is not None)
    resumed = [e["resume_update"] for e in starts if e.get("resume_update")]
    return seconds, (starts[-1]["commit"] if starts else None), resumed


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
    write_atomic(path, "".join(kept))  # a stop while writing leaves the whole file, never a truncated one


#: matplotlib line styles by seed (seed % 3) in the suites' pictures: a method's colour, a seed's line
SEED_LINES = ("-", "--", ":")


def binned(steps, values, edges):
    """Mean of ``values`` whose step falls in each (edges[i], edges[i+1]]; None where empty."""
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (steps > lo) & (steps <= hi)
        out.append(round(float(values[sel].mean()), 4) if sel.any() else None)
    return out


def binned_tag(metrics, tag, edges):
    """``binned`` of one logged tag of ``metrics`` (``read_metrics``), or None when the run never logged it."""
    if tag not in metrics or not len(metrics[tag][0]):
        return None
    return binned(*metrics[tag], edges)


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


# ---------------------------------------------------------------------------------- a plan of runs
@dataclasses.dataclass
class PlannedRun:
    """One training run of a long benchmark: what the scheduler (``run_plan``) needs to know of it.

    ``argv(resume)`` is the trainer's command line (``resume``: a checkpoint path or None); its folder is
    ``<out>/<name>`` and its numbered checkpoints ``models/<prefix>_<update>.pdparams``.
    ``summarize(out, status)`` builds its summary, written atomically to ``summary_path``, which also says
    whether it has finished (``"status"`` in ``finished``; a summary without a status is a finished
    run's); ``status_at_end(returncode, run_dir)`` names how a run that exited 0 ended (e.g. "budget").
    ``label`` is printed after its name when it starts; ``env`` is added to its process's environment;
    ``partial_summaries`` False writes a summary only when the run ends well (no "running" or
    "stopped" ones: a suite whose report reads every summary as a finished run's)."""

    name: str
    argv: typing.Callable
    prefix: str
    summarize: typing.Callable
    summary_path: str
    status_at_end: typing.Callable = lambda returncode, run_dir: "budget"
    finished: tuple = ("budget",)
    label: str = ""
    env: dict = dataclasses.field(default_factory=dict)
    partial_summaries: bool = True
    #: ``resume(run_dir) -> (checkpoint or None, its number)``, the run folder cut back to it (None: a PPO run's)
    resume: typing.Callable | None = None

    def done(self) -> bool:
        if not os.path.exists(self.summary_path):
            return False
        with open(self.summary_path, encoding="utf-8") as f:
            return json.load(f).get("status", self.finished[0]) in self.finished

    def write_summary(self, out, status) -> dict:
        summary = self.summarize(out, status)
        write_json_atomic(self.summary_path, summary)
        return summary

    def summary_if_any(self, out, status) -> dict:
        """``write_summary``, or {} when the run left nothing to summarize (it stopped or failed before
        writing its metrics: a bad flag, an import error), so that it is reported instead of ending the plan."""
        try:
            return self.write_summary(out, status)
        except FileNotFoundError as e:
            print(f"{self.name}: no summary ({e})", flush=True)
            return {}


CRASH_RETRIES = 2  # restarts of a run that died of a signal, per invocation of run_plan


def _start_run(run, out, env):
    """Start ``run`` (claimed by this process) from its newest checkpoint, or afresh: ``(process, its log
    file, checkpoint or None, update)``. Nothing is left running or open if this raises."""
    run_dir = os.path.join(out, run.name)
    ckpt, update = run.resume(run_dir) if run.resume else resume_ppo_run(run_dir, run.prefix)
    if ckpt is None and os.path.isdir(run_dir):
        shutil.rmtree(run_dir)  # cut short before its first checkpoint: start again
        with contextlib.suppress(FileNotFoundError):  # and that attempt's time is not the run's
            os.remove(os.path.join(out, run.name + ".segments.jsonl"))
    segment_event(out, run.name, event="start", commit=code_commit(), resume_update=update)
    proc = log = None
    try:
        if ckpt and run.partial_summaries:  # a resumed run is running again, not "stopped" until its next save
            run.summary_if_any(out, "running")
        log = open(os.path.join(out, run.name + ".log"), "a")
        # a session of its own: a Ctrl-C reaches the run once, from here (a second would abort it unsaved)
        proc = subprocess.Popen(
            stopped_with_this_process(run.argv(ckpt)),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**env, **run.env},
            cwd=ROOT,
            start_new_session=True,
        )
        carry_nice_into_session(proc.pid)
    except BaseException:  # (a Ctrl-C in this instant, a full disk): stopped, and its end written down
        if proc is not None:
            stop_runs([proc])
        if log is not None:
            log.close()
        with contextlib.suppress(Exception):
            segment_event(out, run.name, event="end", returncode=None if proc is None else proc.returncode)
            if ckpt and run.partial_summaries:
                run.summary_if_any(out, "stopped")
        raise
    return proc, log, ckpt, update


def run_plan(plan, out, lanes_at_once=1, state=None, keep=2, describe=lambda summary: "", say_todo=True) -> list:
    """Run the unfinished ``PlannedRun``s of ``plan`` in order, ``lanes_at_once`` at a time; returns the
    names of the runs that failed.

    A run with numbered checkpoints continues from the newest (``resume_ppo_run``); one cut short before
    its first is started again. A packed run newer than its folder in ``out`` is first restored from
    ``state`` (``restore_state``). Only the newest ``keep`` checkpoints are kept; the summary is refreshed at each new
    checkpoint and at a resume ("running") and when the run ends. Each run is a session of its own, at this process's
    nice value (``carry_nice_into_session``). A run that dies of a signal of its own (a native crash) is
    restarted from its newest checkpoint, up to ``CRASH_RETRIES`` times. A Ctrl-C, SIGTERM
    (``interrupt_on_sigterm``) or any error here stops every run (each saves) and waits for it; a run
    stopped from outside stops the plan too."""
    from common.run.launch import SIGNAL_EXIT

    env = child_env(PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # a background job of a script ignores Ctrl-C, and its children would inherit that and miss the
        # stop stop_runs sends before their trainer installs its own handler: Python's default again
        signal.signal(signal.SIGINT, signal.default_int_handler)
    pending = [r for r in plan if not r.done()]
    if say_todo:
        print(f"{len(pending)} runs to do", flush=True)
    os.makedirs(out, exist_ok=True)
    if state is not None:
        restore_state(out, state)
    if pending:  # a Paddle too old: said once here, not in every run's log
        from common.run.device import require_paddle

        require_paddle()
    running, failed = [], []  # running: [run, proc, log, newest checkpoint seen, its RunClaim]
    crashes = {}  # run name: restarts after it died of a signal
    try:
        while pending or running:
            while pending and len(running) < lanes_at_once:
                run = pending.pop(0)
                claim = claim_run(out, run.name)
                if claim is None:  # not failed: it is being trained elsewhere
                    holder = claimed_by(out, run.name)
                    where = f" (claimed by {holder})" if holder else ""
                    print(f"{run.name}: in use by another process (a suite or a trainer){where}: skipped", flush=True)
                    continue
                try:
                    proc, log, ckpt, update = _start_run(run, out, env)
                except BaseException:  # (a bad metrics line, a Ctrl-C while it is cut): the claim is let go
                    claim.close()
                    raise
                running.append([run, proc, log, update, claim])
                started = f"[{time.strftime('%H:%M:%S')}] start {run.name}" + (f" {run.label}" if run.label else "")
                print(started + (f" from update {update}" if ckpt else ""), flush=True)
            time.sleep(2)
            for entry in list(running):
                run, proc, log, seen, claim = entry
                run_dir = os.path.join(out, run.name)
                _, newest = newest_checkpoint(run_dir, run.prefix)
                if proc.poll() is None:
                    if newest > seen:
                        entry[3] = newest
                        prune_checkpoints(run_dir, run.prefix, keep)
                        if run.partial_summaries:
                            run.summary_if_any(out, "running")
                    continue
                running.remove(entry)
                log.close()
                rc = proc.returncode
                segment_event(out, run.name, event="end", returncode=rc)
                prune_checkpoints(run_dir, run.prefix, keep)
                status = run.status_at_end(rc, run_dir) if rc == 0 else "stopped"
                summary = run.summary_if_any(out, status) if rc == 0 or run.partial_summaries else {}
                if rc == 0 and not summary:
                    failed.append(run.name)
                note = describe(summary) if summary else f"see {os.path.join(out, run.name + '.log')}"
                print(f"[{time.strftime('%H:%M:%S')}] {run.name} ended (rc {rc}): {status} {note}", flush=True)
                stopped = rc in SIGNAL_EXIT.values() or rc in (-signal.SIGINT, -signal.SIGTERM)
                if rc < 0 and not stopped and crashes.get(run.name, 0) < CRASH_RETRIES:
                    # killed by a signal of its own (a native crash, the OOM killer): again from its newest
                    # checkpoint, first in line; an error the run reports itself (exit 1) would only repeat
                    crashes[run.name] = crashes.get(run.name, 0) + 1
                    pending.insert(0, run)
                    print(
                        f"[{time.strftime('%H:%M:%S')}] {run.name}: restarting from its newest checkpoint", flush=True
                    )
                elif rc != 0 and not stopped:
                    failed.append(run.name)
                if stopped:  # stopped from outside (also before its trainer's handler was in place): the plan too
                    pending.clear()
                claim.close()  # its end and summary are written: another process may take it now
    except BaseException:  # Ctrl-C, SIGTERM or an error here: each run finishes its step and saves; waited for
        stop_runs([entry[1] for entry in running])
        for run, proc, log, _, claim in running:
            log.close()
            segment_event(out, run.name, event="end", returncode=proc.returncode)
            if run.partial_summaries:
                run.summary_if_any(out, "stopped")
            claim.close()
        print(f"[{time.strftime('%H:%M:%S')}] stopped; {len(running)} run(s) cut short", flush=True)
        raise
    return failed


# ---------------------------------------------------------------------------------- reports
def segments_table(summaries, name_of) -> list:
    """Markdown lines: a table of every start of each summarized run's process (``read_segments``), with
    the update it resumed from, the commit and how it ended; ``name_of(summary)`` is the run's name."""
    lines = ["Segments (each start of a run's process):", ""]
    lines += ["| run | started (UTC) | from update | commit | ended with |", "|---|---|---|---|---|"]
    for s in summaries:
        pairs = segment_pairs(s["segments"])
        for k, (e, end_event) in enumerate(pairs):
            if end_event is not None:
                end = end_event["returncode"]
            else:  # the last start may still be running; an earlier one was killed without an exit
                end = "(running or cut off)" if k == len(pairs) - 1 else "killed (no exit recorded)"
            lines.append(f"| {name_of(s)} | {e['time']} | {e.get('resume_update', 0)} | {e['commit'][:7]} | {end} |")
    return lines


def replace_block(path, start, end, block) -> str:
    """Put ``block`` between the marker lines ``start`` and ``end`` of the text file ``path`` (written whole:
    a stop leaves the old page or the new one); returns ``path``. A missing page or marker exits naming it."""
    if not os.path.isfile(path):
        raise SystemExit(f"error: {path} does not exist: --docs must be the folder that holds the report's page")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if start not in text or end not in text or text.index(start) > text.index(end):
        raise SystemExit(f"error: {path} lacks the report's markers {start!r} ... {end!r}")
    a, b = text.index(start) + len(start), text.index(end)
    return write_atomic(path, text[:a] + "\n" + block + "\n" + text[b:])


# ---------------------------------------------------------------------------------- resume state in git
def _map_state(state, fn):
    """``state`` with every non-container leaf replaced by ``fn(leaf)`` (dicts, lists and tuples kept)."""
    if isinstance(state, dict):
        return {k: _map_state(v, fn) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_map_state(v, fn) for v in state)
    return fn(state)


def _read_checkpoint(src) -> dict:
    """Checkpoint ``src`` as a nested dict of numpy arrays and plain values, ``format`` left out.

    A pickle of an earlier version (a lane started before the format changed) is converted first, in a
    temporary copy (``common.run.convert``), so such a run can still be packed and continued."""
    from common.run.checkpoint import load_checkpoint
    from common.run.convert import convert, is_pickle
    from common.run.tensorfile import is_tensorfile

    with open(src, "rb") as f:
        head = f.read(9)
    if is_pickle(head) and not is_tensorfile(head):
        tmp = src + ".converting"
        shutil.copyfile(src, tmp)
        try:
            convert(tmp)
            return _read_checkpoint(tmp)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    state = load_checkpoint(src)
    state.pop("format", None)
    return _map_state(state, lambda leaf: leaf.numpy() if hasattr(leaf, "numpy") else leaf)


#: a float32 matrix (the policy's or the intrinsic module's) with at least this many entries is packed as int8
#: with one scale per column (the SND authors' 15,488 x 512 layers, the games' 3,136 x 512): half float16's
#: bytes; what that does to the reward: the README in benchmarks/lane_state/. Every smaller array: float16
QUANTIZE_MIN_ENTRIES = 1 << 20
INT8_KEYS = ("int8_columns", "column_scale")


def _quantize(matrix: np.ndarray) -> dict:
    """float32[R, C] -> {int8[R, C], float32[C]}: each column scaled so its largest magnitude is 127."""
    scale = np.abs(matrix).max(axis=0) / 127.0
    scale[scale == 0] = 1.0  # an all-zero column stays zero
    q = np.clip(np.rint(matrix / scale), -127, 127).astype(np.int8)
    return {INT8_KEYS[0]: q, INT8_KEYS[1]: scale.astype(np.float32)}


def _is_quantized(value) -> bool:
    return isinstance(value, dict) and set(value) == set(INT8_KEYS)


def slim_checkpoint(src, dst) -> str:
    """Write a small copy of checkpoint ``src`` to ``dst``: float32 arrays as float16, large matrices
    (the policy's or the intrinsic module's) as int8 per column (``QUANTIZE_MIN_ENTRIES``), no optimizer
    moments (a run resumed from it starts fresh Adam moments, which the trainer does for an empty
    optimizer entry).
    What a lane commits to continue a run elsewhere."""
    from common.run.checkpoint import save_checkpoint, without_optimizers

    def small(leaf):
        if not (isinstance(leaf, np.ndarray) and leaf.dtype == np.float32):
            return leaf
        if leaf.ndim == 2 and leaf.size >= QUANTIZE_MIN_ENTRIES:
            return _quantize(leaf)
        return leaf.astype(np.float16)

    return save_checkpoint(dst, _map_state(without_optimizers(_read_checkpoint(src)), small))


def unslim_checkpoint(src, dst) -> str:
    """``slim_checkpoint`` undone as far as it can be: float16 and int8 matrices back to float32 (the
    rounding stays)."""
    from common.run.checkpoint import save_checkpoint

    def full(state):
        if _is_quantized(state):
            return state[INT8_KEYS[0]].astype(np.float32) * state[INT8_KEYS[1]]
        if isinstance(state, dict):
            return {k: full(v) for k, v in state.items()}
        if isinstance(state, (list, tuple)):
            return type(state)(full(v) for v in state)
        return state.astype(np.float32) if isinstance(state, np.ndarray) and state.dtype == np.float16 else state

    return save_checkpoint(dst, full(_read_checkpoint(src)))


PACKED_FILES = ("config.json", "metrics.jsonl")


def pack_state(plan, out, state) -> list:
    """Copy each unfinished run's resume state from ``out`` into ``state/<name>`` (replacing what was
    packed before): its newest checkpoint slimmed (``slim_checkpoint``), config, metrics and segments;
    a finished run's packed state is removed. Returns the names packed."""
    packed = []
    for run in plan:
        run_dir, dest = os.path.join(out, run.name), os.path.join(state, run.name)
        ckpt, number = newest_checkpoint(run_dir, run.prefix)
        if run.done():
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(dest + ".old", ignore_errors=True)
            continue
        if ckpt is None:
            continue
        # a pack cut short between its two renames left only the earlier one, as <name>.old (restore_state)
        _, in_pack = _packed_checkpoint(dest if os.path.isdir(dest) else dest + ".old")
        if in_pack > number:  # this folder is behind the run's pack (a machine it left): keep the pack
            print(f"{run.name}: not packed: the pack holds update {in_pack}, this folder only {number}")
            continue
        tmp = dest + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(os.path.join(tmp, "models"))
        slim_checkpoint(ckpt, os.path.join(tmp, "models", os.path.basename(ckpt)))
        for f in PACKED_FILES:
            if os.path.exists(os.path.join(run_dir, f)):
                shutil.copy2(os.path.join(run_dir, f), os.path.join(tmp, f))
        segments = os.path.join(out, run.name + ".segments.jsonl")
        if os.path.exists(segments):
            shutil.copy2(segments, os.path.join(tmp, "segments.jsonl"))
        old = dest + ".old"  # the earlier pack stays until the new one is in place
        if os.path.exists(dest):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
        packed.append(run.name)
        mb = os.path.getsize(os.path.join(dest, "models", os.path.basename(ckpt))) / 2**20
        print(f"{run.name}: packed {os.path.basename(ckpt)} ({mb:.1f} MB slimmed) into {dest}")
    return packed


def _packed_checkpoint(src):
    """(prefix, number) of the one checkpoint ``<prefix>_<number>.pdparams`` packed in ``src``, or (None, -1)."""
    for path in glob.glob(os.path.join(src, "models", "*.pdparams")):
        prefix, _, number = os.path.splitext(os.path.basename(path))[0].rpartition("_")
        if number.isdigit():
            return prefix, int(number)
    return None, -1


def restore_state(out, state) -> list:
    """Put each packed run back into ``out`` (a fresh machine) unless ``out`` holds a checkpoint of it at
    least as new: a folder that is missing, has no checkpoint (a start that died) or an older one is
    replaced. The checkpoint goes back to float32 (``unslim_checkpoint``); returns the names."""
    restored = []
    for entry in sorted(os.listdir(state)) if os.path.isdir(state) else []:
        # a pack cut short between its two renames left only the earlier one, as <name>.old
        name = entry.removesuffix(".old")
        if entry.endswith(".tmp") or (entry != name and os.path.exists(os.path.join(state, name))):
            continue
        src, run_dir = os.path.join(state, entry), os.path.join(out, name)
        prefix, packed = _packed_checkpoint(src)
        if prefix is None:
            continue
        claim = claim_run(out, name)  # held until the folder is swapped; run_plan claims it again to start it
        if claim is None:
            print(f"{name}: in use by another process, not restored")
            continue
        try:
            if os.path.exists(run_dir):
                local, newest = newest_checkpoint(run_dir, prefix)
                if local is not None and newest >= packed:
                    continue
            _swap_in_pack(src, run_dir, os.path.join(out, name + ".segments.jsonl"))
        finally:
            claim.close()
        restored.append(name)
        print(f"{name}: restored from {src}")
    return restored


def _swap_in_pack(src, run_dir, segments):
    """``run_dir`` replaced by the pack ``src`` with its checkpoint back in float32, and its segments put at
    ``segments``. The pack is made whole beside the folder first: one that cannot be read leaves the
    folder as it was."""
    tmp, old = run_dir + ".tmp", run_dir + ".old"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("segments.jsonl", "*.pdparams"))
    for path in glob.glob(os.path.join(src, "models", "*.pdparams")):
        unslim_checkpoint(path, os.path.join(tmp, "models", os.path.basename(path)))
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(run_dir):
        os.replace(run_dir, old)
    if os.path.exists(os.path.join(src, "segments.jsonl")):
        shutil.copy2(os.path.join(src, "segments.jsonl"), segments)
    os.replace(tmp, run_dir)
    shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------- a suite's command line
def suite_main(suite, argv=None, add_arguments=None, before_report=None) -> int:
    """The command line of a long-run suite: run its plan (resumable), ``--report-only``, ``--status``,
    ``--pack-state``. ``suite`` is the suite's module: ``__doc__``, ``PLAN``, ``RUN_FORMAT`` (what
    ``--runs`` takes), ``parse_runs(text)``, ``RUNS`` (its ``Runs``), ``describe(summary)``,
    ``write_report(results, docs)``, the folders ``OUT``, ``RESULTS``, ``DOCS``, ``LANE_STATE`` (None: its
    runs are never packed), ``PAGE`` (its report's file in ``DOCS``: a ``--docs`` folder without one starts
    from a copy) and ``TRAINER``, its runs' train script. Flags it does not know go to the trainer
    of every run (checks, e.g. a small budget), once the trainer's parser has accepted them (a misspelt flag
    of the suite's own, ``--report-onyl``, is refused before anything runs), and, unless they are
    ``HOW_NOT_WHAT``, only with an ``--out``, ``--results`` (and, where it packs, ``--state``) of their own.
    Returns 1 when a run failed, else 0. A suite adds flags of its own with ``add_arguments(parser)`` and acts
    on them in ``before_report(args)``, called before its report is written. A suite with ``QUICK = (runs,
    trainer flags)`` also offers ``--quick``: those runs with those flags, and their summaries, state and
    report in a scratch folder, ``<OUT>-quick`` unless ``--out`` names one."""
    import argparse

    p = argparse.ArgumentParser(description=suite.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="", help=f"comma-separated {suite.RUN_FORMAT} (default: the whole plan)")
    p.add_argument("--lanes", type=int, default=1, choices=(1, 2), help="runs at a time (2: one thread each)")
    quick = getattr(suite, "QUICK", None)
    if quick is not None:
        p.add_argument(
            "--quick",
            action="store_true",
            help=f"a check of the whole pipeline in minutes: runs {quick[0]} with {' '.join(quick[1])}; runs, "
            "summaries, state and report in a scratch folder (--out, default: the plan's folder + '-quick')",
        )
    p.add_argument("--out", default=None, help=f"parent folder of the runs (default: {suite.OUT})")
    p.add_argument("--results", default=None, help=f"folder of the runs' summaries (default: {suite.RESULTS})")
    p.add_argument(
        "--docs",
        default=None,
        help=f"folder of the report's page, {suite.PAGE} (default: {suite.DOCS}; elsewhere it starts as a copy)",
    )
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the summaries alone")
    p.add_argument(
        "--status", action="store_true", help="print each summary's status and the planned runs still to do, and stop"
    )
    packs = suite.LANE_STATE is not None  # a suite whose runs are not packed lists neither flag
    p.add_argument(
        "--pack-state",
        action="store_true",
        help="copy the unfinished runs' resume state into --state" if packs else argparse.SUPPRESS,
    )
    p.add_argument(
        "--state",
        default=None,
        help=f"folder of packed resume state, restored where no newer checkpoint is (default: {suite.LANE_STATE})"
        if packs
        else argparse.SUPPRESS,
    )
    if add_arguments is not None:
        add_arguments(p)
    args, extra = p.parse_known_args(argv)
    if getattr(args, "quick", False):
        args.runs, extra = args.runs or quick[0], [*quick[1], *extra]
        args.out = args.out or suite.OUT + "-quick"
        os.makedirs(args.out, exist_ok=True)
        args.results = args.results or os.path.join(args.out, "results")
        args.state = args.state or (os.path.join(args.out, "state") if packs else None)
        args.docs = args.docs or args.out
    args.out, args.results = args.out or suite.OUT, args.results or suite.RESULTS
    args.docs, args.state = args.docs or suite.DOCS, args.state or suite.LANE_STATE
    if args.pack_state and not packs:
        p.error("--pack-state: this suite's runs are not packed (see its docstring)")
    if extra:
        check_trainer_flags(p, suite.TRAINER, extra)
        changing = [f for f in extra if f.startswith("--") and f.split("=")[0] not in HOW_NOT_WHAT]
        plans = [(args.out, suite.OUT), (args.results, suite.RESULTS)]
        plans += [(args.state, suite.LANE_STATE)] if packs else []
        if changing and not (args.report_only or args.status) and any(_same(a, b) for a, b in plans):
            # e.g. a small budget: resumed from the plan's own checkpoints or packs it would end them, and
            # its summaries would mark the plan's runs finished
            flags = "--out, --results and --state" if packs else "--out and --results"
            p.error(
                f"trainer flags {' '.join(changing)} change the runs: give them an {flags} of their own (not the "
                f"plan's {', '.join(repr(folder) for _, folder in plans)})"
            )
    if (args.report_only or args.status) and not os.path.isdir(args.results):
        p.error(f"--results {args.results!r} is not a folder: expected the folder of the runs' summaries")
    if not (args.status or args.pack_state) and not os.path.isdir(args.docs):
        p.error(f"--docs {args.docs!r} is not a folder: expected the folder of the report's page")
    page = os.path.join(args.docs, suite.PAGE)
    if not (args.status or args.pack_state or os.path.exists(page)):  # the report's markers: the committed page's
        shutil.copy(os.path.join(suite.DOCS, suite.PAGE), page)
        print(f"{page}: started from a copy of {os.path.join(suite.DOCS, suite.PAGE)}")
    carry_nice_into_session()  # started as `setsid nice -n N ...`: the whole session yields (autogroup)
    plan = suite.RUNS.planned(
        suite.parse_runs(args.runs) if args.runs else suite.PLAN, args.out, args.results, args.lanes, extra
    )
    if args.pack_state:
        pack_state(plan, args.out, args.state)
        return 0
    if args.status:
        for s in suite.RUNS.load(args.results):
            # an unfinished run's summary says when it was written: a recent "running" is a lane at work
            when = (
                f" (summary of {s['updated']})"
                if s.get("updated") and s.get("status") in ("running", "stopped")
                else ""
            )
            status = s.get("status", "finished")  # (the oldest summaries of a suite that wrote only finished ones)
            print(f"{suite.RUNS.name_of(s)}: {status}{when}, {suite.describe(s)}")
        todo = [run.name for run in plan if not run.done()]
        print("to do, in order:", ", ".join(todo) if todo else "nothing: every planned run has finished")
        return 0
    failed = []
    if not args.report_only:
        failed = run_plan(plan, args.out, args.lanes, args.state, describe=suite.describe)
        if failed:
            print("failed:", ", ".join(failed), file=sys.stderr)
    if before_report is not None:
        before_report(args)
    print("report:", suite.write_report(args.results, args.docs))
    return 1 if failed else 0


#: the flags of a PPO suite's ``QUICK`` runs (Mario, Montezuma): 2 updates of 2 in-process envs x 8 steps, a
#: checkpoint after each, no evaluation; a suite adds its game's own switches
TINY_PPO = ("--num-processes", "2", "--num-workers", "-1", "--num-local-steps", "8", "--batch-size", "2")
TINY_PPO += ("--num-global-steps", "32", "--save-interval", "1", "--eval-interval", "0")
#: trainer flags that change how a run computes, not what it learns: allowed on the plan's own runs (fewer
#: than the trainers' ``HOW_NOT_WHAT``, whose folders a suite chooses itself and whose env backends it keeps)
HOW_NOT_WHAT = frozenset({"--device", "--num-threads", "--num-workers", "--inference"})


def _same(a, b) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def check_trainer_flags(parser, trainer: str, extra) -> None:
    """The flags ``extra`` a suite passes on to its runs, checked by the parser of the train script
    ``trainer`` (``"mario/train.py"``) before any run starts; ``parser.error`` names what it refuses."""
    import importlib

    from common.run.config import build_parser

    module = importlib.import_module(trainer.removesuffix(".py").replace("/", "."))
    theirs = build_parser(module.SPEC.config_cls)

    def refuse(message):
        raise ValueError(message)

    theirs.error = refuse  # its message, not its usage page and exit
    try:
        _, unknown = theirs.parse_known_args(list(extra))
    except ValueError as e:
        parser.error(f"{trainer}: {e}")
    if unknown:
        parser.error(f"{' '.join(unknown)}: neither a flag of this suite nor of {trainer} (see both --help)")


# ---------------------------------------------------------------------------------- a suite's parts
@dataclasses.dataclass(frozen=True)
class Runs:
    """How a suite names, starts and summarizes its runs. A run's key is its entry in the plan, the
    values of the summary fields ``key`` (e.g. ``("method", "seed")``).

    ``name(*key)`` is its folder's name in ``out`` and its summary's in ``results`` (``<name>.json``);
    ``command(*key, out, resume, threads, extra)`` its trainer's command line; ``summarize(out, *key,
    status)`` its summary; ``prefix`` its checkpoints' name before ``_<update>`` (or a function of the
    key). ``order(summary)`` sorts the summaries for the report; ``options`` are more ``PlannedRun``
    fields (e.g. ``finished``)."""

    key: tuple
    name: typing.Callable
    command: typing.Callable
    summarize: typing.Callable
    prefix: str | typing.Callable
    order: typing.Callable
    options: dict = dataclasses.field(default_factory=dict)

    def planned(self, plan, out, results, lanes_at_once=1, extra=()) -> list:
        """The plan's keys as ``PlannedRun``s; one thread per run when two run at once."""
        threads = 1 if lanes_at_once > 1 else 0

        def one(key):
            return PlannedRun(
                name=self.name(*key),
                argv=lambda resume: self.command(*key, out, resume, threads, extra),
                prefix=self.prefix(*key) if callable(self.prefix) else self.prefix,
                summarize=lambda out_, status: self.summarize(out_, *key, status),
                summary_path=self.summary_path(results, *key),
                **self.options,
            )

        return [one(tuple(key)) for key in plan]

    def summary_path(self, results, *key) -> str:
        return os.path.join(results, self.name(*key) + ".json")

    def name_of(self, summary) -> str:
        """The name of the run ``summary`` summarizes."""
        return self.name(*(summary[k] for k in self.key))

    def load(self, results) -> list:
        """The summaries in ``results`` (the files ``name`` would give, with ``*`` for each part of the
        key), sorted by ``order``; ``SystemExit`` naming a file that is not one."""
        out = []
        for path in sorted(glob.glob(self.summary_path(results, *["*"] * len(self.key)))):
            try:
                with open(path, encoding="utf-8") as f:
                    out.append(json.load(f))
            except (OSError, ValueError) as e:
                raise SystemExit(f"error: {path} is not a run summary (JSON): {e}") from None
        return sorted(out, key=self.order)

    def grouped(self, results, *fields) -> dict:
        """The summaries in ``results`` (``load``) by their values of ``fields``: {value, or the tuple of the
        values of several fields: [summary, ...] in ``order``}."""
        out = {}
        for s in self.load(results):
            values = tuple(s[f] for f in fields)
            out.setdefault(values if len(fields) > 1 else values[0], []).append(s)
        return out


def parse_keys(text, plan, parts) -> tuple:
    """``--runs`` as comma-separated keys ``A:B:...``, one part per entry of ``parts``: (its name, the values
    it accepts, or None for a seed, an integer >= 0). A ``*`` part matches any value: the item stands for
    the runs of ``plan`` it matches (``rnd:*``: every planned seed of RND). ``SystemExit`` naming an item
    that is neither."""
    out = []
    for item in text.split(","):
        values = item.split(":")
        if len(values) != len(parts) or not all(
            v == "*" or (v.isdigit() if accepted is None else v in accepted) for v, (_, accepted) in zip(values, parts)
        ):
            accepted = "; ".join(
                f"{n} {'an integer >= 0' if a is None else 'one of ' + ', '.join(a)}" for n, a in parts
            )
            raise SystemExit(
                f"error: --runs {item!r} is invalid: expected {':'.join(n for n, _ in parts)} (a part may be *), "
                f"with {accepted}"
            )
        if "*" in values:
            found = [k for k in plan if all(v in ("*", str(p)) for v, p in zip(values, k))]
            if not found:
                raise SystemExit(f"error: --runs {item!r} matches no run of the plan")
        else:
            found = [tuple(int(v) if accepted is None else v for v, (_, accepted) in zip(values, parts))]
        out += [k for k in found if k not in out]
    return tuple(out)


def parse_method_seeds(text, methods, plan) -> tuple:
    """``--runs`` as ``METHOD:SEED,...`` -> ((method, seed), ...), ``*`` parts matched in ``plan`` (``parse_keys``)."""
    return parse_keys(text, plan, (("METHOD", tuple(methods)), ("SEED", None)))


def write_suite_report(docs, page, picture, alt, summaries, markdown, plot, start, end) -> str:
    """A suite's report: ``markdown(summaries)`` (and, with summaries, ``plot(summaries, docs/picture)``
    shown above it) between the markers ``start`` and ``end`` of ``docs/page``; returns the page's path."""
    block = markdown(summaries)
    if summaries:
        plot(summaries, os.path.join(docs, picture))
        block = f"![{alt}]({picture})\n\n" + block
    return replace_block(os.path.join(docs, page), start, end, block)
