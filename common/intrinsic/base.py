"""The interface every intrinsic-reward module implements.

The trainer only talks to this interface, so RND and the SND variants are
interchangeable by a config string (see ``common.intrinsic.make_intrinsic``).

Conventions
-----------
* Observations arrive as the rollout stores them: ``uint8[B, C, H, W]`` (the
  game's full frame stack). A module picks the channels it looks at with
  ``input_channels`` (RND on Montezuma: only the latest frame) and normalizes
  them itself (running mean/std, clipped to [-5, 5]); the normalizer is part of
  its ``state_dict``.
* ``rollout_reward`` returns the *raw* novelty of every transition of a rollout
  (no grad); its default scores s_{t+1} alone with ``reward``, which is all RND and
  SND need. Modules that need s_t (NovelD), s_t and a_t (ICM) or remember the episode
  (E3B, E3B x RND) override it. Scaling by the running std of the discounted intrinsic return
  (and the optional first-visit gate) is the trainer's job, because it is the same for
  every module.
* ``update`` receives one PPO minibatch (see ``common.ppo.buffer.RolloutBuffer``):
  ``obs`` uint8[B,C,H,W] = s_t, ``next_obs`` uint8[B,C,H,W] = s_{t+1},
  ``dones`` float32[B] = 1 where the transition ended an episode (then
  ``next_obs`` is the episode's true terminal frame, the one ``reward`` scored, and
  the pair (s_t, s_{t+1}) is consecutive too; SND's pair objectives still leave
  these transitions out: docs/sources.md, section 4). It trains the module's own networks with its
  own optimizers and returns a flat ``dict[str, float]`` of losses whose keys
  become VisualDL tags under ``losses/``.
"""

from __future__ import annotations

import numpy as np

from common.intrinsic.registry import register
from common.run.distributed import NO_SYNC


class IntrinsicModule:
    """Base class: computes a novelty reward and trains itself on rollout data.

    A subclass becomes a ``--intrinsic`` choice with ``@register("name")``
    (``common.intrinsic.registry``) and builds itself for a run with ``from_run``. What data-parallel
    training needs of it is declared here: its random stream ``rng`` (each rank gets its own), its
    ``grad_sync`` (gradients averaged over the ranks), its ``normalizers()`` (statistics pooled) and
    its ``networks()`` (every rank starts from rank 0's weights)."""

    #: registry name, e.g. "rnd", "snd-v" (set by ``register``)
    name: str = "base"
    #: one line for ``--help``
    summary: str = ""
    #: True: the reward is paid only for the first visit of s_{t+1} within its episode whatever
    #: ``--int-first-visit`` says (NovelD, whose definition includes that gate)
    first_visit_gate: bool = False
    #: True: ``--int-reward snd`` (the SND authors' convention) is defined for it: their code has it
    snd_convention: bool = False
    #: True: ``reward(obs)`` scores single observations; False: only transitions (``rollout_reward``)
    scores_states: bool = True
    #: the module's own random stream (subset sampling, augmentations), or None
    rng: np.random.Generator | None = None
    #: averages gradients over data-parallel ranks before each optimizer step (``common.run.distributed``)
    grad_sync = NO_SYNC

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels: int, settings) -> IntrinsicModule:
        """The module for a run: ``make_networks(in_channels) -> (target, predictor)`` is the game's factory
        (``<game>/rnd_model.py``), ``obs_shape`` the stored observation's (C, H, W), ``input_channels``
        how many of its channels the module sees, ``settings`` a ``registry.ModuleSettings``."""
        raise NotImplementedError

    def normalizers(self) -> list:
        """The running statistics of its input (``RunningMeanStd``) that data-parallel ranks pool."""
        return []

    def use_authors_scale(self, value_max=255.0) -> None:
        """Read inputs and measure the error as the SND authors' code does (``--int-reward snd``): the
        distillation modules' (``DistillationModule``); nothing to do for a module with no input."""

    def observe(self, obs: np.ndarray) -> None:
        """Update the observation normalizer with ``uint8[B, C, H, W]`` frames."""
        raise NotImplementedError

    def reward(self, obs: np.ndarray) -> np.ndarray:
        """Raw novelty of ``uint8[B, C, H, W]`` observations -> ``float32[B]``."""
        raise NotImplementedError

    def rollout_reward(
        self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, dones: np.ndarray
    ) -> np.ndarray:
        """Raw novelty ``float32[T, N]`` of a rollout's transitions s_t -a_t-> s_{t+1}.

        Args:
            obs: uint8[T+1, N, C, H, W]: ``obs[t]`` is s_t; ``obs[t+1]`` is what the env showed
                after step t, the next episode's first frame where ``dones[t]``.
            next_obs: uint8[T, N, C, H, W]: s_{t+1}, the true terminal frame where ``dones[t]``.
            actions: int64[T, N]; dones: float32[T, N], 1 where step t ended an episode.

        Called once per rollout, before ``observe`` sees its frames; the rollouts of a run
        continue each other (``obs[0]`` is the previous rollout's ``obs[T]``), so an episodic
        module keeps each env's episode across calls until ``reset_episodes``.
        Default: ``reward`` of every s_{t+1}.
        """
        T, N = dones.shape
        return self.reward(next_obs.reshape(T * N, *next_obs.shape[2:])).reshape(T, N)

    def reset_episodes(self) -> None:
        """Forget every env's episode (an episodic module's memory); nothing to forget by default.

        The memory is never checkpointed (E3B's is a float64 D x D matrix per env, 268 MB at Montezuma's
        128 envs): a resumed run starts it empty, so where the episodes are continued a continued
        episode's revisits pay once more (docs/usage.md). The first-visit gate's memory is kept."""

    def update(self, batch: dict) -> dict:
        """One optimisation step on a minibatch; returns ``{loss_name: float}``."""
        raise NotImplementedError

    def features(self, obs: np.ndarray) -> np.ndarray:
        """Target-network features ``float32[B, D]`` (for the embedding view)."""
        raise NotImplementedError

    def networks(self) -> list:
        """The module's ``nn.Layer``s (data-parallel ranks start from rank 0's weights of these)."""
        return []

    def state_dict(self) -> dict:
        raise NotImplementedError

    def set_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def check_state(self, state: dict) -> None:
        """Refuse ``state``, a checkpoint's intrinsic entry, unless this kind of module saved it (its ``name``)."""
        if state.get("name") != self.name:
            raise ValueError(f"checkpoint holds intrinsic module {state.get('name')!r}, this run uses {self.name!r}")


@register("none")
class NoIntrinsic(IntrinsicModule):
    """``--intrinsic none``: plain PPO. Rewards are zero and nothing is trained."""

    summary = "plain PPO"
    snd_convention = True  # the SND authors' baseline

    @classmethod
    def from_run(cls, make_networks, obs_shape, input_channels, settings):
        return cls()

    def observe(self, obs):
        pass

    def reward(self, obs):
        return np.zeros(len(obs), dtype=np.float32)

    def update(self, batch):
        return {}

    def features(self, obs):
        return np.zeros((len(obs), 0), dtype=np.float32)

    def state_dict(self):
        return {}

    def set_state_dict(self, state):
        pass


def episode_rewards(module: IntrinsicModule, stacks: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The intrinsic reward float32[L] of each step of one played episode under ``module``.

    ``stacks``: uint8[L+1, C, H, W], the episode's observations s_0 .. s_L; ``actions``: int[L].
    The episode is scored as a rollout of one env with a fresh episodic memory (the module's
    memory of its training envs, if any, is forgotten: use a copy of the trainer's module)."""
    steps = len(stacks) - 1
    if steps <= 0:
        return np.zeros(0, np.float32)
    actions = np.asarray(actions, dtype=np.int64).reshape(steps, 1)
    obs = stacks[:, None]
    module.reset_episodes()
    rewards = module.rollout_reward(obs, obs[1:], actions, np.zeros((steps, 1), np.float32))
    module.reset_episodes()
    return np.asarray(rewards, np.float32).reshape(steps)


# ------------------------------------------------------------------ target + predictor checkpoints
def distillation_state(module, **optimizers) -> dict:
    """The checkpoint entry of a module with a ``target`` and a ``predictor`` network (RND, the SND
    variants, the DQN's SND-V): its name, both networks' weights, ``optimizers`` (name: state) and
    its random stream. ``load_distillation_state`` reads the shared part back."""
    return {
        "name": module.name,
        "target": module.target.state_dict(),
        "predictor": module.predictor.state_dict(),
        **optimizers,
        "rng": module.rng.bit_generator.state,
    }


def load_distillation_state(module, state: dict) -> None:
    """Check that ``state`` is of ``module``'s kind, then load both networks and the random stream; the
    caller restores the rest (optimizers, normalizers)."""
    from common.run.checkpoint import load_weights

    module.check_state(state)
    load_weights(module.target, state["target"], "intrinsic/target")
    load_weights(module.predictor, state["predictor"], "intrinsic/predictor")
    module.rng.bit_generator.state = state["rng"]
