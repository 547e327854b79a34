"""The report's content as plain blocks (headings, text, tables, figures), for any renderer."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence

from arlarena_jax.arena.report.axis_plot import AXIS_KEY
from arlarena_jax.arena.report.axis_table import (
    AXIS_NOTE,
    AXIS_POWER_NOTE,
    axis_heading,
    axis_power_rows,
    axis_rows,
)
from arlarena_jax.arena.report.comparison import Comparison
from arlarena_jax.arena.report.end_point import end_point_comparisons
from arlarena_jax.arena.report.final_plot import FINAL
from arlarena_jax.arena.report.groups import method_info
from arlarena_jax.arena.report.model import Report, run_records
from arlarena_jax.arena.report.on_policy import on_policy_note
from arlarena_jax.arena.report.power_table import against, against_cell, comparison_rows
from arlarena_jax.arena.report.start_change import start_changes
from arlarena_jax.arena.report.table import (
    DASH,
    SCORE_NOTES,
    SUCCESS_KEY,
    Row,
    cell,
    change_cell,
)
from arlarena_jax.arena.report.versus import comparisons


@dataclasses.dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclasses.dataclass(frozen=True)
class Paragraph:
    text: str


@dataclasses.dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    labels: int = 2  # the leading columns that name a row (left-aligned); the rest are values


@dataclasses.dataclass(frozen=True)
class Figures:
    """Images as (path relative to the report folder, caption)."""

    items: tuple[tuple[str, str], ...]


Block = Heading | Paragraph | Bullets | Table | Figures

NOT_ON_TEST = "not shown (test)"  # a best over test steps would be a choice on test


def results_table(
    rows: Sequence[Row], baseline: str, paired: Mapping[str, Comparison | None] | None = None
) -> Table:
    """The paper-style table of one environment's groups (``baseline``: its display name);
    ``paired``: each group's comparison with the baseline game by game, by label (a column
    where any group has one)."""
    key = rows[0].score_key
    paired = {k: v for k, v in (paired or {}).items() if v is not None}
    splits = sorted({run.split_label for r in rows for run in r.group.runs})
    headers = ["Dimension", "Method", "n", "After cloning (%)"]
    headers += [f"Final success (%, {' / '.join(splits)})"]
    headers += [f"Δ vs {baseline}"]
    headers += [f"Paired vs {baseline} (points)"] if paired else []
    headers += ["Best success (%)"]
    headers += (["Final score", "Best score"] if key else []) + ["Collapsed seeds", "Warned seeds"]
    names = list(rows[0].evaluated)  # the environment's evaluations under other settings
    headers += [f"Success @{name} (%)" for name in names]
    body = []
    for r in rows:
        n = len(r.group.runs)
        line = [r.group.dimension, r.group.label, str(n), cell(r.success["after_cloning"], n, 100)]
        line += [cell(r.success["final"], n, 100), change_cell(r.change)]
        line += [against_cell(paired.get(r.group.label))] if paired else []
        on_test = any(run.eval_split == "test" for run in r.group.runs)
        line += [NOT_ON_TEST if on_test else cell(r.success["best"], n, 100)]
        if key:
            best = NOT_ON_TEST if on_test else cell(r.score["best"], n, 1, 3)
            line += [cell(r.score["final"], n, 1, 3), best]
        line += [f"{r.collapsed}/{n}", f"{r.warned}/{n}"]
        body.append((*line, *(cell(r.evaluated[name], n, 100) for name in names)))
    return Table(tuple(headers), tuple(body))


def _at(value: float | None, step: int | None) -> str:
    return DASH if value is None else f"{value:.1f} (step {step})"


def _evaluated_at(evaluation: dict | None) -> str:
    if evaluation is None or evaluation["success"] is None:
        return DASH
    return f"{evaluation['success']:.1f} (step {evaluation['step']})"


def _best(rec: dict) -> str:
    """The best step's success, on a split a choice may read; a best over test steps is a
    choice made on the test games, so it is not shown."""
    if rec["eval_split"].startswith("test"):
        return NOT_ON_TEST
    return _at(rec["success_best"], rec["success_best_step"])


def runs_table(report: Report, env: str) -> Table:
    """One line per run of ``env``."""
    records = [r for r in run_records(report) if r["env"] == env]
    names = sorted({name for rec in records for name in rec["evaluations"]})
    headers = ("Run", "Method", "Seed", "Split", "State", "Step", "Final success (%)")
    headers += ("Best success (%)",)
    dips = any(rec["success_evaluations"] > 1 for rec in records)
    headers += ("Lowest success (%)",) if dips else ()
    headers += ("Collapse step", "Collapse kinds", "Warnings (first step)")
    headers += tuple(f"Success @{name} (%)" for name in names)
    body = []
    for rec in records:
        state = rec["state"] + (f": {rec['error']}" if rec["error"] else "")
        total = "?" if rec["total_steps"] is None else rec["total_steps"]  # 0: cloning only
        steps = f"{rec['last_step']}/{total}"
        final = _at(rec["success_final"], rec["success_final_step"])
        best = _best(rec)
        step = DASH if rec["collapse_step"] is None else str(rec["collapse_step"])
        kinds = ", ".join(rec["collapse_kinds"]) or DASH
        split = rec["eval_split"]
        body.append((rec["run"], rec["label"], str(rec["seed"]), split, state, steps, final, best))
        if dips:
            body[-1] += (_at(rec["success_lowest"], rec["success_lowest_step"]),)
        warnings = ", ".join(rec["warning_kinds"])
        warnings = f"{warnings} ({rec['warning_step']})" if warnings else DASH
        body[-1] += (step, kinds, warnings)
        body[-1] += tuple(_evaluated_at(rec["evaluations"].get(name)) for name in names)
    return Table(headers, tuple(body))


def comparison_table(found: Sequence[Comparison], won: str) -> Table | None:
    """One line per comparison (a seed, or the mean over seeds) with its power; None if none.
    ``won`` heads the column of games only one side won."""
    if not found:
        return None
    headers, rows = comparison_rows(found, won)
    return Table(headers, rows)


def baseline_comparisons(
    report: Report, env: str, found: Sequence[Comparison]
) -> dict[str, Comparison | None]:
    """Each group of ``env`` against the environment's one baseline group, by label (none
    without exactly one baseline group)."""
    groups = [g for g in report.groups if g.env == env]
    bases = [g for g in groups if g.method == report.baseline]
    if len(bases) != 1:
        return {}
    base = bases[0].label
    return {g.label: against(found, g.label, base) for g in groups if g.label != base}


def first_events(report: Report, env: str) -> Bullets | None:
    """The first event of each kind per collapsed run of ``env``."""
    items = []
    for run in (r for r in report.runs if r.env == env):
        seen: set[str] = set()
        for event in report.collapses[str(run.path)].events:
            if event.kind not in seen:
                seen.add(event.kind)
                items.append(f"{run.path.relative_to(report.root)}: {event.message}")
    return Bullets(tuple(items)) if items else None


def _overridden(monitor: dict) -> str:
    """`` (for this report: k=v, …)`` naming the report's monitor settings, or nothing."""
    if not monitor:
        return ""
    shown = ", ".join(f"{k}={'null' if v is None else v}" for k, v in sorted(monitor.items()))
    return f" (for this report: {shown})"


def _comparisons_defined() -> tuple[str, ...]:
    """The definitions of the comparison tables and their power columns."""
    return (
        "Change over step 0 (where runs kept their per-episode outcomes, held_out/): each "
        "run's final minus its step-0 held-out success over the same games, in points; "
        "gained / lost: games won only at the end / only at the start; a group of several "
        "seeds adds the mean over them.",
        "Head to head (where runs kept their per-episode outcomes): method A's run minus "
        "method B's run of the same seed in held-out success over the same games, at the "
        "last step both evaluated (@step N where that is not both runs' last), in points; "
        "only A / only B won: games only A won / only B won; where both methods ran several "
        "seeds, the mean over them follows.",
        "± SE (paired), in the comparison tables: over one seed's n games, sqrt(mean "
        "(d − d̄)² / n) over the per-game differences d (games both sides won, or both lost, "
        "add nothing); it covers those games, not another training's outcome. Over k seeds "
        "(mean of …): SD / sqrt(k) of the per-seed differences (ddof=1), which holds the "
        "spread between trainings as well as the game noise, but never below the games' own "
        "noise sqrt(Σ SE_j²) / k (SE over: games of k seeds, where that set it). Resolvable: "
        "2 SE, the smallest difference these games or seeds resolve under the rank rule. "
        "80%-power MDE: (z_0.975 + z_0.8) SE ≈ 2.80 SE, the true difference a two-sided 5% "
        "test would detect four times in five. Would resolve it: the fewest games (one seed) "
        "or seeds (a mean over seeds) at which the observed difference would exceed 2 SE, "
        "floor(n (2 SE / d̄)²) + 1 with the SE shrinking as 1/sqrt(n) (n or fewer: resolved "
        "already). Verdict: A > B or A < B only where |d̄| > 2 SE, else not resolved; the "
        "report ranks methods nowhere else.",
    )


def definitions(report: Report) -> Bullets:
    rule, base = report.rule, method_info(report.baseline)[1]
    return Bullets(
        (
            f"Success is {SUCCESS_KEY} (held-out episodes) in %. After cloning: step 0, before "
            "RL. Final: the last evaluated step after 0 (a run in progress: its newest). Best: "
            "the maximum over evaluated steps after 0. Lowest (runs evaluated more than once "
            "after step 0): the minimum over them, a dip the run may have recovered from.",
            "Cells are mean ± x (SD): the sample standard deviation (ddof=1) over the row's n "
            "seeds, their spread, not the SE of the mean; (n=k) when only k seeds have the value "
            "(one of several: the value alone). For one seed, ± x (SE) is instead the standard "
            "error of that evaluation over its n episodes (sqrt(p(1 − p)/n) for a success rate "
            "p), logged at the value's step; ± – (SE) where the run logged none.",
            f"Δ vs {base}: (m − m_{base}) / m_{base} · 100 of the mean final success, against "
            f"the same environment's {base} group (– for that group itself or without one); it "
            f"carries no SE and ranks nothing. Paired vs {base} (where runs kept per-episode "
            f"outcomes): the group's success minus {base}'s over the same games, in points, ± its "
            "paired SE (what it is over in brackets) and the verdict, from the head-to-head "
            "table: the mean over seeds where both ran several, else their one seed.",
            "Step: the newest RL step logged / trainer.total_steps.",
            *_comparisons_defined(),
            "Events: the trainer's stability monitor replayed on the logged metrics with each "
            f"run's monitor settings{_overridden(report.monitor)}, and success_collapse: "
            "training success averaged over "
            f"{rule.window} steps falls more than {rule.drop * 100:g} points below its best so "
            f"far, once that best reached {rule.min_best * 100:g}%, and held_out_format_drop: "
            "the held-out valid-format ratio falls more than the monitor's format_drop below its "
            "best so far (the start's included), and held_out_success_drop: the held-out success "
            f"falls more than {rule.drop * 100:g} points below its best so far (the start's "
            f"included), once that best reached {rule.min_best * 100:g}%. A collapse is "
            f"{', '.join(sorted(report.collapse_on))}; the other events are warnings.",
            "Where each run ended: one dot per seed (seed order, left to right) at its final "
            "held-out success ± the SE of that evaluation, the dashed line the mean success after "
            "cloning; where runs kept per-game outcomes, their paired change over step 0 ± the "
            "paired SE; a hollow dot is a collapsed run.",
            "Training dynamics: the mean over seeds at each step (seeds that logged it); the band "
            "spans the seeds' min to max; dotted lines mark a seed's first collapse event.",
        )
    )


def evaluations_note(report: Report, env: str) -> Paragraph | None:
    """What each ``Success @NAME`` column of ``env`` evaluated: its overrides."""
    seen: dict[str, set[str]] = {}
    for run in (r for r in report.runs if r.env == env):
        for name, record in run.evaluations.items():
            seen.setdefault(name, set()).add(" ".join(record.get("overrides", [])) or "none")
    if not seen:
        return None
    parts = [f"@{name}: {' | '.join(sorted(o))}" for name, o in sorted(seen.items())]
    return Paragraph(
        f"Success @NAME: {SUCCESS_KEY} of each run's final checkpoint evaluated again under "
        f"other settings (arlarena eval-run; a sweep's evaluate_on), in %. Overrides: "
        + "; ".join(parts)
        + "."
    )


CHANGE_HEADING = "Change over step 0 (same run, same held-out games)"
VERSUS_HEADING = "Head to head (same seed, same held-out games)"
TEST_HEADING = "Head to head on the test split (same seed, each run's end point, same test games)"


def env_blocks(report: Report, env: str) -> list[Block]:
    rows = [r for r in report.rows if r.group.env == env]
    baseline = method_info(report.baseline)[1]
    groups = [g for g in report.groups if g.env == env]
    versus = comparisons(groups)
    paired = baseline_comparisons(report, env, versus)
    blocks: list[Block] = [Heading(f"Environment: {env}"), results_table(rows, baseline, paired)]
    if rows[0].score_key:
        key = rows[0].score_key
        note = SCORE_NOTES.get(key, "as logged")
        blocks.append(
            Paragraph(
                f"Score: {key}, {note}; mean ± SD over seeds (one seed: ± SE of its evaluation) "
                "as above."
            )
        )
    note = evaluations_note(report, env)
    if note is not None:
        blocks.append(note)
    runs = [r for r in report.runs if r.env == env]
    quiet = on_policy_note(runs, [str(r.path.relative_to(report.root)) for r in runs])
    if quiet is not None:
        blocks.append(Paragraph(quiet))
    figures = [p for p in report.plots if p.env == env]
    for heading, chosen in (
        ("Where each run ended", [p for p in figures if p.metric.key == FINAL.key]),
        ("Training dynamics", [p for p in figures if p.metric.key not in (FINAL.key, AXIS_KEY)]),
    ):
        if chosen:
            items = tuple(
                (p.path.relative_to(report.out).as_posix(), p.metric.title) for p in chosen
            )
            blocks += [Heading(heading, 3), Figures(items)]
    blocks += [Heading("Runs", 3), runs_table(report, env)]
    for heading, table in (
        (CHANGE_HEADING, comparison_table(start_changes(groups), "Gained / lost")),
        (VERSUS_HEADING, comparison_table(versus, "Only A / only B won")),
        (TEST_HEADING, comparison_table(end_point_comparisons(groups), "Only A / only B won")),
    ):
        if table is not None:
            blocks += [Heading(heading, 3), table]
    blocks += axis_blocks(report, env)
    events = first_events(report, env)
    if events:
        blocks += [Heading("Stability events (the first of each kind per run)", 3), events]
    return blocks


def axis_blocks(report: Report, env: str) -> list[Block]:
    """The test end point against the environment's x axis: its figure, table and note;
    nothing without an axis (:func:`~arlarena_jax.arena.report.build.axes_of`)."""
    numbers = report.axes.get(env)
    if numbers is None:
        return []
    axis = numbers.axis
    blocks: list[Block] = [Heading(axis_heading(axis.key), 3)]
    figures = [p for p in report.plots if p.env == env and p.metric.key == AXIS_KEY]
    if figures:
        items = tuple((p.path.relative_to(report.out).as_posix(), p.metric.title) for p in figures)
        blocks.append(Figures(items))
    headers, rows = axis_rows(numbers)
    blocks += [Table(headers, rows, labels=1), Paragraph(AXIS_NOTE)]
    headers, rows = axis_power_rows(numbers)
    if rows:
        blocks += [Table(headers, rows, labels=1), Paragraph(AXIS_POWER_NOTE)]
    return blocks


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def document(report: Report) -> list[Block]:
    """The whole report, top to bottom."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    envs = list(dict.fromkeys(g.env for g in report.groups))
    intro = (
        f"{_count(len(report.runs), 'run')} in {_count(len(report.groups), 'group')} under "
        f"{report.root}; environments: {', '.join(envs)}. Generated {stamp}."
    )
    blocks: list[Block] = [Heading(report.title, 1), Paragraph(intro)]
    for env in envs:
        blocks += env_blocks(report, env)
    return [*blocks, Heading("Definitions"), definitions(report)]
