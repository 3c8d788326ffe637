"""The Mario env gives the same game on both supported stacks: Python 3.10-3.12 with gym 0.26, nes-py 8
and numpy 1 (AI Studio's), Python 3.13 with gymnasium, nes-py 9 and numpy 2.

``tests/fixtures/mario_1_1_replay.json`` was recorded on the first stack by running this file as a script
(``python tests/test_mario_stack.py``): a fixed action sequence on 1-1 and, per agent step, the reward,
x_pos, flag, done and a hash of the observation stack. The test replays it on whichever stack is
installed and compares every step."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "mario_1_1_replay.json")
#: SIMPLE_MOVEMENT indices: run and jump right, with pauses and a step back, so the score, x_pos and
#: jump physics all move; 400 agent steps or until the first death
PATTERN = [1, 2, 2, 2, 2, 3, 1, 1, 4, 0, 2, 2, 2, 6, 1, 2, 2, 2, 3, 3]


def replay(steps: int = 400) -> list:
    if __package__ in (None, ""):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mario.env import MarioEnv

    env = MarioEnv(world=1, stage=1, action_type="simple")
    try:
        obs = env.reset()
        out = [["reset", hashlib.sha256(obs.tobytes()).hexdigest()[:16]]]
        for t in range(steps):
            obs, reward, done, info = env.step(PATTERN[t % len(PATTERN)])
            digest = hashlib.sha256(obs.tobytes()).hexdigest()[:16]
            out.append([round(float(reward), 6), int(info["x_pos"]), bool(info["flag_get"]), bool(done), digest])
            if done:
                break
    finally:
        env.close()
    return out


def test_the_same_game_on_this_stack_as_on_the_recorded_one():
    with open(FIXTURE, encoding="utf-8") as f:
        want = json.load(f)
    got = replay(len(want["steps"]) - 1)
    assert len(got) == len(want["steps"])
    for t, (a, b) in enumerate(zip(got, want["steps"])):
        if t == 0:
            assert a == b, "the reset observation differs"
            continue
        assert np.isclose(a[0], b[0], atol=1e-6) and a[1:] == b[1:], f"step {t}: {a} != {b} (recorded)"
    assert max(s[1] for s in want["steps"][1:]) > 300  # the sequence does move Mario along


if __name__ == "__main__":
    from importlib.metadata import version

    steps = replay()
    with open(FIXTURE, "w", encoding="utf-8") as f:
        json.dump(
            {
                "recorded_with": {
                    "python": sys.version.split()[0],
                    "numpy": np.__version__,
                    "nes_py": version("nes-py"),
                    "gym_super_mario_bros": version("gym-super-mario-bros"),
                },
                "pattern": PATTERN,
                "steps": steps,
            },
            f,
            indent=0,
        )
    print(f"wrote {FIXTURE}: {len(steps) - 1} steps, last x_pos {steps[-1][1]}")
