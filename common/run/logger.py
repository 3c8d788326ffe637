"""VisualDL logging with every tag name in one place, plus a JSON-lines copy.

The tutorial's tags are kept verbatim so its VisualDL screenshots still match;
structured tags group the rest by prefix (``charts/``, ``losses/``,
``intrinsic/``, ``episode/``, ``eval/``, ``perf/``). Every scalar is also appended
to ``metrics.jsonl`` in the run folder so notebooks and benchmarks can plot curves
with matplotlib without parsing VisualDL's binary records.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings

import numpy as np

# The tutorial's tags (VisualDL), verbatim.
TRAINING_REWARD = "Training Reward"
EVAL_EXTRINSIC = "Eval Extrinsic reward"
EVAL_INTRINSIC = "Eval Intrinsic reward"
TOTAL_LOSS = "Total loss"
FORWARD_LOSS = "Forward loss"

# Structured tags.
STEPS_PER_SEC = "perf/steps_per_sec"
UPDATE_SECONDS = "perf/update_seconds"
COLLECT_SECONDS = "perf/collect_seconds"
INT_REWARD_MEAN = "intrinsic/reward_mean"
INT_REWARD_MAX = "intrinsic/reward_max"
INT_REWARD_RAW = "intrinsic/raw_reward_mean"
INT_REWARD_RAW_CV = "intrinsic/raw_reward_cv"
INT_RETURN_STD = "intrinsic/return_std"
FIRST_VISIT_SHARE = "intrinsic/first_visit_share"
CLIPPED_SHARE = "intrinsic/clipped_share"
ACTION_SHARE = "charts/action_share"
ADV_EXT = "charts/advantage_ext_mean"
ADV_INT = "charts/advantage_int_mean"
NAN_UPDATES = "charts/nonfinite_skipped"
WORKER_RESTARTS = "charts/worker_restarts"
EVALS_LOST = "charts/evals_lost"
HIST_INT_REWARD = "intrinsic/reward_hist"
HIST_ADVANTAGE = "charts/advantage_hist"
EVAL_FRAMES = "eval/frames"
EVAL_ALONG = "eval/intrinsic_along_episode"
EXPLORE = "explore"  # explore/<the game's picture_name>: where the agent has been
EMBEDDING = "intrinsic/target_features"

#: run-folder subfolders of the pictures: update_000010.png and the values drawn, update_000010.npz
EVAL_ALONG_DIR = "eval_intrinsic"
EXPLORE_DIR = "explore"


#: VisualDL 2.5.3's embedding page cuts vectors to this many dimensions, wrongly (see project_for_visualdl)
VISUALDL_MAX_DIM = 200


def project_for_visualdl(mat: np.ndarray) -> np.ndarray:
    """float32[B, D] -> the same points in at most ``VISUALDL_MAX_DIM`` dimensions.

    VisualDL 2.5.3's high-dimensional page truncates vectors above 200 dimensions with an
    indexing slip (its ``parser.js`` reads ``d[c + f]`` for ``d[c * dim + f]``), which zeroes
    all but the first vectors, so its PCA view shows two or three dots whatever the data.
    Here such vectors are centered and expressed in their top principal axes instead: PCA,
    t-SNE and UMAP see the same geometry (exactly so for up to 201 points, which span at
    most 200 dimensions once centered; otherwise the 200 largest-variance directions).
    """
    if mat.ndim != 2 or mat.shape[1] <= VISUALDL_MAX_DIM:
        return mat
    centered = mat - mat.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(centered.astype(np.float64), full_matrices=False)
    return (centered @ vt[:VISUALDL_MAX_DIM].T.astype(np.float32)).astype(np.float32)


class Logger:
    """Writes scalars/histograms/images/embeddings to VisualDL under ``run_dir``.

    ``origin`` says where ``run_dir`` came from (e.g. ``--log-path 'runs'``): a failed write
    (a full disk) raises ``OSError`` naming the file and that origin.
    """

    def __init__(self, run_dir: str, comment: str = "", origin: str = ""):
        from visualdl import LogWriter  # imported here: VisualDL is heavy and only the trainer needs it

        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self.origin = origin
        self.metrics_path = os.path.join(run_dir, "metrics.jsonl")
        with self._writing(run_dir):
            self.writer = LogWriter(logdir=run_dir, comment=comment)
            repair_tail(self.metrics_path)
            self._jsonl = open(self.metrics_path, "a", encoding="utf-8")
        self.last: dict[str, float] = {}

    @contextlib.contextmanager
    def _writing(self, path: str):
        try:
            yield
        except OSError as e:
            origin = f" (the folder comes from {self.origin})" if self.origin else ""
            raise OSError(e.errno, f"cannot write {path}{origin}: {e.strerror or e}") from e

    def scalar(self, tag: str, value: float, step: int) -> None:
        value = float(value)
        if not np.isfinite(value):
            return
        with self._writing(self.run_dir):
            self.writer.add_scalar(tag=tag, value=value, step=int(step))
        with self._writing(self.metrics_path):
            self._jsonl.write(json.dumps({"tag": tag, "step": int(step), "value": value}) + "\n")
        self.last[tag] = value

    def scalars(self, prefix: str, values: dict, step: int) -> None:
        for k, v in values.items():
            self.scalar(f"{prefix}/{k}", v, step)

    def histogram(self, tag: str, values: np.ndarray, step: int, buckets: int = 30) -> None:
        values = np.asarray(values, dtype=np.float64).ravel()
        values = values[np.isfinite(values)]
        if values.size:
            with self._writing(self.run_dir):
                self.writer.add_histogram(tag=tag, values=values, step=int(step), buckets=buckets)

    def image(self, tag: str, img: np.ndarray, step: int) -> None:
        """``img`` uint8[H, W, 3] (or [H, W] gray)."""
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        with self._writing(self.run_dir):
            self.writer.add_image(tag=tag, img=img, step=int(step), dataformats="HWC")

    def picture(self, tag: str, folder: str, step: int, image: np.ndarray, data: dict, unit: str = "update") -> None:
        """Log ``image`` (uint8[H, W, 3]) under ``tag`` at ``step`` and write it with the values it was drawn
        from (``data``, ``common.pictures.save_record``) to ``<run>/<folder>/<unit>_000010.png`` and ``.npz``."""
        from common import pictures

        self.image(tag, image, step)
        stem = os.path.join(self.run_dir, folder, f"{unit}_{step:06d}")
        with self._writing(stem + ".png"):
            pictures.save_png(stem + ".png", image)
            pictures.save_record(stem + ".npz", data)

    def embeddings(self, tag: str, mat: np.ndarray, metadata: list, header: list | None = None) -> None:
        """``mat`` float[B, D]; ``metadata`` one row per sample (a list of str, one per ``header``
        column, or a plain str); ``header`` names the columns.

        VisualDL 2.5.3 wants multi-column metadata column-major (``[columns][samples]``):
        given row-major rows it would record one embedding per column. A tag keeps only its
        first record in VisualDL's high-dimensional view, so log each snapshot under its own tag.
        """
        mat = project_for_visualdl(np.asarray(mat, np.float32))
        rows = [[str(v) for v in m] if isinstance(m, (list, tuple)) else [str(m)] for m in metadata]
        if len(rows) != len(mat):
            raise ValueError(f"embeddings {tag!r}: {len(mat)} vectors but {len(rows)} metadata rows")
        if not header:
            header = [f"label_{i}" for i in range(len(rows[0]))] if rows and len(rows[0]) > 1 else []
        if header:
            columns = [list(c) for c in zip(*rows)]
            if len(columns) != len(header):
                raise ValueError(f"embeddings {tag!r}: header {header} but {len(columns)} metadata columns")
            with self._writing(self.run_dir):
                self.writer.add_embeddings(tag=tag, mat=mat.tolist(), metadata=columns, metadata_header=list(header))
        else:
            with self._writing(self.run_dir):
                self.writer.add_embeddings(tag=tag, mat=mat.tolist(), metadata=[r[0] for r in rows])

    def hparams(self, hparams: dict, metrics: list) -> None:
        # VisualDL's protobuf rejects bools as ints: record them as strings.
        clean = {
            k: (str(v) if isinstance(v, bool) else v)
            for k, v in hparams.items()
            if isinstance(v, (int, float, str, bool))
        }
        with self._writing(self.run_dir):
            self.writer.add_hparams(hparams_dict=clean, metrics_list=[m for m in metrics if m in self.last])

    def flush(self) -> None:
        with self._writing(self.run_dir):
            self.writer.flush()
        with self._writing(self.metrics_path):
            self._jsonl.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # closing after a failed write must not hide that error
            self.writer.close()
        with contextlib.suppress(OSError):
            self._jsonl.close()


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
        buf,
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
        finished episodes; returns the lines worth printing (env worker restarts)."""
        lg, cfg = self.lg, self.cfg
        lg.scalar(TRAINING_REWARD, buf.rewards_ext.mean(axis=1).sum(), update)  # the tutorial's definition
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
            lg.scalar(CLIPPED_SHARE, float((buf.rewards_int >= 1.0).mean()), step)
        names = self.spec.action_names(cfg) if self.spec.action_names is not None else None
        shares = np.bincount(buf.actions.ravel(), minlength=self.num_actions) / buf.actions.size
        for a, share in enumerate(shares):  # what the policy does (e.g. novelty farming by pickup/drop)
            lg.scalar(f"{ACTION_SHARE}/{names[a] if names else a}", share, step)
        lg.scalar(INT_REWARD_MEAN, buf.rewards_int.mean(), step)
        lg.scalar(INT_REWARD_MAX, buf.rewards_int.max(), step)
        lg.scalar(INT_RETURN_STD, int_return_std, step)
        lg.scalar(ADV_EXT, buf.adv_ext.mean(), step)
        lg.scalar(ADV_INT, buf.adv_int.mean(), step)
        lg.scalar(NAN_UPDATES, nonfinite, step)
        notes = []
        if restart_log:
            lg.scalar(WORKER_RESTARTS, len(restart_log), step)
            notes = [f"env worker replaced ({line})" for line in restart_log[self._restarts_reported :]]
            self._restarts_reported = len(restart_log)
        t_collect, t_update = seconds
        lg.scalar(COLLECT_SECONDS, t_collect, step)
        lg.scalar(UPDATE_SECONDS, t_update, step)
        lg.scalar(STEPS_PER_SEC, cfg.rollout_size / max(t_collect + t_update, 1e-9), step)
        for info in episodes:
            ep = info["episode"]
            metrics = {"return": ep["r"], "length": ep["l"], **self.spec.episode_metrics(info)}
            self.recent.append(metrics)
            lg.scalars("episode", metrics, step)
            if self.spec.visited is not None:
                for place in set(self.spec.visited(info)):
                    self.visited.setdefault(place, update)
                    self.visit_counts[place] += 1
        if self.spec.visited is not None:
            lg.scalar(f"charts/{self.spec.visited_name}_visited_total", len(self.visited), step)
        if cfg.histogram_interval and update % cfg.histogram_interval == 0:
            lg.histogram(HIST_INT_REWARD, buf.rewards_int, step)
            lg.histogram(HIST_ADVANTAGE, buf.advantages, step)
        return notes

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

    def picture(self, update: int, buf, raw_int, records: list) -> None:
        """The game's picture of where the agent has been (``spec.rollout_picture``), from this update's
        rollout (``buf``: the ``RolloutBuffer``, ``raw_int`` float[T, N], ``records`` [T][N] of
        ``spec.step_record``) and the run's visited places: ``explore/<picture_name>``."""
        from common.run.game import Rollout

        rollout = Rollout(
            update=update,
            records=records,
            raw_int=np.asarray(raw_int),
            rewards_int=buf.rewards_int,
            dones=buf.dones,
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


def repair_tail(path: str) -> None:
    """Cut a torn last line off ``path`` (a run killed mid-write), so that what is appended next starts a
    line of its own; the cut is named in a warning."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
    warnings.warn(f"{path}: cut the torn last line ({data[keep : keep + 60]!r}) before appending", RuntimeWarning)


def read_metrics(run_dir: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{tag: (steps, values)}`` from a run folder's ``metrics.jsonl``.

    A truncated last line (the run was killed, or the disk filled, mid-write) is skipped
    with a warning; a bad line anywhere else raises ``ValueError`` naming it.
    """
    out: dict[str, tuple[list, list]] = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if all(not rest.strip() for rest in lines[n:]):
                warnings.warn(
                    f"{path}: skipped the truncated last line {n} ({line[:60]!r})", RuntimeWarning, stacklevel=2
                )
                break
            raise ValueError(f"{path}, line {n}: not a JSON record ({e})") from None
        ok = (
            isinstance(rec, dict)
            and isinstance(rec.get("tag"), str)
            and type(rec.get("step")) is int
            and type(rec.get("value")) in (int, float)
        )
        if not ok:
            want = "{'tag': str, 'step': int, 'value': number}"
            raise ValueError(f"{path}, line {n}: expected {want}, got {line[:60]!r}")
        s, v = out.setdefault(rec["tag"], ([], []))
        s.append(rec["step"])
        v.append(rec["value"])
    return {k: (np.asarray(s), np.asarray(v)) for k, (s, v) in out.items()}
