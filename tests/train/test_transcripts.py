"""Held-out transcripts (arlarena_jax.train.transcripts): each episode's turns in order under its
seed, and ``arlarena eval --transcripts-out`` agreeing with ``--episodes-out`` episode for
episode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from arlarena_jax.cli import main
from arlarena_jax.rollout.loop import Rollout, Trajectory, TurnRow
from arlarena_jax.train.held_out import read_records
from arlarena_jax.train.transcripts import episode_transcripts

ROOT = Path(__file__).resolve().parents[2]


def row(trajectory: int, turn: int, action, *, valid: bool = True) -> TurnRow:
    return TurnRow(
        prompt_ids=[1, 2],
        response_ids=[3],
        log_probs=[-0.5],
        prompt="prompt",
        response=f"reply {trajectory}.{turn}",
        group=trajectory,
        trajectory=trajectory,
        env_index=trajectory,
        turn=turn,
        anchor=f"observation {trajectory}.{turn}",
        action=action,
        reward=0.5 * turn,
        action_valid=valid,
        format_valid=True,
        data_source="text",
        info={},
    )


def test_turns_come_in_order_under_each_episode_s_seed():
    # rows interleaved and out of order, as a batched turn loop may leave them
    rows = [row(1, 1, np.int64(3)), row(0, 0, "go north"), row(1, 0, None, valid=False)]
    rows.append(row(0, 1, ("a", 2)))
    trajectories = [
        Trajectory(
            group=0, trajectory=0, env_index=0, episode_return=0.5, length=2, won=True, info={}
        ),
        Trajectory(
            group=1, trajectory=1, env_index=1, episode_return=0.5, length=2, won=False, info={}
        ),
    ]
    records = episode_transcripts(Rollout(rows, trajectories, 1, "text"), seeds=[70, 71])
    assert [(r["seed"], r["won"], r["length"]) for r in records] == [(70, True, 2), (71, False, 2)]
    first, second = records[0]["turns"], records[1]["turns"]
    assert [t["turn"] for t in first] == [0, 1] and [t["turn"] for t in second] == [0, 1]
    assert first[0] == {
        "turn": 0,
        "observation": "observation 0.0",
        "response": "reply 0.0",
        "action": "go north",
        "action_valid": True,
        "format_valid": True,
        "reward": 0.0,
    }
    # NumPy scalars become numbers, other objects their str; None stays null
    assert first[1]["action"] == "('a', 2)"
    assert (second[0]["action"], second[0]["action_valid"]) == (None, False)
    assert second[1]["action"] == 3 and type(second[1]["action"]) is int
    json.dumps(records)  # every value is JSON


def test_eval_writes_transcripts_that_match_the_outcomes(tmp_path, capsys):
    transcripts, episodes = tmp_path / "transcripts.jsonl", tmp_path / "episodes.jsonl"
    argv = [
        "eval",
        "--allow-untrained",
        str(ROOT / "configs/sokoban/base_tiny.yaml"),
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.eval_episodes=4",
        "env.max_turns=3",
        "--episodes-out",
        str(episodes),
        "--transcripts-out",
        str(transcripts),
    ]
    assert main(argv) == 0
    assert f"transcripts: {transcripts}" in capsys.readouterr().out
    records = read_records(transcripts)
    assert len(records) == 4
    # the same evaluation: outcome for outcome, and one turn per step of each episode
    assert [{k: v for k, v in r.items() if k != "turns"} for r in records] == read_records(episodes)
    for record in records:
        turns = record["turns"]
        assert [t["turn"] for t in turns] == list(range(record["length"]))
        # the return is the sum of the turns' rewards (float32 sums: within 1e-6)
        assert np.isclose(sum(t["reward"] for t in turns), record["return"], atol=1e-6)
        assert all(isinstance(t["observation"], str) and t["observation"] for t in turns)
