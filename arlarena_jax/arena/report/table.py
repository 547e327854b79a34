"""The paper's results table: held-out success (and score) per environment and method group.

Per run, from an evaluated metric (``val/success_rate``, or the score):

- *after cloning*: the value at step 0 (the policy the RL phase starts from);
- *final*: the value at the last evaluated step after step 0 (a run in progress: its newest);
- *best*: the maximum over evaluated steps after step 0 (*lowest*, the minimum, per run).

Per group: mean ± sample std (ddof=1) over seeds, marked "(SD)", and the relative change of the
mean final success against the baseline group (GRPO) of the same environment, as the paper prints
it: ``(m − m_grpo) / m_grpo · 100``. A group of one seed has no std: its cells show instead the
standard error of that one evaluation over its episodes, ``<key>_se`` as the evaluation logged it
at the value's step (:func:`arlarena_jax.rollout.metrics.standard_errors`), marked "(SE)";
"– (SE)" where none was logged (older runs). Success is shown in %, the score as logged. Runs
evaluated again under other settings (``evaluations/<name>``, a sweep's ``evaluate_on``) add the
success of each such evaluation, ``val/success_rate@<name>``, per group.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from arlarena_jax.arena.report.events import Series
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.runs import Run

SUCCESS_KEY = "val/success_rate"
# The score, first logged key wins: a generic one, WebShop's task score (tensorboardX turns
# "webshop_task_score (not success_rate)" into this tag), then the mean episode return over turns
# that every environment's evaluation logs (the original's val/text/test_score).
SCORE_KEYS = (
    "val/score",
    "val/webshop_task_score__not_success_rate_",
    "val/text/test_score",
)
SCORE_NOTES = {
    "val/webshop_task_score__not_success_rate_": "WebShop's task score of the purchase",
    "val/text/test_score": "the mean episode return over turns (long failures weigh more)",
}
POINTS = ("after_cloning", "final", "best")
DASH = "–"
SE_SUFFIX = "_se"  # an evaluation's standard error of ``<key>`` is logged as ``<key>_se``
SE_MARK = "(SE)"  # follows a one-seed cell's standard error, telling it from a std over seeds
SD_MARK = "(SD)"  # follows a std over seeds


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One run's evaluated metric at the three points, and its lowest value after step 0 (a dip
    that a run recovered from shows there, not in the final or best; None where not evaluated)."""

    after_cloning: float | None = None
    final: float | None = None
    final_step: int | None = None
    best: float | None = None
    best_step: int | None = None
    lowest: float | None = None
    lowest_step: int | None = None
    count: int = 0  # evaluations after step 0


@dataclasses.dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation over ``n`` seeds (std None for one seed); ``se``: a
    one-seed group's standard error of its evaluation over its episodes, where logged."""

    mean: float | None
    std: float | None
    n: int
    se: float | None = None


@dataclasses.dataclass(frozen=True)
class Row:
    """One table row: a method group of one environment."""

    group: Group
    success: dict[str, Stat]  # by POINTS
    score: dict[str, Stat]
    score_key: str | None
    change: float | None  # % change of the mean final success against the baseline
    collapsed: int  # seeds with a collapse event
    warned: int = 0  # seeds with a warning event
    evaluated: dict[str, Stat] = dataclasses.field(default_factory=dict)  # success @ evaluation


def evaluation(series: Series | None) -> Evaluation:
    """The after-cloning, final, best and lowest values of an evaluated metric (best and lowest
    over the steps after 0, the first step on a tie), and how many evaluations followed step 0."""
    if series is None or not len(series.steps):
        return Evaluation()
    start = series.at(0)
    later = series.steps > 0
    if not later.any():
        return Evaluation(after_cloning=start)
    steps, values = series.steps[later], series.values[later]
    i, j = int(np.argmax(values)), int(np.argmin(values))
    return Evaluation(
        start,
        float(values[-1]),
        int(steps[-1]),
        float(values[i]),
        int(steps[i]),
        float(values[j]),
        int(steps[j]),
        int(later.sum()),
    )


def stat(values: Sequence[float | None]) -> Stat:
    """Mean and ddof=1 std of the values that are not None."""
    present = np.array([v for v in values if v is not None], dtype=np.float64)
    if not len(present):
        return Stat(None, None, 0)
    std = float(np.std(present, ddof=1)) if len(present) > 1 else None
    return Stat(float(np.mean(present)), std, len(present))


def score_key(runs: Sequence[Run]) -> str | None:
    """The first of :data:`SCORE_KEYS` that any of ``runs`` logged."""
    return next((k for k in SCORE_KEYS if any(k in r.scalars for r in runs)), None)


def with_se(s: Stat, se: float | None) -> Stat:
    """``s`` with the standard error ``se`` (unchanged without a mean or an ``se``)."""
    return s if s.mean is None or se is None else dataclasses.replace(s, se=se)


def point_step(e: Evaluation, point: str) -> int | None:
    """The step the value of ``point`` (one of :data:`POINTS`) was logged at."""
    steps = {"after_cloning": 0, "final": e.final_step, "best": e.best_step}
    return None if getattr(e, point) is None else steps[point]


def logged_se(run: Run, key: str, step: int | None) -> float | None:
    """The run's ``<key>_se`` at ``step``; None where it logged none there."""
    series = run.scalars.get(key + SE_SUFFIX)
    return None if series is None or step is None else series.at(step)


def _stats(runs: Sequence[Run], key: str | None) -> dict[str, Stat]:
    evals = [evaluation(r.scalars.get(key)) if key else Evaluation() for r in runs]
    stats = {p: stat([getattr(e, p) for e in evals]) for p in POINTS}
    if len(runs) != 1 or key is None:
        return stats
    return {
        p: with_se(s, logged_se(runs[0], key, point_step(evals[0], p))) for p, s in stats.items()
    }


def _evaluated_metric(run: Run, name: str, key: str) -> float | None:
    value = run.evaluations.get(name, {}).get("metrics", {}).get(key)
    return None if value is None else float(value)


def evaluated_success(run: Run, name: str) -> float | None:
    """The held-out success of the run's evaluation ``name`` (None where it has none)."""
    return _evaluated_metric(run, name, SUCCESS_KEY)


def evaluated_stat(runs: Sequence[Run], name: str) -> Stat:
    """The group's success in evaluation ``name``; one seed: with that evaluation's SE."""
    s = stat([evaluated_success(r, name) for r in runs])
    if len(runs) != 1:
        return s
    return with_se(s, _evaluated_metric(runs[0], name, SUCCESS_KEY + SE_SUFFIX))


def evaluation_names(runs: Sequence[Run]) -> list[str]:
    """The names of the evaluations any of ``runs`` has, sorted."""
    return sorted({name for run in runs for name in run.evaluations})


def relative_change(mean: float | None, baseline: float | None) -> float | None:
    """``(mean − baseline) / baseline · 100``; None if either is missing or the baseline is 0."""
    if mean is None or baseline is None or baseline == 0:
        return None
    return (mean - baseline) / baseline * 100.0


def build_rows(
    groups: Sequence[Group],
    collapsed: dict[str, bool],
    baseline: str = "grpo",
    warned: dict[str, bool] | None = None,
) -> list[Row]:
    """The table's rows; ``collapsed`` (``warned``) maps a run's path (str) to whether it
    collapsed (had a warning). The baseline of an environment is its one group of method
    ``baseline`` (none if several)."""
    by_env: dict[str, list[Run]] = {}
    for g in groups:
        by_env.setdefault(g.env, []).extend(g.runs)
    keys = {env: score_key(runs) for env, runs in by_env.items()}
    names = {env: evaluation_names(runs) for env, runs in by_env.items()}
    success = {id(g): _stats(g.runs, SUCCESS_KEY) for g in groups}
    rows = []
    for g in groups:
        bases = [b for b in groups if b.env == g.env and b.method == baseline]
        base = (
            success[id(bases[0])]["final"].mean if len(bases) == 1 and bases[0] is not g else None
        )
        change = relative_change(success[id(g)]["final"].mean, base)
        hits = sum(collapsed.get(str(r.path), False) for r in g.runs)
        warns = sum((warned or {}).get(str(r.path), False) for r in g.runs)
        stats = _stats(g.runs, keys[g.env])
        evaluated = {n: evaluated_stat(g.runs, n) for n in names[g.env]}
        rows.append(Row(g, success[id(g)], stats, keys[g.env], change, hits, warns, evaluated))
    return rows


def spread(s: Stat, scale: float = 1.0, digits: int = 1) -> str:
    """The std over seeds, marked "(SD)"; else a one-seed group's standard error, marked "(SE)";
    else "– (SE)": one seed, no SE logged."""
    if s.std is not None:
        return f"{s.std * scale:.{digits}f} {SD_MARK}"
    return f"{DASH} {SE_MARK}" if s.se is None else f"{s.se * scale:.{digits}f} {SE_MARK}"


def cell(s: Stat, runs: int, scale: float = 1.0, digits: int = 1) -> str:
    """``mean ± std (SD)``; one seed: ``mean ± SE (SE)`` or ``mean ± – (SE)`` (:func:`spread`);
    ``(n=k)`` when fewer than ``runs`` seeds count (one of several: the mean alone, no ±)."""
    if s.mean is None:
        return DASH
    text = f"{s.mean * scale:.{digits}f}"
    if s.std is not None or s.se is not None or runs == 1:
        text += f" ± {spread(s, scale, digits)}"
    return text if s.n == runs else f"{text} (n={s.n})"


def change_cell(change: float | None) -> str:
    """The paper's ``(+13.3%)``; "–" without a baseline."""
    if change is None or not math.isfinite(change):
        return DASH
    return f"({change:+.1f}%)"
