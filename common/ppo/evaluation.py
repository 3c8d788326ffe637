"""Greedy evaluation episodes: one module for the in-process and the background path.

``Evaluations(spec, cfg, new_intrinsic)`` evaluates snapshots of the trainer's state::

    evals.start(snapshot, seed, record_path)   # a copy of Trainer.state_dict() after update k
    for result, snapshot in evals.finished(block=False):
        ...                                    # log it; a "level solved" checkpoint is the snapshot
    evals.close(cancel=True)

Each episode is the tutorial's greedy rule (``common.ppo.play.greedy_episode``: argmax of the
policy, stopped after ``max_actions`` repeats of one action). With ``eval_in_background``
it plays in a separate process (``BackgroundEvaluator``) while the next update runs, at
most one at a time (a new ``start`` first waits for the previous result, so every
requested update is evaluated); otherwise ``start`` plays it at once, in this process, on
its own copy of the policy. Either way the eval intrinsic reward (summed over the
episode's observations) is computed here with a copy of the snapshot's intrinsic
module. A result is ``{"return", "length", "intrinsic", "info", "strip", "video"}``, and
for a recorded episode (every ``video_interval`` updates) of a run with an intrinsic module
also ``"along"``: the intrinsic reward of every step with the frames at its highest peaks
(``common.pictures.along_episode``; the env's RGB screens, else ``spec.observation_picture``
of the observations), for which the episode keeps up to ``ALONG_KEEP`` screens.

``BackgroundEvaluator(module, cfg_dict)`` spawns one process that imports the game's
spec (``module.SPEC``, e.g. ``mario.train``), builds the policy and an eval env once,
and then plays one greedy episode per request (``submit``/``poll``/``wait``/``close``); a
result carries the episode's observation stacks, its kept RGB screens when asked
(``along``) and its wall time (``seconds``).
The eval process runs at a lower CPU priority (``EVAL_NICENESS``) with one math thread, so its
episode (emulator + batch-1 policy forward) fills the time the training loop leaves idle instead of
slowing its phases (``docs/performance.md``).

Faults: an exception in the eval process reaches the caller as :class:`EvalProcessError`
carrying the formatted traceback; a process that dies (segfault, SIGKILL) is reported
with its exit code. The process is daemonic, started with SIGINT ignored (Ctrl-C reaches
the trainer alone) and one math thread, and without the parent's ``__main__`` (spawn
would re-import the training script).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import time
import traceback

import numpy as np

from common.envs.workers import describe_exitcode, worker_launch
from common.intrinsic.base import episode_rewards
from common.run import games
from common.run.checkpoint import copy_state
from common.run.logger import read_metrics

EVAL_NICENESS = 10  # os.nice increment of the eval process


class EvalProcessError(RuntimeError):
    """The evaluation process raised (the message carries its traceback) or died."""


class EvalProcessLost(EvalProcessError):
    """The evaluation process died or gave no sign of life for ``--worker-timeout`` seconds (hung, stopped)."""


def play_greedy(spec, cfg, policy, weights, seed: int, record_path, along: bool, env, on_step=None):
    """One greedy evaluation episode of ``policy`` with ``weights`` (both evaluation paths play this).

    ``env``: the episode env kept between calls (None: make it); a recorded episode (``record_path``)
    gets an env of its own, closed after it. ``along`` keeps every RGB screen for the intrinsic-reward
    picture, else only the few of ``eval/frames``. Returns ``(result, env)``: ``result`` holds
    ``stacks`` (the observations), ``actions`` (int64[L]), ``return``, ``length``, ``info``, ``strip``,
    ``screens``, ``video``.
    """
    from common.ppo.play import ALONG_KEEP, RGB_KEEP, frame_strip, greedy_episode

    policy.set_state_dict(weights)
    if record_path:
        episode_env = spec.env_factory(cfg, record_path)()
    else:
        if env is None:
            env = spec.env_factory(cfg, None)()
        episode_env = env
    rgb = []  # RGB screens of the episode: a few for the eval/frames picture, many for "along"
    actions = []
    try:
        stacks, ret, steps, info = greedy_episode(
            policy,
            episode_env,
            seed,
            cfg.max_actions,
            cfg.max_eval_steps,
            rgb_frames=rgb,
            rgb_keep=ALONG_KEEP if along else RGB_KEEP,
            on_step=on_step,
            actions=actions,
        )
    finally:
        if record_path:
            episode_env.close()
    result = {
        "stacks": stacks,
        "actions": np.asarray(actions, np.int64),
        "return": ret,
        "length": steps,
        "info": info,
        "strip": frame_strip(stacks, rgb),
        "screens": rgb if along else None,
        "video": record_path,
    }
    return result, env


def _eval_main(conn, module: str, attr: str, cfg_dict: dict) -> None:
    """Entry point of the evaluation process: build once, then one greedy episode per request."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    env = None
    try:
        from common.run.device import require_paddle, set_device

        require_paddle()
        # Paddle's import installs C handlers that print "FatalError: Termination signal" on SIGTERM
        # (how the trainer cancels an eval on Ctrl-C) and react to the terminal's SIGINT: ours instead.
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Background work: the training loop comes first, the eval uses what it leaves idle:
        # end to end unchanged, the loop's own phases (collection) no longer slowed by the eval
        # (docs/performance.md).
        with contextlib.suppress(AttributeError, OSError):
            os.nice(EVAL_NICENESS)
        spec = getattr(importlib.import_module(module), attr)
        cfg = spec.config_cls.from_dict(cfg_dict)
        set_device(cfg.device)
        from common import cpu

        cpu.set_math_threads(1)  # the greedy episode's small batches; nothing on a GPU (common.cpu.fast_paths)
        obs_shape, num_actions = spec.spaces(cfg)
        policy = spec.make_policy(cfg, obs_shape, num_actions)
        while True:
            msg = conn.recv()
            if msg[0] == "close":
                break
            _, weights, seed, record_path, along = msg
            t = time.perf_counter()
            alive = lambda steps: conn.send(("alive", steps))  # noqa: E731 - the trainer's hang check
            result, env = play_greedy(spec, cfg, policy, weights, seed, record_path, along, env, alive)
            conn.send(("result", {**result, "seconds": time.perf_counter() - t}))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the trainer went away
    except BaseException:  # noqa: BLE001 - every failure must reach the trainer
        try:
            conn.send(("error", traceback.format_exc()))
        except (OSError, BrokenPipeError):
            pass
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass


class BackgroundEvaluator:
    """One spawned evaluation process; see the module docstring."""

    def __init__(self, module: str, cfg_dict: dict, attr: str = "SPEC"):
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_eval_main, args=(child, module, attr, cfg_dict), daemon=True, name=f"eval-{module}"
        )
        with worker_launch(hide_main=True):
            self._proc.start()
        child.close()
        self.busy = False
        self.heard = time.monotonic()  # when the process last said something (a result or a sign of life)

    def submit(self, weights: dict, seed: int | None, record_path: str | None = None, along: bool = False) -> None:
        """Start one greedy episode with these policy weights (numpy state dict); one at a time.
        ``along``: keep up to ``ALONG_KEEP`` RGB screens and return them (``"screens"``)."""
        if self.busy:
            raise RuntimeError("an evaluation is already running; wait() for it first")
        self._check_alive()
        try:
            self._conn.send(("eval", weights, seed, record_path, along))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._raise_dead()
        self.busy, self.heard = True, time.monotonic()

    def poll(self) -> dict | None:
        """The running episode's result if it has finished, else None (never blocks)."""
        return self.wait(timeout=0)

    def wait(self, timeout: float | None = None) -> dict | None:
        """Block until the running episode's result arrives (None on timeout or when nothing runs)."""
        if not self.busy:
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # signs of life ("alive") are taken in passing
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = mp.connection.wait([self._conn, self._proc.sentinel], left)
            if not ready:
                return None
            if self._conn not in ready and not self._conn.poll():
                self._raise_dead()
            try:
                kind, payload = self._conn.recv()
            except (EOFError, ConnectionResetError):
                self._raise_dead()
            self.heard = time.monotonic()
            if kind != "alive":
                break
        self.busy = False
        if kind == "error":
            raise EvalProcessError(f"the evaluation process failed:\n{payload}")
        return payload

    def silent_for(self) -> float:
        """Seconds since the running episode last gave a sign of life (0 when nothing runs)."""
        return time.monotonic() - self.heard if self.busy else 0.0

    def kill(self) -> None:
        """End the process at once (SIGKILL: a stopped or hung process too)."""
        if self._proc.pid is not None and self._proc.exitcode is None:
            self._proc.kill()
            self._proc.join(timeout=5)
        self._conn.close()
        self.busy = False

    def _check_alive(self) -> None:
        if not self._proc.is_alive():
            self._raise_dead()

    def _raise_dead(self):
        self._proc.join(timeout=1)
        self.busy = False
        raise EvalProcessLost(
            f"the evaluation process (pid {self._proc.pid}) died: {describe_exitcode(self._proc.exitcode)}"
        )

    def close(self, cancel: bool = False, timeout: float = 10.0) -> None:
        """End the process: ``cancel`` terminates a running episode, else it is asked to exit after it."""
        if self._proc.pid is None or self._proc.exitcode is not None:
            self._conn.close()
            return
        if cancel and self.busy:
            self._proc.terminate()
        else:
            try:
                self._conn.send(("close",))
            except (OSError, BrokenPipeError):
                pass
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            self._proc.terminate()
            self._proc.join(timeout)
        if self._proc.exitcode is None:
            self._proc.kill()
            self._proc.join()
        self._conn.close()
        self.busy = False


class Evaluations:
    """Greedy eval episodes of trainer snapshots, in this process or in the background (module docstring).

    Args:
        spec: the game's ``GameSpec``; cfg: the run's config (``eval_in_background``,
            ``max_actions``, ``max_eval_steps``, ``device``).
        new_intrinsic: a factory of the run's intrinsic module (the eval reward is computed
            with a copy loaded from the snapshot).
        stopping: ``() -> bool``, True once the run is stopping (Ctrl-C): a blocking wait for the
            background episode then gives up (the caller cancels it).
    """

    def __init__(self, spec, cfg, new_intrinsic, stopping=lambda: False):
        self.spec, self.cfg, self._new_intrinsic, self._stopping = spec, cfg, new_intrinsic, stopping
        self._background = None  # the eval process, started at the first background eval
        self._policy = None  # in-process: this module's copy of the policy
        self._env = None  # in-process: the eval env (a recording env is built per episode)
        self._intrinsic = None  # the module copy that scores an episode's observations
        self._pending = None  # the snapshot the background process is playing
        self._done: list = []  # (result, snapshot) ready to be handed out
        self.seconds = 0.0  # time the training loop spent here (background: hand-over and waiting)
        self.lost = 0  # background evaluations lost to a dead or hung process (each skipped, the process replaced)
        self.messages: list[str] = []  # what the trainer should print: each lost evaluation

    def start(self, snapshot: dict, seed: int, record_path: str | None = None) -> None:
        """Evaluate ``snapshot`` (a copy of ``Trainer.state_dict()``, kept until its result is handed out);
        a recorded episode (``record_path``) also gets its intrinsic reward along the episode."""
        t = time.perf_counter()
        along = bool(record_path) and self.cfg.intrinsic != "none"
        if self.cfg.eval_in_background:
            self._collect(block=True)  # one episode in flight at a time
            if self._pending is not None:  # the run is stopping: no new episode
                return
            if self._background is None:
                self._background = BackgroundEvaluator(games.module_of(self.spec.name), self.cfg.to_dict())
            weights = {k: v.numpy() for k, v in snapshot["policy"].items()}
            self._background.submit(weights, seed, record_path, along)
            self._pending = snapshot
        else:
            result = self._play_here(snapshot, seed, record_path, along)
            self._done.append((self._score(result, snapshot), snapshot))
        self.seconds += time.perf_counter() - t

    def start_update(self, snapshot: dict, run_dir: str) -> None:
        """``start`` for the policy after update ``snapshot["update"]``: its seed comes from the run's seed
        and the update, and every ``video_interval``-th update's episode is recorded to ``run_dir/videos``."""
        update, record = snapshot["update"], None
        if self.cfg.video_interval and update % self.cfg.video_interval == 0:
            record = os.path.join(run_dir, "videos", f"eval_{update:06d}.mp4")
        self.start(snapshot, self.cfg.seed + 7919 * (update + 1), record)

    def resume(self, state, run_dir: str, update: int, global_step: int) -> None:
        """At a resume from ``update``: play its eval again if it never reached ``run_dir/metrics.jsonl`` (a
        stop drops the eval in flight), with the seed it would have had. ``state()``: the run's state."""
        every = self.cfg.eval_interval
        if not (every and update and update % every == 0):
            return
        try:
            steps = read_metrics(run_dir).get("eval/return", ((), ()))[0]
        except (OSError, ValueError):  # an unreadable record is reported where the curves are read
            return
        if global_step not in steps:
            self.start_update(copy_state(state()), run_dir)

    def finished(self, block: bool = False) -> list:
        """The evaluations whose results arrived, as ``[(result, snapshot)]`` (``block``: wait for the
        one in flight)."""
        t = time.perf_counter()
        self._collect(block)
        out, self._done = self._done, []
        self.seconds += time.perf_counter() - t
        return out

    def close(self, cancel: bool = False) -> None:
        """End the eval process (``cancel``: at once, dropping an episode in flight) and the eval env."""
        if self._background is not None:
            self._background.close(cancel=cancel)
            self._background = None
        self._pending = None
        if self._env is not None:
            self._env.close()
            self._env = None

    # ------------------------------------------------------------------ internals
    def _collect(self, block: bool) -> None:
        if self._pending is None:
            return
        limit = self.cfg.worker_timeout
        try:
            result = self._background.poll()
            while result is None and block and not self._stopping() and self._background.silent_for() <= limit:
                result = self._background.wait(timeout=0.2)
            if result is None and self._background.silent_for() > limit:
                raise EvalProcessLost(f"the evaluation process gave no sign of life for {limit:g} s (hung or stopped)")
        except EvalProcessLost as e:
            self._lose(e)
            return
        if result is not None:
            snapshot, self._pending = self._pending, None
            self._done.append((self._score(result, snapshot), snapshot))

    def _lose(self, error: EvalProcessLost) -> None:
        """Skip the evaluation in flight and replace the process (the workers' policy: at most
        ``--max-worker-restarts`` times in a run, then the run stops and saves)."""
        update = self._pending["update"]
        self._background.kill()
        self._background, self._pending = None, None
        self.lost += 1
        limit = self.cfg.max_worker_restarts
        if self.lost > limit:
            raise EvalProcessLost(f"{error}; {self.lost} evaluations lost, more than --max-worker-restarts {limit}")
        self.messages.append(
            f"the evaluation of update {update} was lost and is skipped ({error}); a new evaluation process "
            f"takes over ({self.lost} of at most {limit} in this run)"
        )

    def _play_here(self, snapshot: dict, seed: int, record_path: str | None, along: bool) -> dict:
        if self._policy is None:
            self._policy = self.spec.make_policy(self.cfg, *self.spec.spaces(self.cfg))
        result, self._env = play_greedy(
            self.spec, self.cfg, self._policy, snapshot["policy"], seed, record_path, along, self._env
        )
        return result

    def _score(self, result: dict, snapshot: dict) -> dict:
        """The played episode's intrinsic reward: its sum (``"intrinsic"``) and, where the screens were
        kept, the picture's record (``"along"``); the stacks and screens are dropped."""
        from common import pictures

        stacks, actions, screens = result.pop("stacks"), result.pop("actions"), result.pop("screens", None)
        rewards = self._intrinsic_rewards(stacks, actions, snapshot)
        result["intrinsic"] = float(rewards.sum())
        if screens is not None and len(rewards):
            frames = pictures.episode_frames(stacks, screens, self.spec.observation_picture)
            result["along"] = pictures.along_episode(rewards, frames)
        return result

    def _intrinsic_rewards(self, stacks, actions, snapshot: dict):
        """float32[L]: the intrinsic reward of the episode's L steps under the snapshot's module, in one pass."""
        if len(stacks) <= 1 or self.cfg.intrinsic == "none":
            return np.zeros(0, np.float32)
        if self._intrinsic is None:
            self._intrinsic = self._new_intrinsic()
        self._intrinsic.set_state_dict(snapshot["intrinsic"])
        return episode_rewards(self._intrinsic, stacks, actions)


__all__ = ["BackgroundEvaluator", "EvalProcessError", "EvalProcessLost", "Evaluations"]
