"""A sweep's ``method_overrides`` and ``evaluate_on`` (a run's final policy evaluated under other
settings by ``arlarena eval-run``, shown by the report), and the TextWorld recipe's sweep files
(planned, not trained). The end-to-end test runs a tiny Sokoban sweep with one evaluation."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arlarena_jax.arena import evaluate, jobs, plan, progress, spec
from arlarena_jax.arena.sweep import _summary, jobs_of
from arlarena_jax.errors import ConfigError
from tests.helpers.reports import make_run, val
from tests.helpers.sweeps import TINY, child_env

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "sokoban" / "base_tiny.yaml"
SWEEPS = ROOT / "configs" / "sweeps"


def sweep_file(tmp_path: Path, body: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(
        f"base: {BASE}\nout: {tmp_path / 'runs'}\nstarts: {tmp_path / 'starts'}\n"
        + textwrap.dedent(body)
    )
    return path


def test_method_overrides_reach_only_their_method(tmp_path):
    """PPO's overrides join PPO's runs after the sweep-wide ones; an axis value still wins; the
    other methods never see them (GRPO does not read gae_across_turns: it would fail)."""
    path = sweep_file(
        tmp_path,
        """
        methods: [ppo, grpo]
        grid: {algorithm.entropy_coef: [0.0, 0.002]}
        method_overrides:
          PPO: {algorithm.gae_across_turns: true, algorithm.entropy_coef: 0.5, optim.lr: 0.001}
        overrides: {optim.lr: 0.0002}
        """,
    )
    runs = plan.plan(spec.load_sweep(path))
    assert len(runs) == 4
    for run in runs:
        ppo = run.config.algorithm.method == "ppo"
        assert run.config.algorithm.gae_across_turns is (True if ppo else None)
        assert run.config.optim.lr == (0.001 if ppo else 0.0002)
        assert run.config.algorithm.entropy_coef == run.values["algorithm.entropy_coef"]
        assert ("algorithm.gae_across_turns=true" in run.command()) is ppo


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("methods: [grpo]\nmethod_overrides: {gspo: {optim.lr: 0.1}}\n", "not a method of this"),
        ("method_overrides: {nope: {optim.lr: 0.1}}\n", "unknown method preset"),
        ("methods: [nope]\nmethod_overrides: {grpo: {optim.lr: 0.1}}\n", "not a method of"),
        ("method_overrides: {grpo: {algorithm.method: ppo}}\n", "cannot change the method"),
        ("method_overrides: {grpo: {}}\n", "method_overrides.grpo"),
        ("method_overrides: {grpo: 3}\n", "method_overrides.grpo"),
        ("method_overrides: {GRPO: {optim.lr: 1}, grpo: {optim.lr: 2}}\n", "again"),
        ("methods: [grpo]\nmethod_overrides: {grpo: {optim.nope: 1}}\n", "optim.nope"),
        ("evaluate_on: [a, b]\n", "evaluate_on"),
        ("evaluate_on: {a: {}}\n", "evaluate_on.a"),
        ("evaluate_on: {'a/b': {env.max_turns: 4}}\n", "letters, digits"),
        ("evaluate_on: {a: {trainer.run_dir: x}}\n", "set by the evaluation itself"),
        ("evaluate_on: {a: {sft.init_from: x}}\n", "set by the evaluation itself"),
        ("evaluate_on: {big: {env.sokoban.dim_room: 1}}\n", "evaluate_on.big"),
        ("evaluate_on: {big: {env.nope: 1}}\n", "env.nope"),
    ],
)
def test_bad_method_overrides_and_evaluations_fail_in_one_line(tmp_path, body, words):
    path = sweep_file(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        plan.plan(spec.load_sweep(path))
    assert words in str(err.value) and "\n" not in str(err.value)


def evaluated_sweep(tmp_path: Path) -> list[plan.PlannedRun]:
    path = sweep_file(
        tmp_path,
        """
        methods: [grpo, gspo]
        evaluate_on:
          big: {env.sokoban.dim_room: 7, sampler.max_prefill_length: 128}
          long: {env.max_turns: 30}
        """,
    )
    return plan.plan(spec.load_sweep(path))


def test_evaluations_are_jobs_after_their_runs(tmp_path):
    """One job per run and evaluation, in RUN_DIR/evaluations/NAME, needing its run; its command
    is ``arlarena eval-run RUN_DIR NAME overrides``; the progress line counts it apart."""
    runs = evaluated_sweep(tmp_path)
    evaluations = plan.evaluations(runs)
    assert [e.name for e in evaluations] == ["big", "long", "big", "long"]
    first = evaluations[0]
    assert first.job_dir == runs[0].run_dir / "evaluations" / "big"
    assert first.command() == (
        "eval-run",
        str(runs[0].run_dir),
        "big",
        "env.sokoban.dim_room=7",
        "sampler.max_prefill_length=128",
    )
    job_list = jobs_of(runs)
    assert len(job_list) == 1 + 2 + 4  # one shared start, two runs, four evaluations
    by_name = {j.name: j for j in job_list}
    assert by_name[first.job_name].needs == (runs[0].name,)
    assert by_name[first.job_name].run_dir == first.job_dir
    assert progress._kind(first.job_name) == "eval" and progress._kind(runs[0].name) == "run"


def test_dry_run_lists_the_evaluations(tmp_path, capsys):
    from arlarena_jax.cli import main

    path = sweep_file(tmp_path, "methods: [grpo]\nevaluate_on: {long: {env.max_turns: 30}}\n")
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 runs from 1 shared start(s) and 1 evaluation(s)" in out
    assert "eval/sokoban/grpo_seed0/long  env.max_turns=30  new" in out


def test_summary_waits_for_the_evaluations(tmp_path):
    runs = evaluated_sweep(tmp_path)
    for run in runs:
        jobs.write_state(run.run_dir, state="done")
    text, failed = _summary(runs, tmp_path)
    assert "2 of 2 runs done, 0 failed; 0 of 4 evaluations done, 0 failed" in text
    assert "report:" not in text and failed == 0
    for e in plan.evaluations(runs):
        jobs.write_state(e.job_dir, state="done")
    jobs.write_state(plan.evaluations(runs)[1].job_dir, state="failed", error="arlarena: boom")
    text, failed = _summary(runs, tmp_path)
    assert "3 of 4 evaluations done, 1 failed" in text and "arlarena: boom" in text
    assert failed == 1 and "report:" not in text


def test_an_evaluation_made_with_other_overrides_is_refused(tmp_path):
    runs = evaluated_sweep(tmp_path)
    job_dir = plan.evaluations(runs)[0].job_dir
    record = {"name": "big", "overrides": ["env.sokoban.dim_room=7"], "metrics": {}}
    evaluate.write_evaluation(job_dir, record)
    with pytest.raises(ConfigError, match=r"holds evaluation 'big' with env.sokoban.dim_room=7,"):
        evaluated_sweep(tmp_path)
    record["overrides"] = list(plan.evaluations(runs)[0].overrides)
    evaluate.write_evaluation(job_dir, record)
    assert len(plan.evaluations(evaluated_sweep(tmp_path))) == 4  # the same: accepted


def test_eval_run_refuses_bad_requests_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        evaluate.evaluation_config(tmp_path, "x", [])
    (tmp_path / "config.yaml").write_text(BASE.read_text())
    with pytest.raises(ConfigError, match="letters, digits"):
        evaluate.evaluation_config(tmp_path, "../x", [])
    with pytest.raises(ConfigError, match=r"'trainer\.run_dir': set by arlarena eval-run"):
        evaluate.evaluation_config(tmp_path, "x", ["trainer.run_dir=elsewhere"])


# ---- the report ---------------------------------------------------------------------------


def test_the_report_shows_each_evaluation_as_columns(tmp_path):
    """Two GRPO seeds evaluated on 'next' (0.2, 0.4), one SAMPO seed not: the group cell is the
    mean ± std, the run table and runs.csv name each run's value, summary.json keeps it all."""
    from arlarena_jax.arena.report import build_report

    runs = tmp_path / "runs"
    for seed, success in ((0, 0.2), (1, 0.4)):
        run = make_run(runs, f"grpo_seed{seed}", seed=seed, scalars=val(0.5, 0.6))
        record = {
            "name": "next",
            "overrides": ["env.textworld.tier=w4-o6-q8"],
            "step": 20,
            "episodes": 128,
            "metrics": {"val/success_rate": success, "val/reward/mean": 1.0},
        }
        evaluate.write_evaluation(run / "evaluations" / "next", record)
    make_run(runs, "sampo_seed0", method="sampo", scalars=val(0.5, 0.7))
    report = build_report([runs], tmp_path / "report", plots=False)
    assert len(report.runs) == 3  # an evaluation's directory is no run
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Success @next (%)" in text and "30.0 ± 14.1" in text
    assert "40.0 (step 20)" in text and "env.textworld.tier=w4-o6-q8" in text
    with (tmp_path / "report" / "runs.csv").open() as f:
        rows = {r["run"]: r for r in csv.DictReader(f)}
    assert (
        rows["grpo_seed1"]["success@next"] == "40.0" and rows["sampo_seed0"]["success@next"] == ""
    )
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    grpo = next(g for g in summary["groups"] if g["method"] == "grpo")
    assert grpo["evaluated_success"]["next"]["n"] == 2
    run = next(r for r in summary["runs"] if r["run"] == "grpo_seed0")
    assert run["evaluations"]["next"]["metrics"]["val/reward/mean"] == 1.0


# ---- the TextWorld recipe's sweep files --------------------------------------------------


def test_the_textworld_recipe_plans_3_methods_x_2_rewards_x_seeds():
    """PPO, GRPO and RLOO x single and dense rewards (on one scale: a win is worth 1) x 2 seeds
    on w2-o3-q4; PPO alone runs GAE across turns; each run is evaluated on w4-o6-q8."""
    from arlarena_jax.train.config_io import load_config

    runs = plan.plan(spec.load_sweep(SWEEPS / "textworld_recipe.yaml"))
    cells = {(r.config.algorithm.method, r.config.env.reward, r.config.trainer.seed) for r in runs}
    assert len(runs) == len(cells) == 12
    assert {m for m, _, _ in cells} == {"ppo", "grpo", "rloo"}
    assert {w for _, w, _ in cells} == {"single", "dense"}
    for run in runs:
        c = run.config
        assert c.env.name == "textworld" and c.env.textworld.tier == "w2-o3-q4"
        assert c.env.textworld.win_reward == 1.0
        assert c.env.reward_normalise is (c.env.reward == "dense")
        assert (c.algorithm.gae_across_turns is True) is (c.algorithm.method == "ppo")
        (evaluation,) = run.evaluations
        assert evaluation.name == "w4-o6-q8"
        other = load_config(run.base, (*run.overrides, *evaluation.overrides))
        assert other.env.textworld.tier == "w4-o6-q8" and other.env.max_turns > c.env.max_turns
    assert len(plan.starts(runs)) == 4  # one per reward mode and seed, shared by the 3 methods


def test_the_textworld_budget_split_spends_one_budget():
    """Five splits x 2 seeds: cloning steps + 100 per RL step = 800 for every run (the file's
    measured unit), from 100 % cloning (no RL) to none (RL from the untrained model)."""
    runs = plan.plan(spec.load_sweep(SWEEPS / "textworld_sft_rl_budget.yaml"))
    assert len(runs) == 10 and {r.config.env.name for r in runs} == {"textworld"}
    splits = set()
    for run in runs:
        sft, rl = run.config.sft, run.config.trainer.total_steps
        cloning = sft.steps if sft.enabled else 0
        assert cloning + 100 * rl == 800
        splits.add((cloning, rl))
        assert [e.name for e in run.evaluations] == ["w4-o6-q8"]
    assert splits == {(800, 0), (600, 2), (400, 4), (200, 6), (0, 8)}
    assert len(plan.starts(runs)) == 8  # the cloning splits, per seed


# ---- end to end ---------------------------------------------------------------------------


def test_a_sweep_evaluates_each_run_under_other_settings(tmp_path):
    """A tiny Sokoban run, then its final checkpoint on 7x7 rooms: the evaluation job runs after
    the run, records its metrics beside it with the training run's tokenizer (the tiny tokenizer
    built from 7x7 rooms would differ), and the report shows it."""
    path = tmp_path / "tiny.yaml"
    path.write_text(
        f"name: tiny\nbase: {BASE}\nout: {tmp_path / 'runs'}\nstarts: {tmp_path / 'starts'}\n"
        "methods: [grpo]\nseeds: [0]\n"
        "evaluate_on: {big: {env.sokoban.dim_room: 7, sampler.max_prefill_length: 128}}\n"
        + textwrap.dedent(TINY)
    )
    command = [sys.executable, "-m", "arlarena_jax", "sweep", str(path), "--workers", "1"]
    done = subprocess.run(
        command, env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 runs done, 0 failed; 1 of 1 evaluations done, 0 failed" in done.stdout
    run_dir = tmp_path / "runs" / "tiny" / "sokoban" / "grpo_seed0"
    record = evaluate.read_evaluation(run_dir / "evaluations" / "big")
    assert record is not None and record["step"] == 1, record
    assert record["overrides"] == ["env.sokoban.dim_room=7", "sampler.max_prefill_length=128"]
    assert 0.0 <= record["metrics"]["val/success_rate"] <= 1.0
    from arlarena_jax.tokenization.load import load_tokenizer
    from arlarena_jax.train.build import build_tokenizer
    from arlarena_jax.train.config_io import load_config

    kept = load_tokenizer(run_dir / "evaluations" / "big" / "tokenizer")
    trained = build_tokenizer(load_config(run_dir / "config.yaml"))
    bigger = build_tokenizer(load_config(run_dir / "config.yaml", ["env.sokoban.dim_room=7"]))
    assert kept.get_vocab() == trained.get_vocab() != bigger.get_vocab()
    from arlarena_jax.arena.report import build_report

    build_report([tmp_path / "runs"], tmp_path / "report", plots=False)
    assert "Success @big (%)" in (tmp_path / "report" / "report.md").read_text()
