"""Curiosity methods as plug-ins: ``@register("name")`` on an ``IntrinsicModule`` subclass is all it takes.

A registered class builds itself for a run with its ``from_run(make_networks, obs_shape,
input_channels, settings)`` classmethod (``settings``: ``ModuleSettings``, what the run's flags say);
``--intrinsic`` offers every registered name, and ``make_intrinsic`` builds by name. A class
registers when its file is imported; on the first question asked of the registry every file of
this package is imported (``BUILTIN`` first, in the order ``--help`` lists them, then any other in
name order; Paddle comes with them), so a new file under ``common/intrinsic/`` needs no edit here.
A module defined anywhere else, a test's toy one for instance, registers the same way once it is
imported (tests/test_intrinsic_contract.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

#: the modules that define the built-in methods, in --help's order (imported on demand: they import Paddle)
BUILTIN = (
    "common.intrinsic.base",
    "common.intrinsic.rnd",
    "common.intrinsic.snd",
    "common.intrinsic.noveld",
    "common.intrinsic.icm",
    "common.intrinsic.e3b",
    "common.intrinsic.e3b_rnd",
    "common.intrinsic.counts",
    "common.intrinsic.episodic_count",
)
_REGISTRY: dict[str, type] = {}


@dataclasses.dataclass(frozen=True)
class ModuleSettings:
    """What a run tells its intrinsic module: the optimizers' settings, the sampling seed, the game's
    action count and largest observation value, and the SND targets' extra settings."""

    lr: float
    update_proportion: float
    max_grad_norm: float
    seed: int = 0
    target_lr: float | None = None  # the SND targets' learning rate (None: ``lr``)
    max_pairs: int = 512  # SND-STD: the most consecutive pairs per target step
    target_proportion: float = 1.0  # the share of each minibatch an SND target trains on
    value_max: object = 255.0  # the largest raw observation value (a number or one per channel)
    num_actions: int | None = None  # the game's action count (inverse-dynamics modules need it)
    distil: str = "next"  # which state an SND predictor learns: "next" (s_t+1) or "current" (s_t, the authors')


def register(name: str):
    """Class decorator: make ``cls`` the intrinsic module ``--intrinsic name`` (sets ``cls.name``)."""

    def add(cls):
        if _REGISTRY.get(name, cls) is not cls:
            twice = f"{_REGISTRY[name].__name__} and {cls.__name__}"
            raise ValueError(f"intrinsic module {name!r} is registered twice ({twice})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def registered() -> dict[str, type]:
    """``{name: class}`` of every registered module, the built-in ones first ("none" leading)."""
    for module in BUILTIN + _package_modules():
        importlib.import_module(module)
    return dict(_REGISTRY)


def _package_modules() -> tuple[str, ...]:
    """Every other file of this package, by name: where a new method's file is found."""
    package = importlib.import_module(__package__)
    found = (f"{__package__}.{m.name}" for m in pkgutil.iter_modules(package.__path__))
    return tuple(sorted(m for m in found if m not in BUILTIN))


def names() -> tuple[str, ...]:
    """The registered names: what ``--intrinsic`` accepts."""
    return tuple(registered())


def described() -> str:
    """Every registered name with its one-line ``summary``: ``--intrinsic``'s help."""
    return ", ".join(f"{name} ({cls.summary})" for name, cls in registered().items())
