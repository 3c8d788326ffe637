"""Play a trained gridworld agent greedily and record an mp4: ``python gridworld/play.py --checkpoint PATH``."""

from __future__ import annotations

from common.ppo.play import play
from gridworld.train import SPEC


def main(argv=None):
    return play(SPEC, argv)


if __name__ == "__main__":
    main()
