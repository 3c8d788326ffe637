"""What a user sees: VisualDL's web front end, in a real headless Chromium, on a real run.

``tests/test_visualdl.py`` reads every dashboard back over the server's HTTP API; this
module loads the pages a user opens - Scalars, Samples/Image, Histogram, High Dimensional,
Hyper Parameters - on the 2-update Mario 1-1 run of the ``mario_run`` fixture, through
``benchmarks/visualdl_screenshots.py`` (the script that makes the screenshots of
docs/visualdl.md): Chromium driven by Selenium, with Debian's chromium and chromedriver. Chart
titles are drawn into canvases, not the DOM, so the page records every string drawn into
a canvas; a page counts as rendered when each tag's chart is drawn (a 2D canvas with
pixels), each image loaded, and the WebGL scatter plot has pixels on the screenshot.

Skipped where no chromium is installed (``apt-get install -y chromium chromium-driver``);
``.ci/run`` installs it and sets ``PADDLE_CURIOSITY_REQUIRE_CHROMIUM=1``, which turns the
skip into an error, so CI always runs it.
"""

from __future__ import annotations

import os
import sys

import pytest

from common.run import logger as tags
from common.run.logger import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import visualdl_screenshots as vdl  # noqa: E402

CHROMIUM = vdl.find_chromium()
if CHROMIUM is None and os.environ.get("PADDLE_CURIOSITY_REQUIRE_CHROMIUM") == "1":  # set by .ci/run
    raise RuntimeError("PADDLE_CURIOSITY_REQUIRE_CHROMIUM=1 but no chromium is installed")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed: apt-get install -y chromium chromium-driver "
        "(.ci/run installs it; $CHROMIUM names another binary)",
    ),
]

RUN = "mario_short"
RUN_NAME = f"runs/{RUN}"


@pytest.fixture(scope="module")
def show(mario_run, tmp_path_factory):
    """``show(page_name) -> View``: one VisualDL server and one browser for the module's pages."""
    runs, _ = mario_run
    out = tmp_path_factory.mktemp("screenshots")
    with vdl.visualdl_server(str(runs.parent), run=RUN_NAME) as base, vdl.Chromium(CHROMIUM) as browser:
        yield lambda name: vdl.capture(browser, base, vdl.PAGES[name], str(out))


@pytest.fixture(scope="module")
def metrics(mario_run):
    runs, _ = mario_run
    return read_metrics(str(runs / RUN))


def assert_screenshot(view, min_ink=0.02):
    assert os.path.getsize(view.screenshot) > 5_000, view.screenshot
    assert view.ink > min_ink, f"{view.name}: the screenshot is (nearly) blank: {view.ink:.3f} of it drawn"


def test_scalar_page_draws_every_tag(show, metrics):
    view = show("scalar")
    # VisualDL groups tags by the prefix before "/": the tutorial's tags are groups of their own.
    groups = {}
    for tag in metrics:
        groups[tag.split("/")[0]] = groups.get(tag.split("/")[0], 0) + 1
    assert view.groups == groups
    for tag in (tags.TRAINING_REWARD, tags.EVAL_EXTRINSIC, tags.EVAL_INTRINSIC, tags.TOTAL_LOSS, tags.FORWARD_LOSS):
        assert tag in view.text  # the group headings are DOM text
    # Every expanded group draws one chart per tag, titled with the tag.
    assert set(metrics) <= view.drawn, set(metrics) - view.drawn
    charts = [c for c in view.canvases if c["kind"] == "2d" and c["inked"]]
    assert len(charts) == len(metrics)
    assert RUN_NAME in view.text  # the run selector
    assert_screenshot(view)


def test_image_page_shows_the_eval_frames_grid(show):
    view = show("image")
    assert view.groups == {"eval": 2, "explore": 1}
    assert tags.EVAL_FRAMES in view.text and tags.EVAL_ALONG in view.text and RUN_NAME in view.text
    # The browser decoded the latest eval/frames image (8 moments, 120x128 each, in 2 rows of 4 with 2-px
    # lines), the greedy episode's intrinsic reward and Mario's intrinsic reward along x_pos.
    sizes = sorted((i["width"], i["height"]) for i in view.images if i["complete"])
    assert sizes == sorted([(4 * 128 + 3 * 2, 2 * 120 + 2), (1000, 560), (1000, 460)])
    assert_screenshot(view)


def test_histogram_page_draws_both_histograms(show):
    view = show("histogram")
    assert view.groups == {"charts": 1, "intrinsic": 1}
    for tag in (tags.HIST_INT_REWARD, tags.HIST_ADVANTAGE):
        assert f"{tag} ({RUN_NAME})" in view.drawn  # VisualDL titles a histogram "<tag> (<run>)"
    assert sum(c["kind"] == "2d" and c["inked"] for c in view.canvases) == 2
    assert_screenshot(view)


def test_high_dimensional_page_projects_the_target_features(show):
    view = show("high-dimensional")
    # The first embedding is selected; its 32 states (2 envs x 16 steps) and metadata columns are listed.
    assert f"{RUN_NAME}/{tags.EMBEDDING}/update_000001" in view.text
    assert "Points: 32" in view.text and "x_pos_bucket" in view.text
    assert "Component #1" in view.text  # the default projection, PCA, ran in the page
    # What the page's own parser hands to each projection. VisualDL 2.5.3 cuts vectors above 200 dimensions
    # for PCA with an indexing slip that zeroes all rows but the first one or two, so the logger writes the
    # 512-d features in their principal axes (common.run.logger.project_for_visualdl: 32 points span 32): every
    # projection, PCA included, gets every vector intact.
    probe = view.probe
    assert probe["shape"] == [32, 32]
    for projection in ("tsne", "umap", "pca"):
        assert probe[projection] == {"count": 32, "dimension": 32, "zero_rows": 0}, probe
    # The screenshot's pose: UMAP in 2D, coloured by x position; the WebGL scatter plot has drawn its points.
    (scatter,) = view.webgl_ink
    assert scatter > 200, "the WebGL scatter plot drew nothing"
    assert_screenshot(view, min_ink=0.002)


def test_hyper_parameter_page_lists_the_run(show, metrics):
    view = show("hyper-parameter")
    assert RUN_NAME in view.text
    for name in ("intrinsic", "int_coef", "num_local_steps", tags.TRAINING_REWARD, tags.EVAL_EXTRINSIC, "eval/x_pos"):
        assert name in view.text, name
    assert_screenshot(view)
