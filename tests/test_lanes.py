"""benchmarks/lanes.py, the scheduler of the long-run suites: the ways a multi-day lane can lose a stop, a
run or its state, each on real files and processes."""

import json
import os
import signal
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import lanes  # noqa: E402
import mario_no_reward  # noqa: E402


def _checkpoint(path, update):
    from common.run.checkpoint import save_checkpoint

    state = {"game": "mario", "config": {}, "update": update, "policy": {"w": np.full(3, update, np.float32)}}
    save_checkpoint(str(path), {**state, "optimizer": {}})


def _packed(state, name, update):
    os.makedirs(state / name / "models")
    _checkpoint(state / name / "models" / f"x_{update}.pdparams", update)
    (state / name / "metrics.jsonl").write_text(json.dumps({"tag": "t", "step": update, "value": 1.0}) + "\n")


def test_a_packed_run_replaces_a_folder_without_a_checkpoint_or_with_an_older_one(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    for name in ("empty", "older", "newer"):
        _packed(state, name, 4)
    os.makedirs(out / "empty")  # a start that died before its first checkpoint
    os.makedirs(out / "older" / "models")
    _checkpoint(out / "older" / "models" / "x_2.pdparams", 2)  # the machine this run left two moves ago
    os.makedirs(out / "newer" / "models")
    _checkpoint(out / "newer" / "models" / "x_6.pdparams", 6)  # trained on here since it was packed
    assert lanes.restore_state(str(out), str(state)) == ["empty", "older"]
    assert lanes.newest_checkpoint(str(out / "empty"), "x")[1] == 4
    assert [n for n, _ in lanes.numbered_checkpoints(str(out / "older"), "x")] == [4]
    assert lanes.newest_checkpoint(str(out / "newer"), "x")[1] == 6  # kept: newer than the pack
    assert lanes.restore_state(str(out), str(state)) == []  # and once restored, never again


def _planned(tmp_path, name, code, partial=True):
    def summarize(out, status):
        with open(os.path.join(out, name, "metrics.jsonl")) as f:  # what a summary reads first
            return {"status": status, "records": len(f.readlines())}

    return lanes.PlannedRun(
        name=name,
        argv=lambda resume: [sys.executable, "-c", code],
        prefix="x",
        summarize=summarize,
        summary_path=str(tmp_path / f"{name}.json"),
        resume=lambda run_dir: (None, 0),
        partial_summaries=partial,
    )


def _writes_metrics(run_dir, lines=1):
    """A run's code that writes ``lines`` metrics records into ``run_dir`` and exits 0."""
    path = str(run_dir / "metrics.jsonl")
    return f"import os; os.makedirs({str(run_dir)!r}, exist_ok=True); open({path!r}, 'w').write('x\\n' * {lines})"


def test_a_run_that_fails_before_writing_metrics_is_reported_and_the_plan_goes_on(tmp_path):
    out = tmp_path / "out"
    plan = [
        _planned(tmp_path, "bad-flag", "raise SystemExit(2)"),
        _planned(tmp_path, "fine", _writes_metrics(out / "fine")),
    ]
    assert lanes.run_plan(plan, str(out), say_todo=False) == ["bad-flag"]
    assert not (tmp_path / "bad-flag.json").exists()
    assert json.loads((tmp_path / "fine.json").read_text()) == {"status": "budget", "records": 1}


def test_a_resumed_run_reads_running_in_its_summary_from_its_start(tmp_path):
    """--status reads the summary: a stopped run that is resumed must not read "stopped" until its next save."""
    out = tmp_path / "out"
    os.makedirs(out / "r" / "models")
    _checkpoint(out / "r" / "models" / "x_3.pdparams", 3)
    (out / "r" / "metrics.jsonl").write_text("x\n")
    (tmp_path / "r.json").write_text(json.dumps({"status": "stopped", "records": 1}))
    seen = tmp_path / "seen"
    code = f"import json; open({str(seen)!r}, 'w').write(json.load(open({str(tmp_path / 'r.json')!r}))['status'])"
    run = _planned(tmp_path, "r", code)
    run.resume = lambda run_dir: (os.path.join(run_dir, "models", "x_3.pdparams"), 3)
    lanes.run_plan([run], str(out), say_todo=False)
    assert seen.read_text() == "running"
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "budget"


def test_runs_started_from_a_background_job_can_be_stopped_before_their_trainer_starts(tmp_path):
    """A script's background job (`cmd &`) ignores SIGINT, and children inherit an ignored signal: the
    stop that stop_runs sends would be lost until a trainer installs its own handler. run_plan gives its
    runs Python's default again."""
    seen = tmp_path / "disposition"
    code = f"import signal; open({str(seen)!r}, 'w').write(repr(signal.getsignal(signal.SIGINT)))"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        lanes.run_plan([_planned(tmp_path, "r", code, partial=False)], str(tmp_path / "out"), say_todo=False)
    finally:
        signal.signal(signal.SIGINT, before)
    assert "default_int_handler" in seen.read_text()


def test_an_attempt_that_left_no_checkpoint_adds_no_time_to_its_run(tmp_path):
    out = tmp_path / "out"
    os.makedirs(out / "r")  # a start that died before its first checkpoint, and its segment
    lanes.segment_event(str(out), "r", event="start", commit="a" * 40, resume_update=0)
    lanes.segment_event(str(out), "r", event="end", returncode=-9)
    lanes.run_plan([_planned(tmp_path, "r", _writes_metrics(out / "r"))], str(out), say_todo=False)
    assert [e["event"] for e in lanes.read_segments(str(out), "r")] == ["start", "end"]  # this attempt's only


def test_segment_seconds_are_utc_whatever_the_local_zone(tmp_path, monkeypatch):
    """Two hours across a daylight-saving change in the local zone are still two hours."""
    events = [
        {"time": "2026-03-29T01:30:00Z", "event": "start", "commit": "a" * 40, "resume_update": 0},
        {"time": "2026-03-29T03:30:00Z", "event": "end", "returncode": 0},
    ]
    (tmp_path / "run.segments.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        assert lanes.segment_facts(str(tmp_path), "run")[0] == 7200
    finally:
        monkeypatch.undo()
        time.tzset()


def test_trainer_flags_need_folders_of_their_own(tmp_path, capsys):
    """A small budget resumed from the plan's own checkpoints or packs would end them and mark them finished."""
    own = ["--out", str(tmp_path / "out"), "--results", str(tmp_path / "results")]
    for folders in ([], own):  # the plan's folders; its packs (the default --state) still
        with pytest.raises(SystemExit) as stop:
            mario_no_reward.main(["--runs", "rnd:0", "--num-global-steps", "1000", *folders])
        assert stop.value.code == 2 and "--out, --results and --state of their own" in capsys.readouterr().err


def test_a_pack_cut_short_between_its_renames_is_restored_from_the_earlier_one(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    _packed(state, "r", 4)
    os.replace(state / "r", state / "r.old")  # the stop came after the first rename
    assert lanes.restore_state(str(out), str(state)) == ["r"]
    assert lanes.newest_checkpoint(str(out / "r"), "x")[1] == 4


def test_a_run_that_ignores_the_stop_is_killed_after_the_grace_period():
    import subprocess

    code = (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout.readline().strip() == b"ready"
    t0 = time.monotonic()
    assert lanes.stop_runs([proc], grace=1.0) == [-signal.SIGKILL]
    assert time.monotonic() - t0 < 10


def test_a_run_another_process_is_at_work_on_is_skipped_and_left_untouched(tmp_path):
    """Two suites (or a suite and an orphaned trainer) on one run: the second must not cut its metrics,
    delete its folder or start a trainer in it, and the run is not a failure."""
    import fcntl

    out = tmp_path / "out"
    os.makedirs(out / "r")
    (out / "r" / "metrics.jsonl").write_text("x\n" * 3)  # no checkpoint yet: the folder a restart deletes
    trainer = os.open(out / "r" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(trainer, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a training run holds
    plan = [_planned(tmp_path, "r", _writes_metrics(out / "r", lines=5))]
    try:
        assert lanes.run_plan(plan, str(out), say_todo=False) == []
        assert (out / "r" / "metrics.jsonl").read_text() == "x\n" * 3 and not (tmp_path / "r.json").exists()
    finally:
        os.close(trainer)
    suite = lanes.claim_run(str(out), "r")  # another suite process at work on it
    try:
        assert lanes.claim_run(str(out), "r") is None
        assert lanes.run_plan(plan, str(out), say_todo=False) == []
        assert (out / "r" / "metrics.jsonl").read_text() == "x\n" * 3
    finally:
        suite.close()
    assert lanes.run_plan(plan, str(out), say_todo=False) == []  # free again: it runs
    assert (out / "r" / "metrics.jsonl").read_text() == "x\n" * 5


def test_a_run_claimed_by_a_suite_in_another_clone_is_skipped_naming_it(tmp_path, capsys):
    """Two clones of the repository have their own suite folders of one name; a run name is the same in
    both. While a suite in one trains it, a suite in the other skips it rather than train it a second
    time; a check in a scratch folder of another name runs."""
    here, other, scratch = tmp_path / "clone_a" / "out", tmp_path / "clone_b" / "out", tmp_path / "check"
    plan = [_planned(tmp_path, "r", _writes_metrics(other / "r", lines=5))]
    claim = lanes.claim_run(str(here), "r")
    try:
        assert lanes.claimed_by(str(other), "r") == f"process {os.getpid()}, suite folder {here}"
        assert lanes.run_plan(plan, str(other), say_todo=False) == []
        assert not (other / "r" / "metrics.jsonl").exists()
        assert f"r: in use by another process (a suite or a trainer) (claimed by process {os.getpid()}" in (
            capsys.readouterr().out
        )
        check = [_planned(scratch, "r", _writes_metrics(scratch / "r", lines=2))]  # (its own summary too)
        assert lanes.run_plan(check, str(scratch), say_todo=False) == []
        assert (scratch / "r" / "metrics.jsonl").read_text() == "x\n" * 2
    finally:
        claim.close()
    assert lanes.claimed_by(str(other), "r") == ""  # its note outlives it, but is not read
    assert lanes.run_plan(plan, str(other), say_todo=False) == []  # free again: it runs
    assert (other / "r" / "metrics.jsonl").read_text() == "x\n" * 5


def test_without_a_usable_folder_for_machine_claims_a_suite_claims_in_its_clone(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(lanes, "MACHINE_CLAIMS", str(tmp_path / "file" / "claims"))  # not a folder
    out = tmp_path / "out"
    assert lanes.run_plan([_planned(tmp_path, "r", _writes_metrics(out / "r"))], str(out), say_todo=False) == []
    assert (out / "r" / "metrics.jsonl").exists()
    assert "r is claimed in this clone only" in capsys.readouterr().out


def test_a_paddle_too_old_is_named_once_before_any_run_starts(tmp_path, monkeypatch):
    """Not in every run's log; and a suite's --status, --report-only or --help, which train nothing, are
    not refused (interrupt_on_sigterm, the first thing a suite does, lets it pass)."""
    import paddle

    monkeypatch.setattr(paddle, "__version__", "2.5.2")
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    try:
        lanes.interrupt_on_sigterm()
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGHUP, handlers[1])
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"PaddlePaddle 2\.5\.2 is installed; this project needs 2\.6"):
        lanes.run_plan([_planned(tmp_path, "r", _writes_metrics(out / "r"))], str(out), say_todo=False)
    assert not (out / "r").exists()


def test_a_run_stopped_by_a_signal_before_its_trainer_handles_one_stops_the_plan_unrestarted(tmp_path):
    """SIGTERM or SIGINT can reach a run while it still loads (no handler yet): it dies of the signal,
    which is a stop from outside, not a crash to restart; the plan stops with it."""
    out = tmp_path / "out"
    plan = [
        _planned(tmp_path, "r", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"),
        _planned(tmp_path, "next", _writes_metrics(out / "next")),
    ]
    assert lanes.run_plan(plan, str(out), say_todo=False) == []
    assert [e["event"] for e in lanes.read_segments(str(out), "r")] == ["start", "end"]  # not started again
    assert not (out / "next").exists()


def test_a_pack_is_never_replaced_by_an_older_checkpoint(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    _packed(state, "r", 6)
    os.makedirs(out / "r" / "models")
    _checkpoint(out / "r" / "models" / "x_4.pdparams", 4)  # a machine the run left, behind its pack
    (out / "r" / "metrics.jsonl").write_text("x\n")
    run = _planned(tmp_path, "r", "")
    assert lanes.pack_state([run], str(out), str(state)) == []
    assert lanes._packed_checkpoint(str(state / "r"))[1] == 6
    _checkpoint(out / "r" / "models" / "x_8.pdparams", 8)  # trained on past the pack
    assert lanes.pack_state([run], str(out), str(state)) == ["r"]
    assert lanes._packed_checkpoint(str(state / "r"))[1] == 8
    os.replace(state / "r", state / "r.old")  # a pack of update 8 cut short between its renames
    _checkpoint(out / "r" / "models" / "x_6.pdparams", 6)
    os.remove(out / "r" / "models" / "x_8.pdparams")  # a folder behind it
    assert lanes.pack_state([run], str(out), str(state)) == []
    assert lanes._packed_checkpoint(str(state / "r.old"))[1] == 8 and not (state / "r").exists()
    _checkpoint(out / "r" / "models" / "x_10.pdparams", 10)  # past it: packed, and the earlier pack goes
    assert lanes.pack_state([run], str(out), str(state)) == ["r"]
    assert lanes._packed_checkpoint(str(state / "r"))[1] == 10 and not (state / "r.old").exists()
    os.replace(state / "r", state / "r.old")
    (tmp_path / "r.json").write_text(json.dumps({"status": "budget"}))  # the run is done: no pack is kept
    assert lanes.pack_state([run], str(out), str(state)) == [] and not os.listdir(state)


def test_a_run_whose_start_fails_lets_go_of_its_claim(tmp_path):
    """An error or a Ctrl-C between claiming a run and starting it (here: its metrics cannot be read) must
    not leave the claim held, or this process would skip the run as "in use" from then on."""
    import dataclasses

    def unreadable(run_dir):
        raise ValueError(f"{run_dir}/metrics.jsonl, line 2: not a JSON record")

    out = tmp_path / "out"
    plan = [dataclasses.replace(_planned(tmp_path, "r", _writes_metrics(out / "r")), resume=unreadable)]
    with pytest.raises(ValueError, match="line 2"):
        lanes.run_plan(plan, str(out), say_todo=False)
    claim = lanes.claim_run(str(out), "r")
    assert claim is not None
    claim.close()

    def no_command(resume):
        raise KeyboardInterrupt  # a Ctrl-C once its start is written down

    plan = [dataclasses.replace(plan[0], resume=lambda run_dir: (None, 0), argv=no_command)]
    with pytest.raises(KeyboardInterrupt):
        lanes.run_plan(plan, str(out), say_todo=False)
    assert [e["event"] for e in lanes.read_segments(str(out), "r")] == ["start", "end"]  # its end written too
    lanes.claim_run(str(out), "r").close()


def test_a_pack_leaves_out_the_moments_of_every_optimizer_whatever_its_entry_is_called(tmp_path):
    from common.run.checkpoint import load_checkpoint, save_checkpoint

    moments = {"@param0_moment1": np.ones(3, np.float32), "@param0_moment2": np.full(3, 1e-9, np.float32)}
    state = {"game": "mario", "config": {}, "update": 2, "policy": {"w": np.ones(3, np.float32)}, "optimizer": {}}
    save_checkpoint(str(tmp_path / "x_2.pdparams"), {**state, "intrinsic": {"opt": moments, "net": {"b": 1.5}}})
    lanes.slim_checkpoint(str(tmp_path / "x_2.pdparams"), str(tmp_path / "slim.pdparams"))
    slim = load_checkpoint(str(tmp_path / "slim.pdparams"))
    assert slim["intrinsic"]["opt"] == {} and slim["intrinsic"]["net"] == {"b": 1.5}  # ICM's and E3B's key


def test_a_run_gets_its_stop_when_its_suite_is_killed_without_one(tmp_path):
    """A suite killed outright (SIGKILL, the OOM killer) cannot pass a stop on: its run must get one anyway,
    save and exit, instead of training on unwatched (its checkpoints unpruned, its folder fought over)."""
    import subprocess
    import textwrap

    marker, out = tmp_path / "stopped", tmp_path / "out"
    run = (
        f"import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r}, 'w').write('saved'), sys.exit(143)))\n"
        f"print('ready', flush=True)\n"
        f"time.sleep(60)\n"
    )
    suite = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "benchmarks")!r})
        import lanes
        run = lanes.PlannedRun(
            name="r", argv=lambda resume: [sys.executable, "-c", {run!r}], prefix="x",
            summarize=lambda out, status: {{}}, summary_path={str(tmp_path / "r.json")!r},
            resume=lambda run_dir: (None, 0), partial_summaries=False,
        )
        lanes.run_plan([run], {str(out)!r}, say_todo=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", suite], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not ((out / "r.log").exists() and "ready" in (out / "r.log").read_text()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while not (marker.exists() and marker.read_text() == "saved") and time.monotonic() < deadline:
        time.sleep(0.1)  # (the run's handler makes the file, then writes it: wait for both)
    assert marker.exists() and marker.read_text() == "saved"


def test_a_segment_line_torn_by_a_stop_is_left_out_and_the_next_event_starts_a_line(tmp_path):
    start = {"time": "2026-12-07T00:00:00Z", "event": "start", "commit": "a" * 40, "resume_update": 0}
    (tmp_path / "r.segments.jsonl").write_text(json.dumps(start) + '\n{"time": "2026-12-07T01:')
    assert lanes.read_segments(str(tmp_path), "r") == [start]
    with pytest.warns(RuntimeWarning, match="cut the torn last line"):
        lanes.segment_event(str(tmp_path), "r", event="end", returncode=130)
    assert [e["event"] for e in lanes.read_segments(str(tmp_path), "r")] == ["start", "end"]


def test_a_pack_that_cannot_be_read_leaves_the_folder_it_would_replace(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    _packed(state, "r", 6)
    (state / "r" / "models" / "x_6.pdparams").write_bytes(b"not a checkpoint")  # a bad merge, say
    os.makedirs(out / "r" / "models")
    _checkpoint(out / "r" / "models" / "x_4.pdparams", 4)
    with pytest.raises(Exception, match="x_6.pdparams"):
        lanes.restore_state(str(out), str(state))
    assert lanes.newest_checkpoint(str(out / "r"), "x")[1] == 4  # still there, full precision


def test_runs_of_every_suite_parse_keys_and_stars_match_the_plan():
    """--runs: each suite's keys, a * part standing for the planned runs it matches; a bad item or a star
    matching nothing is refused by name (before anything runs)."""
    plan = (("rnd", 0), ("none", 0), ("rnd", 1))
    parts = (("METHOD", ("rnd", "none")), ("SEED", None))
    assert lanes.parse_keys("rnd:*", plan, parts) == (("rnd", 0), ("rnd", 1))
    assert lanes.parse_keys("none:3,*:0", plan, parts) == (("none", 3), ("rnd", 0), ("none", 0))
    for bad in ("rnd", "rnd:x", "icm:0", "rnd:0:1", "rnd:-1"):
        with pytest.raises(SystemExit, match=f"--runs '{bad}' is invalid: expected METHOD:SEED .*one of rnd, none"):
            lanes.parse_keys(bad, plan, parts)
    with pytest.raises(SystemExit, match="'none:\\*' matches no run"):
        lanes.parse_keys("none:*", plan[:1], parts)
    import mario_flag

    assert mario_flag.parse_runs("4-4:*:*") == tuple(k for k in mario_flag.PLAN if k[0] == "4-4")
    with pytest.raises(SystemExit, match="LEVEL one of 1-1, 4-4"):
        mario_flag.parse_runs("1-2:rnd:0")


@pytest.mark.parametrize(
    "name, folders", [("montezuma_snd", "--out, --results and --state"), ("snd_signal", "--out and --results")]
)
def test_trainer_flags_that_change_the_runs_need_folders_of_their_own(name, folders, tmp_path, capsys):
    """A small budget on the plan's own folders would end its runs early and mark them finished: refused,
    naming the folders to give (a suite that packs nothing needs no --state); with its own folders, it passes
    the check (--status runs nothing)."""
    import importlib

    suite = importlib.import_module(name)
    with pytest.raises(SystemExit):
        suite.main(["--num-epochs", "1", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert f"trainer flags --num-epochs change the runs: give them an {folders} of their own" in err
    assert repr(suite.RESULTS) in err and repr(str(tmp_path / "out")) not in err
    own = ["--out", str(tmp_path / "out"), "--results", str(tmp_path), "--state", str(tmp_path / "state")]
    assert suite.main(["--num-epochs", "1", "--status", *own]) == 0
