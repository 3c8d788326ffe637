"""Intrinsic-reward modules, chosen by name (``--intrinsic``): plug-ins registered with
``@register("name")`` (``common.intrinsic.registry``).

``make_intrinsic(name, ...)`` builds one; ``intrinsic_for_run(spec, cfg, obs_shape)`` builds the
one a run's config asks for (the trainer's, its evaluation's, the play scripts'). Every module
implements ``common.intrinsic.base.IntrinsicModule``. This package imports no Paddle until a module
is asked for.
"""

from __future__ import annotations

import functools

from common.intrinsic.registry import ModuleSettings, described, names, register, registered

__all__ = ["ModuleSettings", "described", "intrinsic_for_run", "make_intrinsic", "names", "register", "registered"]


#: ``--snd-network authors``: the methods it is for, with their predictor's initial gain in the authors'
#: code (``STDModelAtari``: 0.5; ``VICRegModelAtari``: sqrt(2))
AUTHORS_PREDICTOR_GAIN = {"snd-std": 0.5, "snd-vic": 2**0.5}


def snd_convention_names() -> tuple[str, ...]:
    """The modules ``--int-reward snd`` (the SND authors' convention) is defined for: those of their code."""
    return tuple(name for name, cls in registered().items() if cls.snd_convention)


def make_intrinsic(
    name: str,
    make_networks,
    obs_shape,
    input_channels: int,
    *,
    lr: float,
    update_proportion: float,
    max_grad_norm: float,
    seed: int,
    target_lr: float | None = None,
    max_pairs: int = 512,
    target_proportion: float = 1.0,
    value_max=255.0,
    num_actions: int | None = None,
    authors_scale: bool = False,
    distil: str = "next",
):
    """Build the intrinsic module ``name`` (a registered one) with its class's ``from_run``.

    ``make_networks(in_channels) -> (target, predictor)`` is the game's factory
    (``mario/rnd_model.py``, ``montezuma/rnd_model.py``); the other arguments are the run's
    ``registry.ModuleSettings``. ``authors_scale``: read inputs and measure the error as the SND
    authors' code does (``--int-reward snd``; the modules whose ``snd_convention`` is set).
    """
    modules = registered()
    if name not in modules:
        raise ValueError(f"unknown intrinsic module {name!r}; choose one of {', '.join(modules)}")
    cls = modules[name]
    if authors_scale and not cls.snd_convention:
        raise ValueError(f"the SND authors' input and error scale is for {snd_convention_names()}, not {name!r}")
    settings = ModuleSettings(
        lr=lr,
        update_proportion=update_proportion,
        max_grad_norm=max_grad_norm,
        seed=seed,
        target_lr=target_lr,
        max_pairs=max_pairs,
        target_proportion=target_proportion,
        value_max=value_max,
        num_actions=num_actions,
        distil=distil,
    )
    module = cls.from_run(make_networks, obs_shape, input_channels, settings)
    if authors_scale:
        module.use_authors_scale(value_max)
    return module


def intrinsic_for_run(spec, cfg, obs_shape):
    """The intrinsic module of a run: ``cfg.intrinsic`` (a ``TrainConfig``) with the game's networks
    (``spec``, a ``GameSpec``) for observations of ``obs_shape``; untrained until a state is loaded."""
    from common.run.errors import UsageError

    if cfg.intrinsic != "none" and not 1 <= cfg.intrinsic_frames <= obs_shape[0]:
        raise UsageError(
            f"--intrinsic-frames {cfg.intrinsic_frames} is invalid: expected 1 to {obs_shape[0]} "
            f"(this game's observations stack {obs_shape[0]})"
        )
    authors = cfg.snd_network == "authors"  # the SND authors' pair, and their predictor learns s_t
    if authors:
        from common.intrinsic.networks import authors_snd_networks

        gain = AUTHORS_PREDICTOR_GAIN[cfg.intrinsic]
        networks = functools.partial(authors_snd_networks, predictor_gain=gain, input_hw=obs_shape[-1])
    else:
        networks = functools.partial(spec.make_intrinsic_networks, cfg)
    return make_intrinsic(
        cfg.intrinsic,
        networks,
        obs_shape,
        cfg.intrinsic_frames,
        lr=cfg.intrinsic_lr or cfg.lr,
        update_proportion=cfg.update_proportion,
        max_grad_norm=cfg.max_grad_norm,
        seed=cfg.seed + 1,
        max_pairs=cfg.snd_max_pairs,
        target_lr=cfg.target_lr or cfg.intrinsic_lr or cfg.lr,
        target_proportion=cfg.target_proportion,
        value_max=spec.obs_value_max(cfg) if callable(spec.obs_value_max) else spec.obs_value_max,
        num_actions=spec.spaces(cfg)[1],
        authors_scale=cfg.int_reward == "snd",
        distil="current" if authors else "next",
    )
