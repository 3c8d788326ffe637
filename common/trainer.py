"""The one training loop, shared by every game.

    collect (T steps x N envs, uint8 obs)
      -> intrinsic rewards for s_{t+1}, scaled by the std of their discounted return
      -> GAE per stream, A = ext_coef * A_ext + int_coef * A_int
      -> PPO epochs x minibatches (+ the intrinsic module's update on each minibatch)
      -> log -> greedy eval every ``eval_interval`` -> checkpoint every ``save_interval``

What differs between games comes from the ``GameSpec``. Ctrl-C / SIGTERM finish
the current step, save a checkpoint and close the workers; a second Ctrl-C
aborts at once.
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import math
import os
import signal
import sys
import time
import warnings

import numpy as np

from common.config import TrainConfig
from common.device import require_paddle, set_device
from common.game import GameSpec

paddle = require_paddle()

from common import logger as tags  # noqa: E402
from common.buffer import RolloutBuffer  # noqa: E402
from common.checkpoint import (CheckpointError, check_compatible, load_checkpoint, nonfinite_tensors,  # noqa: E402
                               optimizer_state, save_checkpoint, set_optimizer_state)
from common.evaluator import BackgroundEvaluator  # noqa: E402
from common.fast_ops import set_num_shards  # noqa: E402
from common.inference import InferenceEngine  # noqa: E402
from common.native import NativeEngine  # noqa: E402
from common.intrinsic import make_intrinsic  # noqa: E402
from common.logger import Logger  # noqa: E402
from common.normalize import FirstVisitGate, RewardForwardFilter, RunningMeanStd  # noqa: E402
from common.play import frame_strip, greedy_episode  # noqa: E402
from common.ppo import PPO  # noqa: E402
from common.vec_env import make_vec_env  # noqa: E402


#: what ``Trainer.state_dict`` writes and ``Trainer.load`` needs
CHECKPOINT_KEYS = ("game", "config", "intrinsic_name", "update", "global_step", "policy", "optimizer", "intrinsic",
                   "int_filter", "int_rms", "rng", "obs_norm_ready")


class NonFiniteLossError(RuntimeError):
    """Raised after ``max_nan_updates`` consecutive updates with a NaN/inf loss or weights."""


class RunStoppedError(RuntimeError):
    """The run stopped on an error; ``checkpoint`` holds the state of the last completed update
    (empty when even that could not be written). The original error is ``__cause__``."""

    def __init__(self, message: str, checkpoint: str = ""):
        super().__init__(message)
        self.checkpoint = checkpoint


class UnusablePathError(ValueError):
    """A folder chosen by a flag (``--log-path``, ``--saved-path``) cannot be created or written."""


class Trainer:
    """PPO + intrinsic reward for one game. ``Trainer(spec, cfg).train()`` runs to completion."""

    def __init__(self, spec: GameSpec, cfg: TrainConfig):
        cfg.validate()
        self.spec, self.cfg = spec, cfg
        set_device(cfg.device)
        paddle.seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)

        self.run_dir = os.path.join(cfg.log_path, cfg.run_name or self._default_run_name())
        self.saved_path = cfg.saved_path or os.path.join(self.run_dir, "models")
        _check_writable(cfg.log_path, "--log-path")  # the folders themselves are made once a resume is accepted
        if cfg.saved_path:
            _check_writable(cfg.saved_path, "--saved-path")

        self.envs = None  # built in train(), after a resume has set the counters (they pick the env seeds)
        self.obs_shape, self.num_actions = spec.spaces(cfg)
        self.policy = spec.make_policy(cfg, self.obs_shape, self.num_actions)
        self.ppo = PPO(self.policy, lr=cfg.lr, epsilon=cfg.epsilon, beta=cfg.beta, vf_coef=cfg.vf_coef,
                       max_grad_norm=cfg.max_grad_norm, value_loss=cfg.value_loss, norm_adv=cfg.norm_adv)
        self._new_intrinsic = lambda: make_intrinsic(  # noqa: E731 - also builds the background eval's copy
            cfg.intrinsic, lambda c: spec.make_intrinsic_networks(cfg, c), self.obs_shape, cfg.intrinsic_frames,
            lr=cfg.intrinsic_lr or cfg.lr, update_proportion=cfg.update_proportion,
            max_grad_norm=cfg.max_grad_norm, seed=cfg.seed + 1, max_pairs=cfg.snd_max_pairs,
            target_lr=cfg.target_lr or cfg.intrinsic_lr or cfg.lr, target_proportion=cfg.target_proportion,
            value_max=spec.obs_value_max)
        if cfg.device == "cpu" and cfg.inference != "dygraph":
            self._use_collection_engine()
        self.intrinsic = self._new_intrinsic()
        self.int_filter = RewardForwardFilter(cfg.int_gamma, cfg.num_envs)
        self.int_rms = RunningMeanStd(())
        # Envs start fresh episodes on resume, so the gate's per-episode memory is not checkpointed.
        self.first_visit = FirstVisitGate(cfg.num_envs) if cfg.int_first_visit and cfg.intrinsic != "none" else None
        self.buffer = RolloutBuffer(cfg.num_local_steps, cfg.num_envs, self.obs_shape)

        self.update = 0          # completed updates
        self.global_step = 0     # agent steps over all envs
        self.obs_norm_ready = cfg.intrinsic == "none"
        self.nan_streak = 0
        self.nan_total = 0
        self.last_checkpoint = ""
        self.saved_update = -1
        self.recent = collections.deque(maxlen=20)   # recent finished training episodes (metrics dicts)
        self.visited: set = set()                    # e.g. every Montezuma room any episode of the run reached
        self._stop_signal = None
        self._eval_env = None
        self.evaluator = None        # the eval process (eval_in_background), started at the first eval
        self._side = None            # thread for the intrinsic module's update step (see learn)
        self._eval_pending = None    # the state the running background eval plays (kept for the success checkpoint)
        self._eval_intrinsic_module = None  # that state's intrinsic module, for the eval's intrinsic reward
        self.last_eval = None        # the latest logged eval result
        self.eval_seconds = 0.0      # time the training loop spent on evals (background: waiting for them)
        self._restarts_reported = 0  # env worker restarts already announced
        if cfg.resume:
            self.load(cfg.resume)
        for folder, flag, value in ((self.saved_path, *(("--saved-path", cfg.saved_path) if cfg.saved_path
                                                        else ("--log-path", cfg.log_path))),
                                    (self.run_dir, "--log-path", cfg.log_path)):
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as e:
                raise UnusablePathError(f"{flag} {value!r} is unusable: cannot create {folder}: {e.strerror}") \
                    from None
        cfg.to_json(os.path.join(self.run_dir, "config.json"))
        self.logger = Logger(self.run_dir, comment=spec.name, origin=f"--log-path {cfg.log_path!r}")

    # ------------------------------------------------------------------ setup
    def _use_collection_engine(self) -> None:
        """Run the policy's collection forward passes on ``--inference``'s engine (CPU), if it can."""
        cfg = self.cfg
        try:
            if cfg.inference == "native":
                if NativeEngine.supports(self.policy):  # else quietly the training network (e.g. MiniGrid's)
                    self.ppo.use_engine(NativeEngine(self.policy, self.obs_shape))
            # Only where a batch can reach the predictor's minimum (e.g. Montezuma's 128 envs): the export
            # costs start-up time and the predictor saves nothing below it.
            elif cfg.num_envs >= InferenceEngine.min_batch:
                precision = "bf16" if cfg.inference == "onednn-bf16" else "fp32"
                self.ppo.use_engine(InferenceEngine(self.policy, self.obs_shape, precision=precision))
        except Exception as e:  # no oneDNN in this Paddle, or a network the engine cannot run
            warnings.warn(f"--inference {cfg.inference} is unavailable ({type(e).__name__}: {e}); collection "
                          "runs the training network (--inference dygraph)")

    def _default_run_name(self) -> str:
        c = self.cfg
        return f"{self.spec.name}_{self.spec.level_name(c)}_{c.intrinsic}_seed{c.seed}_{time.strftime('%Y%m%d-%H%M%S')}"

    def _make_envs(self):
        cfg = self.cfg
        fns = [self.spec.env_factory(cfg, None) for _ in range(cfg.num_envs)]
        # Several envs per worker beat one process per env when envs outnumber cores
        # (benchmarks/env_throughput.py); 0 = in-process for make_vec_env.
        auto = min(cfg.num_envs, os.cpu_count() or 1)
        workers = {-1: 0, 0: auto}.get(cfg.num_workers, min(cfg.num_workers, cfg.num_envs))
        # Env i is seeded with seed + i; a resumed run starts fresh episodes, seeded by its update count
        # so that it does not replay the first episodes of the original run.
        kw = {"max_restarts": cfg.max_worker_restarts, "timeout": cfg.worker_timeout} if workers > 0 else {}
        return make_vec_env(fns, num_workers=workers, seed=cfg.seed + 100_003 * self.update, **kw)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "game": self.spec.name,
            "config": self.cfg.to_dict(),
            "intrinsic_name": self.cfg.intrinsic,
            "update": self.update,
            "global_step": self.global_step,
            "policy": self.policy.state_dict(),
            "optimizer": optimizer_state(self.ppo.optimizer),
            "intrinsic": self.intrinsic.state_dict(),
            "int_filter": self.int_filter.state_dict(),
            "int_rms": self.int_rms.state_dict(),
            "rng": self.rng.bit_generator.state,
            "obs_norm_ready": self.obs_norm_ready,
            "nan_total": self.nan_total,
            "visited": sorted(self.visited),
        }

    def load(self, path: str) -> None:
        """Restore everything from a checkpoint; refuses one from another game or network."""
        state = load_checkpoint(path, required=CHECKPOINT_KEYS)
        check_compatible(state, self.spec.name, {"policy": self.policy.state_dict(),
                                                 "intrinsic_name": self.cfg.intrinsic}, path)
        try:
            self.set_learned_state(state)
            self.int_filter.set_state_dict(state["int_filter"])
            self.int_rms.set_state_dict(state["int_rms"])
            self.rng.bit_generator.state = state["rng"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: {type(e).__name__}: {e}") from e
        self.update, self.global_step = int(state["update"]), int(state["global_step"])
        self.obs_norm_ready = bool(state["obs_norm_ready"])
        self.nan_total = int(state.get("nan_total", 0))
        self.visited = set(state.get("visited", []))

    def learned_state(self) -> dict:
        """What an update changes: policy, its optimizer, the intrinsic module (networks, optimizers,
        normalizer, sampler state)."""
        return {"policy": self.policy.state_dict(), "optimizer": optimizer_state(self.ppo.optimizer),
                "intrinsic": self.intrinsic.state_dict()}

    def set_learned_state(self, state: dict) -> None:
        """Restore ``learned_state``'s parts (from a checkpoint or a snapshot)."""
        self.policy.set_state_dict(state["policy"])
        self.ppo.weights_changed()
        if state["optimizer"]:
            set_optimizer_state(self.ppo.optimizer, state["optimizer"])
        else:  # saved before the first step: no moments yet
            self.ppo.reset_optimizer()
        self.intrinsic.set_state_dict(state["intrinsic"])

    def save(self, name: str | None = None) -> str:
        path = os.path.join(self.saved_path, name or self.spec.checkpoint_name(self.cfg, self.update))
        where = "--saved-path" if self.cfg.saved_path else "--log-path"
        try:
            self.last_checkpoint = save_checkpoint(path, self.state_dict())
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror} (the folder comes from {where})") from e
        self.saved_update = self.update
        return path

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum, frame):
        if self._stop_signal is not None:  # second Ctrl-C: give up at once
            raise KeyboardInterrupt
        self._stop_signal = signum
        print(f"\n{signal.Signals(signum).name} received: finishing this step, saving a checkpoint, closing workers "
              "(press Ctrl-C again to abort without saving)", flush=True)

    def _cpu_threads(self) -> int:
        """Threads for the networks: ``num_threads`` (0 = one per core) on CPU, 1 on GPU."""
        return 1 if self.cfg.device != "cpu" else (self.cfg.num_threads or os.cpu_count() or 1)

    @contextlib.contextmanager
    def math_threads(self):
        """Convolutions on ``num_threads`` batch shards (threads) while the trainer runs Paddle.

        Paddle's CPU convolution kernels are single-threaded and its own math threads only
        oversubscribe the cores (``docs/performance.md``), so the parallelism is ours:
        ``common.fast_ops`` splits each convolution batch into shards run on a thread
        pool; small batches are not split (``fast_ops.MIN_SHARD``). During collection the
        policy runs beside the env workers (pipelined), so there its shards share the cores
        with them.
        """
        n = self._cpu_threads()
        if n == 1:
            yield
            return
        old = set_num_shards(n)
        try:
            yield
        finally:
            set_num_shards(old)

    # ------------------------------------------------------------------ phases
    def init_obs_normalizer(self, obs: np.ndarray) -> np.ndarray:
        """Random-agent warm-up of the intrinsic module's observation normalizer (RND)."""
        for _ in range(self.cfg.obs_norm_steps):
            if self._stop_signal is not None:
                break
            actions = self.rng.integers(0, self.num_actions, size=self.cfg.num_envs)
            obs, _, _, _ = self.envs.step(actions)
            self.intrinsic.observe(obs)
        self.obs_norm_ready = self._stop_signal is None
        return obs

    def collect(self, obs: np.ndarray, keep_metadata: bool = False):
        """Fill the buffer with one rollout; returns (last obs, finished-episode infos) or None if stopped.

        With ``keep_metadata`` the game's embedding labels of every s_{t+1} are kept in
        ``self.embedding_meta`` ({(t, env): [str, ...]}) for the embedding view.
        """
        cfg, buf, envs = self.cfg, self.buffer, self.envs
        buf.start(obs)
        episodes = []
        self.embedding_meta = {}
        if self._stop_signal is not None:
            return None
        # Pipelined: the env groups (each worker's envs in two halves) step in turn, and the policy
        # picks one group's next actions while its worker steps the other half (and the other
        # workers step theirs), so no worker waits for the policy. Groups go in env order at every
        # step, so the sampler's random numbers reach the same envs as in one batched call; with
        # one group this is the plain act-step loop.
        groups = envs.pipeline_groups
        policy_out = [None] * len(groups)  # (actions, log_probs, v_ext, v_int) of the step in flight
        for g, (a, b) in enumerate(groups):
            policy_out[g] = self.ppo.act(obs[a:b], self.rng)
            envs.step_async(policy_out[g][0], a, b)
        for t in range(cfg.num_local_steps):
            step_out = [np.concatenate(x) for x in zip(*policy_out)]
            last = t + 1 == cfg.num_local_steps
            obs = np.empty_like(obs)
            rewards = np.empty(len(obs), np.float32)
            dones = np.empty(len(obs), bool)
            infos = []
            launched = []
            for g, (a, b) in enumerate(groups):
                obs[a:b], rewards[a:b], dones[a:b], group_infos = envs.step_wait(a, b)
                infos.extend(group_infos)
                if not last and self._stop_signal is None:
                    policy_out[g] = self.ppo.act(obs[a:b], self.rng)
                    envs.step_async(policy_out[g][0], a, b)
                    launched.append((a, b))
            if keep_metadata:
                for i, info in enumerate(infos):
                    self.embedding_meta[(buf.t, i)] = self.spec.embedding_metadata(info)
            buf.add(*step_out, rewards, dones, obs, infos)
            for i in np.flatnonzero(dones):
                if "episode" in infos[i]:  # not an episode cut by a worker restart
                    episodes.append(infos[i])
            if self._stop_signal is not None:
                for a, b in launched:  # leave no step in flight
                    envs.step_wait(a, b)
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
        paid = raw
        if self.first_visit is not None:  # revisits within an episode earn nothing
            self.gate_share = self.first_visit.gate_rollout(buf.obs[0], nxt, buf.obs[1:], buf.dones)
            paid = raw * self.gate_share
        # Scale by the std of the discounted intrinsic return, computed along time per env (RND).
        self.int_rms.update(self.int_filter.filter_rollout(paid).ravel())
        buf.rewards_int[:] = paid / math.sqrt(self.int_rms.var + 1e-8)
        self.intrinsic.observe(nxt.reshape(T * N, *self.obs_shape))
        return raw

    def learn(self) -> dict | None:
        """PPO epochs over the buffer; returns mean losses, or None if a non-finite loss skipped it.

        With more than one CPU thread (``num_threads``), each minibatch's intrinsic-module
        step runs on a second thread while the PPO step runs here: they share no
        parameters, optimizers or random generators, so the result is the sequential one
        (Paddle's grad mode is per thread). A non-finite loss ends the update at once; the
        caller rolls the whole update back (``train``).
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
                for k, v in out.items():
                    sums[k] += v
                for k, v in int_out.items():
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

    # ------------------------------------------------------------------ evaluation
    def _eval_seed(self) -> int:
        return self.cfg.seed + 7919 * (self.update + 1)

    def _eval_intrinsic(self, stacks: np.ndarray, state: dict | None = None) -> float:
        """Summed intrinsic reward of an eval episode's s_1 .. s_L, in one batched pass.

        ``state``: a snapshot's intrinsic-module state (a background eval's result arrives after
        later updates changed the live module); the reward is then computed with a copy of the module.
        """
        if len(stacks) <= 1:
            return 0.0
        module = self.intrinsic
        if state is not None:
            if self._eval_intrinsic_module is None:
                self._eval_intrinsic_module = self._new_intrinsic()
            module = self._eval_intrinsic_module
            module.set_state_dict(state)
        return float(module.reward(stacks[1:]).sum())

    def evaluate(self, record_path: str | None = None) -> dict:
        """One greedy episode in this process (the tutorial's rule: stop when one action repeats ``max_actions``
        times). ``eval_in_background`` plays the same episode in the eval process instead."""
        cfg = self.cfg
        if record_path:
            env = self.spec.env_factory(cfg, record_path)()
        else:
            if self._eval_env is None:
                self._eval_env = self.spec.env_factory(cfg, None)()
            env = self._eval_env
        rgb = []  # a few RGB screens of the episode, for the eval/frames strip
        try:
            stacks, ret, steps, info = greedy_episode(self.policy, env, self._eval_seed(),
                                                      cfg.max_actions, cfg.max_eval_steps, rgb_frames=rgb)
        finally:
            if record_path:
                env.close()
        int_reward = self._eval_intrinsic(stacks)
        strip = frame_strip(stacks, rgb)  # 8 moments of the episode side by side (RGB screens when the env has them)
        return {"return": ret, "length": steps, "intrinsic": int_reward, "info": info, "strip": strip,
                "video": record_path}

    # ------------------------------------------------------------------ logging
    def _log_update(self, losses, raw_int, episodes, t_collect, t_update):
        lg, step, buf, cfg = self.logger, self.global_step, self.buffer, self.cfg
        lg.scalar(tags.TRAINING_REWARD, buf.rewards_ext.mean(axis=1).sum(), self.update)  # tutorial's definition
        if losses:
            lg.scalar(tags.TOTAL_LOSS, losses["total"], self.update)
            if "forward" in losses:
                lg.scalar(tags.FORWARD_LOSS, losses["forward"], self.update)
            lg.scalars("losses", losses, step)
        lg.scalar(tags.INT_REWARD_RAW, raw_int.mean(), step)
        if self.first_visit is not None:
            lg.scalar(tags.FIRST_VISIT_SHARE, self.gate_share.mean(), step)
        shares = np.bincount(buf.actions.ravel(), minlength=self.num_actions) / buf.actions.size
        names = self.spec.action_names(cfg) if self.spec.action_names is not None else None
        for a, share in enumerate(shares):  # what the policy does (e.g. novelty farming by pickup/drop)
            lg.scalar(f"{tags.ACTION_SHARE}/{names[a] if names else a}", share, step)
        lg.scalar(tags.INT_REWARD_MEAN, buf.rewards_int.mean(), step)
        lg.scalar(tags.INT_REWARD_MAX, buf.rewards_int.max(), step)
        lg.scalar(tags.INT_RETURN_STD, math.sqrt(self.int_rms.var), step)
        lg.scalar(tags.ADV_EXT, buf.adv_ext.mean(), step)
        lg.scalar(tags.ADV_INT, buf.adv_int.mean(), step)
        lg.scalar(tags.NAN_UPDATES, self.nan_total, step)
        restarts = getattr(self.envs, "restart_log", [])
        if restarts:
            lg.scalar(tags.WORKER_RESTARTS, len(restarts), step)
            for line in restarts[self._restarts_reported:]:
                tqdm_write(f"env worker replaced ({line})")
            self._restarts_reported = len(restarts)
        lg.scalar(tags.COLLECT_SECONDS, t_collect, step)
        lg.scalar(tags.UPDATE_SECONDS, t_update, step)
        lg.scalar(tags.STEPS_PER_SEC, cfg.rollout_size / max(t_collect + t_update, 1e-9), step)
        for info in episodes:
            ep = info.get("episode", {})
            metrics = {"return": ep.get("r", 0.0), "length": ep.get("l", 0), **self.spec.episode_metrics(info)}
            self.recent.append(metrics)
            lg.scalars("episode", metrics, step)
            if self.spec.visited is not None:
                self.visited.update(self.spec.visited(info))
        if self.spec.visited is not None:
            lg.scalar(f"charts/{self.spec.visited_name}_visited_total", len(self.visited), step)
        if cfg.histogram_interval and self.update % cfg.histogram_interval == 0:
            lg.histogram(tags.HIST_INT_REWARD, buf.rewards_int, step)
            lg.histogram(tags.HIST_ADVANTAGE, buf.advantages, step)

    def _log_embeddings(self):
        """Target features of up to 256 of this rollout's states, labelled by the game (x_pos, room, ...).

        One tag per snapshot (``intrinsic/target_features/update_000050``): VisualDL 2.5.3
        shows only the first record of an embedding tag.
        """
        keys = list(self.embedding_meta)
        if self.cfg.intrinsic == "none" or not keys:
            return
        pick = self.rng.choice(len(keys), size=min(256, len(keys)), replace=False)
        buf = self.buffer  # s_{t+1} of step t; the true terminal frame where the episode ended (the info's state)
        obs = np.stack([buf.terminal_obs.get(keys[k], buf.obs[keys[k][0] + 1, keys[k][1]]) for k in pick])
        meta = [self.embedding_meta[keys[k]] for k in pick]
        self.logger.embeddings(f"{tags.EMBEDDING}/update_{self.update:06d}", self.intrinsic.features(obs), meta,
                               list(self.spec.embedding_header))

    # ------------------------------------------------------------------ main loop
    def train(self) -> dict:
        cfg = self.cfg
        print(f"{self.spec.name}: {cfg.num_updates} updates of {cfg.rollout_size} steps "
              f"({cfg.num_envs} envs x {cfg.num_local_steps}), intrinsic={cfg.intrinsic}, run folder {self.run_dir}")
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        from tqdm import tqdm

        bar = tqdm(total=cfg.num_updates * cfg.rollout_size, initial=self.global_step, unit="step",
                   dynamic_ncols=True, desc=self.spec.name)
        result = {}
        try:
            self.envs = self._make_envs()
            obs = self.envs.reset()
            if not self.obs_norm_ready:
                obs = self.init_obs_normalizer(obs)
            while self.update < cfg.num_updates and self._stop_signal is None:
                # the learned state after the last completed update: an update that goes non-finite (or
                # raises) is rolled back to it, so an update is all or nothing
                snapshot = _copy_state(self.learned_state())
                t0 = time.perf_counter()
                embed = bool(cfg.embedding_interval) and (self.update + 1) % cfg.embedding_interval == 0
                with self.math_threads():
                    collected = self.collect(obs, keep_metadata=embed)
                if collected is None:
                    break
                obs, episodes = collected
                last_ext, last_int = self.ppo.values(obs)
                with self.math_threads():
                    raw_int = self.intrinsic_rewards()
                self.buffer.compute_returns_and_advantages(last_ext, last_int, cfg.gamma, cfg.tau, cfg.int_gamma,
                                                           cfg.ext_coef, cfg.int_coef)
                t1 = time.perf_counter()
                try:
                    with self.math_threads():
                        losses = self.learn()
                    if losses is not None and self._nonfinite_weights():
                        losses = None  # finite losses, but a step pushed a weight to inf/NaN (e.g. a huge --lr)
                except BaseException:
                    self.set_learned_state(snapshot)
                    raise
                t2 = time.perf_counter()
                if losses is None:
                    self.set_learned_state(snapshot)
                    self._nonfinite()
                else:
                    self.nan_streak = 0
                self.update += 1
                self.global_step += cfg.rollout_size
                self._log_update(losses, raw_int, episodes, t1 - t0, t2 - t1)
                if embed:
                    self._log_embeddings()
                if cfg.eval_interval and self.update % cfg.eval_interval == 0:
                    self._run_eval()
                if cfg.save_interval and self.update % cfg.save_interval == 0:
                    self.save()
                self.buffer.finish()
                self.wait_eval(block=False)
                self.logger.flush()  # curves can be watched live (metrics.jsonl, VisualDL)
                bar.update(cfg.rollout_size)
                bar.set_postfix_str(self._progress_text(losses))
            if self._stop_signal is None:
                self.wait_eval()  # the last update's eval (its success checkpoint comes before the final one)
            elif self.evaluator is not None:
                self._cancel_eval()
            if self.saved_update != self.update:  # the final state is always on disk
                self.save()
            self._final_hparams()
        except Exception as e:  # a worker fault, an I/O error, a run of non-finite updates: keep what was learned
            raise self._stopped_by(e) from e
        finally:
            bar.close()
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self.close()
        if self.last_eval is not None:
            result["eval"] = self.last_eval
        result.update(update=self.update, global_step=self.global_step, checkpoint=self.last_checkpoint,
                      run_dir=self.run_dir, stopped_by_signal=self._stop_signal is not None)
        return result

    def _nonfinite_weights(self) -> bool:
        nets = [self.policy.state_dict(), self.intrinsic.state_dict()]
        return bool(nonfinite_tensors(nets))

    def _nonfinite(self):
        """Count a rolled-back update; stop after ``max_nan_updates`` of them in a row."""
        self.nan_streak += 1
        self.nan_total += 1
        warnings.warn(f"update {self.update + 1}: non-finite loss or weights, update rolled back "
                      f"({self.nan_streak} in a row, {self.nan_total} in total)", RuntimeWarning, stacklevel=2)
        self.logger.scalar(tags.NAN_UPDATES, self.nan_total, self.global_step + self.cfg.rollout_size)
        if self.nan_streak >= self.cfg.max_nan_updates:
            raise NonFiniteLossError(
                f"{self.nan_streak} consecutive updates had a NaN/inf loss or weights (each rolled back); stopping. "
                "Try a lower --lr or check the rewards.")

    def _stopped_by(self, error: Exception) -> Exception:
        """Save the state of the last completed update after ``error``; the exception to raise instead,
        naming the file. (Every phase leaves that state intact: an update rolls itself back.)"""
        what = f"{type(error).__name__}: {error}"
        try:
            path = self.save()  # (again, if this update was saved: the counters, e.g. nan_total, moved on)
        except Exception as e:  # noqa: BLE001 - e.g. the disk is full: say so, keep the first error
            why = f"{type(e).__name__}: {e}"
            if isinstance(error, NonFiniteLossError):
                return NonFiniteLossError(f"{error} No good state could be saved: {why}")
            return RunStoppedError(f"{what}\n\nThe state of update {self.update} could not be saved either: {why}")
        if isinstance(error, NonFiniteLossError):
            return NonFiniteLossError(f"{error} Last good checkpoint: {path} (update {self.update}).")
        return RunStoppedError(f"{what}\n\nThe state of update {self.update} was saved to {path}; "
                               f"continue with --resume {path}", path)

    def _run_eval(self) -> None:
        """The greedy episode after this update: played here, or handed to the eval process.

        In the background (``eval_in_background``) the eval process gets a copy of the policy
        weights and plays while the next update runs; the trainer keeps a copy of its whole state
        until the result arrives, so a "level solved" checkpoint holds the policy that solved it.
        At most one eval is in flight: the previous one is waited for, so every update is evaluated.
        """
        cfg = self.cfg
        t = time.perf_counter()
        record = None
        if cfg.video_interval and self.update % cfg.video_interval == 0:
            record = os.path.join(self.run_dir, "videos", f"eval_{self.update:06d}.mp4")
        if not cfg.eval_in_background:
            self._log_eval(self.evaluate(record), self.update, self.global_step)
        else:
            self.wait_eval()
            if self.evaluator is None:
                self.evaluator = BackgroundEvaluator(spec_module(self.spec), cfg.to_dict())
            snapshot = _copy_state(self.state_dict())
            weights = {k: v.numpy() for k, v in snapshot["policy"].items()}
            self.evaluator.submit(weights, self._eval_seed(), record)
            self._eval_pending = snapshot
        self.eval_seconds += time.perf_counter() - t

    def wait_eval(self, block: bool = True) -> None:
        """Log the background eval's result if it has arrived (``block``: wait for it)."""
        if self._eval_pending is None:
            return
        t = time.perf_counter()
        ev = self.evaluator.wait() if block else self.evaluator.poll()
        if ev is not None:
            snapshot, self._eval_pending = self._eval_pending, None
            with self.math_threads():
                ev["intrinsic"] = self._eval_intrinsic(ev.pop("stacks"), snapshot["intrinsic"])
            self._log_eval(ev, snapshot["update"], snapshot["global_step"], snapshot)
        self.eval_seconds += time.perf_counter() - t

    def _cancel_eval(self) -> None:
        self._eval_pending = None
        self.evaluator.close(cancel=True)
        self.evaluator = None

    def _log_eval(self, ev: dict, update: int, step: int, snapshot: dict | None = None) -> None:
        """Log an eval of the policy after ``update`` at that update's steps; save it if it solved the level."""
        lg = self.logger
        lg.scalar(tags.EVAL_EXTRINSIC, ev["return"], update)
        lg.scalar(tags.EVAL_INTRINSIC, ev["intrinsic"], update)
        lg.scalar("eval/return", ev["return"], step)
        lg.scalar("eval/length", ev["length"], step)
        lg.scalars("eval", self.spec.episode_metrics(ev["info"]), step)
        lg.image(tags.EVAL_FRAMES, ev["strip"], update)
        if self.spec.eval_success(ev["info"]):
            name = self.spec.checkpoint_name(self.cfg, None)
            if snapshot is None:
                path = self.save(name)
            else:
                path = self.last_checkpoint = save_checkpoint(os.path.join(self.saved_path, name), snapshot)
                if update == self.update:
                    self.saved_update = update
            tqdm_write(f"level solved by the greedy policy at update {update}: saved {path}")
        self.last_eval = {k: v for k, v in ev.items() if k != "strip"}

    def _progress_text(self, losses) -> str:
        lg = self.logger.last
        parts = [f"upd {self.update}/{self.cfg.num_updates}", f"{lg.get(tags.STEPS_PER_SEC, 0):.0f} steps/s"]
        if self.recent:
            keys = self.recent[-1].keys()
            parts += [f"{k} {np.mean([m.get(k, 0) for m in self.recent]):.3g}" for k in keys if k != "length"]
        if losses:
            parts.append(f"loss {losses['total']:.3g}")
        return ", ".join(parts)

    def _final_hparams(self):
        metrics = [tags.TRAINING_REWARD, tags.EVAL_EXTRINSIC, "eval/return", "episode/return"]
        keys = [*self._metric_keys(), *self.spec.episode_metrics({})]  # the game's metrics even if no episode ended
        metrics = list(dict.fromkeys(metrics + [f"{p}/{k}" for p in ("eval", "episode") for k in keys]))
        self.logger.hparams({k: v for k, v in self.cfg.to_dict().items()}, metrics)

    def _metric_keys(self):
        return list(self.recent[-1].keys()) if self.recent else []

    def close(self):
        if getattr(self, "_side", None) is not None:
            self._side.shutdown(wait=True)
            self._side = None
        if self.evaluator is not None:
            self._cancel_eval()
        if self.envs is not None:
            self.envs.close()
        if getattr(self, "ppo", None) is not None and self.ppo.engine is not None:
            self.ppo.engine.close()
        if self._eval_env is not None:
            self._eval_env.close()
            self._eval_env = None
        if hasattr(self, "logger"):
            self.logger.close()


def _copy_state(obj):
    """A copy of a (nested) state dict that later training steps cannot change."""
    if isinstance(obj, paddle.Tensor):
        return obj.detach().clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: _copy_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy_state(v) for v in obj)
    return copy.deepcopy(obj)


def spec_module(spec: GameSpec) -> str:
    """The importable module that defines ``spec`` as ``SPEC`` (``mario.train``), for the eval process.

    Found from the spec's ``make_policy``; when that is the running script (``python mario/train.py``),
    from the script's path under the first ``sys.path`` entry that reaches it through packages.
    """
    name = spec.make_policy.__module__
    if name != "__main__":
        return name
    main = sys.modules["__main__"]
    if getattr(main, "__spec__", None) is not None and main.__spec__.name:  # python -m mario.train
        return main.__spec__.name
    path = os.path.splitext(os.path.abspath(main.__file__))[0]
    best = None
    for root in sys.path:
        root = os.path.abspath(root or os.curdir)
        if not path.startswith(root + os.sep):
            continue
        parts = os.path.relpath(path, root).split(os.sep)
        if all(os.path.isfile(os.path.join(root, *parts[:i], "__init__.py")) for i in range(1, len(parts))):
            if best is None or len(parts) > len(best):
                best = parts
    if best is None:
        raise RuntimeError(f"cannot find an importable module name for {main.__file__}; "
                           "run with --no-eval-in-background")
    return ".".join(best)


def tqdm_write(msg: str) -> None:
    from tqdm import tqdm

    tqdm.write(msg)


def _check_writable(folder: str, flag: str) -> None:
    """Raise UnusablePathError unless ``folder`` exists as a writable folder or can be made one."""
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):  # the deepest existing parent decides
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UnusablePathError(f"{flag} {folder!r} is unusable: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UnusablePathError(f"{flag} {folder!r} is unusable: {probe} is not writable")


#: exit status of a run stopped by a signal (the shell's 128 + signal number)
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def run(spec: GameSpec, argv=None) -> dict:
    """Entry point used by each game's train.py: parse flags, print the config, train.

    Exits with a message (status 1) when the run stops on an error, and with 130 / 143
    after SIGINT / SIGTERM (the checkpoint is saved first), so scripts can tell.
    """
    import json

    from common.config import parse_config

    cfg = parse_config(spec.config_cls, argv, description=spec.config_cls.__doc__)
    print(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
    try:
        trainer = Trainer(spec, cfg)
    except UnusablePathError as e:  # a flag's value: reported as argparse reports bad flags
        print(f"{os.path.basename(sys.argv[0]) or spec.name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except CheckpointError as e:
        raise SystemExit(f"error: {e}") from None
    try:
        result = trainer.train()
    except (RunStoppedError, NonFiniteLossError) as e:
        raise SystemExit(f"error: {e}") from None
    if result["stopped_by_signal"]:
        sys.stdout.flush()
        raise SystemExit(SIGNAL_EXIT.get(trainer._stop_signal, 1))
    return result
