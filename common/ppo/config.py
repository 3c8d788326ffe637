"""PPO's settings, shared by every PPO game: ``TrainConfig`` (the game configs subclass it).

The field machinery (``arg``, ``default``, ``need``, recipes, ``parse_config``) is
``common.run.config``'s.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from common import intrinsic
from common.run.config import RunConfig, arg, default, flag_name, need

#: ``--int-reward``: how novelty is paid (``common.intrinsic.normalize.IntrinsicRewardScale``)
INT_REWARDS = ("rnd", "snd")
SND_NETWORKS = ("game", "authors")


@dataclass
class TrainConfig(RunConfig):
    """PPO settings shared by every game. Game configs subclass this and change defaults."""

    #: ``{name: Recipe}``: the named sets of defaults ``--recipe`` accepts (a class attribute, not a field)
    RECIPES: typing.ClassVar[dict] = {}

    # --- run -------------------------------------------------------------------------
    seed: int = default(314)
    recipe: str = arg(
        "",
        "a named set of defaults for this game's flags, applied before the flags you type (which win); "
        "empty: the defaults shown. This game's recipes and their settings, if it has any, are listed at the "
        "end of --help",
    )
    num_threads: int = arg(
        0,
        "CPU threads for the networks: each large enough convolution batch runs as "
        "this many shards, one thread each (on oneDNN's kernels when Paddle ships them), "
        "and the intrinsic module's update step runs beside the PPO step "
        "(0: this process's share of the CPU cores, all of them outside a data-parallel launch; 1: neither). "
        "See docs/performance.md",
    )
    inference: str = arg(
        "native",
        "what runs the policy's forward passes during collection: native (the default and "
        "the fastest exact engine on a CPU: the same network on oneDNN + numpy, same outputs "
        "up to float rounding; networks without a compute(x, run) method use dygraph), "
        "dygraph (the training network; always used on GPU), onednn-bf16 (a bfloat16 Paddle Inference "
        "predictor, for CPUs with AVX512-BF16/AMX; not exact). Timings: docs/performance.md",
        choices=("native", "onednn-bf16", "dygraph"),  # common.cpu.ENGINES (a test keeps them equal)
    )
    allow_world_size_change: bool = arg(
        False,
        "let --resume continue a checkpoint written by a run of another number of data-parallel ranks "
        "(paddle.distributed.launch --nproc_per_node); refused otherwise. See docs/distributed.md",
    )
    num_global_steps: int = arg(5_000_000, "stop after this many agent steps summed over all envs")
    save_interval: int = arg(50, "save a checkpoint every this many updates (0: never by count)")
    save_minutes: float = arg(
        0.0, "also save a checkpoint after an update when this many minutes have passed since the last one (0: off)"
    )
    eval_interval: int = arg(1, "run a greedy evaluation episode every this many updates (0: never)")
    video_interval: int = arg(
        10, "record the evaluation episode to mp4 at evaluations whose update is a multiple of this (0: never)"
    )
    eval_in_background: bool = arg(
        True,
        "play the evaluation episode in a separate process with a snapshot of the "
        "policy while the next update runs (results are logged at the evaluated "
        "update's step when they arrive); off: in the trainer, blocking",
    )
    max_actions: int = arg(512, "evaluation stops when the greedy policy repeats one action this many times")
    max_eval_steps: int = arg(20_000, "hard cap on agent steps in one evaluation episode")
    stop_when_solved: bool = arg(
        False,
        "end the run (saving a checkpoint) once a greedy evaluation solves the level (Mario: reaches the "
        "flag); the solving policy is saved as the game's success checkpoint either way",
    )
    histogram_interval: int = arg(10, "log histograms of intrinsic rewards and advantages every N updates (0: never)")
    embedding_interval: int = arg(50, "log target-network embeddings of recent states every N updates (0: never)")
    picture_interval: int = arg(
        10,
        "draw where the agent has been every N updates (0: never): Mario the intrinsic reward along x_pos "
        "with deaths and flags, Montezuma the map of the rooms reached and the rollout inside them, MiniGrid the "
        "cells visited; logged "
        "as explore/<name> and written to <run>/explore/. The greedy eval's intrinsic reward along the "
        "episode comes with each video (--video-interval)",
    )
    max_nan_updates: int = arg(
        3,
        "stop the run after this many consecutive updates with a non-finite loss or "
        "weights (each is rolled back; the last good state is saved)",
    )
    worker_timeout: float = arg(60.0, "seconds an env worker may take for one step before it counts as hung")
    max_worker_restarts: int = arg(
        3,
        "replace an env worker process that dies or hangs (its envs start fresh "
        "episodes) at most this many times in a run, then stop and save",
    )

    # --- environments ------------------------------------------------------------------
    num_processes: int = arg(6, "number of parallel environments", aliases=("--num-envs",))
    num_workers: int = arg(
        0,
        "subprocesses hosting the environments, each stepping several of them "
        "(0: one per CPU core, at most one per environment; -1: all in the trainer process)",
    )
    vec_env: str = arg(
        "subproc",
        "where env workers run: subproc (processes on this machine) or ray (Ray actors, on a Ray cluster "
        'or a local Ray instance; needs pip install -e ".[distributed]"; --num-workers 0: one per CPU '
        "of the cluster). See docs/distributed.md",
        choices=("subproc", "ray"),
    )
    ray_address: str = arg(
        "",
        "with --vec-env ray: the Ray cluster to join (auto: the one started on this machine with ray start; "
        "HOST:PORT: a head node); empty: start a new local Ray instance for this run, even beside a cluster",
    )

    # --- PPO ------------------------------------------------------------------------------
    lr: float = arg(4e-5, "Adam learning rate (policy; also the intrinsic networks unless --intrinsic-lr)")
    gamma: float = arg(0.9, "discount factor of the extrinsic reward")
    tau: float = arg(1.0, "GAE lambda (the tutorial calls it tau)")
    beta: float = arg(0.01, "entropy bonus coefficient")
    epsilon: float = arg(0.2, "PPO clipping range")
    batch_size: int = arg(16, "number of minibatches per epoch (the tutorial's batch_size)")
    num_epochs: int = arg(10, "PPO epochs per update")
    num_local_steps: int = arg(512, "rollout length per environment per update")
    max_grad_norm: float = arg(0.5, "global gradient-norm clip")
    value_loss: str = arg(
        "smooth_l1", "value loss: smooth_l1 (tutorial) or mse (RND paper)", choices=("smooth_l1", "mse")
    )
    vf_coef: float = arg(1.0, "weight of the value loss")
    clip_reward: bool = arg(False, "sign-clip extrinsic rewards before learning (the RND paper's Atari setting)")
    norm_adv: bool = arg(
        False,
        "standardize the advantage per minibatch (CleanRL); off: the RND authors' and the tutorial's raw advantages",
    )

    # --- intrinsic reward ----------------------------------------------------------------
    intrinsic: str = arg(
        "rnd",
        lambda: "intrinsic-reward module: " + intrinsic.described() + "; docs/intrinsic_modules.md",
        choices=intrinsic.names,  # every registered module (common.intrinsic.registry)
    )
    int_coef: float = arg(1.0, "weight of the intrinsic advantage (0 keeps the module training but unused)")
    ext_coef: float = arg(
        2.0,
        "weight of the extrinsic advantage; 0: no game reward at all (curiosity alone): the extrinsic value "
        "head learns zero returns, so the game's reward reaches no gradient; the logs still record it",
    )
    int_gamma: float = arg(0.99, "discount of the intrinsic reward stream")
    bootstrap_truncated: bool = arg(
        False,
        "at a time limit (the env's TimeLimit.truncated: Montezuma's 4,500 steps, MiniGrid's max_steps) "
        "continue the return from the value of the terminal frame instead of ending it (off: the RND and SND "
        "authors end it, as at a game over)",
    )
    int_reward: str = arg(
        "rnd",
        "how novelty is paid: rnd (the RND paper: the novelty of s_t+1, divided by the running std of the "
        "discounted intrinsic return; the intrinsic return runs on across episode ends) or snd (the SND "
        "authors' code: the novelty of s_t, the state the action is taken in, as clip(int_eta x error, 0, 1) "
        "with no normalisation; the intrinsic return is cut at episode ends; the module reads pixels in "
        "[0, 1] (RND: minus their running mean) and SND's error is the mean over features). "
        "docs/sources.md, 4.1 'The SND authors' Montezuma recipe and reward convention'",
        choices=INT_REWARDS,
    )
    int_episodic: bool = arg(
        False,
        "cut the intrinsic return at episode ends, as the extrinsic one (off: RND's non-episodic stream; "
        "--int-reward snd always cuts it)",
    )
    int_eta: float = arg(
        1.0, "with --int-reward snd: the scale eta of clip(eta x error, 0, 1) (the SND authors' motivation_eta)"
    )
    intrinsic_epochs: int = arg(
        0,
        "epochs of each update in which the intrinsic module trains, one step per minibatch (0: all "
        "--num-epochs; the SND authors' code trains it once over the rollout: 1)",
    )
    update_proportion: float = arg(
        0.25, "share of each minibatch the intrinsic module trains on (RND/SND/NovelD predictor, ICM/E3B networks)"
    )
    snd_network: str = arg(
        "game",
        "the networks of SND-STD and SND-VIC: game (the game's RND target and predictor, so that the "
        "methods differ only in how the target is trained) or authors (the SND authors' Atari pair: "
        "four 3x3 convolutions with ReLU and orthogonal gain 0.5, an ELU predictor, the local map after "
        "the third convolution; and, as their code, the predictor learns s_t). docs/sources.md, section 4.1",
        choices=SND_NETWORKS,
    )
    snd_max_pairs: int = arg(512, "SND-STD: most consecutive pairs per target step (its scores grow as pairs^2)")
    target_proportion: float = arg(
        1.0,
        "share of each minibatch the SND target is trained on (1: all of it, as "
        "the SND authors' code); RND's target is frozen and ignores it",
    )
    intrinsic_lr: float = arg(
        0.0, "learning rate of the intrinsic module (RND/SND/NovelD predictor, ICM/E3B networks; 0: same as --lr)"
    )
    target_lr: float = arg(
        0.0,
        "learning rate of the SND target network (0: same as the predictor's); RND's target is frozen and ignores it",
    )
    int_first_visit: bool = arg(
        False,
        "pay the intrinsic reward only for the first visit of an observation within "
        "an episode (BeBold/NovelD's episodic restriction): stops a curious agent from "
        "farming novelty by cycling between a few observations (noveld always gates: the gate is part of it). "
        "See docs/exploration.md",
    )
    first_visit_key: str = arg(
        "view",
        "what the first-visit gate counts: view (the observation's exact bytes: MiniGrid's 7x7 view, which can "
        "alias distinct cells) or state (the game's full state: MiniGrid's whole grid with the agent, as the "
        "NovelD authors count; games that report it only). view stays the default: on KeyCorridorS3R3 it "
        "solved more seeds (docs/exploration.md, suite v4)",
        choices=("view", "state"),
    )
    intrinsic_frames: int = arg(4, "how many of the latest stacked frames the intrinsic module sees")
    obs_norm_steps: int = arg(64, "random-agent steps per env to initialise the observation normalizer")

    # ---------------------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.num_processes

    @property
    def rollout_size(self) -> int:
        """Samples per update: num_local_steps x num_processes."""
        return self.num_local_steps * self.num_processes

    @property
    def minibatch_size(self) -> int:
        return self.rollout_size // self.batch_size

    @property
    def num_updates(self) -> int:
        return max(1, self.num_global_steps // self.rollout_size)

    POSITIVE = (
        "num_global_steps",
        "num_processes",
        "num_local_steps",
        "num_epochs",
        "batch_size",
        "max_actions",
        "max_eval_steps",
        "max_nan_updates",
        "snd_max_pairs",
    )
    HOW_NOT_WHAT = RunConfig.HOW_NOT_WHAT + (
        "save_minutes",
        "histogram_interval",
        "embedding_interval",
        "picture_interval",
        "num_threads",
        "inference",
        "num_workers",
        "vec_env",
        "ray_address",
        "worker_timeout",
        "max_worker_restarts",
        "allow_world_size_change",
        "eval_in_background",
    )
    NON_NEGATIVE = (
        "intrinsic_epochs",
        "save_interval",
        "eval_interval",
        "video_interval",
        "histogram_interval",
        "embedding_interval",
        "picture_interval",
        "obs_norm_steps",
        "max_worker_restarts",
        "num_threads",
    )

    #: upper bounds of the flags whose size would exhaust memory or overflow a counter later
    #: (the rollout's observations are checked against the machine's memory by the trainer)
    BOUNDS = {
        "num_processes": 4096,
        "num_local_steps": 1_000_000,
        "num_epochs": 10_000,
        "num_global_steps": 10**13,
        "max_actions": 10**7,
        "max_eval_steps": 10**7,
        "snd_max_pairs": 65_536,
        "save_interval": 10**9,
        "eval_interval": 10**9,
        "video_interval": 10**9,
        "histogram_interval": 10**9,
        "embedding_interval": 10**9,
        "picture_interval": 10**9,
        "obs_norm_steps": 10**7,
        "max_worker_restarts": 10**6,
        "max_nan_updates": 10**6,
        "num_threads": 1024,
        "worker_timeout": 86_400.0,
        "save_minutes": 10**6,
    }

    def validate(self) -> None:
        """Raise ValueError naming the flag and what is accepted."""
        super().validate()
        for name, bound in self.BOUNDS.items():
            need(getattr(self, name) <= bound, flag_name(name), getattr(self, name), f"at most {bound:,}")
        need(
            not self.recipe or self.recipe in self.RECIPES,
            "recipe",
            self.recipe,
            f"one of {', '.join(self.RECIPES)}" if self.RECIPES else "nothing: this game has no recipes",
        )
        need(self.worker_timeout > 0, "worker-timeout", self.worker_timeout, "a positive number of seconds")
        need(self.save_minutes >= 0, "save-minutes", self.save_minutes, "0 (off) or a positive number of minutes")
        need(
            not self.ray_address or self.vec_env == "ray",
            "ray-address",
            self.ray_address,
            "nothing without --vec-env ray (it names the Ray cluster of the Ray env workers)",
        )
        need(1 <= self.intrinsic_frames <= 64, "intrinsic-frames", self.intrinsic_frames, "an integer from 1 to 64")
        need(self.num_workers >= -1, "num-workers", self.num_workers, "-1, 0 or a positive integer")
        need(
            self.vec_env != "ray" or self.num_workers >= 0,
            "num-workers",
            self.num_workers,
            "0 (one per CPU of the Ray cluster) or a positive integer with --vec-env ray",
        )
        need(self.lr > 0, "lr", self.lr, "a positive learning rate")
        need(self.intrinsic_lr >= 0, "intrinsic-lr", self.intrinsic_lr, "0 or a positive learning rate")
        need(self.target_lr >= 0, "target-lr", self.target_lr, "0 or a positive learning rate")
        for name in ("gamma", "tau", "int_gamma"):
            need(0.0 <= getattr(self, name) <= 1.0, flag_name(name), getattr(self, name), "a value in [0, 1]")
        need(0.0 < self.update_proportion <= 1.0, "update-proportion", self.update_proportion, "a value in (0, 1]")
        need(0.0 < self.target_proportion <= 1.0, "target-proportion", self.target_proportion, "a value in (0, 1]")
        need(self.epsilon > 0, "epsilon", self.epsilon, "a positive clip range")
        need(self.max_grad_norm > 0, "max-grad-norm", self.max_grad_norm, "a positive norm")
        for name in ("beta", "int_coef", "ext_coef", "vf_coef"):
            need(getattr(self, name) >= 0, flag_name(name), getattr(self, name), "a number >= 0")
        need(self.int_eta > 0, "int-eta", self.int_eta, "a positive scale")
        need(
            self.int_reward == "snd" or self.int_eta == 1.0,
            "int-eta",
            self.int_eta,
            "1 unless --int-reward snd (the RND convention normalises the reward instead)",
        )
        need(
            self.int_reward == "rnd" or self.intrinsic in intrinsic.snd_convention_names(),
            "int-reward",
            self.int_reward,
            f"rnd with --intrinsic {self.intrinsic} (snd, the SND authors' convention, is defined for "
            f"{', '.join(intrinsic.snd_convention_names())})",
        )
        need(
            self.snd_network == "game" or self.intrinsic in intrinsic.AUTHORS_PREDICTOR_GAIN,
            "snd-network",
            self.snd_network,
            f"game with --intrinsic {self.intrinsic} (authors is for "
            f"{', '.join(intrinsic.AUTHORS_PREDICTOR_GAIN)}: the SND authors' encoder for those)",
        )
        need(
            self.int_reward == "rnd" or not self.int_first_visit,
            "int-reward",
            self.int_reward,
            "rnd with --int-first-visit (the SND authors' convention has no first-visit gate)",
        )
        need(
            self.intrinsic_epochs <= self.num_epochs,
            "intrinsic-epochs",
            self.intrinsic_epochs,
            f"0 (every epoch) to --num-epochs ({self.num_epochs})",
        )
        need(
            self.rollout_size % self.batch_size == 0 and self.minibatch_size > 0,
            "batch-size",
            self.batch_size,
            f"a divisor of num_local_steps x num_processes = {self.rollout_size}",
        )
