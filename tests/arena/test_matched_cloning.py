"""``arlarena matched-cloning``: the continued cloning steps that cost what RL phases cost, on
synthetic run directories whose numbers give the answer by hand (arlarena_jax/arena/matched.py's
rule: N = round(median RL seconds / median cloning seconds per step))."""

from __future__ import annotations

import pytest

from arlarena_jax.arena.matched import cloning_cost, matched_steps, rl_cost, start_of
from arlarena_jax.cli import main
from arlarena_jax.errors import ConfigError
from tests.helpers.reports import make_run

RL_ENV = {"train_batch_size": 2, "group_size": 4}


def rl_run(root, name, seconds_per_step: list[float], start: str):
    """An RL run: step 0 (the start's evaluation, no timing), then one timed step each."""
    timing = {i + 1: s for i, s in enumerate(seconds_per_step)}
    tokens = {i + 1: 100.0 for i in range(len(seconds_per_step))}
    return make_run(
        root,
        name,
        scalars={
            "timing/total": timing,
            "batch/response_tokens": tokens,
            "val/success_rate": {0: 0.5},
        },
        config={"env": RL_ENV, "sft": {"init_from": f"runs/starts/textworld/{start}"}},
    )


def start(root, name, seconds: float, steps: int):
    per_step = {i: 20.0 for i in range(steps)}
    return make_run(
        root,
        name,
        scalars={
            "timing/sft": {0: seconds},
            "sft/steps": {0: float(steps)},
            "sft/tokens": per_step,
        },
        config={"sft": {"batch_size": 8, "init_from": None}},
    )


@pytest.fixture
def three_seeds(tmp_path):
    """Three RL runs of 4 steps: 10, 15 and 50 min (the last beside another job), from starts
    cloned at 10, 12 and 30 s a step."""
    starts = tmp_path / "starts"
    for name, seconds, steps in (("a", 320.0, 32), ("b", 384.0, 32), ("c", 960.0, 32)):
        start(starts, name, seconds, steps)
    runs = [
        rl_run(tmp_path / "runs", f"s{i}", [m * 15.0] * 4, name)
        for i, (m, name) in enumerate(((10, "a"), (15, "b"), (50, "c")))
    ]
    return runs, starts


def test_the_rule_takes_medians_of_both_sides(three_seeds):
    runs, starts = three_seeds
    rl = [rl_cost(r) for r in runs]
    assert [c.seconds for c in rl] == [600.0, 900.0, 3000.0]  # 4 steps of 150, 225, 750 s
    assert rl[0].episodes == 4 * 2 * 4 and rl[0].sampled_tokens == 400.0
    cloning = [cloning_cost(start_of(r, starts)) for r in runs]
    assert [c.seconds_per_step for c in cloning] == [10.0, 12.0, 30.0]
    assert cloning[0].tokens == 32 * 20.0 and cloning[0].turns_per_step == 8
    assert matched_steps(rl, cloning) == 75  # 900 s / 12 s


def test_the_command_prints_the_table_and_n(three_seeds, capsys):
    runs, starts = three_seeds
    assert main(["matched-cloning", *map(str, runs), "--starts", str(starts)]) == 0
    out = capsys.readouterr().out
    assert "sft.continue_steps: 75" in out
    assert "600 expert turns" in out  # 75 steps of 8 turns
    assert "~1500 reply tokens" in out  # 75 steps of 20 reply tokens
    assert out.count(" 4 steps, ") == 3 and out.count(" 32 steps, ") == 3


def test_runs_that_cannot_be_matched_are_one_line(tmp_path, capsys):
    no_rl = make_run(tmp_path, "cloning_only", scalars={"val/success_rate": {0: 0.5}})
    with pytest.raises(ConfigError, match="no RL step recorded"):
        rl_cost(no_rl)
    alone = rl_run(tmp_path, "alone", [60.0], "x")
    (alone / "config.yaml").write_text("env: {train_batch_size: 2, group_size: 4}\nsft: {}\n")
    with pytest.raises(ConfigError, match=r"sft\.init_from is not set"):
        start_of(alone)
    with pytest.raises(SystemExit) as exited:
        main(["matched-cloning", str(tmp_path / "nowhere")])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "nowhere: no tensorboard/ folder" in line
