"""Play a trained montezuma agent greedily and record an mp4: ``python montezuma/play.py --checkpoint PATH``.

``--map PATH`` also draws the training run's map of the first level's rooms as it stood at that
checkpoint (``montezuma.pictures``: each room coloured by how many training episodes reached it,
labelled with the update of its first visit), the rooms of the played episode outlined.
"""

from __future__ import annotations

from common.ppo.play import play
from montezuma.train import SPEC


def add_map_flag(parser) -> None:
    parser.add_argument(
        "--map",
        default="",
        metavar="PATH",
        help="also draw the training run's map of the first level's rooms at this checkpoint to this PNG "
        "(rooms coloured by the training episodes that reached them, labelled with the update of their "
        "first visit; the played episode's rooms outlined)",
    )


def draw_map(args, state: dict, result: dict) -> dict:
    """``--map``: the room map of the checkpoint's run, the played episode's rooms outlined."""
    if not args.map:
        return {}
    from common.pictures import save_png
    from montezuma import pictures

    visited = state.get("visited", {})
    if not isinstance(visited, dict):  # a checkpoint from before first visits were recorded: a list
        visited = dict.fromkeys(visited)
    table = pictures.room_table(visited, state.get("visit_counts", {}), result["info"].get("rooms", ()))
    title = f"Montezuma's Revenge, level 1: the rooms training episodes reached by update {state['update']}"
    save_png(args.map, pictures.draw_rooms(table, title))
    return {"map": args.map}


def main(argv=None):
    return play(SPEC, argv, add_arguments=add_map_flag, after=draw_map)


if __name__ == "__main__":
    main()
