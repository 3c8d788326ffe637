"""PPO's side of data-parallel training: what makes a ``Trainer`` one replica of ``common.run.distributed``.

``join(trainer, world)`` gives the trainer and its intrinsic module their own random streams (one
per rank), gradient averaging in their update steps, running statistics pooled over the ranks
(the module's ``normalizers()`` and the intrinsic return's), and rank 0's parameters to start
from. ``common.run.distributed.World`` offers those tools and knows nothing of PPO; nothing
happens in one process.
"""

from __future__ import annotations


def join(trainer, world) -> None:
    """Make ``trainer`` (a ``common.ppo.trainer.Trainer``) one of ``world``'s data-parallel replicas."""
    if not world.distributed:
        return
    trainer.rng = world.own_stream(trainer.rng)
    trainer.ppo.grad_sync = world.gradient_sync("policy")
    module = trainer.intrinsic  # what it needs is declared by common.intrinsic.base.IntrinsicModule
    if module.rng is not None:
        module.rng = world.own_stream(module.rng)
    module.grad_sync = world.gradient_sync("intrinsic")
    for stats in [*module.normalizers(), trainer.int_scale.rms]:
        stats.sync = world.pooled_moments
    world.broadcast_layers(trainer.policy, *module.networks())
