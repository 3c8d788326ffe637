"""VisualDL's web front end in headless Chromium: load each dashboard, check it, screenshot it.

    python benchmarks/visualdl_screenshots.py                 # a short Mario 1-1 run -> docs/visualdl/*.png
    python benchmarks/visualdl_screenshots.py --runs DIR      # the runs already in DIR/runs (no training)

What a user sees of a run is VisualDL's single-page app, not its HTTP API. This script
starts a real ``visualdl`` server (relative ``--logdir``, ``--language en``: see
docs/visualdl.md) and, for each dashboard in ``PAGES``, waits until the page's text holds
the project's tags and its charts are drawn, then saves a screenshot.
``tests/test_visualdl_browser.py`` runs the same ``capture`` on the test suite's short run.

The browser is driven by Selenium 4 with Debian's ``chromium`` and ``chromedriver``
(``apt-get install chromium chromium-driver``; ``$CHROMIUM`` and ``$CHROMEDRIVER`` name
others). Both paths are handed to Selenium, so Selenium Manager never downloads anything,
and Chromium gets a fresh ``--user-data-dir`` and the flags that keep a headless root
Chromium off the network (``CHROMIUM_FLAGS``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

from selenium import webdriver
from selenium.common.exceptions import JavascriptException, NoSuchElementException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--no-default-browser-check",
    "--enable-unsafe-swiftshader",  # software WebGL for the high-dimensional view's scatter plot
]


def _find(env: str, names) -> str | None:
    path = os.environ.get(env)
    if path:
        return path if os.path.exists(path) else shutil.which(path)
    return next(filter(None, map(shutil.which, names)), None)


def find_chromedriver() -> str | None:
    """Path of chromedriver (``$CHROMEDRIVER`` first), or None."""
    return _find("CHROMEDRIVER", ("chromedriver",))


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome binary (``$CHROMIUM`` first), or None: also None without a chromedriver."""
    return _find("CHROMIUM", CHROMIUM_CANDIDATES) if find_chromedriver() else None


class Chromium(webdriver.Chrome):
    """A headless Chromium with a ``width`` x ``height`` page, driven by Selenium through chromedriver.

    ``timeout``: seconds a script may run in the page; ``driver``: chromedriver (default: ``find_chromedriver()``).
    """

    def __init__(
        self, binary: str, width: int = 1280, height: int = 860, timeout: float = 60.0, driver: str | None = None
    ):
        self.profile = tempfile.mkdtemp(prefix="vdl-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}"]:
            options.add_argument(flag)
        try:
            super().__init__(options=options, service=Service(executable_path=driver or find_chromedriver()))
        except BaseException:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        try:
            self.set_script_timeout(timeout)
            # The page itself is width x height (the window's would be smaller by the headless window frame).
            self.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
            self.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_CANVAS_TEXT})
        except BaseException:
            self.quit()
            raise

    def quit(self) -> None:
        try:
            super().quit()  # the session, then chromedriver
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


# ------------------------------------------------------------------ the VisualDL server
def visualdl_command() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "visualdl")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "visualdl.server.app"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def visualdl_server(
    parent: str, logdir: str = "runs", run: str | None = None, timeout: float = 90.0, log_dir: str | None = None
):
    """Run ``visualdl --logdir <logdir> --language en`` in ``parent``; yields its base URL.

    ``logdir`` is relative (see docs/visualdl.md: an absolute one mixes up the embedding
    view's tensor and metadata). Returns once the server lists ``run`` (or any run); the
    server's output goes to ``<log_dir or parent>/visualdl-<port>.log``.
    """
    port = free_port()
    log_path = os.path.join(log_dir or parent, f"visualdl-{port}.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            visualdl_command() + ["--logdir", logdir, "--host", "127.0.0.1", "--port", str(port), "--language", "en"],
            cwd=parent,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    with open(log_path, errors="replace") as f:
                        raise RuntimeError(f"visualdl exited with {proc.returncode}:\n{f.read()[-3000:]}")
                with contextlib.suppress(OSError, ValueError, KeyError):
                    with urllib.request.urlopen(f"{base}/app/api/runs", timeout=10) as r:
                        runs = json.loads(r.read())["data"]
                    if (run in runs) if run else runs:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"visualdl did not list {run or 'a run'} within {timeout:.0f} s")
                time.sleep(0.5)
            yield base
        finally:
            # The server's own process group (start_new_session): it and its children, nothing else.
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


# ------------------------------------------------------------------ the dashboards
# Runs before any page script: records every string drawn into a canvas. VisualDL's charts
# (ECharts) draw their titles - the tags - and axis labels there, not in the DOM.
RECORD_CANVAS_TEXT = """
window.__drawnText = new Set();
for (const C of [window.CanvasRenderingContext2D, window.OffscreenCanvasRenderingContext2D]) {
  if (!C) continue;
  const fillText = C.prototype.fillText;
  C.prototype.fillText = function (text, ...rest) { window.__drawnText.add(String(text)); return fillText.call(this, text, ...rest); };
}
"""

# What the page shows: its text, the canvas text, the tag groups (name, number of tags,
# expanded), the loaded images and each canvas (size, kind, whether anything is drawn).
SNAPSHOT = """
const groups = [...document.querySelectorAll('h3')].filter(h => h.parentElement.querySelector('.total'))
  .map(h => [h.textContent.trim(), parseInt(h.parentElement.querySelector('.total').textContent, 10),
             !!h.parentElement.nextElementSibling]);
const images = [...document.images].filter(i => !i.src.endsWith('.svg'))
  .map(i => ({src: i.src, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}));
const canvases = [...document.querySelectorAll('canvas')].map(c => {
  const r = c.getBoundingClientRect();
  let kind = 'webgl', inked = null;
  try {
    const ctx = c.getContext('2d');
    if (ctx && c.width && c.height) {
      kind = '2d';
      const px = ctx.getImageData(0, 0, c.width, c.height).data;
      inked = false;
      for (let i = 3; i < px.length; i += 4) if (px[i] > 0) { inked = true; break; }
    }
  } catch (e) { kind = 'unreadable'; }
  return {kind, inked, width: c.width, height: c.height, rect: [r.x, r.y, r.width, r.height]};
});
// VisualDL's drop-downs: a label, then the select (its value's title, then a .list of options).
const selects = Object.fromEntries([...document.querySelectorAll('.list')].filter(l => l.parentElement.previousElementSibling)
  .map(l => [l.parentElement.previousElementSibling.textContent.trim(), l.parentElement.firstElementChild.getAttribute('title')]));
return {text: document.body ? document.body.innerText : '', drawn: [...(window.__drawnText || [])], groups, images,
        canvases, selects, url: location.pathname};
"""

# Clicks the innermost visible element whose whole text is ``arguments[0]``; returns whether one was found.
CLICK_TEXT = """
const hits = [...document.querySelectorAll('body *')].filter(e => e.offsetParent !== null && e.textContent.trim() === arguments[0]);
if (hits.length) hits[hits.length - 1].click();
return hits.length > 0;
"""

# The high-dimensional page's own parser (VisualDL's resource/high-dimensional/parser.js) run on
# the first embedding, with the page's limits per projection (pages/high-dimensional.js: PCA
# keeps at most 200 dimensions, t-SNE and UMAP all): how many of the vectors it hands to the
# projection are all zero. VisualDL 2.5.3 samples the dimensions of wider data with
# ``d[c + f] = ...`` instead of ``d[c * dim + f]``, so for PCA every row but the first one or
# two stays zero and the scatter plot shows two or three points (docs/visualdl.md).
EMBEDDING_INPUT = """return (async () => {
  const {parseFromBlob} = await import('/app/_dist_/resource/high-dimensional/parser.js');
  const api = '/app/api/embedding/';
  const e = (await (await fetch(api + 'list')).json()).data[0];
  const q = '?name=' + encodeURIComponent(e.name);
  const vectors = await (await fetch(api + 'tensor' + q)).blob();
  const metadata = await (await fetch(api + 'metadata' + q)).text();
  const out = {name: e.name, shape: e.shape};
  for (const [projection, maxDimension] of [['pca', 200], ['tsne', undefined], ['umap', undefined]]) {
    const r = await parseFromBlob({shape: e.shape, vectors, metadata, maxCount: 5000, maxDimension});
    let zero = 0;
    for (let i = 0; i < r.count; i++) if (r.vectors.subarray(i * r.dimension, (i + 1) * r.dimension).every(v => v === 0)) zero++;
    out[projection] = {count: r.count, dimension: r.dimension, zero_rows: zero};
  }
  return out;
})()"""

# Picks ``arguments[1]`` in the drop-down labelled ``arguments[0]``; returns an error string or "".
CHOOSE = """
const [label, option] = arguments;
const l = [...document.querySelectorAll('body *')].find(e => e.childElementCount === 0 && e.textContent.trim() === label);
const select = l && l.nextElementSibling;
if (!select || !select.querySelector('.list')) return 'no drop-down labelled ' + label;
const item = [...select.querySelectorAll('.list > *')].find(o => o.getAttribute('title') === option);
if (!item) return label + ' has no option ' + option;
select.firstElementChild.click();
item.click();
return '';
"""

EXPAND_GROUPS = """[...document.querySelectorAll('h3')].filter(h => h.parentElement.querySelector('.total'))
  .forEach(h => { if (!h.parentElement.nextElementSibling) h.parentElement.click(); })"""


@dataclass
class View:
    """One dashboard as the browser showed it."""

    name: str
    url: str
    text: str = ""
    drawn: set = field(default_factory=set)  # strings drawn into canvases: chart titles (tags), axis labels
    groups: dict = field(default_factory=dict)  # tag group -> number of tags
    images: list = field(default_factory=list)  # [{"src", "complete", "width", "height"}]
    canvases: list = field(default_factory=list)
    screenshot: str = ""  # PNG path
    probe: dict = field(default_factory=dict)  # the page's ``Page.probe`` result
    ink: float = 0.0  # share of the screenshot's content area (below the header, left of the settings) not background
    webgl_ink: list = field(default_factory=list)  # per WebGL canvas: its pixels in the screenshot not background


def snapshot(browser: Chromium) -> dict:
    out = browser.execute_script(SNAPSHOT)
    out["drawn"] = set(out["drawn"])
    return out


def wait_for(browser: Chromium, what: str, ready, timeout: float) -> dict:
    """Poll the page's snapshot until ``ready(snap)``; TimeoutException naming ``what`` and showing the page."""
    last = {}

    def check(driver):
        last["snap"] = snap = snapshot(driver)
        return snap if ready(snap) else None

    try:  # a JavascriptException: the document is being replaced
        return WebDriverWait(browser, timeout, 0.5, ignored_exceptions=[JavascriptException]).until(check)
    except TimeoutException:
        snap = last.get("snap") or {"url": "", "groups": [], "images": [], "canvases": [], "text": "(no snapshot)"}
        summary = {k: snap[k] for k in ("url", "groups", "images")}
        summary["canvases"] = [(c["kind"], c["inked"]) for c in snap["canvases"]]
        raise TimeoutException(
            f"{what}: not ready after {timeout:.0f} s; page: {summary}; text: {snap['text'][:600]!r}"
        ) from None


def _all_groups_drawn(snap) -> bool:
    """Every tag group expanded and one drawn chart per tag."""
    groups = snap["groups"]
    drawn = [c for c in snap["canvases"] if c["kind"] == "2d" and c["inked"]]
    return bool(groups) and all(g[2] for g in groups) and len(drawn) >= sum(g[1] for g in groups)


def _all_groups_imaged(snap) -> bool:
    groups = snap["groups"]
    loaded = [i for i in snap["images"] if i["complete"] and i["width"] > 0]
    return bool(groups) and all(g[2] for g in groups) and len(loaded) >= sum(g[1] for g in groups)


def _click(browser: Chromium, text: str) -> None:
    if not browser.execute_script(CLICK_TEXT, text):
        raise NoSuchElementException(f"nothing to click with the text {text!r}")


def _choose(browser: Chromium, label: str, option: str) -> None:
    error = browser.execute_script(CHOOSE, label, option)
    if error:
        raise NoSuchElementException(error)


@dataclass
class Page:
    """A dashboard: its route, when it is loaded, how to show everything, how to pose it for the docs."""

    name: str
    route: str
    loaded: callable  # snap -> bool: the data arrived
    expand: str | None = None  # JS that shows every tag
    complete: callable = None  # snap -> bool: everything drawn after ``expand``
    probe: str | None = None  # JS returning page-specific facts (``View.probe``)
    pose: callable = None  # browser -> None: the view of the docs' screenshot
    posed: callable = None  # snap -> bool: the pose is drawn
    settle: float = 1.5  # seconds to wait once posed (animations, a projection running in a worker)


def _pose_scalar(browser):
    # The tutorial's tags and the curiosity signal, side by side, through the tag search box.
    search = browser.find_element(By.CSS_SELECTOR, "input[placeholder^='Search tags']")
    search.send_keys("^(Training Reward|Eval Extrinsic reward|intrinsic/reward_mean|losses/forward)$")


def _pose_image(browser):
    # The latest evaluation (the step slider starts at the first of the sampled steps).
    slider = browser.find_element(By.CSS_SELECTOR, ".input-range__slider")
    slider.send_keys(Keys.ARROW_RIGHT * 12)  # VisualDL keeps 10 samples per tag


def _last_sample(snap) -> bool:
    m = re.search(r"Sample: (\d+)/(\d+)", snap["text"])
    return bool(m) and m.group(1) == m.group(2)


# The high-dimensional page's loading messages (locales/en/high-dimensional.json).
BUSY = (
    "Fetching tensor...",
    "Fetching metadata...",
    "Reading tensor...",
    "Reading metadata...",
    "Parsing data...",
    "Calculating...",
)


def _idle(snap) -> bool:
    return not any(b in snap["text"] for b in BUSY)


def _pose_embedding(browser):
    # UMAP, not the default PCA: VisualDL 2.5.3's PCA input is broken above 200 dimensions (EMBEDDING_INPUT).
    _click(browser, "UMAP")  # the page parses the data again (and resets the colour) before projecting
    wait_for(browser, "high-dimensional: UMAP selected", lambda s: "Neighbors" in s["text"] and _idle(s), 120)
    _click(browser, "2D")
    wait_for(browser, "high-dimensional: 2D", _idle, 120)
    _choose(browser, "Color by", "x_pos_bucket")


PAGES = {
    "scalar": Page(
        "scalar",
        "/app/scalar",
        loaded=lambda s: bool(s["groups"]),
        expand=EXPAND_GROUPS,
        complete=_all_groups_drawn,
        pose=_pose_scalar,
        posed=lambda s: (
            [g[:2] for g in s["groups"]] == [["Search Result", 4]]
            and sum(c["inked"] is True for c in s["canvases"]) >= 4
        ),
    ),
    "image": Page(
        "image",
        "/app/sample/image",
        loaded=lambda s: bool(s["groups"]),
        expand=EXPAND_GROUPS,
        complete=_all_groups_imaged,
        pose=_pose_image,
        posed=_last_sample,
    ),
    "histogram": Page(
        "histogram",
        "/app/histogram",
        loaded=lambda s: bool(s["groups"]),
        expand=EXPAND_GROUPS,
        complete=_all_groups_drawn,
    ),
    "high-dimensional": Page(
        "high-dimensional",
        "/app/high-dimensional",
        loaded=lambda s: (
            "Points:" in s["text"]
            and "Component #1" in s["text"]
            and _idle(s)
            and any(c["kind"] == "webgl" for c in s["canvases"])
        ),
        probe=EMBEDDING_INPUT,
        pose=_pose_embedding,
        posed=lambda s: "Neighbors" in s["text"] and _idle(s) and s["selects"].get("Color by") == "x_pos_bucket",
        settle=6.0,
    ),
    "hyper-parameter": Page(
        "hyper-parameter", "/app/hyper-parameter", loaded=lambda s: "Trial ID" in s["text"] and "Metrics" in s["text"]
    ),
}


def ink(png: bytes, rect=None) -> tuple[int, int]:
    """(pixels that differ from the most common colour, all pixels) of the screenshot, inside ``rect`` (x, y, w, h)."""
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    if rect is not None:
        x, y, w, h = (int(round(v)) for v in rect)
        img = img[max(y, 0) : max(y + h, 0), max(x, 0) : max(x + w, 0)]
    if img.size == 0:
        return 0, 0
    flat = img.reshape(-1, 3).astype(np.int32)
    _, counts = np.unique((flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2], return_counts=True)
    return int(counts.sum() - counts.max()), int(counts.sum())


def save_png(png: bytes, path: str, colors: int = 128) -> None:
    """Write a screenshot as a palette PNG (UI colours and lines survive; a fraction of the size)."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    img.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)


def capture(browser: Chromium, base: str, page: Page, out_dir: str, timeout: float = 120.0) -> View:
    """Load ``page``, wait for its data, show every tag, record what is shown, pose it and screenshot it."""
    url = base + page.route
    browser.get(url)
    snap = wait_for(browser, f"{page.name}: load {url}", page.loaded, timeout)
    if page.expand:
        browser.execute_script(page.expand)
        snap = wait_for(browser, f"{page.name}: every tag drawn", page.complete, timeout)
    time.sleep(1.0)  # let the last chart animations settle
    snap = snapshot(browser)
    view = View(
        page.name,
        url,
        text=snap["text"],
        drawn=snap["drawn"],
        groups={g[0]: g[1] for g in snap["groups"]},
        images=snap["images"],
        canvases=snap["canvases"],
    )
    if page.probe:
        view.probe = browser.execute_script(page.probe)
    browser.execute_script("window.scrollTo(0, 0)")
    if page.pose:
        page.pose(browser)
        wait_for(browser, f"{page.name}: posed for the screenshot", page.posed, timeout)
        time.sleep(page.settle)
    png = browser.get_screenshot_as_png()
    os.makedirs(out_dir, exist_ok=True)
    view.screenshot = os.path.join(out_dir, f"{page.name}.png")
    save_png(png, view.screenshot)
    drawn, total = ink(png, rect=(0, 60, 1020, 10_000))  # below the header bar, left of the settings panel
    view.ink = drawn / max(total, 1)
    # WebGL canvases cannot be read back from the page: their pixels are judged on the screenshot.
    view.webgl_ink = [ink(png, c["rect"])[0] for c in snapshot(browser)["canvases"] if c["kind"] == "webgl"]
    return view


# ------------------------------------------------------------------ the docs' screenshots
DOCS_RUN = "mario_1-1_rnd"
# --video-interval 10: the greedy episode's intrinsic reward (eval/intrinsic_along_episode) at updates 10 and 20;
# --picture-interval 10: where the agent has been (explore/intrinsic_by_x).
DOCS_FLAGS = (
    "--world 1 --stage 1 --num-processes 2 --num-workers -1 --num-local-steps 64 --batch-size 2 --num-epochs 2 "
    "--num-global-steps 2560 --obs-norm-steps 4 --eval-interval 1 --video-interval 10 --picture-interval 10 "
    "--max-eval-steps 400 --histogram-interval 2 --embedding-interval 10 --seed 1"
).split()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--runs",
        default="",
        help="a folder holding runs/ to show (default: train a short Mario 1-1 run "
        "in a temporary folder: 20 updates of 2 envs x 64 steps)",
    )
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "visualdl"), help="where the PNGs go")
    p.add_argument("--pages", default=",".join(PAGES), help="comma-separated, from: " + ", ".join(PAGES))
    p.add_argument("--timeout", type=float, default=180.0, help="seconds each page may take to draw")
    args = p.parse_args(argv)
    binary = find_chromium()
    if binary is None:
        p.error("no chromium and chromedriver found: apt-get install -y chromium chromium-driver (or set $CHROMIUM)")
    pages = [PAGES[name] for name in args.pages.split(",")]
    with tempfile.TemporaryDirectory(prefix="vdl-shots-") as tmp:
        parent = os.path.abspath(args.runs) if args.runs else tmp
        if not args.runs:
            sys.path.insert(0, ROOT)
            from mario.train import main as train

            train(DOCS_FLAGS + ["--log-path", os.path.join(tmp, "runs"), "--run-name", DOCS_RUN])
        with visualdl_server(parent, log_dir=tmp) as base, Chromium(binary) as browser:
            for page in pages:
                view = capture(browser, base, page, args.out, timeout=args.timeout)
                print(
                    f"{view.screenshot}: {os.path.getsize(view.screenshot) / 1024:.0f} KiB, "
                    f"{len(view.groups)} tag groups, {len(view.drawn)} canvas strings, ink {view.ink:.2f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
