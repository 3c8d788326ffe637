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

from common.run.errors import UsageError
from common.run.files import write_atomic


class UnusablePathError(UsageError):
    """A folder chosen by a flag (``--log-path``, ``--saved-path``) cannot be created or written."""


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


def arg(default, help, choices=None, aliases=(), **kw):
    """A dataclass field carrying its CLI help text, optional choices and alias flags (``("--num-envs",)``).

    ``help`` and ``choices`` may be functions of no argument, asked when a parser is built or a value
    checked (``--intrinsic``: the registered modules, known once their modules are imported)."""
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
            for key in ("help", "choices"):  # asked now: a registry fills up as modules are imported
                if callable(meta.get(key)):
                    meta[key] = meta[key]()
        if f.metadata.get("note"):
            notes.append(f.metadata["note"])
    if notes:
        meta["help"] = " ".join([meta.get("help", ""), *(f"({n})" for n in notes)]).strip()
    return meta


def need(ok: bool, flag: str, value, accepted: str) -> None:
    if not ok:
        raise ValueError(f"--{flag} {value!r} is invalid: expected {accepted}")


def flag_name(name: str) -> str:
    return name.replace("_", "-")


def _as_flags(values: dict) -> str:
    """``{"world": 1, "stop_when_solved": True}`` -> ``--world 1 --stop-when-solved``."""
    return " ".join(
        (f"--{flag_name(k)}" if v else f"--no-{flag_name(k)}") if isinstance(v, bool) else f"--{flag_name(k)} {v}"
        for k, v in values.items()
    )


@dataclass(frozen=True)
class Recipe:
    """A named set of defaults for a game's flags (``--recipe NAME``): ``values`` maps field names to
    values; flags typed on the command line still win. ``why`` says what the recipe is for and where
    its choices come from; ``--help`` prints both, generated from this one object.

    ``cases`` holds values that depend on one other field, ``(field, {its value: {name: value}})``:
    the SND authors' settings differ per method (``--intrinsic``), e.g. ``("intrinsic", {"none":
    {"gamma": 0.99}})``. The field is read after the recipe's ``values`` and the typed flags, and
    the matching case's values become defaults too (typed flags still win)."""

    why: str
    values: dict
    cases: tuple = ()

    def describe(self) -> str:
        """The recipe as the flags it stands for: ``--world 1 --stage 1 ... --stop-when-solved``, then each case."""
        text = _as_flags(self.values)
        if self.cases:
            field_, by_value = self.cases
            text += "".join(f"; with --{flag_name(field_)} {v}: {_as_flags(vals)}" for v, vals in by_value.items())
        return text

    def case_values(self, chosen) -> dict:
        """The values of the case for ``chosen`` (the value of the case field), {} if none matches."""
        return dict(self.cases[1].get(chosen, {})) if self.cases else {}


@dataclass
class RunConfig:
    """What every training loop needs: seed, device, the run's folders, a checkpoint to resume.

    ``TrainConfig`` (PPO) and ``common.dqn.config.DQNConfig`` subclass it; their game configs
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
        "state (and in the PPO games the envs' episodes in progress); the run continues its counters",
    )

    POSITIVE = ()  # names of the fields that must be > 0 (class attributes, not fields)
    NON_NEGATIVE = ()  # ... >= 0
    #: the fields that say where or when a run writes, or how it computes, not what it learns: a resume may
    #: change them unremarked (tests/test_trainer.py and test_dqn.py: the same weights either way)
    HOW_NOT_WHAT = ("device", "log_path", "run_name", "saved_path", "resume", "save_interval", "max_nan_updates")

    def validate(self) -> None:
        """Raise ValueError naming the flag and what is accepted."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # a config read back from a file may hold anything
            want, v = hints.get(f.name), getattr(self, f.name)
            ok = {
                int: type(v) is int,
                float: type(v) in (int, float),
                bool: type(v) is bool,
                str: type(v) is str,
            }.get(want, True)
            need(ok, flag_name(f.name), v if type(v) in (int, float, bool) else str(v)[:40], f"a {want.__name__}")
        need(
            type(self.seed) is int and 0 <= self.seed <= MAX_SEED, "seed", self.seed, f"an integer from 0 to {MAX_SEED}"
        )
        need(plain_name(self.run_name), "run-name", self.run_name, PLAIN_NAME)
        need(self.log_path != "", "log-path", self.log_path, "a folder (empty is no folder; '.' is this one)")
        for f in dataclasses.fields(self):  # inf passes every range check (and NaN fails them all)
            v = getattr(self, f.name)
            if isinstance(v, float):
                need(math.isfinite(v), flag_name(f.name), v, "a finite number")
        for name in self.POSITIVE:
            need(getattr(self, name) > 0, flag_name(name), getattr(self, name), "a positive integer")
        for name in self.NON_NEGATIVE:
            need(getattr(self, name) >= 0, flag_name(name), getattr(self, name), "an integer >= 0")
        for f in dataclasses.fields(self):
            choices = field_meta(type(self), f.name).get("choices")
            if choices:
                v = getattr(self, f.name)
                need(v in choices, flag_name(f.name), v, f"one of {', '.join(map(str, choices))}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def changed_since(self, saved: dict) -> list[str]:
        """``"--flag old -> new"`` for each setting outside ``HOW_NOT_WHAT`` whose value differs from
        ``saved`` (the config a checkpoint holds); a setting that only one of them has is listed too, unless
        ``saved`` lacks it and this run keeps its default (a flag added since, at the behaviour it names)."""
        now = json.loads(json.dumps(self.to_dict()))  # tuples as the saved config's lists
        defaults = json.loads(json.dumps(type(self)().to_dict()))
        changes = []
        for name in sorted(set(now) | set(saved)):
            old, new = saved.get(name, "(none)"), now.get(name, "(none)")
            if name not in saved and name in defaults and new == defaults[name]:
                continue
            if name not in self.HOW_NOT_WHAT and old != new:
                changes.append(f"--{flag_name(name)} {old!r} -> {new!r}")
        return changes

    def to_json(self, path: str) -> None:
        """Write the config to ``path`` whole or not at all (a stop mid-write leaves the earlier file)."""
        write_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True))

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each flag, except an empty one (its help says what empty means, in words); the
    description and the recipes' epilog keep their line breaks."""

    def _get_help_string(self, action):
        if action.default == "":
            return action.help
        return super()._get_help_string(action)


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
        chosen = cls.RECIPES[recipe]
        parser.set_defaults(**chosen.values)
        if chosen.cases:  # the values that depend on another field, as typed or as the recipe set it
            parser.set_defaults(**chosen.case_values(getattr(parser.parse_known_args(argv)[0], chosen.cases[0])))
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
