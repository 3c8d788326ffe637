"""The greedy evaluation episode in a separate process, while the trainer keeps training.

``BackgroundEvaluator(module, cfg_dict)`` spawns one process that imports the game's
spec (``module.SPEC``, e.g. ``mario.train``), builds the policy and an eval env once,
and then plays one greedy episode (``common.play.greedy_episode``, the tutorial's
rule) per request::

    ev = BackgroundEvaluator("mario.train", cfg.to_dict())
    ev.submit(weights, seed, record_path)   # numpy state dict of the policy after update k
    ...                                     # update k + 1 runs meanwhile
    out = ev.poll()                         # None while the episode runs, else its result
    out = ev.wait()                         # blocks until the result is there
    ev.close()                              # or ev.close(cancel=True): terminate at once

A result is ``{"stacks": uint8[L+1, C, H, W], "return", "length", "info", "strip",
"video", "seconds"}`` (the episode's wall time in the eval process): the trainer computes the eval intrinsic reward from the stacks itself.
At most one request is in flight (``busy``). On a 2-core machine the update phase
runs on one core; the eval episode (emulator + batch-1 policy forward, one math
thread) takes the other.

Faults: an exception in the eval process reaches the caller of ``poll``/``wait`` as
:class:`EvalProcessError` carrying the formatted traceback; a process that dies
(segfault, SIGKILL) is reported with its exit code. The process is daemonic, started
with SIGINT ignored (Ctrl-C reaches the trainer alone) and one math thread, and
without the parent's ``__main__`` (spawn would re-import the training script).
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

from common.vec_env import _describe_exitcode, _worker_launch


EVAL_NICENESS = 10  # os.nice increment of the eval process


class EvalProcessError(RuntimeError):
    """The evaluation process raised (the message carries its traceback) or died."""


def _eval_main(conn, module: str, attr: str, cfg_dict: dict) -> None:
    """Entry point of the evaluation process: build once, then one greedy episode per request."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    env = None
    try:
        from common.device import require_paddle, set_device
        from common.play import frame_strip, greedy_episode

        paddle = require_paddle()
        # Paddle's import installs C handlers that print "FatalError: Termination signal" on SIGTERM
        # (how the trainer cancels an eval on Ctrl-C) and react to the terminal's SIGINT: ours instead.
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        paddle.base.core.set_num_threads(1)
        # Background work: the training loop comes first, the eval uses what it leaves idle.
        # Measured on 2 cores (docs/performance.md): end to end unchanged, the loop's own phases
        # no longer slowed by the eval (collection 185 -> 250 steps/s while an eval runs).
        with contextlib.suppress(AttributeError, OSError):
            os.nice(EVAL_NICENESS)
        spec = getattr(importlib.import_module(module), attr)
        cfg = spec.config_cls.from_dict(cfg_dict)
        set_device(cfg.device)
        obs_shape, num_actions = spec.spaces(cfg)
        policy = spec.make_policy(cfg, obs_shape, num_actions)
        while True:
            msg = conn.recv()
            if msg[0] == "close":
                break
            _, weights, seed, record_path = msg
            policy.set_state_dict(weights)
            if record_path:
                episode_env = spec.env_factory(cfg, record_path)()
            else:
                if env is None:
                    env = spec.env_factory(cfg, None)()
                episode_env = env
            rgb, t = [], time.perf_counter()
            try:
                stacks, ret, steps, info = greedy_episode(policy, episode_env, seed, cfg.max_actions,
                                                          cfg.max_eval_steps, rgb_frames=rgb)
            finally:
                if record_path:
                    episode_env.close()
            conn.send(("result", {"stacks": stacks, "return": ret, "length": steps, "info": info,
                                  "strip": frame_strip(stacks, rgb), "video": record_path,
                                  "seconds": time.perf_counter() - t}))
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
        self._proc = ctx.Process(target=_eval_main, args=(child, module, attr, cfg_dict), daemon=True,
                                 name=f"eval-{module}")
        with _worker_launch(hide_main=True):
            self._proc.start()
        child.close()
        self.busy = False

    def submit(self, weights: dict, seed: int | None, record_path: str | None = None) -> None:
        """Start one greedy episode with these policy weights (numpy state dict); one at a time."""
        if self.busy:
            raise RuntimeError("an evaluation is already running; wait() for it first")
        self._check_alive()
        try:
            self._conn.send(("eval", weights, seed, record_path))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._raise_dead()
        self.busy = True

    def poll(self) -> dict | None:
        """The running episode's result if it has finished, else None (never blocks)."""
        return self.wait(timeout=0)

    def wait(self, timeout: float | None = None) -> dict | None:
        """Block until the running episode's result arrives (None on timeout or when nothing runs)."""
        if not self.busy:
            return None
        ready = mp.connection.wait([self._conn, self._proc.sentinel], timeout)
        if not ready:
            return None
        if self._conn not in ready and not self._conn.poll():
            self._raise_dead()
        try:
            kind, payload = self._conn.recv()
        except (EOFError, ConnectionResetError):
            self._raise_dead()
        self.busy = False
        if kind == "error":
            raise EvalProcessError(f"the evaluation process failed:\n{payload}")
        return payload

    def _check_alive(self) -> None:
        if not self._proc.is_alive():
            self._raise_dead()

    def _raise_dead(self):
        self._proc.join(timeout=1)
        self.busy = False
        raise EvalProcessError(f"the evaluation process (pid {self._proc.pid}) died: "
                               f"{_describe_exitcode(self._proc.exitcode)}")

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


__all__ = ["BackgroundEvaluator", "EvalProcessError"]
