"""Every notebook runs top to bottom in quick mode (real kernel, real training, no mocks).

The kernel is this interpreter (``sys.executable -m ipykernel_launcher``) through a
throw-away kernelspec on ``JUPYTER_PATH``, so the test works in a fresh CI venv
whatever kernels the machine has registered. ``NOTEBOOK_QUICK=1`` selects quick mode,
``NOTEBOOK_RUNS`` keeps run folders out of the repository.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB_DIR = os.path.join(ROOT, "notebooks")
sys.path.insert(0, NB_DIR)
import make_notebooks  # noqa: E402

pytestmark = pytest.mark.slow  # real emulators, training runs, processes or servers

KERNEL = "paddle-curiosity-test"


def test_notebooks_are_generated_and_outputs_free():
    for name in make_notebooks.NOTEBOOKS:
        path = os.path.join(NB_DIR, name)
        with open(path, encoding="utf-8") as f:
            assert f.read() == make_notebooks.render(name), f"{name}: run python notebooks/make_notebooks.py"
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
        first_code = next(c for c in nb.cells if c.cell_type == "code").source
        assert "QUICK" in first_code and "NOTEBOOK_QUICK" in first_code


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "paddle-curiosity tests",
                "language": "python",
            }
        )
    )
    saved = {
        k: os.environ.get(k)
        for k in ("JUPYTER_PATH", "NOTEBOOK_QUICK", "NOTEBOOK_RUNS", "OMP_NUM_THREADS", "MPLBACKEND")
    }
    os.environ.update(
        JUPYTER_PATH=str(root),
        NOTEBOOK_QUICK="1",
        NOTEBOOK_RUNS=str(root / "runs"),
        OMP_NUM_THREADS="1",
        MPLBACKEND="module://matplotlib_inline.backend_inline",
    )
    try:
        yield root
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("name", sorted(make_notebooks.NOTEBOOKS))
def test_notebook_runs_in_quick_mode(name, kernel_env):
    nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name=KERNEL, timeout=300, allow_errors=False, resources={"metadata": {"path": NB_DIR}}
    )
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell if one fails
    seconds = time.perf_counter() - t0
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "quick True" in text and "pip install" not in text  # quick mode; the install step was skipped
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, "no matplotlib figure was shown"
    if name == "snd_dqn_pong.ipynb":  # the zoo agent, three short Pong runs overlaid, an eval video, VisualDL
        html = [o for o in outputs if "text/html" in o.get("data", {}) and "<video" in o["data"]["text/html"]]
        from common import zoo

        has_zoo_agent = any(c["game"] == "pong" for c in zoo.cards())
        assert len(html) == 1 + has_zoo_agent and all("data:video/mp4;base64," in h["data"]["text/html"] for h in html)
        assert has_zoo_agent or "no trained pong agent in zoo/ yet" in text
        assert "visualdl --logdir snd_dqn_pong" in text and all(
            f"{a}: last eval return" in text for a in ("dqn", "dqn-e0", "snd")
        )
    elif name != "snd_variants.ipynb":
        html = [o for o in outputs if "text/html" in o.get("data", {}) and "<video" in o["data"]["text/html"]]
        from common import zoo

        game = name.split("_")[0]
        has_zoo_agent = any(c["game"] == game for c in zoo.cards())
        assert len(html) == 2 + has_zoo_agent, "expected the zoo agent's, the eval and the play videos, embedded"
        if has_zoo_agent and game == "mario":  # the zoo agent's episode, as its card says
            assert "flag 1" in text
        if has_zoo_agent and game == "montezuma":  # the card the notebook plays: its episode, as the card says
            ep = zoo.agents_of(game)[0]["episode"]
            assert f"rooms {ep['rooms']:.0f}, score {ep['score']:.0f}" in text
        if game == "mario":  # the whole level, stitched from the zoo agent's screens
            assert "'flag': True" in text and "'height': 208" in text
        elif not has_zoo_agent:
            assert f"no trained {game} agent in zoo/ yet" in text
        assert "data:video/mp4;base64," in html[0]["data"]["text/html"]
        assert "visualdl --logdir" in text
        # the play script's result line (run with the kernel's interpreter), then its video
        assert {
            "mario_rnd_ppo.ipynb": "mario 1-1 (update 2): ",
            "montezuma_rnd_ppo.ipynb": "montezuma level1 (update ",
        }[name] in text, text[-2000:]
        # curiosity at work: the episode's intrinsic reward redrawn, where the agent has been, play.py's picture
        assert "highest peaks at steps" in text and "2 pictures of where the agent has been" in text, text[-3000:]
        assert {"mario_rnd_ppo.ipynb": " plot ", "montezuma_rnd_ppo.ipynb": " map "}[name] in text
        assert len(images) >= 4
        if name == "montezuma_rnd_ppo.ipynb":  # inside the rooms: the heatmap and its rank correlation
            assert " heatmap " in text and "rank correlation" in text and len(images) >= 5
    print(f"{name}: {seconds:.1f} s")


def test_notebook_headings_are_bilingual():
    # The tutorial's readers are Chinese: every title and section heading reads "English / 中文".
    for name in make_notebooks.NOTEBOOKS:
        for cell in make_notebooks.build(name).cells:
            if cell.cell_type != "markdown":
                continue
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    assert re.search(r" / .*[\u4e00-\u9fff]", line), f"{name}: heading without Chinese: {line}"
