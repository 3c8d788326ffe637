"""The DQN loop, shared by any game: one environment, a replay memory, Double DQN, optional SND-V.

This is the SND article's runner (SRL v0.16.1's sequential ``runner.train``): each
env step the worker acts (epsilon-greedy on the online Q network), stores the
transition, then the trainer runs one train step once the memory holds
``memory_warmup_size`` transitions; the run ends after ``train_steps`` train steps
(``runner.train(max_train_count=100_000)``). For the ``snd`` agent (the article's
``SND`` algorithm) the stored reward is ``r_ext + int_reward_scale * r_int`` with
``r_int`` computed when the transition is collected, and each train step first trains
the SND target on pairs of stored observations, then distils the predictor on the Q
batch and updates Q (``common/dqn/snd.py``).

What differs between games comes from a ``common.run.game.GameSpec``: ``make_policy(cfg,
obs_shape, num_actions)`` builds the Q network (called twice: online and target),
``make_intrinsic_networks(cfg, in_channels)`` the SND target and predictor,
``env_factory(cfg, record_path)`` one environment (``reset(seed) -> uint8 obs``,
``step(a) -> obs, reward, done, info`` with ``info["TimeLimit.truncated"]``), and
``episode_metrics(info)`` the game's episode scalars.

Logged (VisualDL + ``metrics.jsonl``), every x-axis in **train steps** (the
article's plot: ``eval_reward0`` against the train count), so runs of the three
agents overlay in one chart: ``episode/return`` (extrinsic), ``episode/length``,
``episode/intrinsic_return``, the game's ``episode/...``, ``eval/return`` and
``eval/length`` (greedy episodes with ``test_epsilon``), ``losses/q``,
``losses/snd_target``, ``losses/forward`` (predictor MSE), ``charts/q_mean``, ``charts/target_mean``,
``charts/epsilon``, ``charts/env_steps``, ``charts/target_syncs``,
``charts/nonfinite_skipped``, ``intrinsic/reward_mean``, ``intrinsic/reward_max``,
``perf/train_steps_per_sec``, ``perf/env_steps_per_sec``, ``perf/cpu_ms_per_train_step``
(CPU time of all threads per train step, env and evaluation included).

Checkpoints (``common.run.checkpoint``, atomic) hold the networks, optimizers, counters,
RNG state, the config and, unless ``--no-save-replay``, the replay memory: a resumed
run then samples the same data; without it the memory starts empty and the run waits
for ``memory_warmup_size`` transitions before training again. The environment starts
a fresh episode on resume. Ctrl-C / SIGTERM finish the current step and save; a
second Ctrl-C aborts.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from common.dqn.config import DQNConfig
from common.run.device import require_paddle, set_device, warn_ignored_cpu_flags
from common.run.errors import NonFiniteLossError, UsageError, stopped_by
from common.run.game import GameSpec
from common.run.runtime import NonFiniteSteps, RunFolder, StopSignals, check_fits

paddle = require_paddle()

from common import cpu  # noqa: E402
from common.dqn.learner import DoubleDQN, LinearSchedule, epsilon_greedy  # noqa: E402
from common.dqn.log import DQNLog  # noqa: E402
from common.dqn.replay import ReplayMemory, replay_bytes  # noqa: E402
from common.intrinsic.base import NoIntrinsic  # noqa: E402
from common.run.checkpoint import (  # noqa: E402
    CheckpointError,
    all_finite,
    check_compatible,
    copy_state,
    load_checkpoint,
)
from common.run.logger import Logger  # noqa: E402


class _Episode:
    """The training episode under way: its current observation and running sums."""

    def __init__(self, obs: np.ndarray):
        self.obs, self.ret, self.int_ret, self.length = obs, 0.0, 0.0, 0


#: what ``DQNTrainer.state_dict`` writes and ``DQNTrainer.load`` needs
CHECKPOINT_KEYS = ("game", "config", "agent", "policy", "learner", "intrinsic", "env_steps", "episodes", "rng")


class DQNTrainer:
    """Double DQN (+ SND-V) on one game. ``DQNTrainer(spec, cfg).train()`` runs to completion."""

    def __init__(self, spec: GameSpec, cfg: DQNConfig):
        cfg.validate()
        from common.run.distributed import World

        if World.launched_size() > 1:  # N copies would all write the same run folder
            raise UsageError(
                f"{spec.name}'s DQN trainer runs in one process; paddle.distributed.launch started "
                f"{World.launched_size()} ranks (data-parallel training is for the PPO games)"
            )
        self.spec, self.cfg = spec, cfg
        set_device(cfg.device)
        warn_ignored_cpu_flags(cfg)
        paddle.seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.folder = RunFolder(cfg, f"{spec.name}_{cfg.agent}_seed{cfg.seed}_{stamp}")
        self.run_dir = self.folder.run_dir

        self.obs_shape, self.num_actions = spec.spaces(cfg)
        if self.obs_shape[0] != cfg.window_length:
            raise ValueError(
                f"the game's observations stack {self.obs_shape[0]} frames but --window-length is {cfg.window_length}"
            )
        q_net = spec.make_policy(cfg, self.obs_shape, self.num_actions)
        target_net = spec.make_policy(cfg, self.obs_shape, self.num_actions)
        self.learner = DoubleDQN(
            q_net,
            target_net,
            lr=cfg.lr,
            discount=cfg.discount,
            target_update_interval=cfg.target_model_update_interval,
            double=cfg.double_dqn,
        )
        if cfg.uses_snd:
            from common.dqn.snd import SNDVArticle

            target, predictor = spec.make_intrinsic_networks(cfg, self.obs_shape[0])
            self.intrinsic = SNDVArticle(
                target,
                predictor,
                lr=cfg.snd_lr or cfg.lr,
                noise=cfg.snd_noise,
                distill_pairing=cfg.snd_distill_pairing,
                seed=cfg.seed + 1,
            )
        else:
            self.intrinsic = NoIntrinsic()
        nbytes = replay_bytes(cfg.memory_capacity, self.obs_shape[1:])
        check_fits(nbytes, f"--memory-capacity {cfg.memory_capacity}", "the replay memory")
        self.memory = ReplayMemory(cfg.memory_capacity, self.obs_shape[1:], self.obs_shape[0])
        self.epsilon = LinearSchedule(
            cfg.epsilon, None if cfg.epsilon_initial < 0 else cfg.epsilon_initial, cfg.epsilon_decay_steps
        )

        self.env_steps = 0
        self.episodes = 0
        self.evals = 0
        self.nonfinite = NonFiniteSteps(cfg.max_nan_updates, "train step")
        self.last_checkpoint = ""
        self.saved_at = -1
        self.last_eval = None
        self.stop = StopSignals("finishing this step and saving a checkpoint")
        self._side = cpu.SideThread("snd-update") if self._parallel() else None
        self._env = None
        self._eval_env = None
        self._episode: _Episode | None = None  # the training episode under way
        self._good = None  # the last learned state known finite (see train_step)
        if cfg.resume:
            self.load(cfg.resume)
        self.folder.create(cfg)
        self.logger = Logger(self.run_dir, comment=spec.name, origin=f"--log-path {cfg.log_path!r}")

    @property
    def train_count(self) -> int:
        return self.learner.train_count

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        learner = self.learner.state_dict()
        return {
            "game": self.spec.name,
            "config": self.cfg.to_dict(),
            "agent": self.cfg.agent,
            "policy": learner.pop("q_net"),
            "learner": learner,
            "intrinsic": self.intrinsic.state_dict(),
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "evals": self.evals,
            "nan_total": self.nonfinite.total,
            "code_commits": self.folder.commits,
            "rng": self.rng.bit_generator.state,
            "replay": self.memory.state_dict() if self.cfg.save_replay else None,
        }

    def learned_state(self) -> dict:
        """What a train step changes: the learner (Q and target networks, optimizer, counters) and the
        intrinsic module. A reference to live tensors: ``copy_state`` it to keep it."""
        return {"learner": self.learner.state_dict(), "intrinsic": self.intrinsic.state_dict()}

    def set_learned_state(self, state: dict) -> None:
        self.learner.set_state_dict(state["learner"])
        self.intrinsic.set_state_dict(state["intrinsic"])

    def load(self, path: str) -> None:
        """Restore everything from a checkpoint; refuses one from another game, agent or network."""
        state = load_checkpoint(path, required=CHECKPOINT_KEYS, game=self.spec.name)
        check_compatible(
            state, self.spec.name, {"agent": self.cfg.agent, "policy": self.learner.q_net.state_dict()}, path
        )
        try:
            self.learner.set_state_dict({"q_net": state["policy"], **state["learner"]})
            self.intrinsic.set_state_dict(state["intrinsic"])
            if state.get("replay") is not None:
                self.memory.set_state_dict(state["replay"])
            self.env_steps = int(state["env_steps"])
            self.episodes = int(state["episodes"])
            self.evals = int(state.get("evals", 0))
            self.nonfinite.total = int(state.get("nan_total", 0))
            self.rng.bit_generator.state = state["rng"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: {type(e).__name__}: {e}") from e
        self.folder.resumed_from(state, path, self.cfg)
        self.saved_at = self.train_count

    def save(self, name: str | None = None) -> str:
        """Write the current state as ``name`` (default: this train step's checkpoint name)."""
        self.logger.sync()  # its records reach the disk first
        name = name or self.spec.checkpoint_name(self.cfg, self.train_count)
        self.last_checkpoint = self.folder.save(name, self.state_dict())
        self.saved_at = self.train_count
        return self.last_checkpoint

    # ------------------------------------------------------------------ signals, threads
    def _threads(self) -> int:
        return (self.cfg.num_threads or os.cpu_count() or 1) if cpu.fast_paths() else 1

    def _parallel(self) -> bool:
        return self.cfg.uses_snd and self.cfg.parallel_intrinsic and self._threads() > 1

    # ------------------------------------------------------------------ one train step
    def train_step(self) -> dict | None:
        """The article's ``Trainer.train()``: SND target step, then predictor + Q on one batch.

        Returns the step's losses, or None while the memory is warming up. All sampling is
        done here first, so the random streams do not depend on thread timing.

        No optimizer applies a non-finite loss: the Q, SND-target and predictor steps are each
        skipped when their loss is NaN/inf. Should a weight still come out non-finite (an overflow from finite
        numbers), the learned state goes back to the last one known finite (``self._good``,
        refreshed every ``--log-interval`` train steps, since a full copy every step would
        cost a noticeable share of the step). Either way the step counts as non-finite;
        ``--max-nan-updates`` of them in a row stop the run (NonFiniteLossError), and no saved
        checkpoint ever holds a NaN/inf.
        """
        losses = self._train_step()
        if losses is None:
            return None
        bad = [k for k in ("q", "snd_target", "forward") if k in losses and not np.isfinite(losses[k])]
        if not all_finite([self.learner.q_net.state_dict(), self.intrinsic.state_dict()]):
            bad.append("weights")
            if self._good is None:
                raise NonFiniteLossError("a train step made the weights non-finite and no finite state was kept")
            self.set_learned_state(self._good)
        if bad:
            self.nonfinite.taken_back(self.train_count + 1, ", ".join(bad))
        else:
            self.nonfinite.ok()
        return losses

    def keep_good_state(self) -> None:
        """Remember the current learned state as the one a non-finite step rolls back to."""
        self._good = copy_state(self.learned_state())

    def _train_step(self) -> dict | None:
        cfg, mem = self.cfg, self.memory
        snd_batch = {}
        if cfg.uses_snd and mem.num_states >= cfg.memory_warmup_size:
            snd_batch["states1"] = mem.sample_states(cfg.batch_size, self.rng)
            snd_batch["states2"] = mem.sample_states(cfg.batch_size // 2, self.rng)
        batch = mem.sample(cfg.batch_size, self.rng) if len(mem) >= cfg.memory_warmup_size else None
        if batch is None and not snd_batch:
            return None
        if batch is not None and cfg.uses_snd:
            snd_batch.update(obs=batch["obs"], next_obs=batch["next_obs"])
        losses = {}
        if self._side is not None and snd_batch and batch is not None:
            future = self._side.submit(self.intrinsic.update, snd_batch)
            try:
                losses.update(self._learn(batch))
            finally:
                losses.update(future.result())
        else:
            if snd_batch:
                losses.update(self.intrinsic.update(snd_batch))
            if batch is not None:
                losses.update(self._learn(batch))
        return losses

    def _learn(self, batch: dict) -> dict:
        return self.learner.learn(
            batch["obs"], batch["actions"], batch["rewards"], batch["terminals"], batch["next_obs"]
        )

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict:
        """``eval_episodes`` episodes with ``test_epsilon``; the first is recorded every ``video_interval`` evals."""
        cfg = self.cfg
        self.evals += 1
        returns, lengths, int_returns = [], [], []
        for e in range(cfg.eval_episodes):
            record = None
            if e == 0 and cfg.video_interval and self.evals % cfg.video_interval == 0:
                record = os.path.join(self.run_dir, "videos", f"eval_{self.train_count:07d}.mp4")
            ret, length, int_ret = self._eval_episode(cfg.seed + 1_000_003 + 7919 * self.evals + e, record)
            returns.append(ret)
            lengths.append(length)
            int_returns.append(int_ret)
        out = {"return": float(np.mean(returns)), "length": float(np.mean(lengths))}
        if cfg.uses_snd:
            out["intrinsic_return"] = float(np.mean(int_returns))
        return out

    def _eval_episode(self, seed: int, record: str | None) -> tuple[float, int, float]:
        """One greedy-ish episode (``test_epsilon``), filmed to ``record`` if given (with SND, also its
        intrinsic reward along the episode): (extrinsic return, length, intrinsic return)."""
        cfg = self.cfg
        env = self.spec.env_factory(cfg, record)() if record else self._get_eval_env()
        picture = bool(record) and cfg.uses_snd
        stacks, int_rewards = [], []  # the recorded episode's, for its intrinsic-reward picture
        ret, length, int_ret = 0.0, 0, 0.0
        rng = np.random.default_rng([cfg.seed, seed])  # its own coins: an evaluation never changes training
        try:
            obs = env.reset(seed=seed)
            stacks.append(obs)  # s_0: the picture's frame of step s is stacks[s]
            for _ in range(cfg.max_eval_steps):
                a = epsilon_greedy(self.learner.q_values(obs[None])[0], cfg.test_epsilon, rng)
                obs, r, done, _ = env.step(a)
                ret += r
                length += 1
                if cfg.uses_snd:
                    r_int = float(self.intrinsic.reward(obs[None])[0])
                    int_ret += r_int
                    if picture:
                        stacks.append(obs)
                        int_rewards.append(r_int)
                if done:
                    break
        finally:
            if record:
                env.close()
        if int_rewards:
            self._log_along_episode(np.stack(stacks), np.asarray(int_rewards, np.float32))
        return ret, length, int_ret

    def _log_along_episode(self, stacks: np.ndarray, rewards: np.ndarray) -> None:
        """The recorded eval episode's intrinsic reward step by step, the frames at its highest peaks above
        (``eval/intrinsic_along_episode``, ``<run>/eval_intrinsic/step_N.png`` and ``.npz``, as the PPO games).

        stacks: uint8[L + 1, C, H, W], the observations s_0 .. s_L; rewards: float32[L], the SND reward of s_1 .. s_L.
        """
        from common import pictures
        from common.run.logger import EVAL_ALONG, EVAL_ALONG_DIR

        record = pictures.along_episode(rewards, pictures.episode_frames(stacks))
        title = f"{self.spec.name}, train step {self.train_count}: SND-V intrinsic reward of the eval episode"
        image = pictures.draw_along_episode(record, title)
        self.logger.picture(EVAL_ALONG, EVAL_ALONG_DIR, self.train_count, image, record, unit="step")

    def _get_eval_env(self):
        if self._eval_env is None:
            self._eval_env = self.spec.env_factory(self.cfg, None)()
        return self._eval_env

    # ------------------------------------------------------------------ main loop
    def train(self) -> dict:
        """Act, store, train, and every so many train steps log, evaluate and save, until ``train_steps``
        (or a signal); the run's result (counts, checkpoint, last evaluation)."""
        cfg = self.cfg  # (what runs and where: printed by common.run.launch.start_lines)
        from tqdm import tqdm

        bar = tqdm(
            total=cfg.train_steps,
            initial=min(self.train_count, cfg.train_steps),
            unit="train step",
            dynamic_ncols=True,
            desc=f"{self.spec.name} {cfg.agent}",
        )
        scope = contextlib.ExitStack()  # the signal handlers and the math threads
        scope.enter_context(self.stop)
        try:
            # with the SND side thread, the two updates side by side are the parallelism: each runs whole
            scope.enter_context(cpu.threads(1 if self._side is not None else self._threads()))
            self.keep_good_state()
            self._env = self.spec.env_factory(cfg, None)()
            self._start_episode(self._env.reset(seed=cfg.seed + 100_003 * self.episodes))
            log = DQNLog(self.logger, self.spec, cfg, self.env_steps, self.train_count)
            while self.train_count < cfg.train_steps and not self.stop.requested:
                eps = self.epsilon(self.env_steps)
                r_int = self._act(eps, log)
                before = self.train_count
                log.step(r_int, self.train_step())
                if self.train_count == before:  # warm-up (or a skipped step): no periodic work
                    continue
                self._periodic(log, eps)
                bar.update(self.train_count - before)
                if self.train_count % 10 == 0:
                    bar.set_postfix_str(log.progress(self.env_steps, eps))
            if self.saved_at != self.train_count or not self.last_checkpoint:
                self.save()
            self.logger.hparams(cfg.to_dict(), ["episode/return", "eval/return"])
        except Exception as e:  # an env fault, an I/O error, a run of non-finite steps: keep what was learned
            raise self._stopped_by(e) from e
        finally:
            bar.close()
            self.close()
            scope.close()
        result = {
            "train_steps": self.train_count,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "checkpoint": self.last_checkpoint,
            "run_dir": self.run_dir,
            "stopped_by_signal": self.stop.requested,
        }
        if self.last_eval is not None:
            result["eval"] = self.last_eval
        return result

    def _start_episode(self, obs: np.ndarray) -> None:
        self._episode = _Episode(obs)
        self.memory.start_episode(obs[-1])

    def _act(self, eps: float, log: DQNLog) -> float | None:
        """One env step of the training episode (epsilon-greedy), stored in the memory with the SND reward
        added; an ended episode is logged and the next one started. Returns the step's intrinsic reward
        (None without SND)."""
        cfg, ep = self.cfg, self._episode
        action = epsilon_greedy(self.learner.q_values(ep.obs[None])[0], eps, self.rng)
        next_obs, reward, done, info = self._env.step(action)
        self.env_steps += 1
        terminated = done and not info.get("TimeLimit.truncated", False)  # a time limit is not an end
        r_int = float(self.intrinsic.reward(next_obs[None])[0]) if cfg.uses_snd else 0.0
        self.memory.add(action, reward + cfg.int_reward_scale * r_int, terminated, next_obs[-1])
        ep.obs, ep.ret, ep.int_ret, ep.length = next_obs, ep.ret + reward, ep.int_ret + r_int, ep.length + 1
        if done:
            self.episodes += 1
            log.episode(self.train_count, ep.ret, ep.length, ep.int_ret if cfg.uses_snd else None, info)
            self._start_episode(self._env.reset())
        return r_int if cfg.uses_snd else None

    def _periodic(self, log: DQNLog, eps: float) -> None:
        """What runs every ``log_interval``, ``eval_interval`` and ``save_interval`` train steps."""
        cfg, step = self.cfg, self.train_count
        if step % cfg.log_interval == 0:
            log.write(step, self.env_steps, eps, self.learner.sync_count, self.nonfinite.total)
            self.keep_good_state()
        if cfg.eval_interval and step % cfg.eval_interval == 0:
            self.last_eval = self.evaluate()
            log.eval(self.last_eval, step)
        if cfg.save_interval and step % cfg.save_interval == 0:
            self.save()

    def _stopped_by(self, error: Exception) -> Exception:
        """Save the current state (finite: a non-finite step never stays applied) after ``error``; the
        exception to raise instead, naming the file."""
        return stopped_by(error, self.save, f"train step {self.train_count}")

    def close(self):
        if self._side is not None:
            self._side.close()
        for env in (self._env, self._eval_env):
            if env is not None:
                env.close()
        self._env = self._eval_env = None
        if hasattr(self, "logger"):
            self.logger.close()
        self.folder.release()


def run(spec: GameSpec, argv=None) -> dict:
    """Entry point used by a game's DQN train.py: ``common.run.launch.run`` with this trainer (the same
    exit statuses as the PPO games: 1 on an error, 2 on a bad flag, 130 / 143 after SIGINT / SIGTERM)."""
    from common.run.launch import run as launch

    return launch(spec, DQNTrainer, argv)
