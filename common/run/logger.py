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
ADV_STD = "charts/advantage_std"  # the combined advantages' spread: compare with --beta
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

    def flush(self, durable: bool = False) -> None:
        """Hand what was logged to the OS; ``durable`` also waits until ``metrics.jsonl`` is on the disk
        (before a checkpoint: a power loss must not keep the checkpoint and lose its update's records)."""
        with self._writing(self.run_dir):
            self.writer.flush()
        with self._writing(self.metrics_path):
            self._jsonl.flush()
            if durable:
                os.fsync(self._jsonl.fileno())

    def sync(self) -> None:
        """``flush(durable=True)`` before a checkpoint, best effort: a failure here is raised by the next
        ``flush``, and must not keep the state from being saved after an error."""
        with contextlib.suppress(OSError):
            self.flush(durable=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # closing after a failed write must not hide that error
            self.writer.close()
        with contextlib.suppress(OSError):
            self._jsonl.close()


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
