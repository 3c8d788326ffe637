"""Play a trained mario agent greedily and record an mp4: ``python mario/play.py --checkpoint PATH``."""

from __future__ import annotations

from common.ppo.play import play
from mario.train import SPEC


def main(argv=None):
    return play(SPEC, argv)


if __name__ == "__main__":
    main()
