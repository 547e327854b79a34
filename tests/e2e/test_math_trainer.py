"""Tool-integrated math end to end (docs/environments.md §1.8, §9): the answer oracle through the
real sandbox and scorer scores 1 on every AIME problem; the trainer on configs/math/base_tiny.yaml
cut to seconds (tiny tokenizer from the oracle, one cloning step, one RL step with trajectory
rows, AIME evaluation) reports the math metrics; bad math settings are one-line errors.

Needs ../shared/data/math (or $ARLARENA_MATH_DATA): skipped with the reason when it is absent."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arlarena_jax.cli import main
from arlarena_jax.rollout import collect
from arlarena_jax.rollout.trajectory import TrajectoryRows
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.held_out import held_out_path, read_records
from arlarena_jax.train.loop import train
from arlarena_jax.train.metrics import read_scalars
from envs import registry
from envs.math.data import default_data_dir
from envs.math.spec import oracle_reply
from envs.text import ScriptedPolicy

CONFIG = "configs/math/base_tiny.yaml"

# Sandboxes share host-wide uids, and tests/envs/test_math_sandbox.py looks for their processes
# host-wide: under pytest-xdist one worker at a time runs such tests (tests/conftest.py).
pytestmark = [
    pytest.mark.usefixtures("one_sandbox_at_a_time"),
    pytest.mark.skipif(
        not (default_data_dir() / "aime2024.jsonl.gz").is_file(),
        reason=f"{default_data_dir()} not found: set $ARLARENA_MATH_DATA to the math data folder",
    ),
]


def small(run_dir) -> list[str]:
    return [
        f"trainer.run_dir={run_dir}",
        "env.math.test_files=[aime2024]",
        "env.train_batch_size=2",
        "env.group_size=2",
        "env.max_turns=2",
        "env.eval_batch_size=30",
        "env.max_right_tokens=64",
        "sampler.max_new_tokens=16",
        "sampler.max_concurrent_decodes=32",
        "sft.num_episodes=4",
        "sft.steps=1",
        "trainer.total_steps=1",
        "trainer.mini_batch_size=4",
        "trainer.micro_batch_size=4",
    ]


def test_the_answer_oracle_scores_every_aime_problem():
    """The oracle's one code turn runs in the real sandbox; the printed \\boxed answer is scored by
    math-verify in the scoring worker: every problem is solved, in one turn, with valid code."""
    config = load_config(CONFIG, ["env.math.test_files=[aime2024]"])
    spec = registry.get("math")
    batch = spec.make_batch(config.env, 30, "test")
    try:
        answers = [p.answer for p in batch.problems]
        policy = ScriptedPolicy(lambda prompts: [oracle_reply(a) for a in answers])
        rollout = collect(
            batch,
            spec.formats["compact"],
            policy,
            group_seeds=list(range(30)),
            group_size=1,
            max_turns=5,
            rows=TrajectoryRows(),
        )
    finally:
        batch.close()
    assert [t.won for t in rollout.trajectories] == [True] * 30
    infos = [t.info for t in rollout.trajectories]
    assert all(i["turns"] == 1 and i["valid_code_turns"] == 1 for i in infos)
    assert all("Code execution result: \\boxed{" in r.response for r in rollout.rows)


def test_math_run_clones_trains_and_evaluates(tmp_path, capsys):
    summary = train(load_config(CONFIG, small(tmp_path)), console=False)
    assert summary.steps == 1
    row = summary.history[0]
    for key in ("actor/pg_loss", "episode/success_rate", "episode/void_turn", "batch/rows"):
        assert math.isfinite(row[key]), key
    assert row["batch/rows"] == 4  # one trajectory row per episode
    # packed widths: quarter-octave steps of at least 16 tokens
    assert row["batch/prompt_width"] >= 16 and row["batch/response_width"] >= 16
    assert row["batch/prompt_width"] % 16 == 0 and row["batch/response_width"] % 16 == 0
    final = summary.final_eval
    assert 0.0 <= final["val/aime2024/avg_at_1"] <= 1.0
    assert {"val/use_code", "val/void_turn", "val/turns"} <= set(final)
    scalars = read_scalars(tmp_path / "tensorboard")
    assert "test/aime2024/avg_at_1" in scalars and "sft/loss" in scalars
    episodes = tmp_path / "episodes.jsonl"
    assert main(["eval", CONFIG, *small(tmp_path), "--episodes-out", str(episodes)]) == 0
    out = capsys.readouterr().out
    assert "30 episodes of the test split" in out and "test/aime2024/avg_at_1" in out
    values = [float(line.split()[-1]) for line in out.splitlines() if "avg_at_1" in line]
    assert np.isclose(values[0], final["val/aime2024/avg_at_1"])
    # the same parameters play the same 30 problems alike: per episode, as the run's last
    # evaluation recorded them
    assert read_records(episodes) == read_records(held_out_path(tmp_path, 1))
    assert len(read_records(episodes)) == 30
    # --step 0: the cloned policy, as the run evaluated it before RL
    assert (
        main(["eval", CONFIG, *small(tmp_path), "--step", "0", "--episodes-out", str(episodes)])
        == 0
    )
    assert "checkpoint step 0, 30 episodes of the test split" in capsys.readouterr().out
    assert read_records(episodes) == read_records(held_out_path(tmp_path, 0))
    # export --step 0: the cloned policy's weights, not the newest step's
    from safetensors.numpy import load_file

    for step in (0, 1):
        out = tmp_path / f"hf{step}"
        assert main(["export", str(tmp_path), "--step", str(step), "--out", str(out)]) == 0
        assert f"exported checkpoint step {step} of {tmp_path}" in capsys.readouterr().out
    cloned, trained = (load_file(tmp_path / f"hf{s}" / "model.safetensors") for s in (0, 1))
    assert cloned.keys() == trained.keys()
    assert any(not np.array_equal(cloned[k], trained[k]) for k in cloned)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.rows=turn", "config key 'env.rows': env 'math' supports trajectory rows, not 'turn'"),
        (
            "env.math.isolation=chroot",
            "config key 'env.math.isolation': must be one of",
        ),
        ("env.math.test_files=[aime2030]", "aime2030"),
        ("env.math.sandbox_timeout_s=0", "config key 'env.math.sandbox_timeout_s': must be > 0"),
    ],
)
def test_math_cli_refuses_bad_settings_in_one_line(override, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", CONFIG, override, f"trainer.run_dir={tmp_path}"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
