"""PPO with a critic end to end on the tiny Sokoban config (docs/algorithms.md §3.7c).

The trainer builds the critic because ``ppo``'s GAE declares ``Input.VALUES``. Checked: the
critic's metrics reach TensorBoard; the checkpoint holds the critic's parameters and optimizer
state; a run stopped after step 2 and resumed equals the uninterrupted run at step 3, critic
included (same rollout exactly; critic and actor metrics within 1e-4 relative, the tolerance of
the policy's resume test: the resumed process compiles afresh); the critic is exported as a
``transformers`` token-classification model; the cheaper value head on the policy's trunk trains
too (tests/e2e/test_textworld_trainer.py); and a ``critic.path`` that is not a value model is one
line.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from arlarena_jax.cli import main
from arlarena_jax.models.value import QwenValueModel, load_value_pretrained
from arlarena_jax.train.metrics import read_scalars
from tests.helpers.tiny_runs import BASE_TINY, stopped_after_step_2, train_tiny
from tests.helpers.tiny_runs import SMALL as TRAINER_SMALL

CONFIG = BASE_TINY
SMALL = [  # the policy trainer test's sizes, PPO without cloning (later keys win)
    *TRAINER_SMALL,
    "algorithm.method=ppo",
    "sft.enabled=false",
    "trainer.eval_at_start=false",
    "trainer.ppo_epochs=2",
    "trainer.eval_every=0",
    "critic.optim.lr=1e-3",  # large enough that the critic visibly moves in 3 steps
]
CRITIC_KEYS = (
    "critic/vf_loss",
    "critic/vf_clipfrac",
    "critic/vf_explained_var",
    "critic/grad_norm",
    "critic/lr",
    "critic/values/mean",
)


def run(directory, steps: int, *extra: str):
    return train_tiny(CONFIG, SMALL, directory, steps, *extra)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ppo")
    return directory, run(directory, 3, "trainer.export_hf=true")


def test_ppo_trains_its_critic_and_logs_it(uninterrupted):
    directory, summary = uninterrupted
    assert summary.steps == 3
    for row in summary.history:
        for key in CRITIC_KEYS:
            assert math.isfinite(row[key]), key
        assert row["critic/lr"] == pytest.approx(1e-3)
        assert 0.0 <= row["critic/vf_clipfrac"] <= 1.0
    scalars = read_scalars(directory / "tensorboard")
    assert [s for s, _ in scalars["critic/vf_loss"]] == [1, 2, 3]
    assert [s for s, _ in scalars["critic/vf_explained_var"]] == [1, 2, 3]
    # the critic learns: its values move between steps (lr 1e-3, 2 epochs of 2 mini-batches)
    means = [row["critic/values/mean"] for row in summary.history]
    assert len(set(means)) == 3


def test_the_checkpoint_holds_the_critic(uninterrupted):
    directory, _ = uninterrupted
    metadata = json.loads((directory / "checkpoints" / "3" / "state" / "_METADATA").read_text())
    top = {key.split(",")[0].strip("('\"") for key in metadata["tree_metadata"]}
    assert {"params", "opt_state", "critic_params", "critic_opt_state"} <= top


def test_the_critic_is_exported_for_transformers(uninterrupted):
    directory, _ = uninterrupted
    critic = load_value_pretrained(directory / "hf_critic")
    assert isinstance(critic, QwenValueModel)
    config = json.loads((directory / "hf_critic" / "config.json").read_text())
    assert config["num_labels"] == 1
    assert (directory / "hf_critic" / "tokenizer.json").is_file()
    ids = np.arange(1, 9, dtype=np.int32)[None]
    assert np.all(np.isfinite(np.asarray(critic(ids))))


def test_resume_equals_the_uninterrupted_run_critic_included(uninterrupted, tmp_path):
    directory, full = uninterrupted
    resumed = run(stopped_after_step_2(directory, tmp_path), 3)
    assert [row["step"] for row in resumed.history] == [3.0]
    expected = full.history[-1]
    for key, value in resumed.history[-1].items():
        if key.startswith(("episode/", "batch/")):  # same rollout: same tokens and rewards
            assert value == expected[key], key
        elif key.startswith(("actor/", "critic/")):
            assert value == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key


def test_a_critic_path_that_is_not_a_value_model_is_one_line(uninterrupted, tmp_path, capsys):
    directory, _ = uninterrupted
    overrides = [*SMALL, f"critic.path={directory / 'hf'}", "trainer.total_steps=1"]
    with pytest.raises(SystemExit) as info:
        main(["train", CONFIG, *overrides, f"trainer.run_dir={tmp_path}"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'critic.path'" in err and "not a value model" in err


def test_a_sharded_ppo_run_matches_the_single_device_run(uninterrupted, tmp_path):
    """Policy and critic (parameters, optimizer states) split over 8 simulated devices (data 2 ×
    fsdp 2 × tensor 2): step 1 sees the same rollout and nearly the same updates (float32 sums
    in another order: 1e-3 relative, as the policy's sharded test). The value clip fraction
    counts strict inequalities between the clipped and unclipped errors, which are equal up to
    rounding wherever V is still V_old (the first mini-batch): rounding flips those, so it is only
    checked to be a fraction."""
    _, full = uninterrupted
    sharded = run(tmp_path, 1, "mesh.data=2", "mesh.fsdp=2", "mesh.tensor=2")
    expected = full.history[0]
    for key, value in sharded.history[0].items():
        if key.startswith(("episode/", "batch/")):
            assert value == expected[key], key
        elif key == "critic/vf_clipfrac":
            assert 0.0 <= value <= 1.0
        elif key.startswith(("actor/", "critic/")):
            assert value == pytest.approx(expected[key], rel=1e-3, abs=1e-5), key
