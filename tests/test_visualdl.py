"""What a training run logs is what a real VisualDL 2.5.3 server shows.

A 2-update Mario 1-1 run (the ``mario_run`` session fixture) writes its VisualDL records;
a real ``visualdl`` server is started on them and every dashboard is read back over its
HTTP API (the routes of ``visualdl/server/api.py``): scalars (values equal to
``metrics.jsonl``), images, histograms, high-dimensional embeddings with their metadata,
and hyperparameters. The server is started with a *relative* ``--logdir``, as the docs
say: with an absolute one VisualDL's cache keys of ``embedding/metadata`` and
``embedding/tensor`` collide (``os.path.join(prefix, "/abs/name")`` drops the prefix) and
the tensor route answers the metadata.
"""

from __future__ import annotations

import io
import json
import os
import sys
import urllib.parse
import urllib.request

import numpy as np
import pytest

from common.run import logger as tags
from common.run.logger import read_metrics

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from visualdl_screenshots import visualdl_server  # noqa: E402  the server launcher shared with the browser test

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

RUN = "mario_short"
TUTORIAL_TAGS = [tags.TRAINING_REWARD, tags.EVAL_EXTRINSIC, tags.EVAL_INTRINSIC, tags.TOTAL_LOSS, tags.FORWARD_LOSS]
STRUCTURED_TAGS = [
    "losses/total",
    "losses/forward",
    tags.INT_REWARD_MEAN,
    tags.INT_REWARD_RAW,
    tags.ADV_EXT,
    tags.ADV_STD,
    tags.STEPS_PER_SEC,
    "eval/return",
    "eval/length",
    "eval/x_pos",
    "eval/flag",
]


class Server:
    def __init__(self, base: str):
        self.base = base

    def raw(self, route: str, **params) -> bytes:
        url = f"{self.base}/app/api/{route}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.read()

    def api(self, route: str, **params):
        reply = json.loads(self.raw(route, **params))
        assert reply["status"] == 0, (route, params, reply)
        return reply["data"]


@pytest.fixture(scope="module")
def server(mario_run):
    runs, _ = mario_run
    # Relative --logdir (see the module doc); run names are then "runs/<run_name>".
    with visualdl_server(str(runs.parent), logdir="runs", run=f"runs/{RUN}") as base:
        yield Server(base)


@pytest.fixture(scope="module")
def metrics(mario_run):
    runs, _ = mario_run
    return read_metrics(str(runs / RUN))


def test_run_folder_holds_everything(mario_run):
    runs, result = mario_run
    run_dir = runs / RUN
    names = set(os.listdir(run_dir))
    assert {"config.json", "metrics.jsonl", "videos", "models"} <= names
    assert any(n.startswith("vdlrecords") for n in names)
    assert json.loads((run_dir / "config.json").read_text())["num_local_steps"] == 16
    assert result["run_dir"] == str(run_dir) and os.path.dirname(result["checkpoint"]) == str(run_dir / "models")


def test_index_page_answers_with_language_flag(server):
    # Without --language, /app/index answers 500 under Werkzeug 3.1 when no Accept-Language is sent.
    with urllib.request.urlopen(f"{server.base}/app/index", timeout=30) as r:
        assert r.status == 200


def test_scalars_match_metrics_jsonl(server, metrics):
    run = f"runs/{RUN}"
    scalar_tags = server.api("scalar/tags")
    got = dict(zip(scalar_tags["runs"], scalar_tags["tags"]))[run]
    for tag in TUTORIAL_TAGS + STRUCTURED_TAGS:
        assert tag in got, tag
    assert set(got) == set(metrics), set(got) ^ set(metrics)
    groups = {t.split("/")[0] for t in got if "/" in t}
    assert {"losses", "intrinsic", "charts", "perf", "eval"} <= groups
    for tag in got:
        rows = server.api("scalar/list", run=run, tag=tag)
        steps = [r[1] for r in rows]
        values = np.array([r[2] for r in rows], dtype=np.float64)
        want_steps, want_values = metrics[tag]
        assert steps == want_steps.tolist(), tag
        # VisualDL stores scalars as float32.
        np.testing.assert_allclose(values, want_values, rtol=1e-6, atol=1e-30, err_msg=tag)
    assert metrics[tags.TRAINING_REWARD][0].tolist() == [1, 2]  # the tutorial's x axis: the update number


def test_eval_frames_image_is_an_rgb_grid(server):
    import imageio.v2 as imageio

    run = f"runs/{RUN}"
    assert "eval/frames" in dict(zip(*server.api("image/tags").values()))[run]
    steps = server.api("image/list", run=run, tag="eval/frames")
    assert [s["step"] for s in steps] == [1, 2]
    png = server.raw("image/image", run=run, tag="eval/frames", index=len(steps) - 1)
    img = imageio.imread(io.BytesIO(png))
    # 8 NES screens at half size (120x128) in 2 rows of 4, 2-px white gaps; in colour, not the 84x84 gray
    # network input.
    assert img.shape[0] == 2 * 120 + 2 and img.shape[1] == 4 * 128 + 3 * 2 and img.shape[2] in (3, 4)
    assert np.abs(img[..., 0].astype(int) - img[..., 2].astype(int)).mean() > 10


def test_pictures_are_images_of_their_own(server):
    import imageio.v2 as imageio

    run = f"runs/{RUN}"
    image_tags = set(dict(zip(*server.api("image/tags").values()))[run])
    along, explore = tags.EVAL_ALONG, f"{tags.EXPLORE}/intrinsic_by_x"
    assert image_tags == {tags.EVAL_FRAMES, along, explore}
    # the greedy episode's intrinsic reward (with each video) and Mario's along x_pos (--picture-interval 1)
    for tag, shape in ((along, (560, 1000)), (explore, (460, 1000))):
        steps = server.api("image/list", run=run, tag=tag)
        assert [s["step"] for s in steps] == [1, 2]
        img = imageio.imread(io.BytesIO(server.raw("image/image", run=run, tag=tag, index=len(steps) - 1)))
        assert img.shape[:2] == shape and img.std() > 20


def test_histograms(server):
    run = f"runs/{RUN}"
    hist_tags = dict(zip(*server.api("histogram/tags").values()))[run]
    assert {tags.HIST_INT_REWARD, tags.HIST_ADVANTAGE} <= set(hist_tags)
    for tag in (tags.HIST_INT_REWARD, tags.HIST_ADVANTAGE):
        records = server.api("histogram/list", run=run, tag=tag)
        assert [r[1] for r in records] == [32, 64]  # global step after each update
        for _, _, bins in records:
            assert sum(b[2] for b in bins) == 32  # every (step, env) sample of the rollout


def test_embeddings_with_metadata(server):
    listing = {e["name"]: e for e in server.api("embedding/list")}
    names = [f"runs/{RUN}/{tags.EMBEDDING}/update_{u:06d}" for u in (1, 2)]
    assert set(names) <= set(listing), listing.keys()
    for name in names:
        rows, dim = listing[name]["shape"]
        # every state of the rollout (2 envs x 16 steps); the 512 target features in their principal axes
        # (common.run.logger.project_for_visualdl: 32 points span 32 dimensions)
        assert rows == 32 and dim == 32
        meta = server.raw("embedding/metadata", name=name).decode().splitlines()  # csv: \r\n
        assert meta[0].split("\t") == ["x_pos_bucket", "stage"]
        assert len(meta) == rows + 1
        for line in meta[1:]:
            bucket, stage = line.split("\t")
            assert int(bucket) % 256 == 0 and stage == "1-1"
        tensor = np.frombuffer(server.raw("embedding/tensor", name=name), dtype=np.float32)
        assert tensor.size == rows * dim and np.isfinite(tensor).all() and tensor.std() > 0


def test_hparams_with_final_metrics(server, metrics):
    run = f"runs/{RUN}"
    trials = {t["name"]: t for t in server.api("hparams/list")}
    trial = trials[run]
    hp = trial["hparams"]
    assert hp["num_local_steps"] == 16 and hp["intrinsic"] == "rnd" and hp["lr"] == pytest.approx(4e-5)
    assert hp["clip_reward"] == "False"  # bools are recorded as strings
    for tag in (tags.TRAINING_REWARD, tags.EVAL_EXTRINSIC, "eval/return", "eval/x_pos", "eval/flag"):
        assert trial["metrics"][tag] == pytest.approx(float(metrics[tag][1][-1]), rel=1e-6), tag
    indicators = server.api("hparams/indicators")
    assert "lr" in {h["name"] for h in indicators["hparams"]}
    assert tags.EVAL_EXTRINSIC in {m["name"] for m in indicators["metrics"]}
