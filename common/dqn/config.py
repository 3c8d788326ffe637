"""Double DQN (+ SND-V) settings: the SND article's runner, every field a CLI flag (``common.run.config``)."""

from __future__ import annotations

from dataclasses import dataclass

from common.run.config import RunConfig, arg, default, need

AGENTS = ("dqn", "dqn-e0", "snd")
#: the article's epsilon per agent: DQN 0.1, DQN_e0 and SND 0
AGENT_EPSILON = {"dqn": 0.1, "dqn-e0": 0.0, "snd": 0.0}


@dataclass
class DQNConfig(RunConfig):
    """Double DQN (+ SND-V) settings; a game's config subclasses this. Defaults: the SND article's runner.

    The run's seed, device, folders and ``--resume`` come from ``RunConfig`` (one help text each).
    """

    # --- agent -----------------------------------------------------------------------------
    agent: str = arg(
        "dqn",
        "the article's three agents: dqn (Double DQN, epsilon 0.1), dqn-e0 (the same, epsilon "
        "0), snd (Double DQN + SND-V intrinsic reward, epsilon 0)",
        choices=AGENTS,
    )

    # --- run ---------------------------------------------------------------------------------
    num_threads: int = arg(
        0,
        "CPU threads for the networks (0: os.cpu_count()): with --parallel-intrinsic and "
        "the snd agent, the SND update runs on a second thread beside the Q update; "
        "otherwise each convolution batch is split into this many shards, one thread each",
    )
    parallel_intrinsic: bool = arg(
        True,
        "snd agent: run the SND networks' update (target step + predictor "
        "step) on a second thread beside the Q update (they share no weights, so "
        "the results are the same as one after the other)",
    )
    resume: str = default("", "and the replay memory, if it was saved")
    train_steps: int = arg(
        100_000,
        "stop after this many train steps (the article: runner.train("
        "max_train_count=100_000)); env steps = train steps + the warm-up",
    )
    save_interval: int = arg(25_000, "save a checkpoint every this many train steps (0: only at the end)")
    save_replay: bool = arg(
        True,
        "put the replay memory in checkpoints (~7 KB per stored frame, 71 MB at "
        "10,000) so --resume continues on the same data; off: a resumed run starts "
        "with an empty memory and waits for the warm-up again",
    )
    eval_interval: int = arg(
        2_000,
        "play --eval-episodes greedy evaluation episodes every this many train steps "
        "(0: never). The article logged one every 5 s of wall time (SRL history, "
        "eval_reward0)",
    )
    eval_episodes: int = arg(1, "episodes per evaluation (their mean return is logged)")
    test_epsilon: float = arg(0.0, "epsilon of the evaluation episodes (SRL's test_epsilon, 0)")
    max_eval_steps: int = arg(5_000, "hard cap on agent steps in one evaluation episode")
    video_interval: int = arg(10, "record every this many-th evaluation's first episode to videos/ (0: never)")
    log_interval: int = arg(100, "log losses, Q values and rates every this many train steps")
    max_nan_updates: int = arg(3, "stop after this many consecutive train steps with a non-finite loss")

    # --- Double DQN ------------------------------------------------------------------------
    lr: float = arg(
        0.0005,
        "Adam learning rate of the Q network (and of the SND networks unless --snd-lr): the "
        "article's runner sets 0.0005 (its SND Config default and SRL's DQN default: 0.001)",
    )
    discount: float = arg(0.99, "discount factor (the article: 0.99)")
    target_model_update_interval: int = arg(
        2_000,
        "copy the online Q network to the target network every this "
        "many train steps (the article's runner: 2,000; its SND Config "
        "default and SRL's DQN default: 1,000)",
    )
    double_dqn: bool = arg(
        True,
        "double DQN targets: the online network picks the next action, the target network "
        "values it (the article: enable_double_dqn=True; the SND agent's own code does the "
        "same)",
    )
    batch_size: int = arg(32, "transitions per train step (SRL's default, not changed by the article)")
    memory_capacity: int = arg(10_000, "replay memory size in stored frames, ~ transitions (the article: 10,000)")
    memory_warmup_size: int = arg(1_000, "train only once the memory holds this many transitions (the article: 1,000)")
    window_length: int = arg(4, "frames stacked into one state (the article: window_length=4)")
    epsilon: float = arg(
        -1.0, "epsilon-greedy exploration while training (-1: the agent's, as the article: dqn 0.1, dqn-e0 0, snd 0)"
    )
    epsilon_initial: float = arg(
        -1.0,
        "epsilon at env step 0, decaying linearly to --epsilon over "
        "--epsilon-decay-steps (-1: constant --epsilon, the article)",
    )
    epsilon_decay_steps: int = arg(0, "env steps of the linear epsilon decay (0: constant, the article)")
    conv_padding: str = arg(
        "valid",
        "padding of the DQN image block in every network: same (the article's Keras "
        "layers: 84->21->11->11, 7,744 features into Dense(512)) or valid (Nature "
        "DQN/RND geometry: 84->20->9->7, 3,136 features, ~1.7x fewer multiply-adds: "
        "the default, for CPU speed; see docs/snd_dqn_pong.md)",
        choices=("valid", "same"),
    )

    # --- SND-V (agent snd) -------------------------------------------------------------------
    int_reward_scale: float = arg(0.5, "reward = extrinsic + this x intrinsic (the article's int_reward_scale 0.5)")
    snd_lr: float = arg(
        0.0, "learning rate of the SND target and predictor (0: --lr, as the article: one lr for all three optimizers)"
    )
    snd_noise: float = arg(
        0.2,
        "uniform noise U(-a, a) added on the [0, 1] scale to the target's contrastive "
        "samples (the article's full listing: 0.2; its excerpt: 0, no augmentation)",
    )
    snd_distill_pairing: str = arg(
        "same",
        "what the predictor is distilled on: same (predictor(s') -> "
        "target(s'), the SND paper and the article's full listing) or shifted "
        "(predictor(s) -> target(s'), the article's Trainer excerpt; see docs/deviations.md)",
        choices=("same", "shifted"),
    )

    def __post_init__(self):
        if self.agent in AGENT_EPSILON and self.epsilon == -1.0:
            self.epsilon = AGENT_EPSILON[self.agent]

    @property
    def uses_snd(self) -> bool:
        return self.agent == "snd"

    POSITIVE = (
        "train_steps",
        "batch_size",
        "memory_capacity",
        "memory_warmup_size",
        "window_length",
        "target_model_update_interval",
        "eval_episodes",
        "max_eval_steps",
        "log_interval",
        "max_nan_updates",
    )
    NON_NEGATIVE = ("save_interval", "eval_interval", "video_interval", "epsilon_decay_steps", "num_threads")
    HOW_NOT_WHAT = RunConfig.HOW_NOT_WHAT + ("num_threads", "parallel_intrinsic")

    def validate(self) -> None:
        """Raise ValueError naming the flag and what is accepted."""
        super().validate()
        need(self.lr > 0, "lr", self.lr, "a positive learning rate")
        need(self.snd_lr >= 0, "snd-lr", self.snd_lr, "0 (same as --lr) or a positive learning rate")
        need(0.0 <= self.discount <= 1.0, "discount", self.discount, "a value in [0, 1]")
        need(0.0 <= self.epsilon <= 1.0, "epsilon", self.epsilon, "a value in [0, 1] (or -1: the agent's)")
        need(
            self.epsilon_initial == -1.0 or 0.0 <= self.epsilon_initial <= 1.0,
            "epsilon-initial",
            self.epsilon_initial,
            "a value in [0, 1] or -1 (constant)",
        )
        need(0.0 <= self.test_epsilon <= 1.0, "test-epsilon", self.test_epsilon, "a value in [0, 1]")
        need(self.int_reward_scale >= 0, "int-reward-scale", self.int_reward_scale, "a value >= 0")
        need(self.snd_noise >= 0, "snd-noise", self.snd_noise, "a value >= 0")
        need(
            self.memory_warmup_size <= self.memory_capacity,
            "memory-warmup-size",
            self.memory_warmup_size,
            f"at most --memory-capacity ({self.memory_capacity})",
        )
        need(
            self.batch_size <= self.memory_warmup_size,
            "batch-size",
            self.batch_size,
            f"at most --memory-warmup-size ({self.memory_warmup_size}), as SRL asserts",
        )
        need(
            self.memory_capacity > self.window_length,
            "memory-capacity",
            self.memory_capacity,
            f"more than --window-length ({self.window_length})",
        )
        need(
            not self.uses_snd or self.batch_size % 2 == 0,
            "batch-size",
            self.batch_size,
            "an even number for the snd agent (half the target's pairs are identical, half random; the article "
            "asserts batch_size % 2 == 0)",
        )
