"""Run configuration: one dataclass per game, every field a CLI flag.

Fields are named after the tutorial's variables (``num_local_steps`` ->
``--num-local-steps``) so a reader of the tutorial finds them. The help text of a
flag is the field's ``help`` metadata; ``choices`` restrict a value. Nothing is read
at import time: ``parse_config(cls, argv)`` builds the config, ``validate`` checks
it, ``to_json`` records it next to the run's logs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import textwrap
import typing
from dataclasses import dataclass, field

from common.errors import UsageError


class UnusablePathError(UsageError):
    """A folder chosen by a flag (``--log-path``, ``--saved-path``) cannot be created or written."""


def process_umask() -> int:
    """The process umask, read without setting it (``os.umask`` can only swap it, a race with threads
    that create files meanwhile): Linux's /proc, else the value seen when this module was imported."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _UMASK_AT_IMPORT


_UMASK_AT_IMPORT = os.umask(0o022)
os.umask(_UMASK_AT_IMPORT)


def check_writable(folder: str, flag: str) -> None:
    """Raise UnusablePathError unless ``folder`` exists as a writable folder or can be made one."""
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):  # the deepest existing parent decides
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UnusablePathError(f"{flag} {folder!r} is unusable: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UnusablePathError(f"{flag} {folder!r} is unusable: {probe} is not writable")


def make_folder(folder: str, flag: str, value: str) -> None:
    """``os.makedirs(folder)``, or UnusablePathError naming the flag (and its value) that chose it."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise UnusablePathError(f"{flag} {value!r} is unusable: cannot create {folder}: {e.strerror}") from None


#: the largest --seed: every generator a run seeds (Paddle, numpy, the emulators, MiniGrid) takes it
MAX_SEED = 2**31 - 1
PLAIN_NAME = "a plain folder name (no '/', not '.' or '..', at most 255 bytes)"


def plain_name(name: str) -> bool:
    """Whether ``name`` names a folder inside its parent and nothing else (empty: the default name)."""
    if name == "":
        return True
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return (
        name not in (".", "..")
        and not any(sep in name for sep in seps)
        and "\0" not in name
        and len(os.fsencode(name)) <= 255
    )


def arg(default, help: str, choices=None, aliases=(), **kw):
    """A dataclass field carrying its CLI help text, optional choices and alias flags (``("--num-envs",)``)."""
    return field(default=default, metadata={"help": help, "choices": choices, "aliases": tuple(aliases), **kw})


def default(value, note: str = ""):
    """A game config's own default for a field that ``TrainConfig`` declares.

    Help, choices and aliases are inherited (one text per flag, so they cannot drift);
    ``note`` is appended to the help, e.g. where the default comes from.
    """
    return field(default=value, metadata={"note": note})


def field_meta(cls, name: str) -> dict:
    """The CLI metadata of field ``name`` of config class ``cls``: help, choices and aliases from the
    class that declared the field with ``arg``, a subclass's ``default(note=...)`` appended to the help."""
    meta, notes = {}, []
    for klass in reversed(cls.__mro__):
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is None or f.name not in vars(klass).get("__annotations__", {}):
            continue
        if "help" in f.metadata:
            meta, notes = dict(f.metadata), []
        if f.metadata.get("note"):
            notes.append(f.metadata["note"])
    if notes:
        meta["help"] = " ".join([meta.get("help", ""), *(f"({n})" for n in notes)]).strip()
    return meta


def need(ok: bool, flag: str, value, accepted: str) -> None:
    if not ok:
        raise ValueError(f"--{flag} {value!r} is invalid: expected {accepted}")


def _flag(name: str) -> str:
    return name.replace("_", "-")


@dataclass(frozen=True)
class Recipe:
    """A named set of defaults for a game's flags (``--recipe NAME``): ``values`` maps field names to
    values; flags typed on the command line still win. ``why`` says what the recipe is for and where
    its choices come from; ``--help`` prints both, generated from this one object."""

    why: str
    values: dict

    def describe(self) -> str:
        """The recipe as the flags it stands for: ``--world 1 --stage 1 ... --stop-when-solved``."""
        return " ".join(
            (f"--{_flag(k)}" if v else f"--no-{_flag(k)}") if isinstance(v, bool) else f"--{_flag(k)} {v}"
            for k, v in self.values.items()
        )


@dataclass
class RunConfig:
    """What every training loop needs: seed, device, the run's folders, a checkpoint to resume.

    ``TrainConfig`` (PPO) and ``common.dqn_config.DQNConfig`` subclass it; their game configs
    subclass those and change defaults only (``default``). ``validate`` checks the fields named
    in ``POSITIVE`` and ``NON_NEGATIVE``, that every float is finite and every value with
    choices is one of them; a subclass adds its own checks after ``super().validate()``.
    """

    seed: int = arg(
        0, "random seed (network init, environments, sampling); with the same seed a CPU run repeats exactly"
    )
    device: str = arg("cpu", "where networks run: cpu, or gpu (needs paddlepaddle-gpu)", choices=("cpu", "gpu"))
    log_path: str = arg(
        "runs",
        "parent folder of run folders; each run writes config.json, VisualDL logs, metrics.jsonl, "
        "videos and checkpoints into log_path/run_name",
    )
    run_name: str = arg("", "name of this run's folder (default: game, settings, seed and time)")
    saved_path: str = arg("", "where checkpoints go (default: <run folder>/models)")
    resume: str = arg(
        "",
        "checkpoint (.pdparams) to continue from: networks, optimizers, normalizers, counters and random "
        "state; the run continues its counters",
    )

    POSITIVE = ()  # names of the fields that must be > 0 (class attributes, not fields)
    NON_NEGATIVE = ()  # ... >= 0

    def validate(self) -> None:
        """Raise ValueError naming the flag and what is accepted."""
        need(
            type(self.seed) is int and 0 <= self.seed <= MAX_SEED, "seed", self.seed, f"an integer from 0 to {MAX_SEED}"
        )
        need(plain_name(self.run_name), "run-name", self.run_name, PLAIN_NAME)
        for f in dataclasses.fields(self):  # inf passes every range check (and NaN fails them all)
            v = getattr(self, f.name)
            if isinstance(v, float):
                need(math.isfinite(v), _flag(f.name), v, "a finite number")
        for name in self.POSITIVE:
            need(getattr(self, name) > 0, _flag(name), getattr(self, name), "a positive integer")
        for name in self.NON_NEGATIVE:
            need(getattr(self, name) >= 0, _flag(name), getattr(self, name), "an integer >= 0")
        for f in dataclasses.fields(self):
            choices = field_meta(type(self), f.name).get("choices")
            if choices:
                v = getattr(self, f.name)
                need(v in choices, _flag(f.name), v, f"one of {', '.join(map(str, choices))}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


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
        "empty: the defaults shown. The recipes and their settings are listed at the end of --help",
    )
    num_threads: int = arg(
        0,
        "CPU threads for the networks: each large enough convolution batch runs as "
        "this many shards, one thread each (on oneDNN's kernels when Paddle ships them), "
        "and the intrinsic module's update step runs beside the PPO step "
        "(0: os.cpu_count(); 1: neither). See docs/performance.md",
    )
    inference: str = arg(
        "native",
        "what runs the policy's forward passes during collection on CPU: native (the "
        "same network on oneDNN primitives + numpy, weights copied after every update, "
        "no Paddle dispatch: outputs equal within ~1e-6, ~1.5x faster at batch 4; networks "
        "with a compute(x, run) method, else dygraph), onednn (Paddle Inference + "
        "oneDNN, for batches of 32 or more; no faster than dygraph now, kept for "
        "comparison), onednn-bf16 (the same in bfloat16 on "
        "AVX512-BF16/AMX CPUs: outputs within ~1e-3; opt-in), dygraph (the training "
        "network; always on GPU). See docs/performance.md",
        choices=("native", "onednn", "onednn-bf16", "dygraph"),
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
    video_interval: int = arg(10, "record the evaluation episode to mp4 every this many updates (0: never)")
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
        "with deaths and flags, Montezuma the map of the rooms reached, MiniGrid the cells visited; logged "
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
        "HOST:PORT: a head node); empty: start a local Ray instance for this run",
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
    intrinsic: str = arg("rnd", "intrinsic-reward module", choices=("none", "rnd", "snd-v", "snd-std", "snd-vic"))
    int_coef: float = arg(1.0, "weight of the intrinsic advantage (0 keeps the module training but unused)")
    ext_coef: float = arg(2.0, "weight of the extrinsic advantage")
    int_gamma: float = arg(0.99, "discount of the (non-episodic) intrinsic reward stream")
    update_proportion: float = arg(0.25, "share of each minibatch the predictor is trained on")
    snd_max_pairs: int = arg(512, "SND-STD: most consecutive pairs per target step (its scores grow as pairs^2)")
    target_proportion: float = arg(
        1.0,
        "share of each minibatch the SND target is trained on (1: all of it, as "
        "the SND authors' code); RND's target is frozen and ignores it",
    )
    intrinsic_lr: float = arg(0.0, "learning rate of the intrinsic predictor (0: same as --lr)")
    target_lr: float = arg(
        0.0,
        "learning rate of the SND target network (0: same as the predictor's); RND's target is frozen and ignores it",
    )
    int_first_visit: bool = arg(
        False,
        "pay the intrinsic reward only for the first visit of an observation within "
        "an episode (BeBold/NovelD's episodic restriction): stops a curious agent from "
        "farming novelty by cycling between a few observations. See docs/exploration.md",
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
    NON_NEGATIVE = (
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

    def validate(self) -> None:
        """Raise ValueError naming the flag and what is accepted."""
        super().validate()
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
            need(0.0 <= getattr(self, name) <= 1.0, _flag(name), getattr(self, name), "a value in [0, 1]")
        need(0.0 < self.update_proportion <= 1.0, "update-proportion", self.update_proportion, "a value in (0, 1]")
        need(0.0 < self.target_proportion <= 1.0, "target-proportion", self.target_proportion, "a value in (0, 1]")
        need(self.epsilon > 0, "epsilon", self.epsilon, "a positive clip range")
        need(self.max_grad_norm > 0, "max-grad-norm", self.max_grad_norm, "a positive norm")
        need(
            self.beta >= 0 and self.int_coef >= 0 and self.ext_coef >= 0,
            "beta/--int-coef/--ext-coef",
            (self.beta, self.int_coef, self.ext_coef),
            "non-negative coefficients",
        )
        need(
            self.rollout_size % self.batch_size == 0 and self.minibatch_size > 0,
            "batch-size",
            self.batch_size,
            f"a divisor of num_local_steps x num_processes = {self.rollout_size}",
        )


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each flag; the description and the recipes' epilog keep their line breaks."""


def _field_type(cls, f):
    hints = typing.get_type_hints(cls)
    return hints[f.name]


def build_parser(cls, description: str = "") -> argparse.ArgumentParser:
    """argparse parser with one ``--kebab-case`` flag per field of ``cls``."""
    recipes = getattr(cls, "RECIPES", {})
    epilog = "recipes (--recipe NAME):\n" + "\n".join(
        textwrap.fill(f"{name}: {r.why}", 100, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
        + "\n"
        + textwrap.fill(
            f"sets {r.describe()}", 100, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False
        )
        for name, r in recipes.items()
    )
    parser = argparse.ArgumentParser(
        description=description or cls.__doc__,
        formatter_class=_HelpFormatter,
        epilog=epilog if recipes else None,
    )
    for f in dataclasses.fields(cls):
        meta = field_meta(cls, f.name)
        flags = ["--" + f.name.replace("_", "-"), *meta.get("aliases", ())]
        typ = _field_type(cls, f)
        help_text = meta.get("help", "")
        if meta.get("aliases"):
            help_text += f" (alias: {', '.join(meta['aliases'])})"
        kw = dict(default=f.default, help=help_text, dest=f.name)
        if f.name == "recipe" and recipes:
            kw["choices"] = tuple(recipes)
        if typ is bool:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **kw)
        else:
            if meta.get("choices"):
                kw["choices"] = meta["choices"]
            parser.add_argument(*flags, type=typ, **kw)
    return parser


def parse_config(cls, argv=None, description: str = ""):
    """Parse ``argv`` into a validated ``cls`` instance; bad values exit with a clear message
    that names the flag as the user typed it (an alias included)."""
    parser = build_parser(cls, description)
    argv = sys.argv[1:] if argv is None else list(argv)
    # a recipe's values become the defaults, so the flags typed still win (an unknown name: refused below)
    recipe = getattr(parser.parse_known_args(argv)[0], "recipe", "")
    if recipe in getattr(cls, "RECIPES", {}):
        parser.set_defaults(**cls.RECIPES[recipe].values)
    ns = parser.parse_args(argv)
    cfg = cls(**vars(ns))
    try:
        cfg.validate()
    except ValueError as e:
        msg = str(e)
        for f in dataclasses.fields(cls):
            primary = "--" + f.name.replace("_", "-")
            for alias in field_meta(cls, f.name).get("aliases", ()):
                typed = any(a == alias or a.startswith(alias + "=") for a in argv)
                if typed and msg.startswith(primary + " "):
                    msg = alias + msg[len(primary) :]
        parser.error(msg)
    return cfg
