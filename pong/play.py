"""Play a trained Pong agent greedily and record an mp4: ``python pong/play.py --checkpoint PATH``.

The agent's evaluation episode (argmax of the online Q network, SRL's ``test_epsilon`` 0), on the
run's env (``ALE/Pong-v5``, the article's frameskip, the game over after ``--max-points``
points); prints the points each side made and the return, and writes the RGB frames to an mp4.
A checkpoint of another game is refused with a clear error.
"""

from __future__ import annotations

import argparse
import os

from pong.train import SPEC


def main(argv=None) -> dict:
    from common.ppo.play import check_play_args, load_policy

    p = argparse.ArgumentParser(description="Play Pong greedily from a checkpoint and record an mp4.")
    p.add_argument("--checkpoint", required=True, help="a .pdparams checkpoint written by pong/train.py")
    p.add_argument("--output", default="", help="mp4 path (default: next to the checkpoint, <name>.mp4)")
    p.add_argument("--max-steps", type=int, default=None, help="cap on agent steps (default: the run's)")
    p.add_argument("--seed", type=int, default=0, help="episode seed (the emulator's reset)")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"), help="where the Q network runs")
    p.add_argument("--policy", default="greedy", choices=("greedy",), help="greedy: argmax of the Q values")
    args = p.parse_args(argv)
    args.output = args.output or os.path.splitext(args.checkpoint)[0] + ".mp4"
    check_play_args(p, args, ("max_steps",), ("output",))
    state, cfg, q_net = load_policy(SPEC, args.checkpoint, args.device)
    output = args.output
    import paddle

    from common.dqn.learner import to_float

    q_net.eval()
    env = SPEC.env_factory(cfg, output)()
    ret, steps, info = 0.0, 0, {}
    try:
        obs = env.reset(seed=args.seed)
        with paddle.no_grad():
            for _ in range(args.max_steps or cfg.max_eval_steps):
                action = int(q_net(to_float(obs[None])).numpy()[0].argmax())
                obs, reward, done, info = env.step(action)
                ret, steps = ret + reward, steps + 1
                if done:
                    break
    finally:
        env.close()
    result = {"return": float(ret), "steps": steps, "video": output, **SPEC.episode_metrics(info)}
    print(
        f"pong {SPEC.level_name(cfg)} ({state.get('agent', cfg.agent)}): "
        + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items())
    )
    return result


if __name__ == "__main__":
    main()
