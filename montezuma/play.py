"""Play a trained montezuma agent greedily and record an mp4: ``python montezuma/play.py --checkpoint PATH``.

``--map PATH`` also draws the training run's map of the first level's rooms as it stood at that
checkpoint (``montezuma.pictures``: each room coloured by how many training episodes reached it,
labelled with the update of its first visit), the rooms of the played episode outlined.

``--heatmap PATH`` also lets the policy play ``--heatmap-steps`` more agent steps as it does in
training (actions sampled from it with ``--seed``, sticky actions, episodes back to back) and draws
where in each room those steps went, and, for a run with an intrinsic module, the mean intrinsic
reward the checkpoint's module pays in each part of the room (``montezuma.pictures.draw_positions``);
the numbers go to the same name with ``.npz``. The printed ``rank correlation`` (Spearman, over the
cells with at least 5 states) of visits and reward is negative when the module pays more where the
policy goes less: the novelty points away from the well-trodden parts of the room. The printed
``place share`` is the share of the reward's variance that the place explains (``pictures.place_share``).
"""

from __future__ import annotations

import os

import numpy as np

from common.ppo.play import play
from montezuma.train import SPEC

HEATMAP_STEPS = 20_000


def add_flags(parser):
    parser.add_argument(
        "--map",
        default="",
        metavar="PATH",
        help="also draw the training run's map of the first level's rooms at this checkpoint to this PNG "
        "(rooms coloured by the training episodes that reached them, labelled with the update of their "
        "first visit; the played episode's rooms outlined)",
    )
    parser.add_argument(
        "--heatmap",
        default="",
        metavar="PATH",
        help="also play --heatmap-steps steps with actions sampled as in training and draw where in each room "
        "they went and what the run's intrinsic module pays there, to this PNG (numbers: same name, .npz)",
    )
    parser.add_argument(
        "--heatmap-steps",
        type=int,
        default=HEATMAP_STEPS,
        help="agent steps played for --heatmap (one env; default: %(default)s)",
    )
    return ("heatmap_steps",), ("map", "heatmap")


def draw_map(args, state: dict, result: dict) -> dict:
    """``--map``: the room map of the checkpoint's run, the played episode's rooms outlined."""
    from common.pictures import save_png
    from montezuma import pictures

    visited = state.get("visited", {})
    if not isinstance(visited, dict):  # a checkpoint from before first visits were recorded: a list
        visited = dict.fromkeys(visited)
    table = pictures.room_table(visited, state.get("visit_counts", {}), result["info"].get("rooms", ()))
    title = f"Montezuma's Revenge, level 1: the rooms training episodes reached by update {state['update']}"
    save_png(args.map, pictures.draw_rooms(table, title))
    return {"map": args.map}


def sampled_walk(policy, env, steps: int, seed: int, module=None) -> dict:
    """Play ``steps`` agent steps with actions sampled from ``policy`` (numpy generator ``seed``), resetting
    the env (seeded with ``seed``) after each episode. Returns int64[steps] ``rooms``, ``cols``,
    ``rows`` (``MontezumaEnv.player_position`` after each step), ``rewards`` float32[steps] (the
    novelty of the state each step reached under ``module``, scored per episode; None without a
    module), ``screens`` {room: uint8[210, 160, 3]} (its first screen) and ``episodes`` (finished)."""
    import paddle

    from common.cpu import unit_floats
    from common.intrinsic.base import episode_rewards
    from common.ppo.actor import sample_actions

    rng = np.random.default_rng(seed)
    places, rewards, screens, episodes = [], [], {}, 0
    obs = env.reset(seed=seed)
    stacks, actions = [obs], []

    def score_episode():
        if module is not None and actions:
            rewards.append(episode_rewards(module, np.stack(stacks), actions))

    policy.eval()
    with paddle.no_grad():
        for _ in range(steps):
            logits = policy(unit_floats(obs[None]))[0].numpy()
            action = int(sample_actions(logits, rng)[0][0])
            obs, _, done, _ = env.step(action)
            place = env.player_position()
            places.append(place)
            if place[0] not in screens:
                screens[place[0]] = env.rgb_frame()
            stacks.append(obs)
            actions.append(action)
            if done:
                score_episode()
                episodes += 1
                obs = env.reset()
                stacks, actions = [obs], []
    score_episode()
    rooms, cols, rows = np.asarray(places, np.int64).reshape(-1, 3).T
    return {
        "rooms": rooms,
        "cols": cols,
        "rows": rows,
        "rewards": np.concatenate(rewards) if module is not None else None,
        "screens": screens,
        "episodes": episodes,
    }


def draw_heatmap(args, state: dict, cfg, policy) -> dict:
    """``--heatmap``: where the sampled policy goes in each room, and what the module pays there."""
    from common.intrinsic import intrinsic_for_run
    from common.pictures import save_png
    from montezuma import pictures

    module = None
    if cfg.intrinsic != "none" and "intrinsic" in state:
        module = intrinsic_for_run(SPEC, cfg, SPEC.spaces(cfg)[0])
        module.set_state_dict(state["intrinsic"])
    env = SPEC.env_factory(cfg, None)()
    try:
        walk = sampled_walk(policy, env, args.heatmap_steps, args.seed, module)
    finally:
        env.close()
    table = pictures.position_table(walk["rooms"], walk["cols"], walk["rows"], walk["rewards"])
    what = f"{cfg.intrinsic} intrinsic reward" if module is not None else "no intrinsic module"
    title = (
        f"Montezuma's Revenge, update {state['update']}, {what}\n{args.heatmap_steps:,} steps sampled from the "
        f"policy ({walk['episodes']} episode{'' if walk['episodes'] == 1 else 's'} ended)"
    )
    save_png(args.heatmap, pictures.draw_positions(table, walk["screens"], title, with_reward=module is not None))
    drawn = [int(r) for r in table["rooms"][: pictures.HEAT_ROOMS]]
    np.savez_compressed(
        os.path.splitext(args.heatmap)[0] + ".npz",
        **table,
        screens=np.stack([walk["screens"][r] for r in drawn]),
        episodes=walk["episodes"],
    )
    out = {"heatmap": args.heatmap, "heatmap_rooms": ",".join(str(r) for r in table["rooms"])}
    if module is not None:
        correlation = pictures.rank_correlation(table)
        out["rank correlation"] = "n/a" if correlation is None else round(correlation, 3)
        share = pictures.place_share(table)
        out["place share"] = "n/a" if share is None else round(share, 3)
    return out


def after(args, state: dict, result: dict, cfg, policy) -> dict:
    out = draw_map(args, state, result) if args.map else {}
    if args.heatmap:
        out.update(draw_heatmap(args, state, cfg, policy))
    return out


def main(argv=None):
    return play(SPEC, argv, add_arguments=add_flags, after=after)


if __name__ == "__main__":
    main()
