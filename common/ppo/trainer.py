"""The one training loop, shared by every game.

    collect (T steps x N envs, uint8 obs)                           Actor + Pipeline
      -> intrinsic rewards (of s_{t+1}, RND's; of s_t, --int-reward snd) IntrinsicStage
      -> GAE per stream, A = ext_coef * A_ext + int_coef * A_int      RolloutBuffer
      -> PPO epochs x minibatches (+ the intrinsic module's step)     PPO, IntrinsicModule
      -> log -> greedy eval every ``eval_interval`` -> checkpoint every ``save_interval``

What differs between games comes from the ``GameSpec``. An update is all or nothing: if
a loss or a weight goes non-finite it is rolled back (and counted); an error anywhere
saves the state of the last completed update and names the file. Ctrl-C / SIGTERM stop at the
next collection step or minibatch: the update under way is dropped (rolled back, as a failed one),
the last completed update is saved, the workers close; a second Ctrl-C aborts at once.

Started by ``paddle.distributed.launch``, each rank runs this loop as one data-parallel
replica (``common.run.distributed``: gradients averaged, reward statistics pooled, the same
decisions on every rank, signals honoured between updates); rank 0 alone logs, evaluates and
writes files, and ``--num-global-steps`` counts the steps of every rank.
"""

from __future__ import annotations

import collections
import functools
import time

import numpy as np
from tqdm import tqdm

from common.ppo.config import TrainConfig
from common.run.device import require_paddle, set_device, warn_ignored_cpu_flags
from common.run.distributed import SilentLogger, World
from common.run.errors import NonFiniteLossError, RunStoppedError, UsageError, stopped_by  # noqa: F401
from common.run.game import GameSpec
from common.run.runtime import NonFiniteSteps, RunFolder, StopSignals, check_fits

paddle = require_paddle()

from common import cpu  # noqa: E402
from common.envs.factory import vec_env_for_run  # noqa: E402
from common.envs.pipeline import Pipeline  # noqa: E402
from common.intrinsic import intrinsic_for_run  # noqa: E402
from common.ppo import replica  # noqa: E402
from common.ppo.actor import Actor  # noqa: E402
from common.ppo.buffer import RolloutBuffer, rollout_bytes  # noqa: E402
from common.ppo.episodes import EpisodeKeeper  # noqa: E402
from common.ppo.evaluation import Evaluations  # noqa: E402
from common.ppo.log import RolloutNotes, RunLog  # noqa: E402
from common.ppo.stage import IntrinsicStage  # noqa: E402
from common.ppo.update import PPO  # noqa: E402
from common.run import logger as tags  # noqa: E402
from common.run.checkpoint import (  # noqa: E402
    CheckpointError,
    all_finite,
    check_compatible,
    copy_state,
    load_checkpoint,
    load_weights,
    optimizer_state,
    set_optimizer_state,
)
from common.run.logger import Logger  # noqa: E402

#: what ``Trainer.state_dict`` writes and ``Trainer.load`` needs
CHECKPOINT_KEYS = (
    "game", "config", "intrinsic_name", "update", "global_step", "policy", "optimizer", "intrinsic",
    "int_filter", "int_rms", "rng", "obs_norm_ready",
)  # fmt: skip


class _StopInUpdate(Exception):
    """A stop signal arrived between two minibatches: the update under way is dropped."""


class Trainer:
    """PPO + intrinsic reward for one game. ``Trainer(spec, cfg).train()`` runs to completion."""

    def __init__(self, spec: GameSpec, cfg: TrainConfig):
        cfg.validate()
        self.spec, self.cfg = spec, cfg
        set_device(cfg.device)
        warn_ignored_cpu_flags(cfg)
        fast = cpu.fast_paths()  # the CPU speed paths: off on a GPU (and with PADDLE_CURIOSITY_PLAIN=1)
        self.world = World.current(cfg.device)  # one process: rank 0 of 1, and nothing below changes
        # agent steps of every rank per update; the ranks step in lockstep
        self.steps_per_update = cfg.rollout_size * self.world.size
        self.num_updates = max(1, cfg.num_global_steps // self.steps_per_update)
        cpu.tune_allocator()
        paddle.seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)

        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.folder = RunFolder(cfg, f"{spec.name}_{spec.level_name(cfg)}_{cfg.intrinsic}_seed{cfg.seed}_{stamp}")
        self.run_dir = self.folder.run_dir

        self.envs = None  # built in train(), after a resume has set the counters (they pick the env seeds)
        self.obs_shape, self.num_actions = spec.spaces(cfg)
        self.policy = spec.make_policy(cfg, self.obs_shape, self.num_actions)
        self.ppo = PPO.from_config(self.policy, cfg)
        engine = cpu.collection_engine(self.policy, self.obs_shape, cfg.inference, cfg.num_envs)
        self.actor = Actor(self.policy, engine)
        self.intrinsic = self._new_intrinsic()
        self.stage = IntrinsicStage(self.intrinsic, cfg, cfg.num_envs)
        self.int_scale = self.stage.scale
        flags = f"--num-local-steps {cfg.num_local_steps} x --num-processes {cfg.num_processes}"
        check_fits(rollout_bytes(cfg.num_local_steps, cfg.num_envs, self.obs_shape), flags, "the rollout")
        state_keys = cfg.first_visit_key == "state"
        if state_keys and not spec.state_keys:
            raise UsageError(f"--first-visit-key state is invalid for {spec.name}: its envs report no state keys")
        self.buffer = RolloutBuffer(cfg.num_local_steps, cfg.num_envs, self.obs_shape, state_keys=state_keys)
        # a stop leaves the update under way at its next minibatch (seconds, not the whole update)
        self.stop = StopSignals(
            "stopping within seconds: the update under way is dropped, the last completed one saved, workers closed"
        )
        self.evals = Evaluations(spec, cfg, self._new_intrinsic, stopping=lambda: self.stop.requested)

        self.update = self.global_step = 0  # completed updates; agent steps over all envs
        self.obs_norm_ready = cfg.intrinsic == "none"
        self.nonfinite = NonFiniteSteps(cfg.max_nan_updates, "update")
        self.last_checkpoint = ""
        self.saved_update = -1
        self.saved_at = time.monotonic()  # when the last checkpoint was written (--save-minutes)
        self.last_eval = None  # the latest logged eval result
        self.solved = False  # a greedy eval solved the level (ends the run with --stop-when-solved)
        self._visited = {}  # the checkpoint's visited places, kept until the run log exists
        self.episodes = EpisodeKeeper(self.world, self.int_scale, lambda: (self.rng, self.intrinsic.rng))  # resume
        # threads for the networks: --num-threads (0 = one per core: this rank's share of them) on CPU, 1 on GPU
        self.threads = (cfg.num_threads or self.world.cores()) if fast else 1
        self._side = cpu.SideThread("intrinsic-update") if self.threads > 1 else None  # see learn
        if cfg.resume:
            self.load(cfg.resume)
            # the updates still to do, at this run's steps per update: the same count on the same world size,
            # the right one after --allow-world-size-change (the counters are the old run's)
            left = max(0, cfg.num_global_steps - self.global_step) // self.steps_per_update
            self.num_updates = self.update + left
        replica.join(self, self.world)  # a data-parallel replica (common.run.distributed); nothing in one process
        if self.world.is_main:
            self.folder.create(cfg)
            self.logger = Logger(self.run_dir, comment=spec.name, origin=f"--log-path {cfg.log_path!r}")
        else:  # rank 0 alone writes files
            self.logger = SilentLogger()
        self.log = RunLog(self.logger, spec, cfg, self.num_actions)
        self.log.num_updates = self.num_updates
        self.log.load_visited(**self._visited)

    def _new_intrinsic(self):
        """The run's intrinsic module (also the eval's copy that scores an episode)."""
        return intrinsic_for_run(self.spec, self.cfg, self.obs_shape)

    def _make_envs(self):
        return vec_env_for_run(self.spec, self.cfg, self.world.rank, self.world.cores(), self.update)

    # ------------------------------------------------------------------ state
    def learned_state(self) -> dict:
        """What an update changes: policy, its optimizer, the intrinsic module (networks, optimizers,
        normalizer, sampler state)."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": optimizer_state(self.ppo.optimizer),
            "intrinsic": self.intrinsic.state_dict(),
        }

    def set_learned_state(self, state: dict) -> None:
        """Restore ``learned_state``'s parts (from a checkpoint or a snapshot)."""
        load_weights(self.policy, state["policy"], "policy")
        self.actor.weights_changed()
        if state["optimizer"]:
            set_optimizer_state(self.ppo.optimizer, state["optimizer"])
        else:  # saved before the first step: no moments yet
            self.ppo.reset_optimizer()
        self.intrinsic.set_state_dict(state["intrinsic"])

    def state_dict(self) -> dict:
        return {
            "game": self.spec.name,
            "config": self.cfg.to_dict(),
            "intrinsic_name": self.cfg.intrinsic,
            "update": self.update,
            "global_step": self.global_step,
            **self.learned_state(),
            **self.int_scale.state_dict(),
            "rng": self.rng.bit_generator.state,
            "obs_norm_ready": self.obs_norm_ready,
            "world_size": self.world.size,
            "nan_total": self.nonfinite.total,
            "code_commits": self.folder.commits,
            **(self.log.visited_state() if hasattr(self, "log") else {}),
        }

    def load(self, path: str) -> None:
        """Restore everything from a checkpoint; refuses one from another game or network."""
        state = load_checkpoint(path, required=CHECKPOINT_KEYS, game=self.spec.name)
        self.world.check_checkpoint(state, path, self.cfg.allow_world_size_change)
        check_compatible(
            state, self.spec.name, {"policy": self.policy.state_dict(), "intrinsic_name": self.cfg.intrinsic}, path
        )
        try:
            self.set_learned_state(state)
            self.int_scale.set_state_dict(state)
            self.rng.bit_generator.state = state["rng"]
            RunLog.check_visited(state.get("visited", ()), state.get("visit_counts"))
            self.episodes.load(state)
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: {type(e).__name__}: {e}") from e
        self.update, self.global_step = int(state["update"]), int(state["global_step"])
        self.folder.resumed_from(state, path, self.cfg)
        self.obs_norm_ready = bool(state["obs_norm_ready"])
        self.nonfinite.total = int(state.get("nan_total", 0))
        self._visited = {k: state[k] for k in ("visited", "visit_counts") if k in state}

    def save(self) -> str:
        """Write the current state as this update's numbered checkpoint, the only kind a resume looks for and
        ``last_checkpoint`` and ``--save-minutes`` count. Rank 0 writes; other ranks return ""."""
        if not self.world.is_main:
            return ""
        self.logger.sync()  # its records reach the disk first
        name = self.spec.checkpoint_name(self.cfg, self.update)
        self.last_checkpoint = self.folder.save(name, {**self.state_dict(), **self.episodes.entry()})
        self.saved_update, self.saved_at = self.update, time.monotonic()
        return self.last_checkpoint

    def math_threads(self):
        """While open, the networks use ``self.threads`` threads (``common.cpu.threads``)."""
        return cpu.threads(self.threads)

    # ------------------------------------------------------------------ phases
    def init_obs_normalizer(self, obs: np.ndarray) -> np.ndarray:
        """Random-agent warm-up of the intrinsic module's observation normalizer (``IntrinsicStage.warm_up``)."""
        stopped = functools.partial(self.world.stop_now, self.stop)
        obs, self.obs_norm_ready = self.stage.warm_up(self.envs, obs, self.cfg.obs_norm_steps, self.rng, stopped)
        if self.obs_norm_ready:  # (a stopped warm-up is done afresh from the envs as they were before it)
            self.episodes.mark(self.envs, self.update)
        return obs

    def collect(self, obs: np.ndarray, notes: RolloutNotes | None = None):
        """Fill the buffer with one rollout; returns (last obs, finished-episode infos) or None if stopped.

        Act, step, store, T times (``Pipeline`` overlaps one env group's step with the policy's
        work on another); ``notes`` keeps what the update's pictures need from each step's infos.
        """
        cfg, buf = self.cfg, self.buffer
        buf.start(obs)
        episodes = []
        if self.world.stop_now(self.stop):
            return None
        steps = Pipeline(self.envs, lambda o: self.actor.act(o, self.rng))
        steps.start(obs)
        for t in range(cfg.num_local_steps):
            last = t + 1 == cfg.num_local_steps or self.world.stop_now(self.stop)
            acted, (obs, rewards, dones, infos) = steps.step(last=last)
            buf.add(*acted, rewards, dones, obs, infos)
            episodes += [infos[i] for i in np.flatnonzero(dones) if "episode" in infos[i]]  # not cut by a restart
            if notes is not None:
                notes.add(t, infos)
            if self.world.stop_now(self.stop):
                steps.drain()
                return None
        return obs, episodes

    def intrinsic_rewards(self) -> np.ndarray:
        """Raw novelty of every transition [T, N]; the rewards paid for it go into the buffer (``IntrinsicStage``)."""
        return self.stage.pay(self.buffer)

    def learn(self) -> dict | None:
        """PPO epochs over the buffer; returns mean losses, or None at the first non-finite loss.

        The intrinsic module takes a step on each minibatch of the first ``intrinsic_epochs``
        epochs (0: all). With more than one CPU thread (``num_threads``), that step runs on a
        second thread while the PPO step runs here: they share no parameters, optimizers or
        random generators, so the result is the sequential one (Paddle's grad mode is per
        thread). It runs inside ``math_threads`` (numpy's BLAS held to one thread: two threads
        each in a multi-threaded BLAS product is not a setting anything here is built for). The
        caller rolls a failed update back (``train``).
        """
        with self.math_threads():
            return self._learn()

    def _learn(self) -> dict | None:
        cfg = self.cfg
        sums, counts = collections.defaultdict(float), collections.defaultdict(int)
        module_epochs = cfg.intrinsic_epochs or cfg.num_epochs
        self.policy.train()
        for epoch in range(cfg.num_epochs):
            for batch in self.buffer.minibatches(cfg.batch_size, self.rng):
                if self.world.stop_now(self.stop):  # leave within a minibatch's time; _update rolls back
                    raise _StopInUpdate
                if epoch >= module_epochs:
                    out, int_out = self.ppo.step(batch), {}
                elif self._side is not None:
                    pending = self._side.submit(self.intrinsic.update, batch)
                    try:
                        out = self.ppo.step(batch)
                    finally:  # awaited even when the PPO step fails: a rollback must not race it
                        int_out = pending.result()
                else:
                    out = self.ppo.step(batch)
                    int_out = self.intrinsic.update(batch) if out is not None else {}
                if out is None or not all(np.isfinite(v) for v in int_out.values()):
                    return None
                for k, v in {**out, **int_out}.items():
                    sums[k] += v
                    counts[k] += 1
        return {k: v / counts[k] for k, v in sums.items()}

    def _update(self, snapshot: dict):
        """``learn`` as all or nothing: returns the losses, or None after rolling back to ``snapshot`` (a
        non-finite update). An exception (``_StopInUpdate`` for a stop) passes on: ``one_update`` rolls
        back the whole update for it."""
        losses = self.learn()
        nets = [self.policy.state_dict(), self.intrinsic.state_dict()]
        if losses is not None and not all_finite(nets):
            losses = None  # finite losses, but a step pushed a weight to inf/NaN (e.g. a huge --lr)
        if not self.world.all(losses is not None):  # every rank keeps the update, or none does
            losses = None
        if losses is None:
            self.set_learned_state(snapshot)
            self.logger.scalar(tags.NAN_UPDATES, self.nonfinite.total + 1, self.global_step + self.steps_per_update)
            self.nonfinite.taken_back(self.update + 1)
        else:
            self.nonfinite.ok()
            self.actor.weights_changed()
        return losses

    # ------------------------------------------------------------------ evaluation
    def _log_evals(self, block: bool = False) -> None:
        """Log finished evals; a greedy policy that solved the level is saved (the evaluated snapshot)."""
        with self.math_threads():
            finished = self.evals.finished(block)
        for message in self.evals.messages:
            tqdm.write(message)
        if self.evals.messages:
            self.logger.scalar(tags.EVALS_LOST, self.evals.lost, self.global_step)
            self.evals.messages.clear()
        for result, snapshot in finished:
            self.log.eval(result, snapshot["update"], snapshot["global_step"])
            if self.spec.eval_success(result["info"]):
                path = self.folder.save(self.spec.checkpoint_name(self.cfg, None), snapshot)
                tqdm.write(f"level solved by the greedy policy at update {snapshot['update']}: saved {path}")
                self.solved = True
            self.last_eval = {k: v for k, v in result.items() if k not in ("strip", "along")}

    def _picture_due(self, update: int) -> bool:
        """Whether ``update`` draws the game's picture of where the agent has been (``picture_interval``)."""
        every = self.cfg.picture_interval
        return self.spec.rollout_picture is not None and bool(every) and update % every == 0

    # ------------------------------------------------------------------ main loop
    def train(self) -> dict:
        cfg = self.cfg  # (what runs and where: printed by the entry point, common.run.launch.start_lines)
        total, main = self.num_updates * self.steps_per_update, self.world.is_main
        bar = tqdm(
            total=total,
            initial=self.global_step,
            unit="step",
            dynamic_ncols=True,
            desc=self.spec.name,
            disable=not main,
        )
        with self.stop:
            try:
                self.envs, obs = self.episodes.start(self._make_envs(), self._make_envs)
                self.episodes.mark(self.envs, self.update)  # a stop in the warm-up resumes from here, warming up afresh
                if main and cfg.resume:  # the eval of this update, if a stop cut it off
                    self.evals.resume(self.state_dict, self.run_dir, self.update, self.global_step)
                if not self.obs_norm_ready:
                    obs = self.init_obs_normalizer(obs)
                while self.update < self.num_updates and not self.world.stop_agreed(self.stop):
                    if cfg.stop_when_solved and self.world.any(self.solved):  # rank 0 evaluates; all ranks stop
                        tqdm.write(f"--stop-when-solved: the run ends at update {self.update}")
                        break
                    obs, losses = self.one_update(obs)
                    if obs is None:
                        break
                    bar.update(self.steps_per_update)
                    bar.set_postfix_str(self.log.progress(self.update, losses))
                if self.stop.requested:
                    self.evals.close(cancel=True)
                else:
                    self._log_evals(block=True)  # the last update's eval (its success checkpoint, if any, comes first)
                if self.saved_update != self.update:  # the final state is always on disk
                    self.save()
                self.log.hparams()
            except Exception as e:  # a worker fault, an I/O error, a run of non-finite updates: keep what was learned
                raise self._stopped_by(e) from e
            finally:
                bar.close()
                self.close()
        result = {"eval": self.last_eval} if self.last_eval is not None else {}
        result.update(
            update=self.update,
            global_step=self.global_step,
            checkpoint=self.last_checkpoint,
            run_dir=self.run_dir,
            stopped_by_signal=self.stop.requested,
        )
        return result

    def one_update(self, obs: np.ndarray):
        """Collect a rollout from ``obs``, learn from it, log, evaluate, save: ``(last obs, losses)``, or
        ``(None, None)`` when a stop signal cut the rollout or its update short (nothing of it is learned)."""
        cfg, main = self.cfg, self.world.is_main  # rank 0 alone logs
        snapshot = copy_state(self.learned_state())  # what a failed update is rolled back to
        before = copy_state(self.int_scale.state_dict()), self.rng.bit_generator.state  # and a dropped one too
        t0 = time.perf_counter()
        embed = main and bool(cfg.embedding_interval) and (self.update + 1) % cfg.embedding_interval == 0
        picture = main and self._picture_due(self.update + 1)
        notes = RolloutNotes(self.spec, labels=embed and cfg.intrinsic != "none", records=picture)
        try:
            with self.math_threads():
                collected = self.collect(obs, notes)
            if collected is None or self.world.stop_agreed(self.stop):
                raise _StopInUpdate
            obs, episodes = collected
            episodes = self.world.gather_episodes(episodes)  # every rank's, on rank 0
            last_ext, last_int = self.actor.values(obs)
            with self.math_threads():
                raw_int = self.intrinsic_rewards()
            episodic = cfg.int_episodic or cfg.int_reward == "snd"  # the SND authors' convention cuts it too
            discounts = (cfg.gamma, cfg.tau, cfg.int_gamma, cfg.ext_coef, cfg.int_coef, episodic)
            bootstrap = self.actor.values if cfg.bootstrap_truncated else None  # values of time-limit frames
            self.buffer.compute_returns_and_advantages(
                last_ext, last_int, *discounts, clip_reward=cfg.clip_reward, value_of=bootstrap
            )
            t1 = time.perf_counter()
            losses = self._update(snapshot)
        except BaseException as e:  # a stop or an error: every state is the last completed update's again
            self.set_learned_state(snapshot)
            self.int_scale.set_state_dict(before[0])
            self.rng.bit_generator.state = before[1]
            if isinstance(e, _StopInUpdate):
                return None, None
            raise
        t2 = time.perf_counter()
        self.update += 1
        self.global_step += self.steps_per_update
        self.episodes.mark(self.envs, self.update)  # where a checkpoint of this update finds the envs
        rollout = self.buffer.summary()
        messages = self.log.update(
            self.update,
            self.global_step,
            rollout,
            losses,
            raw_int,
            gate_share=self.int_scale.gate_share,
            int_return_std=self.int_scale.return_std,
            nonfinite=self.nonfinite.total,
            restart_log=getattr(self.envs, "restart_log", ()),
            seconds=(t1 - t0, t2 - t1),
            episodes=episodes,
        )
        for message in messages:
            tqdm.write(message)
        if notes.labels is not None:
            # a sample of its own: what is logged never changes what is trained
            picks = np.random.default_rng([cfg.seed, self.update])
            self.log.embeddings(self.update, self.buffer, notes.labels, self.intrinsic.features, picks)
        if notes.records is not None:
            self.log.picture(self.update, rollout, raw_int, notes.records)
        if cfg.eval_interval and self.update % cfg.eval_interval == 0 and main:
            self.evals.start_update(copy_state(self.state_dict()), self.run_dir)
        by_count = bool(cfg.save_interval) and self.update % cfg.save_interval == 0
        # rank 0's clock decides for every rank (asked only with --save-minutes: it is a collective)
        by_clock = bool(cfg.save_minutes) and self.world.any(
            main and time.monotonic() - self.saved_at >= 60 * cfg.save_minutes
        )
        if by_count or by_clock:
            self.save()
        self._log_evals(block=False)
        self.logger.flush()  # curves can be watched live (metrics.jsonl, VisualDL)
        return obs, losses

    def _stopped_by(self, error: Exception) -> Exception:
        """Save the state of the last completed update after ``error``; the exception to raise instead,
        naming the file. (Every phase leaves that state intact: an update rolls itself back.)"""
        if not self.world.is_main:
            rank = self.world.rank
            return RunStoppedError(f"{type(error).__name__}: {error}\n\n(rank {rank}: rank 0 saves the checkpoints)")
        # (saved again if this update was: the counters, e.g. nan_total, moved on)
        return stopped_by(error, self.save, f"update {self.update}")

    def close(self):
        if self._side is not None:
            self._side.close()
        self.evals.close(cancel=True)
        if self.envs is not None:
            self.envs.close()
        self.actor.close()
        if hasattr(self, "logger"):
            self.logger.close()
        self.folder.release()


def run(spec: GameSpec, argv=None) -> dict:
    """Entry point used by a PPO game's train.py: ``common.run.launch.run`` with this trainer (exit
    status 1 on an error, 2 on a bad flag, 130 / 143 after SIGINT / SIGTERM, the checkpoint saved first)."""
    from common.run.launch import run as launch

    return launch(spec, Trainer, argv)
