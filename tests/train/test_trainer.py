"""The trainer end to end on the tiny Sokoban config: cloning, RL steps, evaluation, TensorBoard
event files, orbax checkpoints, Hugging Face export, exact resume, and the CLI.

Sizes are cut to seconds (2 groups x 2, 3 turns, 4 cloning steps); the checks are structural
(files exist and read back, metrics finite) and exact where reasoning gives exactness: a run
stopped after step 2 and resumed equals the uninterrupted run at step 3, metric for metric, since
every random source (task seeds, sampler seeds, parameters, optimizer) is checkpointed: the same
rollout (tokens, rewards) exactly, and actor metrics within 1e-4 relative (the resumed process
compiles the update afresh; XLA may order float32 reductions differently, measured 1.4e-6).
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import threading

import pytest

from arlarena_jax.cli import main
from arlarena_jax.models import load_pretrained
from arlarena_jax.train import loop
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.finish import Summary
from arlarena_jax.train.held_out import held_out_path, read_records
from arlarena_jax.train.loop import summary_table
from arlarena_jax.train.metrics import read_scalars
from arlarena_jax.train.resolution import resolve
from tests.helpers.tiny_runs import SAMPO_TINY, SMALL, stopped_after_step_2, train_tiny

CONFIG = SAMPO_TINY


def run(directory, steps: int, *extra: str):
    return train_tiny(CONFIG, SMALL, directory, steps, *extra)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("uninterrupted")
    return directory, run(directory, 3, "trainer.export_hf=true")


def test_short_run_leaves_logs_checkpoints_and_an_export(uninterrupted):
    directory, summary = uninterrupted
    assert summary.steps == 3 and len(summary.history) == 3
    assert summary.success_after_cloning is not None and summary.success_after_rl is not None
    assert "held-out success after RL" in summary_table(summary)
    assert "held-out success after cloning" in summary_table(summary)
    assert "held-out success before RL" in summary_table(summary, cloned=False)
    table = summary_table(summary, split="validation")  # every success row names its split
    assert "| held-out success after cloning (validation) |" in table
    assert "| held-out success after RL (validation) " in table  # the table pads its cells
    assert "| held-out success after RL (test) " in summary_table(summary)
    for row in summary.history:
        for key in ("actor/pg_loss", "actor/grad_norm", "episode/success_rate", "timing/rollout"):
            assert math.isfinite(row[key]), key
        parts = ("rollout/env", "rollout/policy", "update/log_probs")
        assert all(row[f"timing/{p}"] >= 0 for p in parts)
        assert row["timing/rollout/env"] + row["timing/rollout/policy"] == pytest.approx(
            row["timing/rollout"]
        )
        top = ("rollout", "update", "sync")
        assert row["timing/total"] == pytest.approx(sum(row[f"timing/{k}"] for k in top))
    scalars = read_scalars(directory / "tensorboard")
    assert [s for s, _ in scalars["actor/pg_loss"]] == [1, 2, 3]
    assert "sft/loss" in scalars and "test/success_rate" in scalars
    assert (
        sorted(p.name for p in (directory / "checkpoints").iterdir() if p.name.isdigit())[-1] == "3"
    )
    model = load_pretrained(directory / "hf")
    assert model.config.vocab_size >= 64
    assert (directory / "hf" / "tokenizer.json").is_file()
    assert (directory / "config.yaml").is_file()
    # each evaluation's per-episode outcomes (steps 0, 2 and 3), one line per held-out seed,
    # their mean the logged success rate; the table pairs step 0 with step 3
    for step in (0, 2, 3):
        episodes = read_records(held_out_path(directory, step))
        assert len({e["seed"] for e in episodes}) == len(episodes) == 4
        won = sum(e["won"] for e in episodes) / 4
        assert won == pytest.approx(dict(scalars["test/success_rate"])[step], abs=1e-6)
    assert "change over the start (paired)" in summary_table(summary)


def test_resume_equals_the_uninterrupted_run(uninterrupted, tmp_path):
    directory, full = uninterrupted
    resumed = run(stopped_after_step_2(directory, tmp_path), 3)
    assert [row["step"] for row in resumed.history] == [3.0]
    expected = full.history[-1]
    for key, value in resumed.history[-1].items():
        if key.startswith(("episode/", "batch/")):  # same rollout: same tokens and rewards
            assert value == expected[key], key
        elif key.startswith(("actor/", "critic/")):  # float32 sums of another compilation
            assert value == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key


def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_metrics(uninterrupted, tmp_path):
    """``kill -9`` right after step 2's progress line (its checkpoint being written, or just
    written), then the same command: the run resumes from the newest valid checkpoint and every
    logged metric of steps 1-3 equals the uninterrupted run's (TensorBoard, also the values the
    killed process wrote: metrics are flushed before each checkpoint). Rollout metrics exactly,
    update metrics within float32 re-compilation noise, as above."""
    directory, _ = uninterrupted
    command = [sys.executable, "-m", "arlarena_jax", "train", CONFIG, *SMALL]
    command += ["trainer.total_steps=3", "trainer.export_hf=true", f"trainer.run_dir={tmp_path}"]
    killed = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(300, killed.kill)
    watchdog.start()
    try:
        for line in killed.stdout:
            if re.match(r"\[\s*2/3\]", line):
                killed.send_signal(signal.SIGKILL)
                break
        killed.communicate()
    finally:
        watchdog.cancel()
    assert killed.returncode == -signal.SIGKILL
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    expected, got = read_scalars(directory / "tensorboard"), read_scalars(tmp_path / "tensorboard")
    compared = 0
    for tag, values in expected.items():
        if not tag.startswith(("episode/", "batch/", "actor/", "critic/", "val/")):
            continue  # timings and throughput differ between processes
        for step, value in values:
            written = [v for s, v in got.get(tag, []) if s == step]
            assert written, (tag, step)
            exact = tag.startswith(("episode/", "batch/", "val/"))
            for v in written:
                assert v == (value if exact else pytest.approx(value, rel=1e-4, abs=1e-6)), tag
                compared += 1
    assert compared > 100


def test_a_run_sharded_over_a_mesh_matches_the_single_device_run(uninterrupted, tmp_path):
    """Model, optimizer state, sampler cache and update rows split over 8 simulated devices
    (data 2 × fsdp 2 × tensor 2): step 1 sees the same rollout and nearly the same update."""
    _, full = uninterrupted
    sharded = run(tmp_path, 1, "mesh.data=2", "mesh.fsdp=2", "mesh.tensor=2")
    expected = full.history[0]
    for key, value in sharded.history[0].items():
        if key.startswith(("episode/", "batch/")):
            assert value == expected[key], key
        elif key.startswith(("actor/", "critic/")):  # float32 sums in another order
            assert value == pytest.approx(expected[key], rel=1e-3, abs=1e-5), key


def test_cli_rejects_a_bad_override_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", CONFIG, "trainer.totl_steps=3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'trainer.total_steps'" in err


def test_print_config_shows_the_resolved_config_and_runs_nothing(tmp_path, capsys):
    run_dir = tmp_path / "never-created"
    overrides = ["algorithm.clip_high=5e-3", f"trainer.run_dir={run_dir}"]
    with pytest.raises(SystemExit) as info:
        main(["train", CONFIG, *overrides, "--print-config"])
    assert info.value.code == 0 and not run_dir.exists()
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    config = load_config(printed)
    assert config == resolve(load_config(CONFIG, overrides))
    assert (config.algorithm.clip_low, config.algorithm.clip_high) == (3e-3, 5e-3)  # SAMPO's
    assert config.algorithm.gamma == 0.95 and config.algorithm.sapo_tau_pos is None


def test_gen_data_writes_expert_turns(tmp_path, capsys):
    out = tmp_path / "demos.jsonl"
    assert main(["gen-data", CONFIG, str(out), "--episodes", "4"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and all(d["reply"].startswith("<think></think><action>") for d in lines)
    assert all(d["prompt"].startswith("Sokoban step") for d in lines)


def test_unstable_steps_roll_back_to_the_last_good_checkpoint(tmp_path):
    # A KL bound of 1e-12 fires as soon as the policy moves off the reference, so with rollback
    # after one bad step the run restores the cloned policy, saved as step 0.
    summary = run(
        tmp_path,
        3,
        "monitor.rollback=true",
        "monitor.rollback_after=1",
        "monitor.kl_bound=1e-12",
        "trainer.eval_every=0",
    )
    # Every step is bad: step k rolls back to checkpoint k-1, which holds the restored good state
    # (step 0: the cloned policy; later ones were saved right after a rollback, hence good).
    rolled = [row.get("stability/rolled_back_to") for row in summary.history]
    assert summary.stability_events >= 3
    assert rolled == [0.0, 1.0, 2.0]
    assert summary.history[-1]["stability/rollbacks"] == 3.0


def test_a_stopped_run_prints_one_line_and_exits_75(tmp_path, monkeypatch, capsys):
    """What ``arlarena train`` and ``sft`` make of a stopped run (the stops themselves:
    tests/train/test_preemption.py): one line instead of the summary table, status 75."""
    where = "SIGTERM during cloning at step 37 of 260"
    stopped = Summary(None, None, 0, 0, 0, 1.0, str(tmp_path), stopped=where)
    monkeypatch.setattr(loop, "train", lambda config: stopped)
    for command in ("train", "sft"):
        assert main([command, CONFIG, *SMALL, f"trainer.run_dir={tmp_path}"]) == 75
        out, err = capsys.readouterr()
        assert "held-out success" not in out
        assert [line for line in err.splitlines() if "stopped" in line] == [
            f"arlarena: stopped by {where}; run the same command to resume"
        ]
    assert summary_table(stopped).splitlines()[0].endswith(f"| by {where} |")


def test_an_rl_seed_replays_the_start_and_its_evaluation_but_not_the_rollouts(tmp_path):
    """Two one-step runs that differ in ``trainer.rl_seed`` only: cloning and the held-out
    evaluation are ``trainer.seed``'s (equal episode for episode), the training rollout is not
    (other task seeds, other sampler keys: its batch metrics differ). rl_seed 0 equals seed 0, so
    that run resolves to no rl_seed at all."""
    same, other = tmp_path / "same", tmp_path / "other"
    first = run(same, 1, "trainer.rl_seed=0")
    second = run(other, 1, "trainer.rl_seed=1")
    assert load_config(same / "config.yaml").trainer.rl_seed is None
    assert load_config(other / "config.yaml").trainer.rl_seed == 1
    assert read_records(held_out_path(same, 0)) == read_records(held_out_path(other, 0))
    batch = [k for k in first.history[0] if k.startswith(("episode/", "batch/", "actor/"))]
    assert any(first.history[0][k] != second.history[0][k] for k in batch), batch
