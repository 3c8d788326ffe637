"""One rollout of the real Montezuma trainer, and the comparison of two rollouts (collection tests)."""

from __future__ import annotations

import numpy as np

KEYS = ("obs", "actions", "log_probs", "values_ext", "values_int", "rewards_ext", "dones")


def montezuma_rollout(tmp_path, run_name: str, on_trainer=None, **overrides) -> dict:
    """The buffer's arrays (``KEYS``) after one ``Trainer.collect`` from reset, with the subprocess
    vector env ``train()`` would build. ``on_trainer(tr)`` runs before collecting (to check or
    record the trainer's engine, pipeline groups, ...); ``overrides`` are MontezumaConfig fields."""
    from common.ppo.trainer import Trainer
    from montezuma.train import SPEC, MontezumaConfig

    fields = dict(
        num_processes=4,
        num_workers=2,
        num_local_steps=12,
        batch_size=2,
        num_epochs=1,
        num_global_steps=48,
        obs_norm_steps=1,
        eval_interval=0,
        video_interval=0,
        save_interval=0,
        histogram_interval=0,
        embedding_interval=0,
        log_path=str(tmp_path),
        run_name=run_name,
        seed=11,
    )
    fields.update(overrides)
    tr = Trainer(SPEC, MontezumaConfig(**fields))
    tr.envs = tr._make_envs()  # as train() does
    try:
        if on_trainer is not None:
            on_trainer(tr)
        tr.collect(tr.envs.reset())
        return {k: getattr(tr.buffer, k).copy() for k in KEYS}
    finally:
        tr.close()


def assert_same_rollout(a: dict, b: dict) -> None:
    """The same frames, actions, rewards and episode ends; log-probs and values equal within float32
    rounding (the policy ran on other batch sizes or another engine)."""
    for k in ("obs", "actions", "rewards_ext", "dones"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    for k in ("log_probs", "values_ext", "values_int"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)
