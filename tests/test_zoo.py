"""zoo/: every trained agent plays as its card says; export writes weights only, refused by --resume."""

import json
import os

import numpy as np
import pytest

from common import zoo

CARDS = zoo.cards()


@pytest.mark.slow
@pytest.mark.parametrize("card", CARDS, ids=[c["name"] for c in CARDS])
def test_zoo_agent_plays_as_its_card_says(card, tmp_path):
    """The greedy episode with the card's seed is deterministic on a CPU: the same numbers again."""
    path = os.path.join(zoo.ZOO, card["file"])
    assert os.path.getsize(path) <= zoo.MAX_BYTES
    ep = card["episode"]
    result = zoo.card_result(zoo.play_once(card["game"], path, ep["seed"], str(tmp_path / "episode.mp4"), ep["policy"]))
    expected = {k: v for k, v in ep.items() if k not in ("seed", "policy")}
    assert result == expected
    assert os.path.getsize(tmp_path / "episode.mp4") > 1000


def test_the_zoo_stays_out_of_the_wheel():
    """zoo/ is a data folder of the checkout: setup.py lists no zoo package and no package data."""
    import ast

    with open(os.path.join(zoo.ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    kwargs = {k.arg: k.value for k in call.keywords}
    packages = ast.literal_eval(kwargs["packages"])
    assert packages and not any(p == "zoo" or p.startswith("zoo.") for p in packages)
    assert "package_data" not in kwargs and "data_files" not in kwargs and "include_package_data" not in kwargs
    assert not os.path.exists(os.path.join(zoo.ZOO, "__init__.py"))


@pytest.mark.slow
def test_export_writes_weights_only_and_a_measured_card(tmp_path):
    from short_runs import tiny_grid_run

    from common.ppo.trainer import Trainer
    from common.run.checkpoint import CheckpointError, load_checkpoint
    from gridworld.train import SPEC, GridConfig

    result = tiny_grid_run(tmp_path)
    card = zoo.export(
        "gridworld", result["checkpoint"], "tiny-agent", hours=0.001, note="a test", zoo=str(tmp_path), gif=True
    )
    assert os.path.getsize(tmp_path / "tiny-agent.gif") > 1000
    path = tmp_path / "tiny-agent.pdparams"
    state = load_checkpoint(str(path))
    assert state["zoo"] == 1 and "optimizer" not in state and "int_filter" not in state
    assert state["intrinsic"]["predictor_opt"] == {}
    assert os.path.getsize(path) < os.path.getsize(result["checkpoint"]) / 2
    assert card["level"] == "DoorKey-5x5" and card["agent_steps"] == 128
    trained_at = load_checkpoint(result["checkpoint"])["code_commits"]  # the run's, not the exporting checkout's
    assert card["trained_at_commit"] == trained_at[0] and state["code_commits"] == trained_at
    again = zoo.card_result(zoo.play_once("gridworld", str(path), 0))
    assert again == {k: v for k, v in card["episode"].items() if k not in ("seed", "policy")}
    sampled = [zoo.card_result(zoo.play_once("gridworld", str(path), 3, policy="sample")) for _ in range(2)]
    assert sampled[0] == sampled[1]  # a sampled episode repeats with its seed
    assert zoo.cards(str(tmp_path))[0]["name"] == "tiny-agent"
    with pytest.raises(CheckpointError, match="incomplete"):
        Trainer(SPEC, GridConfig(log_path=str(tmp_path), run_name="resumed", resume=str(path)))
    assert np.isfinite(card["episode"]["return"])
    assert card["weights"] == "policy, intrinsic module"

    small = zoo.export("gridworld", result["checkpoint"], "half", zoo=str(tmp_path), half=True, intrinsic=False)
    state = load_checkpoint(str(tmp_path / "half.pdparams"))
    assert "intrinsic" not in state and small["weights"] == "policy in float16"
    assert {str(v.dtype) for v in state["policy"].values()} == {"paddle.float16"}
    assert zoo.card_result(zoo.play_once("gridworld", str(tmp_path / "half.pdparams"), 0)) == {
        k: v for k, v in small["episode"].items() if k not in ("seed", "policy")
    }


def test_a_half_zoo_file_widens_to_the_rounded_float32_weights():
    import paddle

    from common.run.checkpoint import widen

    weights = {"fc.weight": paddle.to_tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4) / 3)}
    state = {"config": {}, "update": 1, "policy": weights, "intrinsic": {"predictor_opt": {"m": 1}}}
    small = zoo.weights_only(state, half=True, intrinsic=False)
    assert small["half"] == 1 and "intrinsic" not in small and small["policy"]["fc.weight"].dtype == paddle.float16
    wide = widen(small)["policy"]["fc.weight"]
    assert wide.dtype == paddle.float32
    rounded = weights["fc.weight"].numpy().astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(wide.numpy(), rounded)
    assert 0 < np.abs(rounded - weights["fc.weight"].numpy()).max() < 1e-3  # rounded, and only just
    assert widen(state) is state  # a float32 checkpoint: as it is
    odd = {**small, "half": paddle.to_tensor([1, 1])}  # a careless file: no tensor truth value is asked
    assert widen(odd) is odd
    kept = zoo.weights_only(state)
    assert kept["intrinsic"]["predictor_opt"] == {} and kept["policy"]["fc.weight"].dtype == paddle.float32
    # a module's optimizers are emptied at any depth (E3B's "opt"; E3B x RND nests both parts' states)
    nested = {
        "name": "e3b-rnd",
        "episodic": {"opt": {"m": 1}, "nets": {"w": 2}},
        "novelty": {"predictor_opt": {"m": 1}},
    }
    kept = zoo.weights_only({**state, "intrinsic": nested})["intrinsic"]
    assert kept == {"name": "e3b-rnd", "episodic": {"opt": {}, "nets": {"w": 2}}, "novelty": {"predictor_opt": {}}}


@pytest.mark.parametrize("card", CARDS, ids=[c["name"] for c in CARDS])
def test_a_card_gives_the_size_of_its_file(card):
    """A file rewritten after its card (a format change) must not leave the card's size behind."""
    assert card["megabytes"] == round(os.path.getsize(os.path.join(zoo.ZOO, card["file"])) / 2**20, 2)


def test_the_readmes_show_the_zoo_as_its_cards_say():
    table = zoo.markdown_table()
    for name in ("README.md", "README_cn.md", os.path.join("zoo", "README.md")):
        with open(os.path.join(zoo.ROOT, name), encoding="utf-8") as f:
            text = f.read()
        assert zoo.replace_table(text, table) == text, f"{name}: run python -m common.zoo table"


def test_the_zoo_table_names_the_authors_networks(tmp_path):
    card = json.loads(json.dumps(next(c for c in CARDS if c["game"] == "montezuma")))  # a copy: CARDS stays as read
    card["settings"].update(intrinsic="snd-vic", policy_network="authors", snd_network="authors")
    (tmp_path / card["file"]).write_bytes(b"")  # the card must name a file in its zoo; the table does not read it
    (tmp_path / "card.json").write_text(json.dumps(card), encoding="utf-8")
    assert "| PPO + SND-VIC (SND authors' networks and policy) |" in zoo.markdown_table(str(tmp_path))
    for policy, snd, label in [
        ("game", "authors", "PPO + SND-VIC (SND authors' networks)"),
        ("authors", "game", "PPO + SND-VIC (SND authors' policy)"),
        ("game", "game", "PPO + SND-VIC"),
    ]:
        card["settings"].update(policy_network=policy, snd_network=snd)
        (tmp_path / "card.json").write_text(json.dumps(card), encoding="utf-8")
        assert f"| {label} |" in zoo.markdown_table(str(tmp_path))
