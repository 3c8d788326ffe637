"""Generate the notebooks of this folder (outputs-free) from the cell sources below.

    python notebooks/make_notebooks.py            # rewrite the .ipynb files
    python notebooks/make_notebooks.py --check    # exit 1 if a .ipynb differs from this script

The notebooks are written for Baidu AI Studio (Python 3.10, ``%cd``, ``!pip install``,
persistent ``/home/aistudio/work``) and run anywhere. Their first code cell holds the
parameters: ``QUICK`` selects a tiny smoke run (the default; ``NOTEBOOK_QUICK=0`` in
the environment or ``QUICK = False`` in the cell selects the real one) and
``NOTEBOOK_RUNS`` moves the run folders. The install cell only pip-installs when a
package is not importable, so it is a no-op where the project is installed
(``tests/test_notebooks.py`` runs every notebook top to bottom in quick mode).

Edit this file, not the .ipynb files, and regenerate: the tests check they agree.
"""

from __future__ import annotations

import os
import sys
import textwrap

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))


def md(text: str):
    return new_markdown_cell(textwrap.dedent(text).strip("\n"))


def code(text: str):
    return new_code_cell(textwrap.dedent(text).strip("\n"))


# ------------------------------------------------------------------ shared cells
def params_cell(extra: str = ""):
    return code(
        textwrap.dedent("""
        # Parameters. QUICK = True: a tiny smoke run (about a minute on a CPU) that shows every step.
        # Set QUICK = False (or NOTEBOOK_QUICK=0 in the environment) for a real training run.
        import os

        QUICK = os.environ.get("NOTEBOOK_QUICK", "1") != "0"
        RUNS = os.environ.get("NOTEBOOK_RUNS", "")  # parent folder of the run folders ("" = <repo>/runs)
    """)
        + textwrap.dedent(extra)
    )


SETUP = code("""
    # Setup: go to the repository and install what is missing (nothing, where the project is installed).
    # On AI Studio, clone or unzip the repository once into /home/aistudio/work (that folder survives restarts).
    import importlib.metadata
    import importlib.util
    import sys

    for REPO in (os.path.abspath(".."), os.path.abspath("."), "/home/aistudio/work/paddle-curiosity"):
        if os.path.exists(os.path.join(REPO, "common", "ppo", "trainer.py")):
            break
    else:
        raise FileNotFoundError("put the repository in /home/aistudio/work/paddle-curiosity (or open this notebook "
                                "from its notebooks/ folder)")
    %cd {REPO}
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    RUNS = RUNS or os.path.join(REPO, "runs")

    NEEDED = ["paddle", "nes_py", "gym_super_mario_bros", "ale_py", "gymnasium", "visualdl", "imageio_ffmpeg", "cv2"]
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    try:  # the game scripts (`!python mario/train.py`) import the project as an installed package
        importlib.metadata.version("paddle-curiosity")
    except importlib.metadata.PackageNotFoundError:
        missing.append("paddle-curiosity")
    if missing:
        print("missing:", missing, "-> pip install")
        # AI Studio ships paddlepaddle-gpu: install the CPU build only where there is no Paddle at all.
        EXTRA = "" if importlib.util.find_spec("paddle") else "[cpu]"
        !{sys.executable} -m pip install -q -e .{EXTRA}
    from common.run.device import require_paddle

    paddle = require_paddle()  # a Paddle older than the project's minimum stops here, naming its version
    DEVICE = "gpu" if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0 else "cpu"
    print("repo", REPO, "| runs", RUNS, "| paddle", paddle.__version__, "| device", DEVICE, "| quick", QUICK)
""")


def curves_cell(tags: list[str]):
    return code(f"""
        # Curves from the run's metrics.jsonl (the same values VisualDL shows).
        import matplotlib.pyplot as plt

        from common.run.logger import read_metrics

        metrics = read_metrics(result["run_dir"])
        TAGS = {tags!r}
        fig, axes = plt.subplots(2, (len(TAGS) + 1) // 2, figsize=(4.2 * ((len(TAGS) + 1) // 2), 6.5))
        for ax, tag in zip(axes.flat, TAGS):
            if tag in metrics:
                steps, values = metrics[tag]
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None)
            ax.set_title(tag, fontsize=10)
            ax.set_xlabel("agent steps" if "/" in tag else "update")  # the tutorial's tags count updates
            ax.grid(alpha=0.3)
        for ax in axes.flat[len(TAGS):]:
            ax.axis("off")
        fig.tight_layout()
        plt.show()
        print(len(metrics), "tags logged:", ", ".join(sorted(metrics)))
    """)


VIDEO = code("""
    # The latest evaluation episode (written every --video-interval updates to <run>/videos/).
    import glob

    from IPython.display import Video, display

    videos = sorted(glob.glob(os.path.join(result["run_dir"], "videos", "eval_*.mp4")))
    print(len(videos), "eval videos:", [os.path.basename(v) for v in videos[-5:]])
    if videos:
        display(Video(videos[-1], embed=True, width=384))
""")


def visualdl_md(game: str):
    return md(f"""
        ## VisualDL / VisualDL 可视化看板

        Everything the run logged is in its run folder (`{{RUNS}}/<run_name>/`: `config.json`, VisualDL records,
        `metrics.jsonl`, `videos/`, `models/`). To browse it:

        * **Locally**: `visualdl --logdir runs --host 127.0.0.1 --port 8040 --language en`, then open
          <http://127.0.0.1:8040>. Keep `--language en` (without it, VisualDL 2.5.3's `/app/index` answers
          500 under Werkzeug 3.1 when the browser sends no Accept-Language) and give `--logdir` as a relative
          path (with an absolute one the embedding view mixes up its tensor and metadata).
        * **AI Studio**: the left sidebar's 可视化 (Visualization) tab: set the log folder to the `runs` folder
          of the repository in `/home/aistudio/work` and start the service; or run the command above in a
          terminal and open the forwarded port.

        Dashboards: **Scalars** (the tutorial's tags `Training Reward`, `Eval Extrinsic reward`,
        `Eval Intrinsic reward`, `Total loss`, `Forward loss`, then groups `losses/`, `intrinsic/`, `charts/`,
        `episode/`, `eval/`, `perf/`), **Image** (`eval/frames`: eight moments of each evaluation episode;
        `eval/intrinsic_along_episode`: its intrinsic reward step by step; `explore/`: where the agent has been),
        **Histogram** (intrinsic rewards and advantages), **High Dimensional** (target features of recent
        {game} states, coloured by {"x position bucket and stage" if game == "Mario" else "room"}; project them
        with PCA, t-SNE or UMAP), and
        **Hyper Parameters** (the run's flags with its final metrics). See `docs/visualdl.md`.
    """)


def play_cell(game: str, quick_steps: int, full_steps: int, width: int, picture: str = ""):
    """Run the game's play.py on the run's last checkpoint and show its mp4 (and the PNG of ``picture``,
    a flag of play.py that draws one: ``--plot`` or ``--map``)."""
    draw = f" {picture} {{play_png}}" if picture else ""
    show = "\n        display(Image(filename=play_png, width=800))" if picture else ""
    return code(f"""
        from IPython.display import Image

        play_mp4, play_png = os.path.join(result["run_dir"], "play.mp4"), os.path.join(result["run_dir"], "play.png")
        !{{sys.executable}} {game}/play.py --checkpoint {{result["checkpoint"]}} --device {{DEVICE}} --output {{play_mp4}} --max-steps {{{quick_steps} if QUICK else {full_steps}}}{draw}
        display(Video(play_mp4, embed=True, width={width})){show}
    """)


def zoo_cells(game: str, width: int):
    """Play the game's trained agent from ``zoo/`` (its card first) and show the video; say so where there is none."""
    return [
        md(f"""
            ## A trained agent from `zoo/` / `zoo/` 中训练好的智能体

            `zoo/` holds trained agents: a weights-only file each, loaded through the safe loader, with a card
            (`zoo/<name>.json`: settings, agent steps, hours on a 2-core CPU, what its episode does). This cell
            plays the {game} agent's episode as its card records it (greedy, or sampled with the card's seed:
            Montezuma's) with `{game}/play.py` and shows it.

            `zoo/` 中是训练好的智能体：每个都是只含权重的文件（经安全加载器读取），并附一张卡片
            （`zoo/<name>.json`：设置、步数、在 2 核 CPU 上的训练时长、该回合的结果）。本单元用
            `{game}/play.py` 按卡片记录的方式（贪心，或如蒙特祖玛按卡片的种子采样）玩一局并播放录像。
        """),
        code(f"""
            # The zoo agent of this game: its card, then its card's episode played here, and its video.
            import json

            from IPython.display import Video, display

            from common import zoo

            cards = zoo.agents_of("{game}")  # those trained with curiosity first (Mario's zoo also has plain PPO's)
            if not cards:
                print("no trained {game} agent in zoo/ yet: zoo/README.md lists the agents there are")
            for card in cards[:1]:
                print(json.dumps({{k: card[k] for k in ("name", "level", "agent_steps", "hours_on_2_core_cpu",
                                                        "episode")}}, indent=1))
                zoo_mp4 = os.path.join(RUNS, "zoo_" + card["name"] + ".mp4")
                os.makedirs(RUNS, exist_ok=True)
                ep = card["episode"]
                !{{sys.executable}} {game}/play.py --checkpoint zoo/{{card["file"]}} --output {{zoo_mp4}} --device {{DEVICE}} --policy {{ep["policy"]}} --seed {{ep["seed"]}}
                display(Video(zoo_mp4, embed=True, width={width}))
        """),
    ]


def curiosity_cells(what: str, what_cn: str):
    """The pictures of curiosity at work: the eval episode's intrinsic reward redrawn from its values, and the
    latest picture of where the agent has been (``what`` / ``what_cn`` say what that picture is for the game)."""
    return [
        md(f"""
            ## Curiosity at work / 好奇心如何起作用

            With each evaluation video (`--video-interval`) the run draws the greedy episode's intrinsic reward
            step by step, its highest peaks marked and the frames there shown above them, as in Figure 1 of the
            RND paper (`eval/intrinsic_along_episode` in VisualDL). The values are kept in
            `<run>/eval_intrinsic/update_N.npz`: `common.pictures` redraws them here. Every `--picture-interval`
            updates it also draws where the agent has been (`explore/` in VisualDL, `<run>/explore/update_N.png`
            and `.npz`): {what}

            每段评估录像（`--video-interval`）都会配一张图：贪心评估回合中每一步的内在奖励，标出最高的几个峰值，
            并在上方给出峰值处的画面，与 RND 论文的图 1 相同。数据保存在 `<run>/eval_intrinsic/update_N.npz`，
            这里用 `common.pictures` 重新绘制。每 `--picture-interval` 次更新还会画出智能体去过哪里
            （VisualDL 中的 `explore/`，以及 `<run>/explore/update_N.png` 和 `.npz`）：{what_cn}
        """),
        code("""
            # The latest greedy episode's intrinsic reward, redrawn from its values.
            import glob

            import matplotlib.pyplot as plt

            from common import pictures

            along = sorted(glob.glob(os.path.join(result["run_dir"], "eval_intrinsic", "update_*.npz")))
            print(len(along), "episode pictures:", [os.path.basename(p) for p in along[-3:]])
            if along:
                record = pictures.load_record(along[-1])
                print("highest peaks at steps", (record["peaks"] + 1).tolist(), "of", len(record["rewards"]))
                fig, ax = plt.subplots(figsize=(12, 6.8))
                ax.imshow(pictures.draw_along_episode(record, os.path.basename(along[-1])))
                ax.axis("off")
                plt.show()
        """),
        code("""
            # Where the agent has been: the latest explore/ picture and the values it was drawn from.
            from IPython.display import Image

            explore = sorted(glob.glob(os.path.join(result["run_dir"], "explore", "update_*.png")))
            print(len(explore), "pictures of where the agent has been:", [os.path.basename(p) for p in explore[-3:]])
            if explore:
                display(Image(filename=explore[-1], width=900))
                data = pictures.load_record(explore[-1][:-4] + ".npz")
                print({k: v.shape for k, v in data.items()})
        """),
    ]


def print_cmd_cell():
    return code("""
        # The command for this notebook's runs (a relative --logdir, from the folder above it).
        print(f"cd {os.path.dirname(os.path.abspath(RUNS))} && visualdl --logdir {os.path.basename(os.path.abspath(RUNS))} "
              "--host 127.0.0.1 --port 8040 --language en")
    """)


# ------------------------------------------------------------------ Mario
def mario_notebook():
    return [
        md("""
            # Super Mario Bros with PPO + RND (PaddlePaddle) / 超级马里奥：PPO + RND 好奇心探索

            The tutorial's agent: PPO on the tutorial's Mario wrappers (84x84 gray, skip 4, stack 4) with Random
            Network Distillation as an exploration bonus, here with the tutorial's defects fixed (the predictor
            is trained, the intrinsic reward reaches the advantages). The notebook trains, plots the curves,
            shows an evaluation video, plays a checkpoint and points to VisualDL.

            Run it top to bottom. `QUICK = True` (the default) trains for a few seconds only, to check that
            everything works; set `QUICK = False` for a real run (hours on a CPU, much faster on an AI Studio GPU).
        """),
        params_cell("""
            WORLD, STAGE = 1, 1
        """),
        SETUP,
        *zoo_cells("mario", width=384),
        md("""
            ## The whole level / 整个关卡

            `mario/level_picture.py` plays the zoo's plain-PPO 1-1 agent (`mario-1-1-ppo`, which reaches the flag)
            through the level and stitches its screens into one picture: each column is the median of the screens that showed it, so Mario and the enemies drop
            out. A column of the picture is an `x_pos`, the unit of every distance in the logs (`eval/x_pos`,
            the `explore/` pictures, docs/mario_no_reward.md).

            `mario/level_picture.py` 让 zoo 中的 1-1 智能体跑完整关，并把它看到的画面拼成一张全景图：每一列取
            显示过它的画面的中位数，马里奥和敌人因此消失。图中的每一列就是一个 `x_pos`，也就是日志里所有距离的
            单位（`eval/x_pos`、`explore/` 图片、docs/mario_no_reward.md）。
        """),
        code("""
            from IPython.display import Image, display

            from mario.level_picture import DEFAULT_CHECKPOINT, level_picture

            level_png = os.path.join(RUNS, "level_1_1.png")
            print(level_picture(DEFAULT_CHECKPOINT, level_png))  # a few seconds: the agent plays 1-1 once
            display(Image(level_png, width=900))
        """),
        md("""
            ## Train / 训练

            `mario.train.main(flags)` is exactly `python mario/train.py <flags>` (see `python mario/train.py --help`;
            every flag is a field of `MarioConfig`). From a terminal or a `!` cell:

                !python mario/train.py --world 1 --stage 1 --num-global-steps 2000000 --device gpu

            Curiosity alone, with no game reward at all (the ICM paper's test, docs/mario_no_reward.md: world
            1-1, COMPLEX_MOVEMENT, 1M agent steps):

                !python mario/train.py --recipe no-reward-1-1 --intrinsic rnd --device gpu

            The run folder is `RUNS/<run_name>`; Ctrl-C (or the stop button) saves a checkpoint first.
        """),
        code("""
            from mario.train import main as train_mario

            if QUICK:
                flags = ["--num-processes", "2", "--num-workers", "-1", "--num-local-steps", "16", "--batch-size", "2",
                         "--num-epochs", "1", "--num-global-steps", "64", "--obs-norm-steps", "2",
                         "--max-eval-steps", "60", "--video-interval", "1", "--histogram-interval", "1",
                         "--embedding-interval", "1", "--picture-interval", "1"]
            else:  # the CPU recipe (docs/mario_learning.md); without --recipe: the tutorial's PPO settings
                flags = ["--recipe", "cpu-1-1", "--video-interval", "10"]
            run_name = f"mario_{WORLD}-{STAGE}_rnd" + ("_quick" if QUICK else "")
            result = train_mario(flags + ["--world", str(WORLD), "--stage", str(STAGE), "--device", DEVICE,
                                          "--log-path", RUNS, "--run-name", run_name])
            print({k: v for k, v in result.items() if k != "eval"})
        """),
        md("""
            ## Curves / 训练曲线

            `Training Reward` is the tutorial's (mean over envs of the rollout's extrinsic rewards, summed over
            time); the eval tags come from one greedy episode every `--eval-interval` updates (5 in the
            `cpu-1-1` recipe, every update in the quick mode).
        """),
        curves_cell(
            [
                "Training Reward",
                "Eval Extrinsic reward",
                "Eval Intrinsic reward",
                "Total loss",
                "Forward loss",
                "eval/x_pos",
                "intrinsic/reward_mean",
                "perf/steps_per_sec",
            ]
        ),
        md("## Evaluation video / 评估录像"),
        VIDEO,
        *curiosity_cells(
            "for Mario, the mean intrinsic reward of the rollout's steps binned by `x_pos`, with the places where "
            "episodes ended (deaths, flags): update after update, the novelty frontier moves right.",
            "马里奥按 `x_pos` 分箱的 rollout 平均内在奖励，并标出回合结束的位置（死亡、到达旗杆）："
            "随着训练推进，新奇的前沿逐渐右移。",
        ),
        md("""
            ## Play a checkpoint / 加载检查点试玩

            `mario/play.py` loads a checkpoint, plays one greedy episode (the tutorial's evaluation rule),
            records the emulator's frames to an mp4 and prints the result. It refuses a checkpoint of another
            game with a clear error. `--plot PATH` also draws the episode's intrinsic reward step by step.
        """),
        play_cell("mario", quick_steps=60, full_steps=5000, width=384, picture="--plot"),
        visualdl_md("Mario"),
        print_cmd_cell(),
    ]


# ------------------------------------------------------------------ Montezuma
def montezuma_notebook():
    return [
        md("""
            # Montezuma's Revenge with PPO + RND (PaddlePaddle) / 蒙特祖玛的复仇：PPO + RND

            The RND paper's recipe (Burda et al. 2018): sticky actions, two value heads, a non-episodic intrinsic
            stream, RND on the latest frame with normalized observations, ext/int advantage weights 2/1. The
            defaults of `montezuma/train.py` are the paper's (128 envs x 128 steps); RND needs hundreds of
            millions of frames to leave the first rooms, so `QUICK = True` only checks the pipeline.
        """),
        params_cell("""
            NUM_ENVS = 2 if QUICK else 32  # the paper uses 128; 32 fits an AI Studio GPU machine's CPUs better
        """),
        SETUP,
        *zoo_cells("montezuma", width=320),
        md("""
            ## Train / 训练

            Same as `!python montezuma/train.py --num-envs 32 --device gpu ...` (see `--help`).

            The SND authors' settings and reward convention, with their SND-VIC networks and actor-critic
            (docs/montezuma.md; 128 envs, 4M agent steps):

                !python montezuma/train.py --recipe snd-montezuma --intrinsic snd-vic --snd-network authors --policy-network authors --device gpu
        """),
        code("""
            from montezuma.train import main as train_montezuma

            if QUICK:
                flags = ["--num-workers", "-1", "--num-local-steps", "16", "--batch-size", "2", "--num-epochs", "1",
                         "--num-global-steps", "64", "--obs-norm-steps", "2", "--eval-interval", "1",
                         "--max-eval-steps", "50", "--video-interval", "1", "--histogram-interval", "1",
                         "--embedding-interval", "1", "--picture-interval", "1", "--max-episode-steps", "16"]
            else:
                flags = ["--num-global-steps", "50000000", "--eval-interval", "20", "--video-interval", "20"]
            run_name = "montezuma_rnd" + ("_quick" if QUICK else "")
            result = train_montezuma(flags + ["--num-envs", str(NUM_ENVS), "--device", DEVICE, "--log-path", RUNS,
                                              "--run-name", run_name])
            print({k: v for k, v in result.items() if k != "eval"})
        """),
        md("""
            ## Curves / 训练曲线

            `episode/rooms` is the number of rooms an episode visited (the paper's exploration measure);
            training episodes are 4,500 agent steps at most, cut at 16 in quick mode so that some finish.
        """),
        curves_cell(
            [
                "Training Reward",
                "Eval Extrinsic reward",
                "Eval Intrinsic reward",
                "Total loss",
                "Forward loss",
                "eval/rooms",
                "intrinsic/reward_mean",
                "episode/rooms",
            ]
        ),
        md("## Evaluation video / 评估录像"),
        VIDEO,
        *curiosity_cells(
            "for Montezuma, the map of the 24 rooms of level 1, each room coloured by how many training episodes "
            "reached it and labelled with the update of its first visit, the latest rollout's rooms outlined.",
            "蒙特祖玛第一关 24 个房间的地图，每个房间按到达过它的训练回合数着色，标注首次到达时的更新序号，"
            "最近一次 rollout 到过的房间加了轮廓线。",
        ),
        md(
            "## Play a checkpoint (`montezuma/play.py`: rooms visited and score; `--map`: the run's room map) / "
            "加载检查点试玩（访问过的房间数与得分；`--map`：训练到达过的房间地图）"
        ),
        play_cell("montezuma", quick_steps=50, full_steps=4500, width=320, picture="--map"),
        md(
            "## Inside the rooms (`--heatmap`): where the policy goes, and where its curiosity pays / "
            "房间内部（`--heatmap`）：策略去了哪里，好奇心奖励在哪里\n\n"
            "The policy plays more steps with actions sampled as in training; the left panel counts its visits "
            "per 8x8-pixel cell of the room, the right one shows the mean intrinsic reward the run's module pays "
            "there. A negative rank correlation means the module pays more where the policy goes less.\n\n"
            "策略按训练时的方式（按概率采样动作）再玩若干步；左图是房间中每个 8x8 像素格子的访问次数，右图是该格子里"
            "状态的平均内在奖励。秩相关为负，说明策略越少去的地方，好奇心奖励越高。"
        ),
        code("""
            heat_png = os.path.join(result["run_dir"], "heatmap.png")
            !{sys.executable} montezuma/play.py --checkpoint {result["checkpoint"]} --device {DEVICE} --output {os.path.join(result["run_dir"], "heat.mp4")} --max-steps 1 --heatmap {heat_png} --heatmap-steps {500 if QUICK else 20000}
            display(Image(filename=heat_png, width=800))
        """),
        visualdl_md("Montezuma"),
        print_cmd_cell(),
    ]


# ------------------------------------------------------------------ SND
def snd_notebook():
    return [
        md("""
            # SND variants: what the three target losses do / SND 三种目标网络训练方式

            Self-supervised Network Distillation (Pecháč et al., arXiv 2302.11563) keeps RND's predictor but
            *trains* the target with a self-supervised loss, so its features keep separating states:

            * **SND-V**: contrastive. Pairs (s, s) should have feature distance 0, pairs (s, s') distance 1
              (both members augmented: random conv, tile mask, noise).
            * **SND-STD**: Spatio-Temporal DeepInfoMax on consecutive states: the global features of s<sub>t+1</sub>
              must pick the local features of s<sub>t</sub> out of the batch (InfoNCE over bilinear scores).
            * **SND-VIC**: VICReg on (s<sub>t</sub>, s<sub>t+1</sub>): invariance, variance hinge, covariance.

            On a batch of real Mario frames (random actions) we measure each loss's quantity before and after a
            few target steps. The same modules train inside `mario/train.py --intrinsic snd-v|snd-std|snd-vic`.
        """),
        params_cell("""
            NUM_FRAMES = 64                      # transitions in the batch
            TARGET_STEPS = 6 if QUICK else 300   # target (and predictor) updates on that batch
        """),
        SETUP,
        md("## A batch of real frames / 一批真实的游戏画面"),
        code("""
            import numpy as np

            from mario.env import make_env

            rng = np.random.default_rng(0)
            env = make_env(world=1, stage=1, action_type="simple")
            obs = [env.reset()]
            dones = []
            for t in range(NUM_FRAMES):
                # mostly right / right+jump so the frames move through the level
                o, r, d, info = env.step(int(rng.choice([1, 2, 3, 4, 0, 5, 6], p=[.3, .25, .15, .1, .1, .05, .05])))
                dones.append(float(d))
                obs.append(env.reset() if d else o)
            env.close()
            obs = np.stack(obs)  # uint8 [NUM_FRAMES + 1, 4, 84, 84]
            batch = {"obs": obs[:-1], "next_obs": obs[1:], "dones": np.array(dones, np.float32)}
            print(batch["obs"].shape, "episode ends:", int(batch["dones"].sum()), "| Mario's x_pos at the end:", info["x_pos"])

            import matplotlib.pyplot as plt

            fig, axes = plt.subplots(1, 8, figsize=(16, 2.4))
            for ax, i in zip(axes, np.linspace(0, NUM_FRAMES, 8).astype(int)):
                ax.imshow(obs[i, -1], cmap="gray")
                ax.set_title(f"t={i}")
                ax.axis("off")
            plt.show()
        """),
        md("""
            ## The three modules / 三个 SND 模块

            Built with the trainer's factory (`common.intrinsic.make_intrinsic`, with the tutorial's RND networks
            for Mario) and this notebook's learning rate and seed; observation normalizer fitted on the batch.
        """),
        code('''
            import paddle

            from common.intrinsic import make_intrinsic
            from common.intrinsic.augment import snd_v_augment
            from common.intrinsic.snd import contrastive_pairs, stdim_scores, stdim_terms, vicreg_terms
            from mario.rnd_model import make_rnd_networks

            paddle.seed(0)
            modules = {name: make_intrinsic(name, make_rnd_networks, (4, 84, 84), 4, lr=1e-4, update_proportion=0.25,
                                            max_grad_norm=0.5, seed=0)
                       for name in ("snd-v", "snd-std", "snd-vic")}
            for m in modules.values():
                m.observe(obs)

            valid = batch["dones"] == 0  # consecutive pairs only (STD, VIC)
            pair_rng_state = np.random.default_rng(1).bit_generator.state


            @paddle.no_grad()
            def measure(name, m):
                """The quantity each loss acts on, on the fixed batch."""
                out = {"novelty": m.reward(batch["next_obs"])}
                if name == "snd-v":
                    rng = np.random.default_rng(1)  # the same pairs and augmentations before and after
                    ia, ib, tau = contrastive_pairs(NUM_FRAMES, rng)
                    x = m.normalize(batch["obs"])
                    za = m.target(snd_v_augment(paddle.gather(x, paddle.to_tensor(ia)), rng))
                    zb = m.target(snd_v_augment(paddle.gather(x, paddle.to_tensor(ib)), rng))
                    d = ((za - zb) ** 2).mean(axis=1).numpy()
                    out.update(d_same=d[tau == 0], d_diff=d[tau == 1])
                elif name == "snd-vic":
                    z = m.target(m.normalize(batch["obs"][valid]))
                    z1 = m.target(m.normalize(batch["next_obs"][valid]))
                    out.update({k: float(v) for k, v in vicreg_terms(z, z1).items()})
                else:
                    n = int(valid.sum())
                    z, fmap = m.target.forward_with_map(paddle.concat([m.normalize(batch["obs"][valid]),
                                                                       m.normalize(batch["next_obs"][valid])]))
                    gl, ll = stdim_scores(z[n:], fmap[:n], fmap[n:], m.heads.global_local, m.heads.local_local)
                    # InfoNCE's view: per location, softmax over the candidates s_t of each anchor s_t+1; mean over locations
                    out["p_gl"] = paddle.nn.functional.softmax(gl, axis=-1).mean(axis=0).numpy()  # [N, N]
                    out.update({k: float(v) for k, v in stdim_terms(gl, ll, z[:n]).items()})
                return out


            before = {name: measure(name, m) for name, m in modules.items()}
        '''),
        md("## A few target steps on the batch / 在这批数据上训练目标网络几步"),
        code("""
            import time

            history = {name: [] for name in modules}
            for name, m in modules.items():
                t0 = time.perf_counter()
                for _ in range(TARGET_STEPS):
                    history[name].append(m.update(batch))
                print(f"{name}: {TARGET_STEPS} steps in {time.perf_counter() - t0:.1f} s, last losses",
                      {k: round(v, 4) for k, v in history[name][-1].items()})
            after = {name: measure(name, m) for name, m in modules.items()}

            fig, axes = plt.subplots(1, 3, figsize=(15, 3.5))
            for ax, name in zip(axes, modules):
                for key in [k for k in history[name][0] if k.startswith("snd_target/")]:
                    ax.plot([h[key] for h in history[name]], label=key.split("/")[1])
                ax.plot([h["forward"] for h in history[name]], "k--", label="predictor (forward)")
                ax.set_title(f"{name}: loss terms per target step")
                ax.set_yscale("symlog", linthresh=1e-3)
                ax.legend(fontsize=8)
            plt.show()
        """),
        md("""
            ## SND-V: contrastive distances / SND-V：对比学习的特征距离

            d = mean squared feature difference of the two augmented members of a pair. Training pulls
            same-state pairs towards 0 and different-state pairs towards 1.
        """),
        code("""
            fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
            for ax, (title, res) in zip(axes, [("before", before["snd-v"]), (f"after {TARGET_STEPS} steps", after["snd-v"])]):
                bins = np.linspace(0, max(res["d_same"].max(), res["d_diff"].max(), 1.2), 30)
                ax.hist(res["d_same"], bins, alpha=0.6, label=f"(s, s)   tau=0, mean {res['d_same'].mean():.3f}")
                ax.hist(res["d_diff"], bins, alpha=0.6, label=f"(s, s') tau=1, mean {res['d_diff'].mean():.3f}")
                ax.set_title(f"SND-V {title}")
                ax.set_xlabel("feature distance d")
                ax.legend(fontsize=8)
            plt.show()
        """),
        md("""
            ## SND-VIC: VICReg terms / SND-VIC：VICReg 的各项损失

            Invariance (consecutive states close), variance hinge (every feature keeps std >= 1 over the batch),
            covariance (features decorrelated).
        """),
        code("""
            terms = ["invariance", "variance", "covariance"]
            fig, ax = plt.subplots(figsize=(6, 3.2))
            xs = np.arange(len(terms))
            ax.bar(xs - 0.2, [before["snd-vic"][k] for k in terms], 0.4, label="before")
            ax.bar(xs + 0.2, [after["snd-vic"][k] for k in terms], 0.4, label=f"after {TARGET_STEPS} steps")
            ax.set_xticks(xs, terms)
            ax.set_yscale("log")
            ax.legend()
            ax.set_title("SND-VIC terms on the batch")
            plt.show()
            print({k: (round(before["snd-vic"][k], 4), round(after["snd-vic"][k], 4)) for k in terms})
        """),
        md("""
            ## SND-STD: ST-DIM scores / SND-STD：ST-DIM 打分矩阵

            The global-local bilinear scores of every anchor s<sub>t+1</sub> (rows) against every candidate
            s<sub>t</sub> (columns), as InfoNCE sees them: a softmax over each row (per location, then averaged
            over locations). Training raises the diagonal, the probability of the true predecessor, above
            chance (1/N); neighbouring frames look alike, so the mass spreads along the diagonal band.
        """),
        code("""
            fig, axes = plt.subplots(1, 2, figsize=(10, 4))
            for ax, (title, res) in zip(axes, [("before", before["snd-std"]), (f"after {TARGET_STEPS} steps", after["snd-std"])]):
                p = res["p_gl"]
                im = ax.imshow(p, cmap="viridis")
                fig.colorbar(im, ax=ax, fraction=0.046)
                ax.set_title(f"{title}: mean p(diagonal) {np.diag(p).mean():.3f}, chance {1 / len(p):.3f}\\n"
                             f"InfoNCE global-local {res['global_local']:.3f}", fontsize=9)
                ax.set_xlabel("s_t (candidate)")
                ax.set_ylabel("s_t+1 (anchor)")
            fig.tight_layout()
            plt.show()
        """),
        md("""
            ## Novelty (intrinsic reward) of the batch / 这批数据的新颖度（内在奖励）

            The predictor is distilled from the moving target on a random 25% of each batch: the novelty of
            frames it has seen falls, while the target's changing features keep it from vanishing entirely.
        """),
        code("""
            fig, ax = plt.subplots(figsize=(7, 3))
            for name in modules:
                ax.plot(before[name]["novelty"], alpha=0.4, label=f"{name} before (mean {before[name]['novelty'].mean():.3g})")
                ax.plot(after[name]["novelty"], label=f"{name} after (mean {after[name]['novelty'].mean():.3g})")
            ax.set_yscale("log")
            ax.set_xlabel("t")
            ax.legend(fontsize=7)
            plt.show()
        """),
        md("""
            ## In a training run / 在完整训练中使用

                !python mario/train.py --world 1 --stage 1 --intrinsic snd-v   # or snd-std, snd-vic

            logs each variant's loss terms under `losses/snd_target/...` in VisualDL
            (`visualdl --logdir runs --language en`, see `docs/visualdl.md`).
        """),
    ]


# ------------------------------------------------------------------ Pong: the SND article's own experiment
def pong_notebook():
    return [
        md("""
            # Double DQN + SND-V on Pong: the SND article's comparison / Pong：Double DQN 与 SND-V 对比

            The Japanese SND article does not run SND on PPO: it builds SND-V on a **Double DQN** and compares three
            agents on Atari Pong (5-point games, frame skip 7, gray + binarized 84x84 frames, window 4):

            * **DQN**: Double DQN with epsilon 0.1;
            * **DQN_e0**: the same with epsilon 0 (no random actions at all);
            * **SND**: Double DQN, epsilon 0, reward = extrinsic + 0.5 x SND-V intrinsic reward.

            It found little difference between the three (Pong is learnable even at epsilon 0). This notebook runs
            `pong/train.py --agent dqn|dqn-e0|snd` (the article's settings, `--help` names each source), overlays the
            three runs' curves against train steps, as the article's chart does, and shows an evaluation video.
            `QUICK = True` (the default) only checks the pipeline with tiny runs; `QUICK = False` runs the article's
            100,000 train steps per agent (hours on a CPU: see `docs/snd_dqn_pong.md`; `--device gpu` on AI Studio).
        """),
        params_cell("""
            AGENTS = ["dqn", "dqn-e0", "snd"]
            SEED = 0
        """),
        SETUP,
        *zoo_cells("pong", width=320),
        md("""
            ## Train the three agents / 训练三个智能体

            `pong.train.main(flags)` is exactly `python pong/train.py <flags>`. The runs share one parent folder,
            `RUNS/snd_dqn_pong/`, so VisualDL overlays them. Ctrl-C (or the stop button) saves a checkpoint first;
            `--resume <checkpoint>` continues (the replay memory is in the checkpoint unless `--no-save-replay`).
        """),
        code("""
            from pong.train import main as train_pong

            PARENT = os.path.join(RUNS, "snd_dqn_pong")
            if QUICK:  # a few hundred env steps per agent: 1-point games, a small memory and batch
                flags = ["--train-steps", "40", "--memory-capacity", "500", "--memory-warmup-size", "64",
                         "--batch-size", "8", "--max-points", "1", "--eval-interval", "20", "--max-eval-steps", "100",
                         "--video-interval", "2", "--log-interval", "10", "--save-interval", "0"]
            else:  # the article: 100,000 train steps per agent
                flags = ["--eval-interval", "2000", "--video-interval", "10"]
            results = {}
            for agent in AGENTS:
                results[agent] = train_pong(flags + ["--agent", agent, "--seed", str(SEED), "--device", DEVICE,
                                                     "--log-path", PARENT, "--run-name", f"pong_{agent}_seed{SEED}"])
                print(agent, {k: v for k, v in results[agent].items() if k != "eval"})
        """),
        md("""
            ## The comparison / 对比结果

            Every curve's x axis is **train steps** (SRL's train count, what the article plots): the greedy
            evaluation return (`eval/return`, 5-point games: from -5 to +5), the training episodes' return, the Q
            loss, and for SND its intrinsic reward and the SND target's contrastive loss.
        """),
        code("""
            import matplotlib.pyplot as plt

            from common.run.logger import read_metrics

            TAGS = ["eval/return", "episode/return", "losses/q", "charts/q_mean", "intrinsic/reward_mean",
                    "losses/snd_target"]
            metrics = {agent: read_metrics(r["run_dir"]) for agent, r in results.items()}
            fig, axes = plt.subplots(2, 3, figsize=(14, 6.5))
            for ax, tag in zip(axes.flat, TAGS):
                for agent, m in metrics.items():
                    if tag in m:
                        steps, values = m[tag]
                        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, label=agent)
                ax.set_title(tag, fontsize=10)
                ax.set_xlabel("train steps")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=8)
            fig.tight_layout()
            plt.show()
            for agent, m in metrics.items():
                if "eval/return" in m:
                    print(f"{agent}: last eval return {m['eval/return'][1][-1]:+.1f}, "
                          f"{len(m.get('episode/return', ([], []))[0])} training episodes")
        """),
        md(
            "## An evaluation episode of the SND agent (the emulator's screen; the network sees it gray, cropped and binarized to 84x84) / SND 智能体的一局评估（模拟器画面；网络看到的是其灰度、裁剪、二值化后的 84x84 帧）"
        ),
        code("""
            import glob

            from IPython.display import Video, display

            videos = sorted(glob.glob(os.path.join(results["snd"]["run_dir"], "videos", "eval_*.mp4")))
            print(len(videos), "eval videos:", [os.path.basename(v) for v in videos[-5:]])
            if videos:
                display(Video(videos[-1], embed=True, width=320))
        """),
        md("""
            ## VisualDL / VisualDL 可视化看板

            `visualdl --logdir snd_dqn_pong --host 127.0.0.1 --port 8040 --language en` from the `runs` folder
            (keep `--language en` and a relative `--logdir`, see `docs/visualdl.md`), or AI Studio's 可视化 tab on
            `runs/snd_dqn_pong`. The three runs appear as `pong_dqn_seed0`, `pong_dqn-e0_seed0`,
            `pong_snd_seed0`: in **Scalars**, `eval/return` and `episode/return` overlay the three agents against
            train steps, the article's chart. The full three-agent benchmark with its report is
            `python benchmarks/snd_dqn_pong.py` (`docs/snd_dqn_pong.md`).
        """),
        code("""
            # The command for this notebook's runs (a relative --logdir, from the runs folder).
            print(f"cd {RUNS} && visualdl --logdir snd_dqn_pong --host 127.0.0.1 --port 8040 --language en")
        """),
    ]


NOTEBOOKS = {
    "mario_rnd_ppo.ipynb": mario_notebook,
    "montezuma_rnd_ppo.ipynb": montezuma_notebook,
    "snd_variants.ipynb": snd_notebook,
    "snd_dqn_pong.ipynb": pong_notebook,
}


def build(name: str) -> nbformat.NotebookNode:
    cells = NOTEBOOKS[name]()
    stem = os.path.splitext(name)[0]
    for i, cell in enumerate(cells):
        cell.id = f"{stem[:40]}-{i:02d}"  # stable ids: regenerating does not churn the diff
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python", "version": "3.10"},
        },
    )
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name)) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for name in NOTEBOOKS:
        path = os.path.join(HERE, name)
        text = render(name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if "--check" in argv:
            if old != text:
                stale.append(name)
        elif old != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print("wrote", path)
    if stale:
        print("out of date (run python notebooks/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
