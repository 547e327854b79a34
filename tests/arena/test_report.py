"""`arlarena report`: runs read back from synthetic event files, the table's numbers, collapse
detection at planted steps, grouping, and the written files (HTML parses, PNGs are PNGs)."""

from __future__ import annotations

import argparse
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboardX import SummaryWriter

from arlarena_jax.arena.report import add_command, build_report
from arlarena_jax.arena.report.collapse import (
    COLLAPSE_KINDS,
    SuccessCollapse,
    collapse_kinds,
    detect,
    monitor_overrides,
    success_collapse,
)
from arlarena_jax.arena.report.events import Series, read_events
from arlarena_jax.arena.report.groups import group_runs
from arlarena_jax.arena.report.plots import mean_band
from arlarena_jax.arena.report.runs import find_run_dirs, load_run, load_runs
from arlarena_jax.arena.report.table import build_rows, cell, change_cell, stat
from arlarena_jax.errors import ConfigError
from tests.helpers.reports import held_out_games, make_run, val

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOL = 1e-6  # event files store float32: values like 0.4 come back within ~1e-8


def report_cli(*argv: str) -> int:
    """``arlarena report ARGV...`` through the subcommand's own parser; its exit status."""
    parser = argparse.ArgumentParser(prog="arlarena")
    add_command(parser.add_subparsers())
    args = parser.parse_args(["report", *argv])
    return args.handler(args)


@pytest.fixture
def table_runs(tmp_path: Path) -> Path:
    """GRPO: finals 0.3, 0.5; SAMPO: finals 0.4, 0.5, 0.6 (best 0.7, 0.55, 0.6); GSPO: 1 seed."""
    make_run(tmp_path, "grpo_seed0", seed=0, scalars=val(0.4, 0.3))
    make_run(tmp_path, "grpo_seed1", seed=1, scalars=val(0.5, 0.5))
    make_run(tmp_path, "sampo_seed0", method="sampo", seed=0, scalars=val(0.7, 0.4))
    make_run(tmp_path, "sampo_seed1", method="sampo", seed=1, scalars=val(0.55, 0.5))
    # the after-cloning value 0.9 is higher than any later one: "best" must ignore step 0
    make_run(tmp_path, "sampo_seed2", method="sampo", seed=2, scalars=val(0.6, 0.6, start=0.9))
    make_run(tmp_path, "deep/er/gspo_seed0", method="gspo", scalars=val(0.2, 0.35))
    return tmp_path


def rows_by_label(root: Path, baseline: str = "grpo") -> dict:
    groups = group_runs(load_runs([root]))
    return {r.group.label: r for r in build_rows(groups, {}, baseline)}


def test_the_table_numbers(table_runs: Path):
    rows = rows_by_label(table_runs)
    assert list(rows) == ["GRPO", "GSPO", "SAMPO"]  # the paper's method order
    grpo, sampo, gspo = rows["GRPO"], rows["SAMPO"], rows["GSPO"]
    # GRPO finals 0.3, 0.5: mean 0.4, sample std sqrt((0.1² + 0.1²) / 1) = 0.141421
    assert grpo.success["final"].mean == pytest.approx(0.4, abs=TOL)
    assert grpo.success["final"].std == pytest.approx(math.sqrt(0.02), abs=TOL)
    # GRPO bests 0.4 (step 10), 0.5: mean 0.45, std sqrt(2 · 0.05²) = 0.0707107
    assert grpo.success["best"].mean == pytest.approx(0.45, abs=TOL)
    assert grpo.success["best"].std == pytest.approx(math.sqrt(0.005), abs=TOL)
    # SAMPO finals 0.4, 0.5, 0.6: mean 0.5, std 0.1; vs GRPO (0.5 − 0.4) / 0.4 = +25 %
    assert sampo.success["final"].mean == pytest.approx(0.5, abs=TOL)
    assert sampo.success["final"].std == pytest.approx(0.1, abs=TOL)
    assert sampo.change == pytest.approx(25.0, abs=1e-4)
    # SAMPO bests 0.7, 0.55, 0.6 (not the 0.9 at step 0); after cloning 0.5, 0.5, 0.9
    assert sampo.success["best"].mean == pytest.approx(1.85 / 3, abs=TOL)
    assert sampo.success["after_cloning"].mean == pytest.approx(1.9 / 3, abs=TOL)
    assert gspo.change == pytest.approx((0.35 - 0.4) / 0.4 * 100, abs=1e-4)
    assert grpo.change is None  # the baseline itself
    assert (grpo.group.dimension, sampo.group.dimension) == ("base", "ours (SAMPO)")


def test_the_cells_print_as_the_paper(table_runs: Path):
    rows = rows_by_label(table_runs)
    assert cell(rows["GRPO"].success["final"], 2, 100) == "40.0 ± 14.1 (SD)"  # std over seeds
    assert cell(rows["GSPO"].success["final"], 1, 100) == "35.0 ± – (SE)"  # one seed: no std
    assert change_cell(rows["SAMPO"].change) == "(+25.0%)"
    assert change_cell(rows["GSPO"].change) == "(-12.5%)"
    assert change_cell(None) == "–"


def test_a_value_only_some_seeds_have_names_its_spread_or_shows_none():
    """Two of three seeds: their std (0.3, 0.5: sqrt(0.02) = 0.1414), marked SD; one of two:
    no spread at all, so no "±" (an SD needs two seeds, and no SE of several seeds is kept)."""
    assert cell(stat([0.3, 0.5, None]), 3, 100) == "40.0 ± 14.1 (SD) (n=2)"
    assert cell(stat([0.57, None]), 2, 100) == "57.0 (n=1)"


def test_without_a_baseline_row_the_change_is_a_dash(table_runs: Path):
    rows = rows_by_label(table_runs, baseline="cispo")
    assert all(r.change is None for r in rows.values())


def success_se(points: dict[int, float], n: int) -> dict[str, dict[int, float]]:
    """val/success_rate and its val/success_rate_se = sqrt(p(1 − p)/n) over n episodes."""
    se = {step: math.sqrt(p * (1 - p) / n) for step, p in points.items()}
    return {"val/success_rate": points, "val/success_rate_se": se}


def evaluated(run: Path, success: float, se: float | None = None) -> None:
    """The run's final policy evaluated again as 'next' (its metrics.json)."""
    from arlarena_jax.arena import evaluate

    metrics = {"val/success_rate": success} | ({} if se is None else {"val/success_rate_se": se})
    record = {"name": "next", "overrides": ["x=1"], "step": 20, "episodes": 75, "metrics": metrics}
    evaluate.write_evaluation(run / "evaluations" / "next", record)


@pytest.fixture
def se_runs(tmp_path: Path) -> Path:
    """SAMPO, one seed with SEs over 40 episodes: 0.5 (step 0), 0.75 (10, best), 0.625 (20,
    final), evaluated on 'next' at 0.25 ± 0.05; GRPO, two seeds with SEs: finals 0.3, 0.5;
    GSPO, one seed that logged no SE."""
    sampo = make_run(
        tmp_path, "sampo", method="sampo", scalars=success_se({0: 0.5, 10: 0.75, 20: 0.625}, 40)
    )
    evaluated(sampo, 0.25, math.sqrt(0.25 * 0.75 / 75))  # 0.05
    for seed, (best, final) in enumerate(((0.4, 0.3), (0.5, 0.5))):
        run = make_run(
            tmp_path,
            f"grpo{seed}",
            seed=seed,
            scalars=success_se({0: 0.5, 10: best, 20: final}, 40),
        )
        evaluated(run, 0.2 + 0.2 * seed, 0.05)
    evaluated(make_run(tmp_path, "gspo", method="gspo", scalars=val(0.2, 0.35)), 0.1)
    return tmp_path


def test_one_seed_shows_the_logged_se_at_the_value_s_step(se_runs: Path):
    rows = rows_by_label(se_runs)
    sampo = rows["SAMPO"]
    # sqrt(p(1 − p)/40): step 0 (p 0.5) 0.0790569, step 10 (0.75) 0.0684653, step 20 (0.625)
    # 0.0765466; event files store float32 (TOL)
    assert sampo.success["after_cloning"].se == pytest.approx(0.0790569, abs=TOL)
    assert sampo.success["best"].se == pytest.approx(0.0684653, abs=TOL)
    assert sampo.success["final"].se == pytest.approx(0.0765466, abs=TOL)
    assert cell(sampo.success["after_cloning"], 1, 100) == "50.0 ± 7.9 (SE)"
    assert cell(sampo.success["final"], 1, 100) == "62.5 ± 7.7 (SE)"
    assert cell(sampo.success["best"], 1, 100) == "75.0 ± 6.8 (SE)"
    assert cell(sampo.evaluated["next"], 1, 100) == "25.0 ± 5.0 (SE)"  # sqrt(0.1875 / 75)


def test_several_seeds_keep_the_std_and_no_se_keeps_the_dash(se_runs: Path):
    rows = rows_by_label(se_runs)
    grpo, gspo = rows["GRPO"], rows["GSPO"]
    # finals 0.3, 0.5: std sqrt(0.02) = 0.141421; 'next' 0.2, 0.4: the same std
    assert cell(grpo.success["final"], 2, 100) == "40.0 ± 14.1 (SD)"
    assert cell(grpo.evaluated["next"], 2, 100) == "30.0 ± 14.1 (SD)"
    assert all(s.se is None for s in [*grpo.success.values(), grpo.evaluated["next"]])
    assert cell(gspo.success["final"], 1, 100) == "35.0 ± – (SE)"
    assert cell(gspo.success["after_cloning"], 1, 100) == "50.0 ± – (SE)"
    assert cell(gspo.evaluated["next"], 1, 100) == "10.0 ± – (SE)"


def test_the_written_report_marks_the_se(se_runs: Path, tmp_path: Path):
    build_report([se_runs], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "| 50.0 ± 7.9 (SE) | 62.5 ± 7.7 (SE) |" in md  # after cloning, final
    assert "| 75.0 ± 6.8 (SE) |" in md and "| 25.0 ± 5.0 (SE) |" in md and "| 35.0 ± – (SE) |" in md
    assert "<td>62.5 ± 7.7 (SE)</td>" in html
    for text in (md, html):
        assert "For one seed, ± x (SE) is instead the standard error" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    by_method = {g["method"]: g for g in summary["groups"]}
    assert by_method["sampo"]["success"]["final"]["se"] == pytest.approx(0.0765466, abs=TOL)
    assert by_method["grpo"]["success"]["final"]["se"] is None


def test_webshop_s_one_seed_score_shows_its_se(tmp_path: Path):
    """The score's SE is logged under the score's sanitised tag plus _se."""
    score = "val/webshop_task_score (not success_rate)"
    scalars = {score: {0: 0.4, 10: 0.6, 20: 0.55}, f"{score}_se": {0: 0.031, 10: 0.024, 20: 0.027}}
    make_run(tmp_path, "webshop", env="webshop", scalars=scalars)
    (row,) = rows_by_label(tmp_path).values()
    assert row.score_key == "val/webshop_task_score__not_success_rate_"
    assert cell(row.score["final"], 1, 1, 3) == "0.550 ± 0.027 (SE)"
    assert cell(row.score["best"], 1, 1, 3) == "0.600 ± 0.024 (SE)"
    assert cell(row.success["final"], 1, 100) == "–"  # no success logged


@settings(max_examples=25, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False), st.integers(2, 8))
def test_identical_seeds_have_zero_std(value: float, n: int):
    s = stat([value] * n)
    assert s.mean == pytest.approx(value, rel=1e-12, abs=1e-12)
    assert s.std == pytest.approx(0.0, abs=1e-9 * max(1.0, abs(value)))


def _event_file(log: Path, name: str, points: list[tuple[str, int, float]]) -> None:
    """Write ``points`` with a SummaryWriter and name the event file ``name`` in ``log``."""
    scratch = log.parent / f"scratch_{name}"
    with SummaryWriter(str(scratch)) as w:
        for tag, step, value in points:
            w.add_scalar(tag, value, step)
    log.mkdir(exist_ok=True)
    next(scratch.iterdir()).rename(log / name)


def test_a_rewritten_step_keeps_the_last_value_written(tmp_path: Path):
    """A resumed run writes step 20 again in a newer file (file times sort as numbers, and
    "1000" < "999" as text); within a file the later record wins."""
    log = tmp_path / "tb"
    _event_file(log, "events.out.tfevents.999.host", [("x", 10, 1.0), ("x", 20, 0.1)])
    _event_file(
        log, "events.out.tfevents.1000.host", [("x", 20, 0.5), ("y", 5, 1.0), ("y", 5, 2.0)]
    )
    scalars = read_events(log).scalars
    assert scalars["x"].steps.tolist() == [10, 20]
    assert scalars["x"].values.tolist() == pytest.approx([1.0, 0.5])
    assert scalars["y"].values.tolist() == [2.0]


def test_a_cut_off_record_ends_the_file(tmp_path: Path):
    run = make_run(tmp_path, "r", scalars={"a": {1: 1.0, 2: 2.0}})
    event = next((run / "tensorboard").iterdir())
    event.write_bytes(event.read_bytes()[:-3])  # a run killed while writing
    assert read_events(run / "tensorboard").scalars["a"].steps.tolist() == [1]


def test_an_in_progress_run_is_reported_up_to_its_last_step(tmp_path: Path):
    train = {"episode/success_rate": {s: 0.5 for s in range(1, 21)}}
    make_run(tmp_path, "done", scalars=val(0.6, 0.7) | train, state={"state": "done"})
    short = {"episode/success_rate": {s: 0.5 for s in range(1, 11)}}
    make_run(tmp_path, "running", seed=1, scalars=val(0.4) | short, state={"state": "running"})
    runs = {r.path.name: r for r in load_runs([tmp_path])}
    assert (runs["running"].last_step, runs["done"].last_step) == (10, 20)
    assert runs["running"].state == "running"
    row = build_rows(group_runs(runs.values()), {})[0]
    assert row.success["final"].mean == pytest.approx((0.7 + 0.4) / 2, abs=TOL)


def test_cloning_steps_are_no_rl_steps(tmp_path: Path):
    """A cloning-only run logs its cloning (and continued cloning) per cloning step: 12 steps
    of each here, and no RL step, so its last RL step is 0."""
    cloning = {f"{p}/loss": {s: 1.0 for s in range(12)} for p in ("sft", "sft_continued")}
    timing = {"timing/sft": {0: 60.0}, "timing/sft_continued": {0: 30.0}}
    make_run(tmp_path, "cloned", scalars=val() | cloning | timing, state={"state": "done"})
    (run,) = load_runs([tmp_path])
    assert run.last_step == 0


def test_a_cloning_only_run_shows_step_0_of_0_and_an_unknown_total_a_question_mark(
    tmp_path: Path,
):
    """trainer.total_steps 0 (cloning only) reads 0/0; a config without it reads 0/?."""
    runs = tmp_path / "runs"
    make_run(runs, "cloned", scalars=val(), config={"trainer": {"total_steps": 0}})
    unknown = make_run(runs, "unknown", seed=1, scalars=val())
    config = yaml.safe_load((unknown / "config.yaml").read_text())
    del config["trainer"]["total_steps"]
    (unknown / "config.yaml").write_text(yaml.safe_dump(config))
    build_report([runs], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert re.search(r"\| cloned \|[^\n]*\| 0/0 \|", md), md
    assert re.search(r"\| unknown \|[^\n]*\| 0/\? \|", md), md


def test_mean_band_aligns_seeds_on_the_union_of_steps():
    a = Series(np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0]))
    b = Series(np.array([1, 2]), np.array([3.0, 4.0]))  # in progress: no step 3 yet
    steps, mean, low, high = mean_band([a, b])
    assert steps.tolist() == [1, 2, 3]
    assert mean.tolist() == [2.0, 3.0, 3.0]
    assert (low.tolist(), high.tolist()) == ([1.0, 2.0, 3.0], [3.0, 4.0, 3.0])


def test_runs_differing_in_a_key_are_kept_apart(tmp_path: Path):
    for lr in (1e-4, 3e-4):
        for seed in (0, 1):
            cfg = {"optim": {"lr": lr}, "algorithm": {"clip_high": 0.28}}
            make_run(tmp_path, f"sapo_{lr}_{seed}", method="sapo", seed=seed, config=cfg)
    # GRPO differs from SAPO in clip_high, and its seeds only in ignored keys: no suffix
    make_run(tmp_path, "grpo0", seed=0, config={"algorithm": {"clip_high": 0.2}})
    make_run(tmp_path, "grpo1", seed=1, config={"algorithm": {"clip_high": 0.2}})
    groups = group_runs(load_runs([tmp_path]))
    assert [(g.label, g.seeds) for g in groups] == [
        ("GRPO", [0, 1]),
        ("SAPO lr=0.0001", [0, 1]),
        ("SAPO lr=0.0003", [0, 1]),
    ]
    assert groups[1].keys == (("optim.lr", "0.0001"),)
    merged = group_runs(load_runs([tmp_path]), ignore=["optim.lr"])
    assert [(g.label, g.seeds) for g in merged] == [("GRPO", [0, 1]), ("SAPO", [0, 0, 1, 1])]


def test_keys_sharing_a_last_part_are_named_in_full(tmp_path: Path):
    make_run(tmp_path, "a", config={"optim": {"lr": 1e-4}, "sft": {"optim": {"lr": 1e-3}}})
    make_run(tmp_path, "b", config={"optim": {"lr": 3e-4}, "sft": {"optim": {"lr": 1e-2}}})
    labels = [g.label for g in group_runs(load_runs([tmp_path]))]
    assert labels == [
        "GRPO optim.lr=0.0001 sft.optim.lr=0.001",
        "GRPO optim.lr=0.0003 sft.optim.lr=0.01",
    ]


def planted(spike_step: int = 12, drop_step: int = 15, steps: int = 20) -> dict:
    """A stable history with a grad-norm ×10 spike and a format-ratio drop planted."""
    grad = {s: 1.0 + 0.01 * (s % 3) for s in range(1, steps + 1)}
    grad[spike_step] = 10.0
    fmt = {s: (1.0 if s < drop_step else 0.7) for s in range(1, steps + 1)}
    return {"actor/grad_norm": grad, "episode/valid_response_format_ratio": fmt}


def test_collapses_are_detected_at_the_planted_steps(tmp_path: Path):
    run = load_run(make_run(tmp_path, "r", scalars=planted()))
    collapse = detect(run)
    first = {}
    for event in collapse.events:
        first.setdefault(event.kind, event.step)
    assert first == {"grad_norm_spike": 12, "format_drop": 15}
    # a format drop is a collapse; a gradient-norm spike alone is a warning
    assert (collapse.first_step, collapse.kinds) == (15, ["format_drop"])
    assert (collapse.first_warning_step, collapse.warning_kinds) == (12, ["grad_norm_spike"])


def test_the_run_config_sets_the_monitor(tmp_path: Path):
    config = {"monitor": {"grad_norm_spike_factor": 20.0, "kl_keys": ["actor/ppo_kl"]}}
    run = load_run(make_run(tmp_path, "r", scalars=planted(), config=config))
    detected = detect(run)  # 10 < 20 × median 1.01: no spike
    assert detected.kinds == ["format_drop"] and detected.warning_kinds == []
    bad = load_run(make_run(tmp_path, "bad", config={"monitor": {"window": 0}}))
    with pytest.raises(ConfigError, match="monitor section"):
        detect(bad)


def test_the_report_s_monitor_settings_go_over_the_run_s(tmp_path: Path, capsys):
    # a cloned policy whose entropy starts low and halves: 0.3 -> 0.05 (< 0.2 x 0.3 = 0.06)
    entropy = {s: 0.3 if s < 8 else 0.05 for s in range(1, 13)}
    runs = tmp_path / "runs"
    make_run(runs, "grpo_seed0", scalars={"actor/entropy": entropy, "actor/kl_loss": {4: 0.1}})
    run = load_run(runs / "grpo_seed0")
    assert detect(run).kinds == ["entropy_collapse"] and detect(run).warning_kinds == ["kl_drift"]
    judged = detect(
        run, monitor=monitor_overrides(["entropy_collapse_fraction=0.1", "kl_bound=null"])
    )
    assert judged.events == ()  # 0.05 > 0.1 x 0.3 = 0.03; no KL bound
    assert monitor_overrides(["kl_keys=[actor/ppo_kl]"]) == {"kl_keys": ("actor/ppo_kl",)}
    bad = {
        "kl_bond=0.1": "report --monitor kl_bond: not a monitor setting (one of ",
        "kl_bound": "expected SETTING=VALUE",
        "window=0": "report --monitor: monitor window must be >= 1, got 0",
        "kl_bound=high": "report --monitor: ",
    }
    for item, message in bad.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            monitor_overrides([item])

    out = tmp_path / "report"
    argv = [str(runs), "-o", str(out), "--no-plots"]
    assert report_cli(*argv, "--monitor", "entropy_collapse_fraction=0.1") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["monitor_overrides"] == {"entropy_collapse_fraction": 0.1}
    record = summary["runs"][0]
    assert (record["collapsed"], record["warning_kinds"]) == (False, ["kl_drift"])
    assert (
        "monitor settings (for this report: entropy_collapse_fraction=0.1)"
        in (out / "report.md").read_text()
    )


def test_success_collapse():
    steps = np.arange(1, 21)
    success = Series(steps, np.where(steps < 10, 0.8, 0.0))
    assert [e.step for e in success_collapse(success, SuccessCollapse(window=1))] == [10]
    # window 5: the mean is 0.64 at step 10 (fall 0.16), 0.48 at step 11 (fall 0.32 > 0.25)
    assert [e.step for e in success_collapse(success, SuccessCollapse(window=5))] == [11]
    low = Series(steps, np.where(steps < 10, 0.15, 0.0))  # its best never reached 0.2
    assert success_collapse(low, SuccessCollapse(window=1)) == []
    with pytest.raises(ConfigError, match="success collapse"):
        SuccessCollapse(drop=0.0)


def test_an_unknown_baseline_is_one_config_error(table_runs: Path, tmp_path: Path):
    with pytest.raises(ConfigError, match="baseline: unknown method preset 'grpoo'"):
        build_report([table_runs], tmp_path / "out", baseline="grpoo", plots=False)


def test_no_runs_is_one_config_error(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"no runs found under .*config\.yaml and tensorboard/"):
        find_run_dirs([tmp_path / "empty"])
    with pytest.raises(ConfigError, match="no such run directory"):
        find_run_dirs([tmp_path / "missing"])
    run = make_run(tmp_path, "r")
    (run / "config.yaml").write_text(yaml.safe_dump({"env": {"name": "x"}, "trainer": {}}))
    with pytest.raises(ConfigError, match=r"missing key 'algorithm\.method'"):
        load_run(run)


class _Checker(HTMLParser):
    """Asserts that every element opened is closed in order; collects image sources."""

    VOID = frozenset({"meta", "img", "br", "hr", "link", "input"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, f"unbalanced </{tag}>"


def parse_html(text: str) -> _Checker:
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.stack == []
    return checker


def test_the_written_report(tmp_path: Path, capsys):
    runs = tmp_path / "runs"
    train = planted() | {"episode/success_rate": {s: 0.5 for s in range(1, 21)}}
    make_run(
        runs,
        "grpo_seed0",
        scalars=val(0.4, 0.3) | train,
        state={"state": "failed", "error": "boom"},
    )
    make_run(
        runs, "grpo_seed1", seed=1, scalars=val(0.5, 0.5) | {"actor/grad_norm": {1: 1.0, 2: 1.1}}
    )
    make_run(runs, "sampo_seed0", method="sampo", scalars=val(0.6), texts={3: "step 3: x"})
    out = tmp_path / "report"
    assert report_cli(str(runs), "-o", str(out), "--title", "T <&>") == 0
    assert "wrote" in capsys.readouterr().out

    html = (out / "report.html").read_text()
    images = parse_html(html).images
    assert "T &lt;&amp;&gt;" in html and "(+50.0%)" in html  # (0.6 − 0.4) / 0.4
    pngs = sorted((out / "plots").glob("*.png"))
    names = {p.name for p in pngs}
    assert names == {
        "sokoban-actor_grad_norm.png",
        "sokoban-episode_success_rate.png",
        "sokoban-episode_valid_response_format_ratio.png",
        "sokoban-final_success.png",
        "sokoban-val_success_rate.png",
    }  # metrics no run logged are skipped
    assert sorted(images) == sorted(f"plots/{n}" for n in names)
    for png in pngs:
        assert png.stat().st_size > 1000 and png.read_bytes()[:8] == PNG_SIGNATURE
    md = (out / "report.md").read_text()
    assert "| GRPO | 2 |" in md and "](plots/sokoban-val_success_rate.png)" in md
    assert md.index("### Where each run ended") < md.index("](plots/sokoban-final_success.png)")
    assert md.index("](plots/sokoban-final_success.png)") < md.index("### Training dynamics")
    assert "failed: boom" in md and "| format_drop | grad_norm_spike (12) |" in md
    assert "| Collapsed seeds | Warned seeds |" in md and "| 1/2 | 1/2 |" in md

    summary = json.loads((out / "summary.json").read_text())
    by_run = {r["run"]: r for r in summary["runs"]}
    assert by_run["grpo_seed0"]["collapse_step"] == 15  # the format drop
    assert by_run["grpo_seed0"]["warning_step"] == 12  # the gradient-norm spike
    assert by_run["sampo_seed0"]["state"] == "unknown"
    assert by_run["sampo_seed0"]["logged_events"] == ["step 3: x"]  # the trainer's own record
    assert by_run["grpo_seed1"]["success_best"] == pytest.approx(50.0, abs=1e-4)
    # grpo_seed0: 0.4 at step 10, 0.3 at step 20; a tie (grpo_seed1: 0.5, 0.5) gives the first
    assert by_run["grpo_seed0"]["success_lowest"] == pytest.approx(30.0, abs=1e-4)
    assert by_run["grpo_seed0"]["success_lowest_step"] == 20
    assert by_run["grpo_seed1"]["success_lowest_step"] == 10
    assert by_run["grpo_seed1"]["success_evaluations"] == 2  # steps 10 and 20, not step 0
    assert "| 40.0 (step 10) | 30.0 (step 20) |" in md  # best, then lowest
    assert len((out / "runs.csv").read_text().splitlines()) == 4


def document_text(runs: Path) -> str:
    """report.md of the runs under ``runs``, written beside them."""
    out = runs.parent / f"{runs.name}-report"
    assert report_cli(str(runs), "-o", str(out)) == 0
    return (out / "report.md").read_text()


def test_the_lowest_success_column_only_where_a_run_had_several_evaluations(tmp_path: Path):
    """A dip the run recovered from shows only in "Lowest": 0.5 → 0.2 (step 10) → 0.6."""
    make_run(tmp_path / "once", "grpo_seed0", scalars=val(0.6))
    make_run(tmp_path / "dip", "grpo_seed0", scalars=val(0.2, 0.6))
    once = document_text(tmp_path / "once")
    dip = document_text(tmp_path / "dip")
    assert "Lowest success" not in once
    assert "| 60.0 (step 20) | 60.0 (step 20) | 20.0 (step 10) |" in dip  # final, best, lowest


def test_a_best_over_test_steps_is_not_shown_and_old_runs_say_what_they_evaluated(
    tmp_path: Path,
):
    """A run evaluated on the test split, or from before the splits (no trainer.eval_split),
    shows its final success but no best step: choosing that best would read the test games."""
    make_run(
        tmp_path, "grpo_seed0", scalars=val(0.2, 0.6), config={"trainer": {"eval_split": "test"}}
    )
    old = make_run(tmp_path, "grpo_seed1", seed=1, scalars=val(0.4, 0.5))
    config = yaml.safe_load((old / "config.yaml").read_text())
    del config["trainer"]["eval_split"]
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    md = document_text(tmp_path)
    assert "| grpo_seed0 | GRPO | 0 | test |" in md and "| 1 | test, before the protocol |" in md
    assert md.count("not shown (test)") == 3  # both runs' rows and their group's row
    assert "Final success (%, test / test, before the protocol)" in md


def test_runs_with_per_episode_outcomes_show_their_paired_change(tmp_path: Path):
    """Four held-out games: step 0 wins games 0-1, step 20 wins games 1-3 (gained 2, lost 1):
    d = (-1, 0, 1, 1), mean 0.25, deviations 1.5625 + 0.0625 + 0.5625 x 2 = 2.75, paired SE
    sqrt(2.75 / 4 / 4) = 0.4146: +25.0 ± 41.5 points; 2 SE = 82.9, the 80%-power MDE 2.801585 x
    41.458 = 116.1; 25.0 < 82.9: not resolved, and n (2 SE / d̄)² = 4 x 2.75 / 16 x 4 / 0.0625
    = 44 exactly, so 45 games would resolve it. A run without the files has no row."""
    paired = make_run(tmp_path / "runs", "grpo_seed0", scalars=val(0.6, 0.75))
    held_out_games(paired, 0, [True, True, False, False])
    held_out_games(paired, 20, [False, True, True, True])
    make_run(tmp_path / "runs", "grpo_seed1", seed=1, scalars=val(0.5, 0.5))
    build_report([tmp_path / "runs"], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "### Change over step 0 (same run, same held-out games)" in md
    assert (
        "| Comparison | Seed | Difference (points) | ± SE (paired) | SE over | Resolvable (2 SE) "
        "| 80%-power MDE (2.80 SE) | Would resolve it | Gained / lost | Verdict |"
    ) in md
    change = md[md.index("### Change over step 0") : md.index("## Definitions")]
    row = "| GRPO | 0 | +25.0 | 41.5 | 4 games | 82.9 | 116.1 | 45 games | 2/1 | not resolved |"
    assert row in change
    assert "| GRPO | 1 |" not in change and "| GRPO | mean of" not in change  # seed 1: no games
    runs = {
        r["run"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())["runs"]
    }
    assert runs["grpo_seed0"]["change_paired"] == pytest.approx(25.0, abs=1e-6)
    assert runs["grpo_seed1"]["change_paired"] is None


def test_embedded_images_and_no_plots(tmp_path: Path):
    make_run(tmp_path / "runs", "r", scalars=val(0.6))
    report = build_report([tmp_path / "runs"], tmp_path / "a", embed_images=True)
    images = parse_html((tmp_path / "a" / "report.html").read_text()).images
    assert images and all(src.startswith("data:image/png;base64,iVBORw0KGgo") for src in images)
    assert report.plots and all(p.path.is_file() for p in report.plots)
    report = build_report([tmp_path / "runs"], tmp_path / "b", plots=False)
    assert report.plots == [] and not (tmp_path / "b" / "plots").exists()
    assert "<img" not in (tmp_path / "b" / "report.html").read_text()


def test_a_run_resumed_after_a_fallback_counts_each_step_once(tmp_path: Path):
    """Steps 1-10 logged, 9-10 logged again in the same file, then a resume from step 5 (a new
    event file, started within the same second) logs 6-12: each (tag, step) counts once, with
    its last value; the old branch's texts of a redone step are gone, a step's two texts kept."""
    from arlarena_jax.train.metrics import MetricsWriter, read_scalars

    run = make_run(tmp_path, "run")
    log = run / "tensorboard"
    with MetricsWriter(log) as first:
        for step in range(1, 11):
            first.scalars(step, {"episode/success_rate": step / 100})
        first.scalars(0, {"val/success_rate": 0.5})
        first.scalars(10, {"val/success_rate": 0.9})  # the abandoned branch's best
        first.text(3, "stability", "kl drift at 3")
        first.text(7, "stability", "spike at 7")
        first.text(7, "stability", "kl drift at 7")
        for step in (9, 10):
            first.scalars(step, {"episode/success_rate": step / 100 + 0.5})
    before = read_events(log)
    assert before.scalars["episode/success_rate"].values.tolist() == pytest.approx(
        [s / 100 for s in range(1, 9)] + [0.59, 0.60], abs=TOL
    )
    assert [t.text for t in before.texts] == ["kl drift at 3", "spike at 7", "kl drift at 7"]
    with MetricsWriter(log) as resumed:  # resumed from step 5's checkpoint
        for step in range(6, 13):
            resumed.scalars(step, {"episode/success_rate": step / 100 + 0.2})
            if step == 7:
                resumed.text(7, "stability", "spike at 7 again")
        resumed.scalars(10, {"val/success_rate": 0.6})
    assert len(list(log.glob("events.out.tfevents.*"))) == 3  # make_run's, first, resumed
    want = [(s, s / 100 + 0.2 * (s > 5)) for s in range(1, 13)]
    points = read_scalars(log)["episode/success_rate"]
    assert [s for s, _ in points] == list(range(1, 13))
    assert [v for _, v in points] == pytest.approx([v for _, v in want], abs=TOL)
    after = read_events(log)
    series = after.scalars["episode/success_rate"]
    assert series.steps.tolist() == list(range(1, 13))
    assert series.values.tolist() == pytest.approx([v for _, v in want], abs=TOL)
    assert [(t.step, t.text) for t in after.texts] == [
        (3, "kl drift at 3"),
        (7, "spike at 7 again"),
    ]
    report = build_report([tmp_path], tmp_path / "out", plots=False)
    (record,) = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"]
    assert record["last_step"] == 12 and report.runs[0].last_step == 12
    assert record["success_final"] == pytest.approx(60.0, abs=1e-4)  # 0.6 at step 10, in %
    assert record["success_best"] == pytest.approx(60.0, abs=1e-4)  # not the old branch's 0.9
    assert record["logged_events"] == ["kl drift at 3", "spike at 7 again"]


def test_a_staleness_sweep_gets_its_kl_and_staleness_plots(tmp_path: Path):
    """Issue 40's report: runs that log the sampler-trainer KL (every k) and the staleness (k > 0,
    from the producer) get one plot each, embedded in the report."""
    runs = tmp_path / "runs"
    sync = {"actor/sampler_trainer_kl": {s: 1e-13 for s in range(1, 5)}}
    stale = {
        "actor/sampler_trainer_kl": {s: 1e-3 for s in range(1, 5)},
        "async/staleness_mean": {s: 1.0 for s in range(1, 5)},
    }
    grid = {"trainer": {"max_staleness": 0}}
    make_run(runs, "grpo_k0_seed0", scalars=val(0.5) | sync, config=grid)
    grid = {"trainer": {"max_staleness": 1}}
    make_run(runs, "grpo_k1_seed0", scalars=val(0.6) | stale, config=grid)
    report = build_report([runs], tmp_path / "out")
    plotted = {p.metric.key: p.path for p in report.plots}
    assert {"actor/sampler_trainer_kl", "async/staleness_mean"} <= set(plotted)
    for path in (plotted["actor/sampler_trainer_kl"], plotted["async/staleness_mean"]):
        assert path.read_bytes()[:8] == PNG_SIGNATURE and path.stat().st_size > 1000
    md = (tmp_path / "out" / "report.md").read_text()
    assert "](plots/sokoban-actor_sampler_trainer_kl.png)" in md
    assert "](plots/sokoban-async_staleness_mean.png)" in md


def test_a_held_out_success_drop_is_a_collapse(tmp_path: Path):
    """Held-out success at steps 0, 8, 16: 0.297, 0.453, 0.0 (the arena's GRPO seed 1 with its
    step-14 evaluation as step 8). 0.0 is 0.453 below the best before it, past the rule's drop
    0.25; a drop of 0.5 or a min_best of 0.5 lets it pass; a fall of 0.2 is no event."""
    scalars = {"val/success_rate": {0: 0.297, 8: 0.453, 16: 0.0}}
    run = load_run(make_run(tmp_path, "r", scalars=scalars))
    collapse = detect(run)
    assert (collapse.first_step, collapse.kinds) == (16, ["held_out_success_drop"])
    assert "val/success_rate 0 < best 0.453 − 0.25" in collapse.events[0].message
    assert detect(run, rule=SuccessCollapse(drop=0.5)).events == ()
    assert detect(run, rule=SuccessCollapse(min_best=0.5)).events == ()
    mild = {"val/success_rate": {0: 0.5, 16: 0.3}}
    assert detect(load_run(make_run(tmp_path, "mild", scalars=mild))).events == ()


def test_a_held_out_format_drop_is_a_collapse(tmp_path: Path):
    """The held-out valid-format ratio at steps 0, 8, 16: 1.0, 0.9, 0.177 (the arena's GRPO seed
    1 at step 16). 0.9 is 0.1 below the best, within format_drop 0.15; 0.177 is 0.823 below."""
    scalars = {"val/valid_response_format_ratio": {0: 1.0, 8: 0.9, 16: 0.177}}
    run = load_run(make_run(tmp_path, "r", scalars=scalars))
    collapse = detect(run)
    assert (collapse.first_step, collapse.kinds) == (16, ["held_out_format_drop"])
    assert "0.177 < best 1 − 0.15" in collapse.events[0].message
    assert detect(run, monitor=monitor_overrides(["format_drop=0.9"])).events == ()
    assert detect(run, monitor=monitor_overrides(["format_drop=null"])).events == ()
    assert detect(run, monitor=monitor_overrides(["enabled=false"])).events == ()


def test_the_report_chooses_which_kinds_are_a_collapse(tmp_path: Path):
    """Entropy 0.3 -> 0.05 (an entropy_collapse by default: < 0.2 x 0.3) in a run whose
    held-out success rises 0.3 -> 0.5, and a second run whose held-out success falls
    0.3 -> 0.0 (a held_out_success_drop). Judged on the held-out kinds only, the first run's
    entropy event becomes a warning and only the second run collapsed."""
    entropy = {s: 0.3 if s < 8 else 0.05 for s in range(1, 13)}
    runs = tmp_path / "runs"
    rising = {"actor/entropy": entropy, "val/success_rate": {0: 0.3, 12: 0.5}}
    falling = {"actor/entropy": entropy, "val/success_rate": {0: 0.3, 12: 0.0}}
    make_run(runs, "grpo_seed0", scalars=rising)
    make_run(runs, "grpo_seed1", seed=1, scalars=falling)
    held_out = collapse_kinds(["held_out_success_drop, held_out_format_drop"])
    assert held_out == {"held_out_success_drop", "held_out_format_drop"}
    assert collapse_kinds([]) == COLLAPSE_KINDS
    assert collapse_kinds(["kl_drift", "nonfinite"]) == {"kl_drift", "nonfinite"}
    with pytest.raises(ConfigError, match="collapse kinds: unknown entropy_colapse; known: "):
        collapse_kinds(["entropy_colapse"])
    run = load_run(runs / "grpo_seed0")
    assert detect(run).kinds == ["entropy_collapse"]
    judged = detect(run, kinds=held_out)
    assert (judged.collapsed, judged.warning_kinds) == (False, ["entropy_collapse"])

    out = tmp_path / "report"
    argv = [str(runs), "-o", str(out), "--no-plots"]
    assert report_cli(*argv, "--collapse-on", "held_out_success_drop") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["collapse_on"] == ["held_out_success_drop"]
    judged_runs = {r["seed"]: (r["collapsed"], r["collapse_kinds"]) for r in summary["runs"]}
    assert judged_runs == {0: (False, []), 1: (True, ["held_out_success_drop"])}
    assert summary["groups"][0]["collapsed_seeds"] == 1
    assert "A collapse is held_out_success_drop; the other" in (out / "report.md").read_text()


def png_width(path: Path) -> int:
    """A PNG's width in pixels."""
    return png_size(path)[0]


def test_the_final_success_figure_shows_each_seeds_end(tmp_path: Path):
    """Seed 0: 50 % at step 0, 75 % ± 5 (its logged SE) at step 20, and the per-game records
    of the paired test above: +25.0 ± 41.46 points. Seed 1: 50 % ± no logged SE, no records
    (no paired change), marked collapsed. The figure has the paired panel only when some run
    has records (a wider PNG); a group never evaluated after step 0 draws nothing."""
    from arlarena_jax.arena.report.final_plot import final_points, plot_final

    runs = tmp_path / "runs"
    seed0 = make_run(runs, "s0", scalars=val(0.6, 0.75) | {"val/success_rate_se": {20: 0.05}})
    held_out_games(seed0, 0, [True, True, False, False])
    held_out_games(seed0, 20, [False, True, True, True])
    seed1 = make_run(runs, "s1", seed=1, scalars=val(0.5, 0.5))
    (group,) = group_runs(load_runs([runs]))
    first, second = final_points(group, {str(seed1): True})
    assert (first.seed, second.seed) == (0, 1)
    assert (first.after_cloning, first.final, first.final_se) == pytest.approx((50, 75, 5))
    assert (first.change, first.change_se) == pytest.approx((25.0, 41.4578), abs=1e-3)
    assert not first.collapsed and second.collapsed
    assert second.final == pytest.approx(50) and second.final_se is None
    assert second.change is None and second.change_se is None

    assert plot_final("sokoban", [group], tmp_path / "both.png", {})
    (alone,) = group_runs(load_runs([seed1]))
    assert plot_final("sokoban", [alone], tmp_path / "one.png", {})
    assert png_width(tmp_path / "both.png") > 1.5 * png_width(tmp_path / "one.png")

    unevaluated = make_run(tmp_path / "other", "u", scalars=val())
    (never,) = group_runs(load_runs([unevaluated]))
    assert not plot_final("sokoban", [never], tmp_path / "none.png", {})
    assert not (tmp_path / "none.png").exists()


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's (width, height) in pixels (its IHDR chunk, bytes 16-23)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_=.-0123456789", min_size=1, max_size=30)


@given(words=st.lists(WORDS, min_size=1, max_size=8), runs=st.integers(1, 9))
def test_a_tick_label_wraps_at_its_spaces_and_keeps_every_word(words: list[str], runs: int):
    """Law: the lines but the last, joined by spaces, are the label again (words are never cut,
    at hyphens neither); a line is longer than LABEL_CHARS only when it is one word; the last
    line counts the runs."""
    from arlarena_jax.arena.report.final_plot import LABEL_CHARS, tick_label

    label = " ".join(words)
    *lines, count = tick_label(label, runs).split("\n")
    assert " ".join(lines) == label
    assert all(len(line) <= LABEL_CHARS or " " not in line for line in lines)
    assert count == f"(n={runs})"


def test_many_groups_stack_the_paired_panel_under_the_first(tmp_path: Path):
    """Two groups: the two panels side by side (wider than tall). Four: the paired panel under
    the first, each column wide enough for its wrapped label (taller than wide, and wider than
    the figure of two)."""
    from arlarena_jax.arena.report.final_plot import plot_final

    run = make_run(tmp_path / "runs", "s0", scalars=val(0.5, 0.75))
    held_out_games(run, 0, [True, False, False, True])
    held_out_games(run, 20, [True, True, False, True])
    (group,) = group_runs(load_runs([run]))
    assert plot_final("sokoban", [group] * 2, tmp_path / "two.png", {})
    assert plot_final("sokoban", [group] * 4, tmp_path / "four.png", {})
    (w2, h2), (w4, h4) = png_size(tmp_path / "two.png"), png_size(tmp_path / "four.png")
    assert w2 > h2 and h4 > w4 and h4 > 1.5 * h2


@given(st.lists(st.text(min_size=1, max_size=120), min_size=1, max_size=12))
def test_the_legend_rows_hold_their_labels(labels: list[str]):
    """Law: 1 to 3 columns, and a row of them holds the longest label (with room for the
    marker) within LEGEND_LINE_CHARS, unless one column is all there is."""
    from arlarena_jax.arena.report.plots import LEGEND_LINE_CHARS, legend_columns

    columns = legend_columns(labels)
    assert 1 <= columns <= 3
    longest = max(map(len, labels))
    assert columns == 1 or columns * (longest + 8) <= LEGEND_LINE_CHARS


def test_long_group_labels_do_not_widen_a_training_figure(tmp_path: Path):
    """The legend goes under the axes: two groups named like phase B's runs (60 characters)
    draw a figure as wide as two named GRPO and SAMPO (within 5 %), one column of labels, so a
    page that scales figures to its column keeps their plots the same size."""
    import dataclasses

    from arlarena_jax.arena.report.plots import METRICS, plot_metric

    runs = tmp_path / "runs"
    scalars = {"episode/success_rate": {1: 0.2, 2: 0.4}}
    for method in ("grpo", "sampo"):
        make_run(runs, f"{method}_seed0", method=method, scalars=scalars)
    groups = group_runs(load_runs([runs]))
    metric = next(m for m in METRICS if m.key == "episode/success_rate")
    long = "SAMPO continue_steps=0 num_episodes=32 steps=64 total_steps={}"
    renamed = [dataclasses.replace(g, label=long.format(16 * i)) for i, g in enumerate(groups)]
    assert plot_metric("textworld", groups, metric, tmp_path / "short.png")
    assert plot_metric("textworld", renamed, metric, tmp_path / "long.png")
    (w_short, h_short), (w_long, h_long) = (
        png_size(tmp_path / f"{name}.png") for name in ("short", "long")
    )
    assert abs(w_long - w_short) <= 0.05 * w_short and h_long > h_short


def test_head_to_head_pairs_two_methods_game_by_game(tmp_path: Path):
    """Seed 0, step 20, four games: GRPO wins 0-1, SAMPO wins 1-3, so d = (−1, 0, 1, 1): SAMPO −
    GRPO = +25.0 ± 41.5 points (the paired-change arithmetic above), 2 games only SAMPO won, 1
    only GRPO. Seed 1: SAMPO is at step 10 while GRPO reached 20: they meet at step 10 (wins
    0-3 against 0-1, d = (0, 0, 1, 1): +50.0 ± sqrt(4 · 0.25 / 16) = 25.0), marked @step 10. A
    seed only one method ran is left out."""
    from arlarena_jax.arena.report.versus import head_to_head

    runs = tmp_path / "runs"
    grpo0 = make_run(runs, "grpo_seed0", scalars=val(0.5, 0.5))
    sampo0 = make_run(runs, "sampo_seed0", method="sampo", scalars=val(0.5, 0.75))
    grpo1 = make_run(runs, "grpo_seed1", seed=1, scalars=val(0.5, 0.5))
    sampo1 = make_run(runs, "sampo_seed1", method="sampo", seed=1, scalars=val(1.0))
    make_run(runs, "sampo_seed2", method="sampo", seed=2, scalars=val(0.5))
    for run in (grpo0, grpo1, sampo0, sampo1):
        held_out_games(run, 0, [True, False, False, False])
    held_out_games(grpo0, 20, [True, True, False, False])
    held_out_games(sampo0, 20, [False, True, True, True])
    held_out_games(grpo1, 10, [True, True, False, False])
    held_out_games(grpo1, 20, [False, False, False, False])
    held_out_games(sampo1, 10, [True, True, True, True])

    first, second = head_to_head(group_runs(load_runs([runs])))
    assert (first.a, first.b, first.seed, first.step, first.final) == ("SAMPO", "GRPO", 0, 20, True)
    assert (first.change.change, first.change.se) == pytest.approx((0.25, 0.414578), abs=1e-6)
    assert (first.change.gained, first.change.lost) == (2, 1)
    assert (second.seed, second.step, second.final) == (1, 10, False)
    assert (second.change.change, second.change.se) == pytest.approx((0.5, 0.25), abs=1e-9)

    build_report([runs], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    versus = md[md.index("### Head to head") :]
    assert "| Only A / only B won | Verdict |" in versus
    assert "| SAMPO − GRPO | 2 |" not in versus and "| mean of 0, 1, 2 |" not in versus
    assert (
        "| SAMPO − GRPO | 0 | +25.0 | 41.5 | 4 games | 82.9 | 116.1 | 45 games | 2/1 "
        "| not resolved |"
    ) in versus  # as over step 0 in the test above
    # +50.0 is exactly 2 SE: not resolved (strictly more is needed); 4 (2 · 0.25 / 0.5)² = 4
    # games is the tie, 5 resolve it; the MDE is 2.801585 · 25.0 = 70.0
    assert (
        "| SAMPO − GRPO | 1 @step 10 | +50.0 | 25.0 | 4 games | 50.0 | 70.0 | 5 games | 2/0 "
        "| not resolved |"
    ) in versus
    # Over the two seeds: mean (25 + 50) / 2 = 37.5; their spread |50 − 25| / 2 = 12.5 is below
    # the games' noise sqrt(41.4578² + 25²) / 2 = 24.206, which sets the SE; 2 SE = 48.4, the MDE
    # 67.8; 2 (48.41 / 37.5)² = 3.33, so 4 seeds.
    assert (
        "| SAMPO − GRPO | mean of 0, 1 (steps as above) | +37.5 | 24.2 | games of 2 seeds | 48.4 "
        "| 67.8 | 4 seeds | 4/1 | not resolved |"
    ) in versus
    assert "| +37.5 ± 24.2 (SE, games of 2 seeds): not resolved |" in md  # the method table
    html = (tmp_path / "out" / "report.html").read_text()
    assert '<td class="label">SAMPO − GRPO</td><td class="label">0</td><td>+25.0</td>' in html
    assert '<td class="label">grpo_seed0</td><td class="label">GRPO</td>' in html  # runs: 2
    assert html.count('<div class="wide"><table>') == html.count("<table>")  # scroll, not spill
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(v["seed"], v["only_a_won"], v["only_b_won"]) for v in summary["head_to_head"]] == [
        (0, 2, 1),
        (1, 2, 0),
    ]
    assert [(v["needed"], v["resolved"]) for v in summary["head_to_head"]] == [
        (45, False),
        (5, False),
    ]
    (mean,) = summary["head_to_head_over_seeds"]
    assert (mean["seeds"], mean["se_over"], mean["se_from_games"]) == ([0, 1], "seeds", True)
    assert (mean["difference"], mean["se"]) == pytest.approx((37.5, 24.2061), abs=1e-4)
    assert (mean["needed"], mean["verdict"]) == (4, "not resolved")


def test_runs_whose_ratio_never_moved_are_named_on_policy(tmp_path: Path):
    """|ppo_kl| ≤ 1e-5 and clip fraction 0 at every step: on-policy. A run with ppo_kl 2e-5 at
    one step, or with one clipped step, is not; a cloning-only run (no ratio metrics) is not
    counted. Two on-policy runs of two with updates: "All 2"; then one of three: named."""
    from arlarena_jax.arena.report.on_policy import on_policy_note

    def ratio(kl: list[float], clip: list[float]) -> dict:
        return {
            "actor/ppo_kl": dict(enumerate(kl, start=1)),
            "actor/pg_clipfrac": dict(enumerate(clip, start=1)),
        }

    runs = tmp_path / "runs"
    make_run(runs, "a", scalars=val(0.5) | ratio([1e-7, -4e-7], [0.0, 0.0]))
    make_run(runs, "b", seed=1, scalars=val(0.5) | ratio([-1e-5, 0.0], [0.0, 0.0]))
    make_run(runs, "cloning_only", seed=2, scalars=val())
    loaded = load_runs([runs])
    names = [r.path.name for r in loaded]
    assert on_policy_note(loaded, names).startswith("All 2 runs with RL updates here had")
    make_run(runs, "c", seed=3, scalars=val(0.5) | ratio([2e-5, 0.0], [0.0, 0.0]))
    make_run(runs, "d", seed=4, scalars=val(0.5) | ratio([0.0, 0.0], [0.0, 0.01]))
    loaded = load_runs([runs])
    note = on_policy_note(loaded, [r.path.name for r in loaded])
    assert note.startswith("2 of 4 runs with RL updates (a, b) had"), note
    build_report([runs], tmp_path / "out", plots=False)
    assert "2 of 4 runs with RL updates (a, b) had" in (tmp_path / "out" / "report.md").read_text()
    alone = load_runs([runs / "c"])
    assert on_policy_note(alone, ["c"]) is None


def test_runs_tested_at_their_end_point_pair_on_the_test_games(tmp_path: Path):
    """A protocol sweep's test evaluation (evaluations/test/episodes.jsonl) pairs two methods'
    runs of a seed game by game. Eight test games, SAMPO wins 1-5, GRPO wins game 8:
    d = (1, 1, 1, 1, 1, 0, 0, -1), d̄ = 0.5, Σ (d − d̄)² = 5 x 0.25 + 2 x 0.25 + 2.25 = 4,
    SE = sqrt(4 / 8 / 8) = 0.25: +50.0 ± 25.0 points, exactly 2 SE, so not resolved, and
    floor(8 (2 x 0.25 / 0.5)²) + 1 = 9 games would resolve it."""
    from arlarena_jax.train.held_out import write_records

    def tested(run: Path, wins: list[int]) -> None:
        games = [{"seed": i, "won": bool(w), "return": 0.0} for i, w in enumerate(wins)]
        write_records(run / "evaluations" / "test" / "episodes.jsonl", games)

    runs = tmp_path / "runs"
    tested(make_run(runs, "grpo_seed0", scalars=val(0.5)), [0, 0, 0, 0, 0, 0, 0, 1])
    tested(make_run(runs, "sampo_seed0", method="sampo", scalars=val(0.5)), [1] * 5 + [0] * 3)
    md = document_text(runs)
    heading = "### Head to head on the test split (same seed, each run's end point"
    assert heading in md
    row = (
        "| SAMPO − GRPO | 0 | +50.0 | 25.0 | 8 games | 50.0 | 70.0 | 9 games | 5/1 | not resolved |"
    )
    assert row in md.split(heading)[1]
