"""Play a trained gridworld agent greedily and record an mp4: ``python gridworld/play.py --checkpoint PATH``."""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # `python gridworld/play.py` from a checkout: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common.ppo.play import play  # noqa: E402
from gridworld.train import SPEC  # noqa: E402


def main(argv=None):
    return play(SPEC, argv)


if __name__ == "__main__":
    main()
