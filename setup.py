"""Curiosity-driven exploration for PaddlePaddle: PPO + RND / SND on Mario and Montezuma.

PaddlePaddle is deliberately *not* a hard requirement: AI Studio and GPU machines
already have ``paddlepaddle-gpu``, and a plain ``paddlepaddle`` requirement would
replace it with the CPU build. Following the Paddle ecosystem's convention (PARL,
PaddleNLP) Paddle is left to the user; the CPU build comes with the ``cpu`` extra,
and ``common.run.device`` tells clearly when no Paddle is installed:

    pip install -e ".[cpu]"        # fresh machine, CPU
    pip install -e .               # Paddle (CPU or GPU build) already installed
"""

from setuptools import setup

PADDLE_CPU = "paddlepaddle>=2.6,<4"

# Two Mario stacks, chosen by the Python version (mario/env.py plays both; tests/test_mario_stack.py checks
# they give the same game): on Python 3.10-3.12 gym 0.26 + nes-py 8 + gym-super-mario-bros 7 + numpy 1
# (AI Studio's stack; nes-py 8.2.1 overflows on numpy 2), on Python 3.13 gymnasium + nes-py 9 +
# gym-super-mario-bros 9 + numpy 2 (no gym: unmaintained, and broken on numpy 2).
OLD, NEW = "python_version < '3.13'", "python_version >= '3.13'"

install_requires = [
    f"numpy>=1.23,<2; {OLD}",
    f"numpy>=2,<3; {NEW}",
    f"gym==0.26.2; {OLD}",
    f"nes-py==8.2.1; {OLD}",
    f"nes-py>=9.0.1,<10; {NEW}",
    f"gym-super-mario-bros==7.4.0; {OLD}",
    f"gym-super-mario-bros>=9.1,<10; {NEW}",
    "ale-py>=0.9,<0.13",  # bundles the Atari ROMs (Montezuma's Revenge included)
    "gymnasium>=1.0,<2",
    f"opencv-python-headless>=4.5,<4.11; {OLD}",  # 4.11+ needs numpy 2
    f"opencv-python-headless>=4.11; {NEW}",
    "visualdl==2.5.3",
    f"pandas<3; {OLD}",  # the VisualDL server imports pandas; pandas 3 needs numpy 2
    "tqdm>=4.60",
    "imageio>=2.20",
    "imageio-ffmpeg>=0.4.7",  # ships its own ffmpeg binary for mp4 writing
    "matplotlib>=3.5",
    "minigrid>=2.3,<4",
]

setup(
    name="paddle-curiosity",
    version="0.1.0",
    description="PPO with Random/Self-supervised Network Distillation for Super Mario Bros and "
    "Montezuma's Revenge, on PaddlePaddle",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.14",
    packages=[
        "common",
        "common.cpu",
        "common.dqn",
        "common.envs",
        "common.intrinsic",
        "common.ppo",
        "common.run",
        "mario",
        "montezuma",
        "gridworld",
        "pong",
    ],
    install_requires=install_requires,
    extras_require={
        "cpu": [PADDLE_CPU],
        "gpu": ["paddlepaddle-gpu>=2.6,<4"],
        # --vec-env ray: env workers as Ray actors (docs/distributed.md); data-parallel ranks need only Paddle
        "distributed": ["ray>=2.9,<3"],
        "test": [
            "pytest>=7",
            "pytest-xdist>=3.5",  # the suite runs on every core (pyproject.toml: -n auto)
            "nbclient>=0.7",
            "nbformat>=5",
            "ipykernel>=6",
            "psutil>=5",
            "selenium>=4.10",  # tests/test_visualdl_browser.py: VisualDL's pages in Debian's chromium + chromedriver
            "ruff==0.17.6",
            "codespell>=2.2",
        ],
    },
)
