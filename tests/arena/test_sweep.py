"""The sweep file, its expansion into runs and shared starts, job states and the progress line
(no training: the end-to-end sweep is tests/arena/test_sweep_run.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arlarena_jax.arena import jobs, plan, progress, spec
from arlarena_jax.errors import ConfigError
from arlarena_jax.train.config_io import load_config, override_text
from arlarena_jax.train.start import check_start, cloning_settings, is_rl_only, start_key
from tests.helpers.sweeps import planned_without_results, sweep_file

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "sokoban" / "base_tiny.yaml"


def test_grid_zip_and_shorthands_expand_in_order(tmp_path):
    """2 methods x 2 lrs x 2 zip positions x 2 seeds = 16 runs; methods vary slowest, the zip
    axis inside the grid, seeds fastest; every value appears in the overrides and the name."""
    path = sweep_file(
        tmp_path,
        """
        seeds: [0, 1]
        methods: [grpo, gspo]
        grid: {optim.lr: [1.0e-4, 3.0e-4]}
        zip: {sft.steps: [10, 20], trainer.total_steps: [3, 1]}
        """,
    )
    s = spec.load_sweep(path)
    combos = plan.combinations(s)
    assert len(combos) == 16
    keys = ["algorithm.method", "optim.lr", "sft.steps", "trainer.total_steps", "trainer.seed"]
    assert [list(v) for _, v in combos] == [keys] * 16
    assert [v["algorithm.method"] for _, v in combos] == ["grpo"] * 8 + ["gspo"] * 8
    assert [v["trainer.seed"] for _, v in combos] == [0, 1] * 8
    assert [(v["sft.steps"], v["trainer.total_steps"]) for _, v in combos[:4]] == [
        (10, 3),
        (10, 3),
        (20, 1),
        (20, 1),
    ]
    runs = plan.plan(s)
    assert runs[0].name == "sokoban/grpo_lr=0.0001_steps=10_total_steps=3_seed0"
    assert runs[0].run_dir == tmp_path / "runs" / "s" / runs[0].name
    assert "optim.lr=0.0001" in runs[0].overrides and "trainer.seed=0" in runs[0].overrides
    assert len({r.run_dir for r in runs}) == 16


def test_budget_and_overrides_order(tmp_path):
    """The budget sets trainer.total_steps; sweep-wide overrides and then axes win over it."""
    path = sweep_file(tmp_path, "methods: [grpo]\nbudget: {rl_steps: 7}\n")
    (run,) = plan.plan(spec.load_sweep(path))
    assert run.config.trainer.total_steps == 7
    path = sweep_file(tmp_path, "budget: {rl_steps: 7}\ngrid: {trainer.total_steps: [2]}\n")
    (run,) = plan.plan(spec.load_sweep(path))
    assert run.config.trainer.total_steps == 2


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("methods: [grpo]\ngrid: {algorithm.method: [gspo]}\n", "both set the same axis"),
        ("zip: {sft.steps: [1, 2], trainer.total_steps: [1]}\n", "one length"),
        ("zip: {sft.steps: [1, 1]}\n", "same values"),
        ("seeds: [0, 0]\n", "repeats a value"),
        ("methods: []\n", "non-empty list"),
        ("sweeps: 3\n", "unknown"),
        ("budget: {rl_steps: -1}\n", "rl_steps"),
        ("budget: {hours: 1}\n", "budget.hours"),
        ("methods: [no_such_method]\n", "unknown method preset"),
        ("grid: {optim.nope: [1]}\n", "optim.nope"),
    ],
)
def test_bad_sweep_files_fail_in_one_line(tmp_path, body, words):
    path = sweep_file(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        plan.plan(spec.load_sweep(path))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_missing_base_is_named(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("base: nowhere.yaml\nmethods: [grpo]\n")
    with pytest.raises(ConfigError, match="no config file"):
        spec.load_sweep(path)


def test_runs_that_differ_after_cloning_share_one_start(tmp_path):
    """Methods, RL hyper-parameters and the RL batch share a start; the seed (it also seeds the
    model) and the cloning config do not. The start's command carries no RL-only override."""
    path = sweep_file(
        tmp_path,
        """
        methods: [grpo, sapo, gspo]
        grid: {optim.lr: [1.0e-4, 3.0e-4], sft.steps: [5, 9]}
        seeds: [0, 1]
        overrides: {env.train_batch_size: 4, trainer.ppo_epochs: 2}
        """,
    )
    runs = plan.plan(spec.load_sweep(path))
    starts = plan.starts(runs)
    assert len(runs) == 24 and len(starts) == 4  # 2 cloning configs x 2 seeds
    for start in starts:
        sharing = [r for r in runs if r.start == start]
        assert len(sharing) == 6  # 3 methods x 2 learning rates
        assert len({r.config.sft.steps for r in sharing}) == 1
        assert not [o for o in start.overrides if is_rl_only(o.split("=")[0])]
        assert start.run_dir == tmp_path / "starts" / "sokoban" / start.key
    for run in runs:
        assert run.command()[-1] == f"sft.init_from={run.start.run_dir}"


def test_jobs_follow_the_file_order_each_start_where_first_needed(tmp_path):
    """The issue-39 layout (no cloning, clone + RL, more cloning): one worker runs the zero-shot
    run, then the first start and its run (and the run's evaluation), and only then the second
    start, rather than every start before any run."""
    from arlarena_jax.arena.sweep import jobs_of

    path = sweep_file(
        tmp_path,
        """
        methods: [grpo]
        zip: {sft.enabled: [false, true, true], sft.steps: [null, 5, 9],
              trainer.total_steps: [0, 2, 0]}
        evaluate_on: {long: {env.max_turns: 30}}
        """,
    )
    runs = plan.plan(spec.load_sweep(path))
    first, second = plan.starts(runs)
    names = [job.name for job in jobs_of(runs)]
    evals = [e.job_name for e in plan.evaluations(runs)]
    assert names == [
        runs[0].name, evals[0],
        first.name, runs[1].name, evals[1],
        second.name, runs[2].name, evals[2],
    ]  # fmt: skip
    needs = {job.name: job.needs for job in jobs_of(runs)}
    assert needs[runs[0].name] == () and needs[runs[2].name] == (second.name,)
    assert needs[evals[1]] == (runs[1].name,)


def test_each_start_is_followed_by_every_run_that_shares_it(tmp_path):
    """An arms sweep (RL steps 0 and 2 from each seed's start): the file order puts every seed of
    the first arm before the second arm, but the jobs take one start's two arms (a paired cell)
    before the next start is cloned, so a campaign cut short keeps whole cells."""
    from arlarena_jax.arena.sweep import jobs_of

    path = sweep_file(
        tmp_path,
        """
        methods: [grpo]
        grid: {trainer.total_steps: [0, 2]}
        seeds: [0, 1]
        evaluate_on: {long: {env.max_turns: 30}}
        """,
    )
    runs = plan.plan(spec.load_sweep(path))
    assert [(r.config.trainer.total_steps, r.config.trainer.seed) for r in runs] == [
        (0, 0), (0, 1), (2, 0), (2, 1),
    ]  # fmt: skip
    seed0, seed1 = plan.starts(runs)
    evals = {e.run_name: e.job_name for e in plan.evaluations(runs)}
    names = [job.name for job in jobs_of(runs)]
    assert names == [
        seed0.name, runs[0].name, evals[runs[0].name], runs[2].name, evals[runs[2].name],
        seed1.name, runs[1].name, evals[runs[1].name], runs[3].name, evals[runs[3].name],
    ]  # fmt: skip
    needs = {job.name: job.needs for job in jobs_of(runs)}
    assert needs[runs[2].name] == (seed0.name,) and needs[runs[3].name] == (seed1.name,)


def test_the_start_key_ignores_rl_keys_and_is_stable_across_sweeps(tmp_path):
    a = load_config(BASE, ["algorithm.method=sapo", "optim.lr=0.001", "trainer.total_steps=3"])
    b = load_config(
        BASE,
        [
            "trainer.run_dir=elsewhere",
            "monitor.window=3",
            "env.group_size=4",
            "trainer.prompt_widths=3",
        ],
    )
    assert start_key(a) == start_key(b) == start_key(load_config(BASE))
    for other in ("trainer.seed=1", "sft.steps=3", "model.name=tiny", "trainer.eval_episodes=9"):
        changed = load_config(BASE, [other])
        if changed != load_config(BASE):
            assert start_key(changed) != start_key(a), other
    assert "sft.steps" in cloning_settings(a) and "optim.lr" not in cloning_settings(a)


def test_a_run_directory_of_another_config_is_refused(tmp_path):
    path = sweep_file(tmp_path, "methods: [grpo]\nbudget: {rl_steps: 3}\n")
    (run,) = plan.plan(spec.load_sweep(path))
    from arlarena_jax.train.config_io import dump_config
    from arlarena_jax.train.resolution import resolve

    dump_config(resolve(run.config), run.run_dir / "config.yaml")
    plan.plan(spec.load_sweep(path))  # the same run: accepted
    faster = sweep_file(
        tmp_path, "methods: [grpo]\nbudget: {rl_steps: 3}\noverrides: {trainer.prompt_widths: 3}\n"
    )
    plan.plan(spec.load_sweep(faster))  # the same values, computed on less padding: accepted
    path = sweep_file(tmp_path, "methods: [grpo]\nbudget: {rl_steps: 4}\n")
    with pytest.raises(ConfigError, match=r"holds a run with trainer.total_steps=3, .* gives 4"):
        plan.plan(spec.load_sweep(path))


def test_init_from_is_checked_before_anything_runs(tmp_path):
    start = tmp_path / "start"
    config = load_config(BASE, [f"sft.init_from={start}"])
    with pytest.raises(ConfigError, match="not a run directory"):
        check_start(config)
    from arlarena_jax.train.config_io import dump_config

    dump_config(load_config(BASE, ["sft.steps=3"]), start / "config.yaml")
    with pytest.raises(ConfigError, match="no cloned policy"):
        check_start(config)
    (start / "checkpoints" / "0").mkdir(parents=True)
    (start / "checkpoints" / "0" / "commit_success.txt").write_text("")
    with pytest.raises(ConfigError, match=r"cloned with sft.steps=3, this run has sft.steps=None"):
        check_start(config)
    check_start(load_config(BASE, [f"sft.init_from={start}", "sft.steps=3", "optim.lr=0.01"]))
    with pytest.raises(ConfigError, match=r"needs sft\.enabled=true"):
        check_start(load_config(BASE, [f"sft.init_from={start}", "sft.enabled=false"]))


def test_eval_of_a_run_ignores_its_start(tmp_path, capsys):
    """``arlarena eval`` restores the run's own checkpoint, so a shared start cloned with other
    settings (here another evaluation temperature) is no reason to refuse it; ``train`` refuses.
    The empty run directory then stops both, eval on its missing checkpoint."""
    from arlarena_jax.cli import main
    from arlarena_jax.train.config_io import dump_config

    start = tmp_path / "start"
    dump_config(load_config(BASE), start / "config.yaml")
    (start / "checkpoints" / "0").mkdir(parents=True)
    (start / "checkpoints" / "0" / "commit_success.txt").write_text("")
    args = [str(BASE), f"sft.init_from={start}", "sampler.eval.temperature=0.5"]
    args.append(f"trainer.run_dir={tmp_path / 'run'}")
    for command, words in [("eval", "has no checkpoint to evaluate"), ("train", "cloned with")]:
        with pytest.raises(SystemExit) as info:
            main([command, *args])
        assert info.value.code == 2
        assert words in capsys.readouterr().err


@pytest.mark.parametrize("value", [1.0e-4, 3, True, None, "sapo", [1, 2], "1e-3", "</action>"])
def test_override_text_reads_back(value):
    """What the sweep writes on a command line is what the config loader's YAML reads."""
    import yaml

    from arlarena_jax.train.config_io import _Loader

    key, _, raw = override_text("a.b", value).partition("=")
    assert key == "a.b" and yaml.load(raw, Loader=_Loader) == value


def test_job_states_and_the_wrapper(tmp_path):
    """The wrapper records done (0), failed (other; with the error line) and stopped (75);
    a running record whose process is gone reads as interrupted."""
    assert jobs.read_state(tmp_path / "a") == {"state": "new"}
    argv = [str(tmp_path / "b"), "--minutes", "5", "--", "train", str(tmp_path / "missing.yaml")]
    status = jobs.main(argv)
    record = jobs.read_state(tmp_path / "b")
    assert status == 2 and record["state"] == "failed" and record["exit"] == 2
    assert record["error"].startswith("arlarena:") and "missing.yaml" in record["error"]
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    jobs.write_state(
        tmp_path / "c", state="running", pid=int(dead.stdout), host=os.uname().nodename
    )
    assert jobs.read_state(tmp_path / "c")["state"] == "interrupted"
    assert [jobs.state_of_exit(s) for s in (0, 75, 1, 2)] == ["done", "stopped", "failed", "failed"]


def test_a_run_outliving_its_killed_wrapper_still_reads_as_running(tmp_path):
    """The wrapper killed alone (SIGKILL) leaves its run going, holding the run directory's
    lock: the job is running until the run ends too (then interrupted, and it resumes), so a
    sweep started meanwhile does not start it again into the lock (a failed 'in use')."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        record = dict(state="running", pid=int(dead.stdout), host=os.uname().nodename)
        jobs.write_state(tmp_path / "d", **record, child=orphan.pid)
        assert jobs.read_state(tmp_path / "d")["state"] == "running"
    finally:
        orphan.kill()
        orphan.wait(timeout=30)
    assert jobs.read_state(tmp_path / "d")["state"] == "interrupted"


def test_progress_counts_and_estimates_time_left(tmp_path):
    """One run took 100 s and one start 40 s; left: a queued start (40), a queued run (100) and
    a run 30 s into its 100 (70): 210 s of work over 2 workers = 105 s, shown as 2 min."""
    now = 1000.0
    records = {
        "start/e/a": dict(state="done", started=0.0, ended=40.0),
        "start/e/b": dict(state="new"),
        "e/r1": dict(state="done", started=100.0, ended=200.0),
        "e/r2": dict(state="stopped"),
        "e/r3": dict(state="running", started=now - 30),
        "e/r4": dict(state="failed", error="x"),
    }
    job_list = []
    for name, record in records.items():
        jobs.write_state(tmp_path / name, **record)
        job_list.append(jobs.Job(name, ("demo",), tmp_path / name))
    lines = []
    p = progress.Progress(job_list, 2, emit=lines.append, clock=lambda: now)
    states = p.states()
    states["e/r3"]["state"] = "running"  # the pid check is for this host's real processes
    assert p.seconds_left(states) == pytest.approx(105.0)
    assert p.line(states) == (
        "sweep: 2 done, 1 running, 1 failed, 2 queued of 6 (about 2 min left)"
    )
    p.update()
    p.update()  # unchanged counts within `every`: not printed again
    assert len(lines) == 1


def test_time_left_reads_each_job_from_the_done_jobs_of_its_own_settings(tmp_path):
    """Cells of one sweep can differ 100-fold in cost (no RL steps against 16). Done: the cheap
    cell's seed 0 (10 s) and the dear cell's seed 0 (1000 s), each with its evaluation (5 s, 50 s).
    To do, one worker: both cells' seed 1 (10 + 1000 s), the dear one's evaluation (50 s), and a
    third cell no job of its settings has finished, timed as the mean run (505 s): 1565 s, 26 min.
    A seed, run directory and start are not settings; the line counts the one guessed job."""

    def job(name: str, *command: str) -> jobs.Job:
        return jobs.Job(name, command, tmp_path / name)

    def train(steps: int, seed: int) -> tuple[str, ...]:
        run = f"e/steps={steps}_seed{seed}"
        return (
            "train",
            f"trainer.total_steps={steps}",
            f"trainer.seed={seed}",
            f"trainer.run_dir=runs/{run}",
            f"sft.init_from=starts/{seed}",
        )

    def evaluate(steps: int, seed: int) -> tuple[str, ...]:
        return ("eval-run", f"runs/e/steps={steps}_seed{seed}", "test")

    done = {
        ("e/steps=0_seed0", train(0, 0)): 10.0,
        ("e/steps=16_seed0", train(16, 0)): 1000.0,
        ("eval/e/steps=0_seed0/test", evaluate(0, 0)): 5.0,
        ("eval/e/steps=16_seed0/test", evaluate(16, 0)): 50.0,
    }
    to_do = [
        ("e/steps=0_seed1", train(0, 1)),
        ("e/steps=16_seed1", train(16, 1)),
        ("eval/e/steps=16_seed1/test", evaluate(16, 1)),
        ("e/steps=4_seed0", train(4, 0)),
    ]
    job_list = []
    for (name, command), wall in done.items():
        jobs.write_state(tmp_path / name, state="done", started=0.0, ended=wall)
        job_list.append(job(name, *command))
    job_list += [job(name, *command) for name, command in to_do]
    p = progress.Progress(job_list, 1, clock=lambda: 5000.0)
    assert p.seconds_left(p.states()) == pytest.approx(10 + 1000 + 50 + 505)
    assert p.line().endswith(
        "queued of 8 (about 26 min left; 1 of the 4 to do timed by other settings' jobs)"
    )


def test_dry_run_prints_every_run_and_runs_nothing(tmp_path, capsys):
    path = sweep_file(tmp_path, "methods: [grpo, cispo]\nseeds: [3]\n")
    from arlarena_jax.cli import main

    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 runs from 1 shared start(s)" in out
    assert "sokoban/cispo_seed3" in out and "algorithm.method=cispo trainer.seed=3" in out
    assert out.count("(new)") == 2 and not (tmp_path / "runs").exists()


SWEEPS = sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_the_shipped_sweep_files_plan(path):
    runs = plan.plan(planned_without_results(spec.load_sweep(path)))
    assert runs and len({r.run_dir for r in runs}) == len(runs)


def test_quick_is_a_subset_of_the_paper_grid():
    """Same out, name and budget: the paper grid skips what quick.yaml already ran."""
    quick = plan.plan(spec.load_sweep(ROOT / "configs" / "sweeps" / "quick.yaml"))
    grid = plan.plan(spec.load_sweep(ROOT / "configs" / "sweeps" / "paper_grid.yaml"))
    commands = {r.run_dir: r.command() for r in grid}
    assert len(quick) == 14 and len(grid) == 39
    assert all(commands[r.run_dir] == r.command() for r in quick)
    assert len(plan.starts(grid)) == 3 and len(plan.starts(quick)) == 2
    methods = {r.config.algorithm.method for r in grid}
    from arlarena_jax.objectives.presets import PAPER_METHODS

    assert methods == set(PAPER_METHODS)


def test_what_a_second_sweep_runs(tmp_path):
    """Done is skipped; failed only with --retry-failed; running and queued jobs are left to
    their process locally, while the SLURM executor gets them (it waits for those SLURM still
    knows and resubmits those it lost)."""
    from arlarena_jax.arena.sweep import to_run

    states = ("new", "done", "failed", "stopped", "queued", "running", "interrupted")
    job_list = []
    for state in states:
        jobs.write_state(tmp_path / state, state=state)
        job_list.append(jobs.Job(state, ("demo",), tmp_path / state))

    def names(**kwargs):
        return [j.name for j in to_run(job_list, **kwargs)]

    # "running" recorded without this host: another machine's process, left to it locally
    assert names(retry_failed=False) == ["new", "stopped", "interrupted"]
    assert names(retry_failed=True) == ["new", "failed", "stopped", "interrupted"]
    slurm = names(retry_failed=False, executor="slurm")
    assert slurm == ["new", "stopped", "queued", "running", "interrupted"]


def test_a_start_cloned_under_another_hash_is_reused_by_its_settings(tmp_path):
    """A start whose directory name is not today's hash (cloned before the schema gained a key)
    but whose stored config has the same cloning settings is reused; one of other settings not."""
    from arlarena_jax.train.config_io import dump_config

    path = sweep_file(tmp_path, "methods: [grpo, gspo]\nbudget: {rl_steps: 3}\n")
    runs = plan.plan(spec.load_sweep(path))
    (start,) = plan.starts(runs)
    old = start.run_dir.parent / "0123456789ab"
    dump_config(load_config(BASE, ["sft.steps=7"]), old.parent / "other" / "config.yaml")
    dump_config(runs[0].config, old / "config.yaml")
    again = plan.plan(spec.load_sweep(path))
    assert {r.start.run_dir for r in again} == {old}
    assert again[0].command()[-1] == f"sft.init_from={old}"
    assert is_rl_only("trainer.use_rollout_log_probs") and is_rl_only("sft.micro_batch_size")
