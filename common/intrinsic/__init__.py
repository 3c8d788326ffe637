"""Intrinsic-reward modules, chosen by name (``--intrinsic``).

``make_intrinsic(name, ...)`` builds one; ``intrinsic_for_run(spec, cfg, obs_shape)`` builds the
one a run's config asks for (the trainer's, its evaluation's, the play scripts'). Every module
implements ``common.intrinsic.base.IntrinsicModule``.
"""

from __future__ import annotations

from common.intrinsic.base import IntrinsicModule, NoIntrinsic

INTRINSIC_NAMES = ("none", "rnd", "snd-v", "snd-std", "snd-vic", "noveld", "icm", "e3b", "count")
#: the modules the SND authors' reward convention (``--int-reward snd``) is defined for: those of their code
SND_CONVENTION_MODULES = ("none", "rnd", "snd-v", "snd-std", "snd-vic")
#: the modules whose features are learned by inverse dynamics: they need the game's action count
ACTION_MODULES = ("icm", "e3b")


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
) -> IntrinsicModule:
    """Build the intrinsic module ``name``.

    ``make_networks(in_channels) -> (target, predictor)`` is the game's factory
    (``mario/rnd_model.py``, ``montezuma/rnd_model.py``). ``target_lr`` is the
    learning rate of the SND target (ignored by RND, whose target is frozen);
    ``max_pairs`` caps SND-STD's consecutive pairs per target step (ignored by the others);
    ``target_proportion`` is the share of each minibatch the SND target trains on;
    ``value_max`` is the largest raw observation value (one per channel or one number),
    which sizes SND-V's noise; ``num_actions`` is the game's action count (ICM and E3B predict the
    action; their encoder is the game's target network, freshly initialised and trained);
    ``authors_scale``: read inputs and measure the error as the SND authors' code does
    (``--int-reward snd``; RND and the SND variants only, ``DistillationModule.use_authors_scale``).
    """
    if name not in INTRINSIC_NAMES:
        raise ValueError(f"unknown intrinsic module {name!r}; choose one of {', '.join(INTRINSIC_NAMES)}")
    if authors_scale and name not in SND_CONVENTION_MODULES:
        raise ValueError(
            f"the SND authors' input and error scale is defined for {SND_CONVENTION_MODULES}, not {name!r}"
        )
    if name == "none":
        return NoIntrinsic()
    if name == "count":  # no networks (docs/intrinsic_modules.md: the worked example)
        from common.intrinsic.counts import HashCount

        return HashCount(obs_shape, input_channels, seed=seed)
    target, predictor = make_networks(input_channels)
    common = dict(
        obs_shape=obs_shape,
        input_channels=input_channels,
        lr=lr,
        update_proportion=update_proportion,
        max_grad_norm=max_grad_norm,
        seed=seed,
    )
    if name == "rnd":
        from common.intrinsic.rnd import RND

        module = RND(target, predictor, **common)
        if authors_scale:
            module.use_authors_scale(value_max)
        return module
    if name == "noveld":
        from common.intrinsic.noveld import NovelD

        return NovelD(target, predictor, **common)
    if name in ACTION_MODULES:
        if num_actions is None:
            raise ValueError(f"--intrinsic {name} predicts actions: make_intrinsic needs num_actions")
        from common.intrinsic.e3b import E3B
        from common.intrinsic.icm import ICM

        return {"icm": ICM, "e3b": E3B}[name](target, num_actions=num_actions, **common)
    from common.intrinsic.snd import SND_VARIANTS  # noqa: E402  (Paddle-heavy, imported on demand)

    if name == "snd-std":
        common["max_pairs"] = max_pairs
    if name == "snd-v":
        common["value_max"] = value_max
    module = SND_VARIANTS[name](
        target,
        predictor,
        target_lr=lr if target_lr is None else target_lr,
        target_proportion=target_proportion,
        **common,
    )
    if authors_scale:
        module.use_authors_scale(value_max)
    return module


def intrinsic_for_run(spec, cfg, obs_shape) -> IntrinsicModule:
    """The intrinsic module of a run: ``cfg.intrinsic`` (a ``TrainConfig``) with the game's networks
    (``spec``, a ``GameSpec``) for observations of ``obs_shape``; untrained until a state is loaded."""
    from common.run.errors import UsageError

    if cfg.intrinsic != "none" and not 1 <= cfg.intrinsic_frames <= obs_shape[0]:
        raise UsageError(
            f"--intrinsic-frames {cfg.intrinsic_frames} is invalid: expected 1 to {obs_shape[0]} "
            f"(this game's observations stack {obs_shape[0]})"
        )
    return make_intrinsic(
        cfg.intrinsic,
        lambda c: spec.make_intrinsic_networks(cfg, c),
        obs_shape,
        cfg.intrinsic_frames,
        lr=cfg.intrinsic_lr or cfg.lr,
        update_proportion=cfg.update_proportion,
        max_grad_norm=cfg.max_grad_norm,
        seed=cfg.seed + 1,
        max_pairs=cfg.snd_max_pairs,
        target_lr=cfg.target_lr or cfg.intrinsic_lr or cfg.lr,
        target_proportion=cfg.target_proportion,
        value_max=spec.obs_value_max,
        num_actions=spec.spaces(cfg)[1],
        authors_scale=cfg.int_reward == "snd",
    )
