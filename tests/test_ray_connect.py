"""How a run reaches Ray: ``--vec-env ray`` starting (and stopping) a local instance of its own, also
beside a running cluster, and ``--ray-address auto`` joining one started with ``ray start --head``. Each
run is its own process, as a user's would be. Skipped when Ray is not installed (CI installs it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[distributed]" to run the Ray tests')

# Ray instances and actor processes; one xdist worker runs every Ray test, as "ray stop --force" and
# address="auto" would reach another worker's instance
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning"}
TINY = ["--num-processes", "2", "--num-workers", "1", "--num-local-steps", "8", "--batch-size", "2"]
TINY += ["--num-epochs", "1", "--num-global-steps", "32", "--obs-norm-steps", "1", "--eval-interval", "0"]
TINY += ["--video-interval", "0", "--histogram-interval", "0", "--embedding-interval", "0", "--num-threads", "1"]


def gridworld(tmp_path, name, *flags):
    cmd = [sys.executable, os.path.join(ROOT, "gridworld", "train.py"), *TINY, "--vec-env", "ray", *flags]
    cmd += ["--log-path", str(tmp_path / "runs"), "--run-name", name]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def gcs_servers() -> set[int]:
    """The process ids of every Ray instance's GCS server on this machine (one per instance)."""
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "gcs_server":
                    pids.add(int(pid))
        except OSError:  # the process ended meanwhile
            pass
    return pids


def test_a_run_starts_and_stops_its_own_local_ray(tmp_path):
    before = gcs_servers()  # a machine may run other instances (CI's has); this run must add none
    res = gridworld(tmp_path, "own")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert (tmp_path / "runs" / "own" / "models" / "gridworld_DoorKey-5x5_2.pdparams").exists()  # 2 updates
    # connect("") started the instance, so the run shut it down: no GCS server of its own is left
    assert gcs_servers() <= before


def test_ray_address_auto_joins_a_cluster_started_by_ray_start(tmp_path):
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    assert ray_cli, "the ray command comes with the distributed extra"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = [ray_cli, "start", "--head", "--port", str(port), "--num-cpus", "2", "--include-dashboard=false"]
    env = {**ENV, "PYTHONPATH": ROOT}  # the actors import the env factories from this checkout
    started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    try:
        res = gridworld(tmp_path, "joined", "--ray-address", "auto")
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        # without --ray-address a run starts an instance of its own beside the cluster (Ray's own default
        # would join the cluster and then refuse num_cpus)
        res = gridworld(tmp_path, "beside")
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        assert "Connecting to existing Ray cluster" not in res.stdout + res.stderr
        # the run left the cluster running (it did not start it): a later process still joins it
        probe = "import ray; ray.init(address='auto'); print('nodes', len(ray.nodes()))"
        still = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        assert still.returncode == 0 and "nodes 1" in still.stdout, still.stderr[-2000:]
    finally:
        subprocess.run([ray_cli, "stop", "--force"], env=env, capture_output=True, text=True, timeout=120)
