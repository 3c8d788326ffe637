"""Greedy play: the evaluation episode shared by the trainer and the play scripts.

``python mario/play.py --checkpoint runs/.../models/mario_1_1_50.pdparams`` loads a
checkpoint, plays one greedy episode (argmax of the policy, stopped after
``--max-actions`` repeats of one action, as in the tutorial's evaluation), writes
the emulator's RGB frames to an mp4 and prints the result. With ``--plot PATH`` it also draws
the intrinsic reward of every step of that episode, the frames at its highest peaks above
their points (``common.pictures``), to a PNG, and writes the values next to it (``.npz``).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from common.run.config import MAX_SEED

RGB_KEEP = 8  # moments shown in the eval/frames image
STRIP_ROWS = 2  # ... laid out in 2 rows of 4, so each moment stays readable in VisualDL's image card
#: screens kept (up to twice as many) when the frames at the intrinsic reward's peaks are wanted:
#: every screen of an episode of up to 1,023 steps (Mario's halved screens: 47 MB at most)
ALONG_KEEP = 512
SCREEN_MAX_HEIGHT = 160
PROGRESS_EVERY = 50  # steps between two calls of greedy_episode's on_step


def shrink_screen(frame: np.ndarray, max_height: int = SCREEN_MAX_HEIGHT) -> np.ndarray:
    """An RGB screen halved while taller than ``max_height``: NES 240x256 -> 120x128, Atari 210x160 -> 105x80."""
    while frame.shape[0] > max_height:
        frame = frame[::2, ::2]
    return np.ascontiguousarray(frame)


def greedy_episode(
    policy,
    env,
    seed: int | None,
    max_actions: int,
    max_steps: int,
    rgb_frames: list | None = None,
    rgb_keep: int = RGB_KEEP,
    sample_rng: np.random.Generator | None = None,
    on_step=None,
    actions: list | None = None,
):
    """Play one greedy episode. Returns (stacks uint8[L+1, C, H, W], return, steps, last info).

    With ``sample_rng`` the actions are drawn from the policy's distribution with that generator
    instead of taken by argmax (deterministic for a given generator state on a CPU). ``on_step(steps)``,
    if given, is called every ``PROGRESS_EVERY`` steps (the background eval's sign of life).
    ``actions`` (a list), if given, receives the action of every step (what ICM and E3B score).

    With ``rgb_frames`` (a list) and an env that has ``rgb_frame()``, the list receives
    ``(step, uint8[h, w, 3])`` screens (``shrink_screen``: halved while taller than 160 px)
    spread evenly over the episode, at most ``2 * rgb_keep`` of them plus the final screen:
    every ``stride``-th step is copied and, when the list is full, every other one is dropped
    and the stride doubles. That costs one screen copy per stride, whatever the episode's
    length; an episode shorter than ``2 * rgb_keep`` steps keeps every screen.
    """
    import paddle

    from common.cpu import unit_floats

    obs = env.reset(seed=seed)
    stacks, ret, steps, repeat, last_action, info = [obs], 0.0, 0, 0, -1, {}
    grab = getattr(env, "rgb_frame", None) if rgb_frames is not None else None
    stride = 1
    if grab is not None:
        rgb_frames.append((0, shrink_screen(grab())))
    taken = actions if actions is not None else []
    policy.eval()
    with paddle.no_grad():
        while steps < max_steps:
            logits, _, _ = policy(unit_floats(obs[None]))
            logits = logits.numpy()[0].astype(np.float64)
            if sample_rng is None:
                action = int(logits.argmax())
            else:  # inverse CDF of softmax(logits) at one uniform draw
                probs = np.exp(logits - logits.max())
                cdf = np.cumsum(probs / probs.sum())
                action = int(min(np.searchsorted(cdf, sample_rng.random(), side="right"), len(cdf) - 1))
            obs, reward, done, info = env.step(action)
            taken.append(action)
            ret += reward
            steps += 1
            if on_step is not None and steps % PROGRESS_EVERY == 0:
                on_step(steps)
            stacks.append(obs)
            repeat = repeat + 1 if action == last_action else 1
            last_action = action
            if done or repeat >= max_actions:
                break
            if grab is not None and steps % stride == 0:
                rgb_frames.append((steps, shrink_screen(grab())))
                if len(rgb_frames) >= 2 * rgb_keep:
                    rgb_frames[:] = rgb_frames[::2]
                    stride *= 2
    if grab is not None and rgb_frames[-1][0] != steps:
        rgb_frames.append((steps, shrink_screen(grab())))
    return np.stack(stacks), ret, steps, info


def frame_strip(
    stacks: np.ndarray,
    rgb_frames: list | None = None,
    num: int = RGB_KEEP,
    max_height: int = 160,
    rows: int = STRIP_ROWS,
) -> np.ndarray:
    """``num`` moments of an episode in a grid of ``rows`` rows, read left to right then top to bottom.

    Uses the emulator's RGB screens from ``greedy_episode(..., rgb_frames=...)`` when there
    are any (halved while taller than ``max_height``, which ``greedy_episode`` has already done:
    NES 240x256 -> 120x128, Atari 210x160 -> 105x80), else the latest gray 84x84 frame of
    evenly spaced observation stacks.
    Moments are separated by 2-px white lines: 8 Mario moments give uint8 ``[2 * 120 + 2,
    4 * 128 + 3 * 2, 3]``, gray ones ``[2 * 84 + 2, 4 * 84 + 3 * 2]``. An episode with
    fewer moments than ``num`` fills fewer cells (a short one, a single row); unused cells
    are white.
    """
    if rgb_frames:
        pick = np.linspace(0, len(rgb_frames) - 1, num=min(num, len(rgb_frames))).round().astype(int)
        frames = [rgb_frames[i][1] for i in pick]
        while frames[0].shape[0] > max_height:
            frames = [f[::2, ::2] for f in frames]
    else:
        pick = np.linspace(0, len(stacks) - 1, num=min(num, len(stacks))).astype(int)
        frames = [stacks[i, -1] for i in pick]
    cols = min(-(-num // rows), len(frames))
    used_rows = -(-len(frames) // cols)
    (h, w), gap = frames[0].shape[:2], 2
    grid = np.full(
        (used_rows * h + (used_rows - 1) * gap, cols * w + (cols - 1) * gap) + frames[0].shape[2:], 255, np.uint8
    )
    for k, f in enumerate(frames):
        r, c = divmod(k, cols)
        grid[r * (h + gap) : r * (h + gap) + h, c * (w + gap) : c * (w + gap) + w] = f
    return grid


def check_play_args(p, args, positive: tuple, paths: tuple) -> None:
    """A play script's usage errors (exit 2, naming the flag and value): the ``positive`` flags given
    and <= 0, ``--seed`` (where the script has one) outside the range every generator takes, a ``paths``
    flag whose folder cannot be written. Nothing is made here: the writer makes a missing folder, so a
    checkpoint refused after these checks leaves no empty folder behind."""
    from common.run.config import MAX_SEED, check_writable
    from common.run.errors import UsageError

    for name in positive:
        v = getattr(args, name)
        if v is not None and v <= 0:
            p.error(f"--{name.replace('_', '-')} {v} is invalid: expected a positive integer")
    if hasattr(args, "seed") and not 0 <= args.seed <= MAX_SEED:
        p.error(f"--seed {args.seed} is invalid: expected an integer from 0 to {MAX_SEED}")
    for flag, path in ((f"--{name}", getattr(args, name)) for name in paths):
        if path:
            try:
                check_writable(os.path.dirname(os.path.abspath(path)), flag)
            except UsageError as e:
                p.error(str(e))


def load_policy(spec, checkpoint: str, device: str, required=("policy",)):
    """``(state, cfg, policy)`` of a checkpoint of ``spec``'s game, the policy network built on ``device``
    with the checkpoint's weights; any fault of the file exits with ``error: ...`` naming it."""
    from common.run.device import set_device

    set_device(device)  # first: it imports Paddle quietly, and the checkpoint's tensors are made on this device
    from common.run.checkpoint import CheckpointError, check_compatible, load_checkpoint, load_weights, widen

    try:
        state = widen(load_checkpoint(checkpoint, required=required, game=spec.name))  # a float16 zoo file
        cfg = spec.config_cls.from_dict(state["config"])
        try:  # the train script's own checks: a careless config (world 9, a negative max_actions) is named
            cfg.validate()
        except ValueError as e:
            raise CheckpointError(f"{checkpoint}: its config: {e}") from None
        policy = spec.make_policy(cfg, *spec.spaces(cfg))
        check_compatible(state, spec.name, {"policy": policy.state_dict()}, checkpoint)
        load_weights(policy, state["policy"], "policy")
    except CheckpointError as e:
        raise SystemExit(f"error: {e}") from None
    except ValueError as e:  # a policy entry of another dtype or type
        raise SystemExit(f"error: {checkpoint}: {e}") from None
    return state, cfg, policy


def play(spec, argv=None, add_arguments=None, after=None) -> dict:
    """Entry point of each game's play.py.

    A game adds flags of its own with ``add_arguments(parser)``, which may return ``(positive, paths)``:
    the names of its flags that must be positive and of its output paths, checked with the common
    ones before anything plays. It acts on them with ``after(args, state, result, cfg=, policy=)
    -> dict`` (``state``: the checkpoint; ``result``: what is printed, plus the last ``info``;
    ``cfg`` and ``policy``: the run's config and the loaded policy), which returns what to add to
    the printed result (Montezuma: ``--map``, ``--heatmap``).
    """
    p = argparse.ArgumentParser(description=f"Play {spec.name} greedily from a checkpoint and record an mp4.")
    p.add_argument("--checkpoint", required=True, help="a .pdparams checkpoint written by train.py")
    p.add_argument("--output", default="", help="mp4 path (default: next to the checkpoint, <name>.mp4)")
    p.add_argument(
        "--max-actions",
        type=int,
        default=None,
        help="stop when one action repeats this often (default: the run's --max-actions)",
    )
    p.add_argument(
        "--max-steps", type=int, default=None, help="cap on agent steps (default: the run's --max-eval-steps)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="episode seed, 0 by default (the game's own randomness: Montezuma's sticky actions, MiniGrid's "
        "layout; the draws of --policy sample)",
    )
    p.add_argument(
        "--policy",
        default="greedy",
        choices=("greedy", "sample"),
        help="greedy: the most likely action (the training run's evaluation); sample: actions drawn from the "
        "policy with --seed, as in training (a policy that breaks its loops by chance, e.g. in MiniGrid)",
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"), help="where the policy runs")
    p.add_argument(
        "--plot",
        default="",
        metavar="PATH",
        help="also draw the intrinsic reward of every step of the episode, with the frames at its highest "
        "peaks, to this PNG (the values go to the same name with .npz); needs a run with an intrinsic module",
    )
    p.add_argument(
        "--episodes",
        type=int,
        default=1,
        help="episodes to play, with seeds --seed, --seed + 1, ...: the first is recorded (the mp4, --plot and "
        "the game's pictures), every one is printed, then the mean and the largest of each number",
    )
    positive, paths = ("max_actions", "max_steps", "episodes"), ("output", "plot")
    if add_arguments is not None:
        more_positive, more_paths = add_arguments(p) or ((), ())
        positive, paths = positive + tuple(more_positive), paths + tuple(more_paths)
    args = p.parse_args(argv)
    check_play_args(p, args, positive, paths)
    if args.episodes > 1 and args.seed + args.episodes - 1 > MAX_SEED:
        p.error(f"--episodes {args.episodes} is invalid with --seed {args.seed}: its last seed would pass {MAX_SEED}")
    state, cfg, policy = load_policy(spec, args.checkpoint, args.device, required=("policy", "update"))
    output = args.output or os.path.splitext(args.checkpoint)[0] + ".mp4"
    plot = args.plot and _can_plot(cfg, state)
    screens = [] if plot else None
    actions = []
    stacks, result, info = _episode(spec, cfg, policy, args, args.seed, output, screens, actions)
    if plot:
        result["plot"] = plot_along_episode(spec, cfg, state, stacks, actions, screens, args.plot)
    if after is not None:
        result.update(after(args, state, {**result, "info": info}, cfg=cfg, policy=policy))
    title = f"{spec.name} {spec.level_name(cfg)} (update {state['update']})"
    print(f"{title}: {_line(result)}")
    if args.episodes > 1:
        result["episodes"] = [dict(result)] + [  # a copy: the result does not hold itself
            _episode_result(spec, cfg, policy, args, seed) for seed in range(args.seed + 1, args.seed + args.episodes)
        ]
        numbers = [k for k, v in result["episodes"][1].items() if isinstance(v, (int, float))]  # not --heatmap's
        table = {k: [float(e[k]) for e in result["episodes"]] for k in numbers}
        print(
            f"{title}, {args.episodes} episodes (seeds {args.seed}-{args.seed + args.episodes - 1}, {args.policy}): "
            + ", ".join(f"{k} mean {np.mean(v):.4g} max {max(v):.4g}" for k, v in table.items())
        )
    return result


def _line(result: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items())


def _episode(spec, cfg, policy, args, seed: int, output=None, screens=None, actions=None):
    """One episode of ``play`` with ``seed``, in a fresh env (recorded to ``output`` if given; ``screens`` and
    ``actions`` as ``greedy_episode`` fills them). Returns (stacks, the printed numbers, the last info)."""
    env = spec.env_factory(cfg, output)()
    try:
        stacks, ret, steps, info = greedy_episode(
            policy,
            env,
            seed,
            args.max_actions or cfg.max_actions,
            args.max_steps or cfg.max_eval_steps,
            rgb_frames=screens,
            rgb_keep=ALONG_KEEP,
            sample_rng=np.random.default_rng(seed) if args.policy == "sample" else None,
            actions=actions,
        )
    finally:
        env.close()
    video = {"video": output} if output and os.path.exists(output) else {}  # (a game may record no frames)
    return stacks, {"return": float(ret), "steps": steps, **video, **spec.episode_metrics(info)}, info


def _episode_result(spec, cfg, policy, args, seed: int) -> dict:
    """One more episode of ``play --episodes``, unrecorded (as if played with ``--seed seed`` alone); printed
    and returned."""
    result = _episode(spec, cfg, policy, args, seed)[1]
    print(f"  seed {seed}: {_line(result)}")
    return result


def _can_plot(cfg, state) -> bool:
    if cfg.intrinsic == "none" or "intrinsic" not in state:
        print(f"--plot: this run has no intrinsic module (--intrinsic {cfg.intrinsic}): nothing to plot")
        return False
    return True


def plot_along_episode(spec, cfg, state, stacks, actions, screens, path: str) -> str:
    """Draw the intrinsic reward of every step of one episode (``common.pictures``) under the checkpoint's
    module to ``path`` (PNG), and its values to the same name with ``.npz``; returns ``path``."""
    from common import pictures
    from common.intrinsic import intrinsic_for_run
    from common.intrinsic.base import episode_rewards

    module = intrinsic_for_run(spec, cfg, stacks.shape[1:])
    module.set_state_dict(state["intrinsic"])
    rewards = episode_rewards(module, stacks, actions)
    record = pictures.along_episode(rewards, pictures.episode_frames(stacks, screens, spec.observation_picture))
    title = f"{spec.name} {spec.level_name(cfg)}, update {state['update']}: {cfg.intrinsic} intrinsic reward"
    pictures.save_png(path, pictures.draw_along_episode(record, title))
    pictures.save_record(os.path.splitext(path)[0] + ".npz", record)
    return path
