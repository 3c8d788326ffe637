"""The games, by name: the one place that says which module defines each game's ``GameSpec``.

A game is a folder with a ``train.py`` that defines ``SPEC`` (``common.run.game.GameSpec``). The zoo,
the background evaluation process and every tool that starts from a game's name find its spec here;
adding a game is one line below (docs/adding_a_game.md). Importing this module imports no game.
"""

from __future__ import annotations

import importlib

#: game name (``GameSpec.name``) -> the importable module that defines its ``SPEC``
GAMES = {
    "mario": "mario.train",
    "montezuma": "montezuma.train",
    "gridworld": "gridworld.train",
    "pong": "pong.train",
}


def names() -> tuple[str, ...]:
    return tuple(GAMES)


def module_of(name: str) -> str:
    """The module that defines game ``name``'s ``SPEC``; ``ValueError`` naming the games otherwise."""
    if name not in GAMES:
        raise ValueError(f"game {name!r} is not one of {', '.join(GAMES)} (common/run/games.py)")
    return GAMES[name]


def spec_of(name: str):
    """Game ``name``'s ``GameSpec`` (its module imported)."""
    return importlib.import_module(module_of(name)).SPEC
