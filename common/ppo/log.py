"""What a PPO run logs after each update and each evaluation: ``RunLog``, on top of ``common.run.logger``.

``RolloutNotes`` keeps what the pictures and the embedding view take from a rollout's infos. The tag
names are ``common.run.logger``'s (one place for every tag of every trainer).
"""

from __future__ import annotations

import numpy as np

from common.run.logger import (
    ACTION_SHARE,
    ADV_EXT,
    ADV_INT,
    ADV_STD,
    CLIPPED_SHARE,
    COLLECT_SECONDS,
    EMBEDDING,
    EVAL_ALONG,
    EVAL_ALONG_DIR,
    EVAL_EXTRINSIC,
    EVAL_FRAMES,
    EVAL_INTRINSIC,
    EXPLORE,
    EXPLORE_DIR,
    FIRST_VISIT_SHARE,
    FORWARD_LOSS,
    HIST_ADVANTAGE,
    HIST_INT_REWARD,
    INT_RETURN_STD,
    INT_REWARD_MAX,
    INT_REWARD_MEAN,
    INT_REWARD_RAW,
    INT_REWARD_RAW_CV,
    NAN_UPDATES,
    STEPS_PER_SEC,
    TOTAL_LOSS,
    TRAINING_REWARD,
    UPDATE_SECONDS,
    WORKER_RESTARTS,
    Logger,
)


class RolloutNotes:
    """What the embedding view and the picture of where the agent has been take from a rollout's infos:
    ``labels`` {(t, env): the game's ``embedding_metadata``} and ``records`` [T][N] of its
    ``step_record``, each kept only when asked for (None otherwise)."""

    def __init__(self, spec, labels: bool = False, records: bool = False):
        self.spec = spec
        self.labels = {} if labels else None
        self.records = [] if records else None

    def add(self, t: int, infos: list) -> None:
        """The infos of step ``t`` (one per env)."""
        if self.labels is not None:
            for i, info in enumerate(infos):
                self.labels[(t, i)] = self.spec.embedding_metadata(info)
        if self.records is not None:
            self.records.append([self.spec.step_record(info) for info in infos])


class RunLog:
    """What a PPO run logs after each update and each evaluation, on top of a ``Logger``.

    Keeps the recent training episodes (progress line) and every place the run's episodes
    visited (``spec.visited``: Montezuma's rooms) with the update of its first visit and how
    many finished episodes reached it, which are checkpointed (``visited_state``). Draws the
    pictures (``common.pictures``): the greedy episode's intrinsic reward along the episode
    (``eval``) and the game's picture of where the agent has been (``picture``), each logged as
    an image and written with its values to the run folder.
    ``spec`` is the game's ``GameSpec`` (episode metrics, action names, visited places, pictures).
    """

    def __init__(self, logger: Logger, spec, cfg, num_actions: int):
        import collections

        self.lg, self.spec, self.cfg, self.num_actions = logger, spec, cfg, num_actions
        self.num_updates = cfg.num_updates  # the trainer's (with data-parallel ranks: all ranks' steps)
        self.recent = collections.deque(maxlen=20)  # metrics of recent finished training episodes
        self.visited: dict = {}  # place -> update of its first visit (None: unknown, an old checkpoint's)
        self.visit_counts: collections.Counter = collections.Counter()  # place -> finished episodes there
        self._restarts_reported = 0

    def visited_state(self) -> dict:
        """The checkpoint's part: ``{"visited": {place: first update}, "visit_counts": {place: episodes}}``."""
        return {"visited": dict(self.visited), "visit_counts": dict(self.visit_counts)}

    @staticmethod
    def check_visited(visited=(), visit_counts=None) -> None:
        """Raise ``ValueError`` naming the entry unless ``visited`` is a dict {place: first update (an int
        >= 0) or None} or a list of places, and ``visit_counts`` a dict {place: episodes, an int >= 0};
        a place is an int or a string."""

        def place(p) -> bool:
            return (type(p) is int and 0 <= p < 2**31) or (type(p) is str and len(p) <= 200)

        if isinstance(visited, dict):
            bad = [p for p, u in visited.items() if not place(p) or not (u is None or (type(u) is int and u >= 0))]
        elif isinstance(visited, (list, tuple)):
            bad = [p for p in visited if not place(p)]
        else:
            raise ValueError(f"entry 'visited' is a {type(visited).__name__}: expected a dict or a list of places")
        if bad:
            raise ValueError(f"entry 'visited' holds {str(bad[0])[:40]!r}: expected places (ints or names)")
        counts = visit_counts or {}
        if not isinstance(counts, dict) or any(
            not place(p) or not (type(n) is int and n >= 0) for p, n in counts.items()
        ):
            raise ValueError("entry 'visit_counts': expected a dict {place: episodes >= 0}")

    def load_visited(self, visited=(), visit_counts=None) -> None:
        """Restore ``visited_state``; a checkpoint from before first visits were kept holds a list of
        places: their first update is unknown (None) and their counts start at 0."""
        self.visited = dict(visited) if isinstance(visited, dict) else dict.fromkeys(visited)
        self.visit_counts.update(visit_counts or {})

    def update(
        self,
        update: int,
        step: int,
        rollout: dict,
        losses: dict | None,
        raw_int,
        *,
        gate_share=None,
        int_return_std: float = 0.0,
        nonfinite: int = 0,
        restart_log=(),
        seconds=(0.0, 0.0),
        episodes=(),
    ) -> list[str]:
        """Scalars of one update (the tutorial's tags at ``update``, the rest at ``step``) and its
        finished episodes; ``rollout`` is the buffer's ``summary()``. Returns the lines worth printing (env
        worker restarts)."""
        lg, cfg = self.lg, self.cfg
        lg.scalar(TRAINING_REWARD, rollout["training_reward"], update)  # the tutorial's definition
        if losses:
            lg.scalar(TOTAL_LOSS, losses["total"], update)
            if "forward" in losses:
                lg.scalar(FORWARD_LOSS, losses["forward"], update)
            lg.scalars("losses", losses, step)
        lg.scalar(INT_REWARD_RAW, raw_int.mean(), step)
        # how much the novelty tells this rollout's states apart, whatever the module's feature scale
        lg.scalar(INT_REWARD_RAW_CV, raw_int.std() / max(float(raw_int.mean()), 1e-12), step)
        if gate_share is not None:
            lg.scalar(FIRST_VISIT_SHARE, gate_share.mean(), step)
        if cfg.int_reward == "snd":  # clip(eta x error, 0, 1): how often the clip bites
            lg.scalar(CLIPPED_SHARE, rollout["int_reward_clipped_share"], step)
        self._action_shares(rollout["actions"], step)
        lg.scalar(INT_REWARD_MEAN, rollout["int_reward_mean"], step)
        lg.scalar(INT_REWARD_MAX, rollout["int_reward_max"], step)
        lg.scalar(INT_RETURN_STD, int_return_std, step)
        lg.scalar(ADV_EXT, rollout["adv_ext_mean"], step)
        lg.scalar(ADV_INT, rollout["adv_int_mean"], step)
        lg.scalar(ADV_STD, rollout["adv_std"], step)
        lg.scalar(NAN_UPDATES, nonfinite, step)
        notes = self._restarts(restart_log, step)
        t_collect, t_update = seconds
        lg.scalar(COLLECT_SECONDS, t_collect, step)
        lg.scalar(UPDATE_SECONDS, t_update, step)
        lg.scalar(STEPS_PER_SEC, cfg.rollout_size / max(t_collect + t_update, 1e-9), step)
        self._episodes(episodes, update, step)
        if cfg.histogram_interval and update % cfg.histogram_interval == 0:
            lg.histogram(HIST_INT_REWARD, rollout["rewards_int"], step)
            lg.histogram(HIST_ADVANTAGE, rollout["advantages"], step)
        return notes

    def _action_shares(self, actions: np.ndarray, step: int) -> None:
        """Each action's share of the rollout (int64[T, N] actions): what the policy does (e.g. novelty
        farming by pickup/drop)."""
        names = self.spec.action_names(self.cfg) if self.spec.action_names is not None else None
        shares = np.bincount(actions.ravel(), minlength=self.num_actions) / actions.size
        for a, share in enumerate(shares):
            self.lg.scalar(f"{ACTION_SHARE}/{names[a] if names else a}", share, step)

    def _restarts(self, restart_log, step: int) -> list[str]:
        """The count of env worker replacements, and a line for each one not reported yet."""
        if not restart_log:
            return []
        self.lg.scalar(WORKER_RESTARTS, len(restart_log), step)
        notes = [f"env worker replaced ({line})" for line in restart_log[self._restarts_reported :]]
        self._restarts_reported = len(restart_log)
        return notes

    def _episodes(self, episodes, update: int, step: int) -> None:
        """The finished episodes' scalars, and the places they visited (first update, episode counts)."""
        for info in episodes:
            ep = info["episode"]
            metrics = {"return": ep["r"], "length": ep["l"], **self.spec.episode_metrics(info)}
            self.recent.append(metrics)
            self.lg.scalars("episode", metrics, step)
            if self.spec.visited is not None:
                for place in set(self.spec.visited(info)):
                    self.visited.setdefault(place, update)
                    self.visit_counts[place] += 1
        if self.spec.visited is not None:
            self.lg.scalar(f"charts/{self.spec.visited_name}_visited_total", len(self.visited), step)

    def eval(self, result: dict, update: int, step: int) -> None:
        """One greedy eval episode of the policy after ``update``, at that update's step."""
        lg = self.lg
        lg.scalar(EVAL_EXTRINSIC, result["return"], update)
        lg.scalar(EVAL_INTRINSIC, result["intrinsic"], update)
        lg.scalar("eval/return", result["return"], step)
        lg.scalar("eval/length", result["length"], step)
        lg.scalars("eval", self.spec.episode_metrics(result["info"]), step)
        lg.image(EVAL_FRAMES, result["strip"], update)
        along = result.get("along")  # the intrinsic reward of every step, the frames at its peaks
        if along is not None:
            from common import pictures

            name, level, intrinsic = self.spec.name, self.spec.level_name(self.cfg), self.cfg.intrinsic
            title = f"{name} {level}, update {update}: {intrinsic} intrinsic reward of the greedy episode"
            self._picture(EVAL_ALONG, EVAL_ALONG_DIR, update, pictures.draw_along_episode(along, title), along)

    def picture(self, update: int, summary: dict, raw_int, records: list) -> None:
        """The game's picture of where the agent has been (``spec.rollout_picture``), from this update's
        rollout (``summary``: the buffer's ``summary()``, ``raw_int`` float[T, N], ``records`` [T][N] of
        ``spec.step_record``) and the run's visited places: ``explore/<picture_name>``."""
        from common.run.game import Rollout

        rollout = Rollout(
            update=update,
            records=records,
            raw_int=np.asarray(raw_int),
            rewards_int=summary["rewards_int"],
            dones=summary["dones"],
            intrinsic=self.cfg.intrinsic,
            visited=dict(self.visited),
            visit_counts=dict(self.visit_counts),
        )
        image, data = self.spec.rollout_picture(self.cfg, rollout)
        self._picture(f"{EXPLORE}/{self.spec.picture_name}", EXPLORE_DIR, update, image, data)

    def _picture(self, tag: str, folder: str, update: int, image: np.ndarray, data: dict) -> None:
        self.lg.picture(tag, folder, update, image, data)

    def embeddings(self, update: int, buf, meta: dict, features, rng: np.random.Generator) -> None:
        """Target features (``features(uint8 obs) -> float[B, D]``) of up to 256 of the rollout's states,
        labelled by the game (``meta``: {(t, env): labels}, e.g. x_pos, room).

        One tag per snapshot (``intrinsic/target_features/update_000050``): VisualDL 2.5.3
        shows only the first record of an embedding tag.
        """
        keys = list(meta)
        if not keys:
            return
        pick = rng.choice(len(keys), size=min(256, len(keys)), replace=False)
        # s_{t+1} of step t; the true terminal frame where the episode ended (the info's state)
        obs = np.stack([buf.next_frame(*keys[k]) for k in pick])
        self.lg.embeddings(
            f"{EMBEDDING}/update_{update:06d}",
            features(obs),
            [meta[keys[k]] for k in pick],
            list(self.spec.embedding_header),
        )

    def progress(self, update: int, losses: dict | None) -> str:
        """The progress bar's text: update, speed, recent episode metrics, loss."""
        parts = [f"upd {update}/{self.num_updates}", f"{self.lg.last.get(STEPS_PER_SEC, 0):.0f} steps/s"]
        if self.recent:
            keys = [k for k in self.recent[-1] if k != "length" and not k.endswith("_mask")]  # a mean of masks: noise
            parts += [f"{k} {np.mean([m.get(k, 0) for m in self.recent]):.3g}" for k in keys]
        if losses:
            parts.append(f"loss {losses['total']:.3g}")
        return ", ".join(parts)

    def hparams(self) -> None:
        """The run's config against its final metrics (VisualDL's hyperparameter view)."""
        metrics = [TRAINING_REWARD, EVAL_EXTRINSIC, "eval/return", "episode/return"]
        keys = [*(self.recent[-1].keys() if self.recent else ()), *self.spec.episode_metrics({})]
        metrics = list(dict.fromkeys(metrics + [f"{p}/{k}" for p in ("eval", "episode") for k in keys]))
        self.lg.hparams(dict(self.cfg.to_dict()), metrics)
