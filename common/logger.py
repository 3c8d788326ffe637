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
INT_RETURN_STD = "intrinsic/return_std"
FIRST_VISIT_SHARE = "intrinsic/first_visit_share"
ACTION_SHARE = "charts/action_share"
ADV_EXT = "charts/advantage_ext_mean"
ADV_INT = "charts/advantage_int_mean"
NAN_UPDATES = "charts/nonfinite_skipped"
WORKER_RESTARTS = "charts/worker_restarts"
HIST_INT_REWARD = "intrinsic/reward_hist"
HIST_ADVANTAGE = "charts/advantage_hist"
EVAL_FRAMES = "eval/frames"
EMBEDDING = "intrinsic/target_features"


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
            self.writer.add_histogram(tag=tag, values=values, step=int(step), buckets=buckets)

    def image(self, tag: str, img: np.ndarray, step: int) -> None:
        """``img`` uint8[H, W, 3] (or [H, W] gray)."""
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        self.writer.add_image(tag=tag, img=img, step=int(step), dataformats="HWC")

    def embeddings(self, tag: str, mat: np.ndarray, metadata: list, header: list | None = None) -> None:
        """``mat`` float[B, D]; ``metadata`` one row per sample (a list of str, one per ``header``
        column, or a plain str); ``header`` names the columns.

        VisualDL 2.5.3 wants multi-column metadata column-major (``[columns][samples]``):
        given row-major rows it would record one embedding per column. A tag keeps only its
        first record in VisualDL's high-dimensional view, so log each snapshot under its own tag.
        """
        mat = np.asarray(mat, np.float32)
        rows = [[str(v) for v in m] if isinstance(m, (list, tuple)) else [str(m)] for m in metadata]
        if len(rows) != len(mat):
            raise ValueError(f"embeddings {tag!r}: {len(mat)} vectors but {len(rows)} metadata rows")
        if not header:
            header = [f"label_{i}" for i in range(len(rows[0]))] if rows and len(rows[0]) > 1 else []
        if header:
            columns = [list(c) for c in zip(*rows)]
            if len(columns) != len(header):
                raise ValueError(f"embeddings {tag!r}: header {header} but {len(columns)} metadata columns")
            self.writer.add_embeddings(tag=tag, mat=mat.tolist(), metadata=columns, metadata_header=list(header))
        else:
            self.writer.add_embeddings(tag=tag, mat=mat.tolist(), metadata=[r[0] for r in rows])

    def hparams(self, hparams: dict, metrics: list) -> None:
        # VisualDL's protobuf rejects bools as ints: record them as strings.
        clean = {k: (str(v) if isinstance(v, bool) else v) for k, v in hparams.items()
                 if isinstance(v, (int, float, str, bool))}
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
                warnings.warn(f"{path}: skipped the truncated last line {n} ({line[:60]!r})", RuntimeWarning,
                              stacklevel=2)
                break
            raise ValueError(f"{path}, line {n}: not a JSON record ({e})") from None
        s, v = out.setdefault(rec["tag"], ([], []))
        s.append(rec["step"])
        v.append(rec["value"])
    return {k: (np.asarray(s), np.asarray(v)) for k, (s, v) in out.items()}
