"""The one training loop, shared by every game.

    collect (T steps x N envs, uint8 obs)                           Actor + Pipeline
      -> intrinsic rewards for s_{t+1}, scaled by the std of their discounted return
      -> GAE per stream, A = ext_coef * A_ext + int_coef * A_int      RolloutBuffer
      -> PPO epochs x minibatches (+ the intrinsic module's step)     PPO, IntrinsicModule
      -> log -> greedy eval every ``eval_interval`` -> checkpoint every ``save_interval``

What differs between games comes from the ``GameSpec``. An update is all or nothing: if
a loss or a weight goes non-finite it is rolled back (and counted); an error anywhere
saves the state of the last completed update and names the file. Ctrl-C / SIGTERM
finish the current step, save a checkpoint and close the workers; a second Ctrl-C
aborts at once.

Started by ``paddle.distributed.launch``, each rank runs this loop as one data-parallel
replica (``common.distributed``: gradients averaged, reward statistics pooled, the same
decisions on every rank, signals honoured between updates); rank 0 alone logs, evaluates and
writes files, and ``--num-global-steps`` counts the steps of every rank.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import signal
import time
import warnings

import numpy as np
from tqdm import tqdm

from common.config import TrainConfig, check_writable, make_folder
from common.device import require_paddle, set_device
from common.distributed import SilentLogger, World
from common.errors import NonFiniteLossError, RunStoppedError, stopped_by  # noqa: F401 (re-exported)
from common.game import GameSpec

paddle = require_paddle()

from common import cpu  # noqa: E402
from common import logger as tags  # noqa: E402
from common.actor import Actor  # noqa: E402
from common.buffer import RolloutBuffer  # noqa: E402
from common.checkpoint import (  # noqa: E402
    CheckpointError,
    check_compatible,
    copy_state,
    load_checkpoint,
    nonfinite_tensors,
    optimizer_state,
    save_checkpoint,
    set_optimizer_state,
)
from common.evaluation import Evaluations  # noqa: E402
from common.intrinsic import intrinsic_for_run  # noqa: E402
from common.logger import Logger, RunLog  # noqa: E402
from common.normalize import IntrinsicRewardScale  # noqa: E402
from common.ppo import PPO  # noqa: E402
from common.vec_env import Pipeline, make_vec_env  # noqa: E402

#: what ``Trainer.state_dict`` writes and ``Trainer.load`` needs
CHECKPOINT_KEYS = (
    "game",
    "config",
    "intrinsic_name",
    "update",
    "global_step",
    "policy",
    "optimizer",
    "intrinsic",
    "int_filter",
    "int_rms",
    "rng",
    "obs_norm_ready",
)


class Trainer:
    """PPO + intrinsic reward for one game. ``Trainer(spec, cfg).train()`` runs to completion."""

    def __init__(self, spec: GameSpec, cfg: TrainConfig):
        cfg.validate()
        self.spec, self.cfg = spec, cfg
        set_device(cfg.device)
        self.world = World.current(cfg.device)  # one process: rank 0 of 1, and nothing below changes
        # agent steps of every rank per update; the ranks step in lockstep
        self.steps_per_update = cfg.rollout_size * self.world.size
        self.num_updates = max(1, cfg.num_global_steps // self.steps_per_update)
        if cfg.device == "cpu":
            cpu.tune_allocator()
        paddle.seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)

        self.run_dir = os.path.join(cfg.log_path, cfg.run_name or self._default_run_name())
        self.saved_path = cfg.saved_path or os.path.join(self.run_dir, "models")
        check_writable(cfg.log_path, "--log-path")  # the folders themselves are made once a resume is accepted
        if cfg.saved_path:
            check_writable(cfg.saved_path, "--saved-path")

        self.envs = None  # built in train(), after a resume has set the counters (they pick the env seeds)
        self.obs_shape, self.num_actions = spec.spaces(cfg)
        self.policy = spec.make_policy(cfg, self.obs_shape, self.num_actions)
        self.ppo = PPO(
            self.policy,
            lr=cfg.lr,
            epsilon=cfg.epsilon,
            beta=cfg.beta,
            vf_coef=cfg.vf_coef,
            max_grad_norm=cfg.max_grad_norm,
            value_loss=cfg.value_loss,
            norm_adv=cfg.norm_adv,
        )
        engine = (
            cpu.collection_engine(self.policy, self.obs_shape, cfg.inference, cfg.num_envs)
            if cfg.device == "cpu"
            else None
        )
        self.actor = Actor(self.policy, engine)
        self.intrinsic = self._new_intrinsic()
        self.int_scale = IntrinsicRewardScale(
            cfg.int_gamma, cfg.num_envs, first_visit=cfg.int_first_visit and cfg.intrinsic != "none"
        )
        self.buffer = RolloutBuffer(cfg.num_local_steps, cfg.num_envs, self.obs_shape)
        self.evals = Evaluations(spec, cfg, self._new_intrinsic, stopping=lambda: self._stop_signal is not None)

        self.update = 0  # completed updates
        self.global_step = 0  # agent steps over all envs
        self.obs_norm_ready = cfg.intrinsic == "none"
        self.nan_streak = 0
        self.nan_total = 0
        self.last_checkpoint = ""
        self.saved_update = -1
        self.last_eval = None  # the latest logged eval result
        self._visited = {}  # the checkpoint's visited places, kept until the run log exists
        self._stop_signal = None
        self._side = None  # thread for the intrinsic module's update step (see learn)
        if cfg.resume:
            self.load(cfg.resume)
            # the updates still to do, at this run's steps per update: the same count on the same world size,
            # the right one after --allow-world-size-change (the counters are the old run's)
            left = max(0, cfg.num_global_steps - self.global_step) // self.steps_per_update
            self.num_updates = self.update + left
        self.world.attach(self)  # a data-parallel replica (common.distributed); nothing in one process
        if self.world.is_main:
            make_folder(
                self.saved_path,
                *(("--saved-path", cfg.saved_path) if cfg.saved_path else ("--log-path", cfg.log_path)),
            )
            make_folder(self.run_dir, "--log-path", cfg.log_path)
            cfg.to_json(os.path.join(self.run_dir, "config.json"))
            self.logger = Logger(self.run_dir, comment=spec.name, origin=f"--log-path {cfg.log_path!r}")
        else:  # rank 0 alone writes files
            self.logger = SilentLogger()
        self.log = RunLog(self.logger, spec, cfg, self.num_actions)
        self.log.num_updates = self.num_updates
        self.log.load_visited(**self._visited)

    def _new_intrinsic(self):
        """The run's intrinsic module (also the eval's copy that scores an episode)."""
        return intrinsic_for_run(self.spec, self.cfg, self.obs_shape)

    def _default_run_name(self) -> str:
        c = self.cfg
        return f"{self.spec.name}_{self.spec.level_name(c)}_{c.intrinsic}_seed{c.seed}_{time.strftime('%Y%m%d-%H%M%S')}"

    def _make_envs(self):
        cfg = self.cfg
        fns = [self.spec.env_factory(cfg, None) for _ in range(cfg.num_envs)]
        # Several envs per worker beat one process per env when envs outnumber cores
        # (benchmarks/env_throughput.py); 0 = in-process for make_vec_env.
        auto = min(cfg.num_envs, self.world.cores())
        workers = {-1: 0, 0: auto}.get(cfg.num_workers, min(cfg.num_workers, cfg.num_envs))
        kw = {"max_restarts": cfg.max_worker_restarts, "timeout": cfg.worker_timeout} if workers > 0 else {}
        if cfg.vec_env == "ray":  # Ray actors; --num-workers 0: one per CPU of the Ray cluster
            workers, kw = cfg.num_workers, {"max_restarts": cfg.max_worker_restarts, "timeout": cfg.worker_timeout}
            kw.update(kind="ray", address=cfg.ray_address)
        # Env i is seeded with seed + i (rank r's: as env r * num_envs + i of one big run); a resumed run
        # starts fresh episodes, seeded by its update count so that it does not replay the original's.
        seed = cfg.seed + 100_003 * self.update + self.world.rank * cfg.num_envs
        return make_vec_env(fns, num_workers=workers, seed=seed, **kw)

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
        self.policy.set_state_dict(state["policy"])
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
            "nan_total": self.nan_total,
            **(self.log.visited_state() if hasattr(self, "log") else {}),
        }

    def load(self, path: str) -> None:
        """Restore everything from a checkpoint; refuses one from another game or network."""
        state = load_checkpoint(path, required=CHECKPOINT_KEYS)
        self.world.check_checkpoint(state, path, self.cfg.allow_world_size_change)
        check_compatible(
            state, self.spec.name, {"policy": self.policy.state_dict(), "intrinsic_name": self.cfg.intrinsic}, path
        )
        try:
            self.set_learned_state(state)
            self.int_scale.set_state_dict(state)
            self.rng.bit_generator.state = state["rng"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: {type(e).__name__}: {e}") from e
        self.update, self.global_step = int(state["update"]), int(state["global_step"])
        self.obs_norm_ready = bool(state["obs_norm_ready"])
        self.nan_total = int(state.get("nan_total", 0))
        self._visited = {k: state[k] for k in ("visited", "visit_counts") if k in state}

    def save(self, name: str | None = None, state: dict | None = None) -> str:
        """Write ``state`` (default: the current one) as ``name`` (default: this update's checkpoint name).

        Rank 0 alone writes; other ranks return ""."""
        if not self.world.is_main:
            return ""
        path = os.path.join(self.saved_path, name or self.spec.checkpoint_name(self.cfg, self.update))
        where = "--saved-path" if self.cfg.saved_path else "--log-path"
        try:
            self.last_checkpoint = save_checkpoint(path, self.state_dict() if state is None else state)
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror} (the folder comes from {where})") from e
        if state is None or state["update"] == self.update:
            self.saved_update = self.update
        return path

    # ------------------------------------------------------------------ signals and threads
    def _on_signal(self, signum, frame):
        if self._stop_signal is not None:  # second Ctrl-C: give up at once
            raise KeyboardInterrupt
        self._stop_signal = signum
        print(
            f"\n{signal.Signals(signum).name} received: finishing this step, saving a checkpoint, closing workers "
            "(press Ctrl-C again to abort without saving)",
            flush=True,
        )

    def _stop_requested(self) -> bool:
        """A signal asks to stop now (within a phase). Data-parallel ranks stop only between updates,
        where they agree (``_stop_agreed``): one rank leaving a phase early would leave the others
        waiting for it."""
        return self._stop_signal is not None and not self.world.distributed

    def _stop_agreed(self) -> bool:
        """Whether to stop, the same on every rank (a signal that reached any rank stops them all)."""
        if self.world.distributed:
            self._stop_signal = self.world.max_int(self._stop_signal or 0) or None
        return self._stop_signal is not None

    def _cpu_threads(self) -> int:
        """Threads for the networks: ``num_threads`` (0 = one per core: this rank's share of them) on CPU,
        1 on GPU."""
        return 1 if self.cfg.device != "cpu" else (self.cfg.num_threads or self.world.cores())

    def math_threads(self):
        """While open, the networks' convolutions use ``num_threads`` threads (``common.cpu.threads``).

        During collection the policy runs beside the env workers (pipelined), so there its
        threads share the cores with them.
        """
        return cpu.threads(self._cpu_threads())

    # ------------------------------------------------------------------ phases
    def init_obs_normalizer(self, obs: np.ndarray) -> np.ndarray:
        """Random-agent warm-up of the intrinsic module's observation normalizer (RND)."""
        for _ in range(self.cfg.obs_norm_steps):
            if self._stop_requested():
                break
            actions = self.rng.integers(0, self.num_actions, size=self.cfg.num_envs)
            obs, _, _, _ = self.envs.step(actions)
            self.intrinsic.observe(obs)
        self.obs_norm_ready = not self._stop_requested()
        return obs

    def collect(self, obs: np.ndarray, keep_metadata: bool = False, keep_records: bool = False):
        """Fill the buffer with one rollout; returns (last obs, finished-episode infos) or None if stopped.

        Act, step, store, T times (``Pipeline`` overlaps one env group's step with the policy's
        work on another). With ``keep_metadata`` the game's embedding labels of every s_{t+1}
        are kept in ``self.embedding_meta`` ({(t, env): [str, ...]}) for the embedding view;
        with ``keep_records`` its ``step_record`` of every step in ``self.step_records`` ([T][N])
        for the picture of where the agent has been.
        """
        cfg, buf = self.cfg, self.buffer
        buf.start(obs)
        episodes, self.embedding_meta, self.step_records = [], {}, []
        if self._stop_requested():
            return None
        steps = Pipeline(self.envs, lambda o: self.actor.act(o, self.rng))
        steps.start(obs)
        for t in range(cfg.num_local_steps):
            last = t + 1 == cfg.num_local_steps or self._stop_requested()
            acted, (obs, rewards, dones, infos) = steps.step(last=last)
            buf.add(*acted, rewards, dones, obs, infos)
            episodes += [infos[i] for i in np.flatnonzero(dones) if "episode" in infos[i]]  # not cut by a restart
            if keep_metadata:
                for i, info in enumerate(infos):
                    self.embedding_meta[(t, i)] = self.spec.embedding_metadata(info)
            if keep_records:
                self.step_records.append([self.spec.step_record(info) for info in infos])
            if self._stop_requested():
                steps.drain()
                return None
        if cfg.clip_reward:
            np.sign(buf.rewards_ext, out=buf.rewards_ext)
        return obs, episodes

    def intrinsic_rewards(self) -> np.ndarray:
        """Raw novelty of every s_{t+1} [T, N], and the scaled rewards stored in the buffer."""
        buf = self.buffer
        T, N = buf.num_steps, buf.num_envs
        nxt = buf.next_obs_for_reward()
        raw = self.intrinsic.reward(nxt.reshape(T * N, *self.obs_shape)).reshape(T, N)
        buf.rewards_int[:] = self.int_scale.scale(raw, buf.obs[0], nxt, buf.obs[1:], buf.dones)
        self.intrinsic.observe(nxt.reshape(T * N, *self.obs_shape))
        return raw

    def learn(self) -> dict | None:
        """PPO epochs over the buffer; returns mean losses, or None at the first non-finite loss.

        With more than one CPU thread (``num_threads``), each minibatch's intrinsic-module
        step runs on a second thread while the PPO step runs here: they share no
        parameters, optimizers or random generators, so the result is the sequential one
        (Paddle's grad mode is per thread). The caller rolls a failed update back (``train``).
        """
        cfg = self.cfg
        sums, count = collections.defaultdict(float), 0
        self.policy.train()
        side = self._side_thread()
        for _ in range(cfg.num_epochs):
            for batch in self.buffer.minibatches(cfg.batch_size, self.rng):
                if side is not None:
                    pending = side.submit(self.intrinsic.update, batch)
                    out = self.ppo.step(batch)
                    int_out = pending.result()
                else:
                    out = self.ppo.step(batch)
                    int_out = self.intrinsic.update(batch) if out is not None else {}
                if out is None or not all(np.isfinite(v) for v in int_out.values()):
                    return None
                for k, v in {**out, **int_out}.items():
                    sums[k] += v
                count += 1
        return {k: v / count for k, v in sums.items()}

    def _side_thread(self):
        """The thread for the intrinsic step (CPU, more than one thread configured), else None."""
        if self._cpu_threads() == 1:
            return None
        if self._side is None:
            self._side = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="intrinsic-update")
        return self._side

    def _update(self, snapshot: dict):
        """``learn`` as all or nothing: returns the losses, or None after rolling back to ``snapshot``."""
        try:
            with self.math_threads():
                losses = self.learn()
            nets = [self.policy.state_dict(), self.intrinsic.state_dict()]
            if losses is not None and nonfinite_tensors(nets):
                losses = None  # finite losses, but a step pushed a weight to inf/NaN (e.g. a huge --lr)
            if not self.world.all(losses is not None):  # every rank keeps the update, or none does
                losses = None
        except BaseException:
            self.set_learned_state(snapshot)
            raise
        if losses is None:
            self.set_learned_state(snapshot)
            self._nonfinite()
        else:
            self.nan_streak = 0
            self.actor.weights_changed()
        return losses

    def _nonfinite(self):
        """Count a rolled-back update; stop after ``max_nan_updates`` of them in a row."""
        self.nan_streak += 1
        self.nan_total += 1
        warnings.warn(
            f"update {self.update + 1}: non-finite loss or weights, update rolled back "
            f"({self.nan_streak} in a row, {self.nan_total} in total)",
            RuntimeWarning,
            stacklevel=2,
        )
        self.logger.scalar(tags.NAN_UPDATES, self.nan_total, self.global_step + self.steps_per_update)
        if self.nan_streak >= self.cfg.max_nan_updates:
            raise NonFiniteLossError(
                f"{self.nan_streak} consecutive updates had a NaN/inf loss or weights (each rolled back); stopping. "
                "Try a lower --lr or check the rewards."
            )

    # ------------------------------------------------------------------ evaluation
    def _start_eval(self) -> None:
        """Hand the policy after this update to the evaluation (``common.evaluation``)."""
        record = None
        if self.cfg.video_interval and self.update % self.cfg.video_interval == 0:
            record = os.path.join(self.run_dir, "videos", f"eval_{self.update:06d}.mp4")
        self.evals.start(copy_state(self.state_dict()), self.cfg.seed + 7919 * (self.update + 1), record)

    def _log_evals(self, block: bool = False) -> None:
        """Log finished evals; a greedy policy that solved the level is saved (the evaluated snapshot)."""
        with self.math_threads():
            finished = self.evals.finished(block)
        for result, snapshot in finished:
            self.log.eval(result, snapshot["update"], snapshot["global_step"])
            if self.spec.eval_success(result["info"]):
                path = self.save(self.spec.checkpoint_name(self.cfg, None), snapshot)
                tqdm.write(f"level solved by the greedy policy at update {snapshot['update']}: saved {path}")
            self.last_eval = {k: v for k, v in result.items() if k not in ("strip", "along")}

    def _picture_due(self, update: int) -> bool:
        """Whether ``update`` draws the game's picture of where the agent has been (``picture_interval``)."""
        every = self.cfg.picture_interval
        return self.spec.rollout_picture is not None and bool(every) and update % every == 0

    # ------------------------------------------------------------------ main loop
    def train(self) -> dict:
        cfg = self.cfg
        print(
            f"{self.spec.name}: {self.num_updates} updates of {self.steps_per_update} steps "
            f"({cfg.num_envs} envs x {cfg.num_local_steps}"
            f"{f' x {self.world.size} ranks; this is rank {self.world.rank}' if self.world.distributed else ''}), "
            f"intrinsic={cfg.intrinsic}, run folder {self.run_dir}"
        )
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        bar = tqdm(
            total=self.num_updates * self.steps_per_update,
            initial=self.global_step,
            unit="step",
            dynamic_ncols=True,
            desc=self.spec.name,
            disable=not self.world.is_main,
        )
        try:
            self.envs = self._make_envs()
            obs = self.envs.reset()
            if not self.obs_norm_ready:
                obs = self.init_obs_normalizer(obs)
            while self.update < self.num_updates and not self._stop_agreed():
                snapshot = copy_state(self.learned_state())  # what a failed update is rolled back to
                t0 = time.perf_counter()
                embed = bool(cfg.embedding_interval) and (self.update + 1) % cfg.embedding_interval == 0
                picture = self._picture_due(self.update + 1)
                embed, picture = (embed, picture) if self.world.is_main else (False, False)  # rank 0 alone logs
                with self.math_threads():
                    collected = self.collect(obs, keep_metadata=embed, keep_records=picture)
                if collected is None or self._stop_agreed():
                    break
                obs, episodes = collected
                episodes = self.world.gather_episodes(episodes)  # every rank's, on rank 0
                last_ext, last_int = self.actor.values(obs)
                with self.math_threads():
                    raw_int = self.intrinsic_rewards()
                self.buffer.compute_returns_and_advantages(
                    last_ext, last_int, cfg.gamma, cfg.tau, cfg.int_gamma, cfg.ext_coef, cfg.int_coef
                )
                t1 = time.perf_counter()
                losses = self._update(snapshot)
                t2 = time.perf_counter()
                self.update += 1
                self.global_step += self.steps_per_update
                for note in self.log.update(
                    self.update,
                    self.global_step,
                    self.buffer,
                    losses,
                    raw_int,
                    gate_share=self.int_scale.gate_share,
                    int_return_std=self.int_scale.return_std,
                    nonfinite=self.nan_total,
                    restart_log=getattr(self.envs, "restart_log", ()),
                    seconds=(t1 - t0, t2 - t1),
                    episodes=episodes,
                ):
                    tqdm.write(note)
                if embed and cfg.intrinsic != "none":
                    self.log.embeddings(
                        self.update, self.buffer, self.embedding_meta, self.intrinsic.features, self.rng
                    )
                if picture:
                    self.log.picture(self.update, self.buffer, raw_int, self.step_records)
                if cfg.eval_interval and self.update % cfg.eval_interval == 0 and self.world.is_main:
                    self._start_eval()
                if cfg.save_interval and self.update % cfg.save_interval == 0:
                    self.save()
                self.buffer.finish()
                self._log_evals(block=False)
                self.logger.flush()  # curves can be watched live (metrics.jsonl, VisualDL)
                bar.update(self.steps_per_update)
                bar.set_postfix_str(self.log.progress(self.update, losses))
            if self._stop_signal is None:
                self._log_evals(block=True)  # the last update's eval (its success checkpoint comes first)
            else:
                self.evals.close(cancel=True)
            if self.saved_update != self.update:  # the final state is always on disk
                self.save()
            self.log.hparams()
        except Exception as e:  # a worker fault, an I/O error, a run of non-finite updates: keep what was learned
            raise self._stopped_by(e) from e
        finally:
            bar.close()
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self.close()
        result = {"eval": self.last_eval} if self.last_eval is not None else {}
        result.update(
            update=self.update,
            global_step=self.global_step,
            checkpoint=self.last_checkpoint,
            run_dir=self.run_dir,
            stopped_by_signal=self._stop_signal is not None,
        )
        return result

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
            self._side.shutdown(wait=True)
            self._side = None
        self.evals.close(cancel=True)
        if self.envs is not None:
            self.envs.close()
        self.actor.close()
        if hasattr(self, "logger"):
            self.logger.close()
