"""``arlarena keep-results``: the done jobs of a sweep kept without checkpoints; the report reads
them; copied back, the sweep runs only the rest and clones no start that only kept runs needed.
(No training: the run directories are written by hand, as the sweep's jobs leave them.)"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from arlarena_jax.arena import jobs, plan, spec
from arlarena_jax.arena.keep import keep_results
from arlarena_jax.arena.sweep import jobs_of, to_run
from arlarena_jax.errors import ConfigError
from tests.helpers.sweeps import sweep_file


def finished(run_dir: Path, state: str = "done") -> None:
    """A job directory as a sweep leaves it: results, a state, and heavy checkpoints."""
    (run_dir / "tensorboard").mkdir(parents=True)
    (run_dir / "tensorboard" / "events.out.tfevents.1.vm").write_bytes(b"events")
    (run_dir / "checkpoints" / "4").mkdir(parents=True)
    (run_dir / "checkpoints" / "4" / "params").write_bytes(b"\0" * 4096)
    (run_dir / "held_out").mkdir()
    (run_dir / "held_out" / "step_000000.jsonl").write_text('{"seed": 1, "won": true}\n')
    (run_dir / "config.yaml").write_text("trainer: {seed: 0}\n")
    (run_dir / "final.json").write_text(json.dumps({"complete": True}))
    jobs.write_state(run_dir, state=state)


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_done_jobs_are_kept_without_checkpoints(tmp_path):
    runs = tmp_path / "runs"
    finished(runs / "sokoban" / "grpo_seed0")
    finished(runs / "sokoban" / "sapo_seed0", state="stopped")  # resuming needs its checkpoints
    evaluation = runs / "sokoban" / "grpo_seed0" / "evaluations" / "long"
    evaluation.mkdir(parents=True)
    (evaluation / "metrics.json").write_text("{}")
    (evaluation / "episodes.jsonl").write_text('{"seed": 1, "won": false}\n')
    jobs.write_state(evaluation, state="done")

    written = keep_results(runs, tmp_path / "kept")
    assert len(written) == 2  # the run and its evaluation
    assert files(tmp_path / "kept") == {
        "sokoban/grpo_seed0/config.yaml",
        "sokoban/grpo_seed0/final.json",
        "sokoban/grpo_seed0/sweep_state.json",
        "sokoban/grpo_seed0/tensorboard/events.out.tfevents.1.vm",
        "sokoban/grpo_seed0/held_out/step_000000.jsonl",
        "sokoban/grpo_seed0/evaluations/long/metrics.json",
        "sokoban/grpo_seed0/evaluations/long/episodes.jsonl",
        "sokoban/grpo_seed0/evaluations/long/sweep_state.json",
    }
    keep_results(runs, tmp_path / "kept")  # again: the same files, replaced
    assert len(files(tmp_path / "kept")) == 8


def test_bad_folders_are_named(tmp_path):
    with pytest.raises(ConfigError, match="missing is not a directory"):
        keep_results(tmp_path / "missing", tmp_path / "kept")
    (tmp_path / "runs").mkdir()
    with pytest.raises(ConfigError, match="lies inside"):
        keep_results(tmp_path / "runs", tmp_path / "runs" / "kept")


def test_kept_runs_copied_back_are_not_run_again_nor_is_their_start(tmp_path):
    """Two methods share one start; GRPO's run was kept in an earlier session (the machine lost
    the start): copied back, the sweep runs SAPO's run and the start it needs, not GRPO's; with
    both runs kept nothing runs, the start included."""
    path = sweep_file(tmp_path, "methods: [grpo, sapo]\n")
    runs = plan.plan(spec.load_sweep(path))
    grpo, sapo = runs
    finished(grpo.run_dir)
    keep_results(tmp_path / "runs", tmp_path / "kept")
    shutil.rmtree(tmp_path / "runs")
    shutil.rmtree(tmp_path / "starts", ignore_errors=True)
    shutil.copytree(tmp_path / "kept", tmp_path / "runs")

    def todo() -> list[str]:
        return [job.name for job in to_run(jobs_of(runs), retry_failed=False)]

    assert todo() == [grpo.start.name, sapo.name]
    finished(sapo.run_dir)
    assert todo() == []


def test_a_kept_start_copied_back_without_its_policy_is_cloned_again(tmp_path, monkeypatch):
    """The start's own kept results copied back too (done, no step-0 checkpoint): the run still
    to do needs its cloned policy, so the sweep clones the start again (its state reset to new,
    saying why) instead of failing the run on a missing policy; cloned again, only the run is
    left."""
    from arlarena_jax.arena import sweep
    from arlarena_jax.train.config_io import dump_config
    from arlarena_jax.train.resolution import resolve
    from arlarena_jax.train.start import cloned_policy

    path = sweep_file(tmp_path, "methods: [grpo, sapo]\n")
    runs = plan.plan(spec.load_sweep(path))
    grpo, sapo = runs
    finished(grpo.run_dir)
    dump_config(resolve(grpo.config), grpo.run_dir / "config.yaml")  # the sweep checks it
    finished(grpo.start.run_dir)  # a start keeps no step 0 here: its policy is lost on copy
    for root in ("runs", "starts"):
        keep_results(tmp_path / root, tmp_path / "kept" / root)
        shutil.rmtree(tmp_path / root)
        shutil.copytree(tmp_path / "kept" / root, tmp_path / root)
    assert jobs.read_state(grpo.start.run_dir)["state"] == "done"

    def todo() -> list[str]:
        return [job.name for job in to_run(jobs_of(runs), retry_failed=False)]

    assert todo() == [grpo.start.name, sapo.name]
    seen = {}

    class Recorder:  # runs nothing: what the executor would be given, and the start's state
        def run(self, todo, _progress, _dirs):
            seen["jobs"] = [job.name for job in todo]
            seen["start"] = jobs.read_state(grpo.start.run_dir)
            return 0

    monkeypatch.setattr(sweep, "_executor", lambda *_: Recorder())
    args = argparse.Namespace(
        sweep=path, out=None, dry_run=False, retry_failed=False, executor="local", workers=1
    )
    sweep.sweep_command(args)
    assert seen["jobs"] == [grpo.start.name, sapo.name]
    assert seen["start"]["state"] == "new"
    assert "commit_success.txt is gone" in seen["start"]["previous_error"]
    marker = cloned_policy(grpo.start.run_dir)
    marker.parent.mkdir(parents=True)
    marker.write_text("")
    jobs.write_state(grpo.start.run_dir, state="done")  # as the clone leaves it
    assert todo() == [sapo.name]


def test_the_command_prints_what_it_kept(tmp_path, capsys):
    from arlarena_jax.cli import main

    finished(tmp_path / "runs" / "sokoban" / "grpo_seed0")
    assert main(["keep-results", str(tmp_path / "runs"), "-o", str(tmp_path / "kept")]) == 0
    assert "kept the results of 1 done job(s)" in capsys.readouterr().out
    assert (tmp_path / "kept" / "sokoban" / "grpo_seed0" / "final.json").is_file()


def test_the_report_reads_kept_runs_as_it_read_the_originals(tmp_path):
    from arlarena_jax.arena.report.runs import load_run
    from tests.helpers.reports import make_run, val

    original = make_run(tmp_path / "runs", "grpo_seed0", scalars=val(0.6, 0.7), state={})
    jobs.write_state(original, state="done")
    keep_results(tmp_path / "runs", tmp_path / "kept")
    before, after = load_run(original), load_run(tmp_path / "kept" / "grpo_seed0")
    assert after.config == before.config and set(after.scalars) == set(before.scalars)
    for tag, series in before.scalars.items():  # the same event file: exactly equal
        assert list(after.scalars[tag].steps) == list(series.steps)
        assert list(after.scalars[tag].values) == list(series.values)
    assert after.state == "done"
