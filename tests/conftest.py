"""Shared fixtures. Tests run on the CPU with the real emulators and real Paddle."""

import os
import shutil
import sys
import tempfile
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore", message="No ccache found")

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from short_runs import mario_run, montezuma_run  # noqa: E402,F401  session fixtures: tiny real training runs


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """Every test that uses a short run (directly or through another fixture) joins one xdist group, so
    that one worker makes each session fixture once for all of them."""
    for item in items:
        if {"mario_run", "montezuma_run"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("short_runs"))


def pytest_configure(config):
    """The suites' machine-wide run claims (benchmarks/lanes.py): each test process its own folder, apart
    from a real lane's, removed at its end."""
    config.run_claims = tempfile.mkdtemp(prefix="run-claims-")
    os.environ["CURIOSITY_RUN_CLAIMS"] = config.run_claims


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "run_claims", ""), ignore_errors=True)
