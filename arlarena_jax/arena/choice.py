"""A recipe chosen on the validation split by a written rule: a sweep file's ``recipe_from``.

A *search* sweep (``protocol: {select_on: validation, end_point: none}``) tries recipes, each
evaluated on the validation games only. A later sweep names it, and its zip axis becomes, for each
value of the key ``per``, the recipe the rule chooses from the search's finished runs:

.. code-block:: yaml

    recipe_from:
      sweep: budget_textworld_recipe.yaml   # the search sweep file, relative to this file
      per: sft.num_episodes                 # one recipe per value of this search axis
      tie_games: 1                          # validation wins within this many games tie
      prefer_lower: [sft.steps, sft.optim.lr]  # a tie goes to the lowest value, key by key
      runs: results/budget_textworld_recipe # optional: the search's runs (default: its out)

A recipe is a run's values on the search's axes other than ``per``, the method and the seed. Its
score is w̄_r, its wins on the validation games at its last validation evaluation, averaged over
its seeds. Per value of ``per``:

    best = max_r w̄_r,  chosen = argmin over {r : w̄_r >= best - tie_games} of (prefer_lower values)

The rule reads the validation files only (``held_out/validation/``), and the search must have
finished: a run not done, or without a validation evaluation, refuses the choice in one line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from arlarena_jax.errors import ConfigError

KNOWN_KEYS = ("sweep", "per", "tie_games", "prefer_lower", "runs")
SPLIT = "validation"


@dataclasses.dataclass(frozen=True)
class RecipeFrom:
    """A checked ``recipe_from`` block: the search sweep file and the choice rule."""

    sweep: Path
    per: str
    tie_games: float = 0.0
    prefer_lower: tuple[str, ...] = ()
    runs: Path | None = None


@dataclasses.dataclass(frozen=True)
class Scored:
    """One recipe of the search: its values, its mean validation wins and games per seed."""

    recipe: dict[str, Any]
    wins: float
    games: int
    seeds: int


@dataclasses.dataclass(frozen=True)
class Choice:
    """The recipe chosen for ``per_value``, and every recipe it was chosen from."""

    per_value: Any
    chosen: Scored
    scored: tuple[Scored, ...]


def parse_recipe_from(raw: Any, path: Path) -> RecipeFrom:
    """The ``recipe_from`` block of the sweep file ``path``; a bad one is one line."""

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"sweep file {str(path)!r}: key 'recipe_from{key}': {message}")

    if not isinstance(raw, dict):
        raise fail("", f"expected a mapping ({', '.join(KNOWN_KEYS)}), got {raw!r}")
    unknown = sorted(set(raw) - set(KNOWN_KEYS))
    if unknown:
        raise fail(f".{unknown[0]}", f"unknown ({', '.join(KNOWN_KEYS)})")
    for key in ("sweep", "per"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise fail(f".{key}", f"expected a {key} name, got {raw.get(key)!r}")
    search = path.parent / raw["sweep"]
    if not search.is_file():
        raise fail(".sweep", f"no sweep file {str(search)!r}")
    tie = raw.get("tie_games", 0)
    if isinstance(tie, bool) or not isinstance(tie, int | float) or tie < 0:
        raise fail(".tie_games", f"expected a number of games >= 0, got {tie!r}")
    prefer = raw.get("prefer_lower", [])
    if not isinstance(prefer, list) or not all(isinstance(k, str) for k in prefer):
        raise fail(".prefer_lower", f"expected a list of dotted keys, got {prefer!r}")
    runs = raw.get("runs")
    if runs is not None and not isinstance(runs, str):
        raise fail(".runs", f"expected a directory, got {runs!r}")
    return RecipeFrom(
        search, raw["per"], float(tie), tuple(prefer), None if runs is None else Path(runs)
    )


def _refuse(recipe_from: RecipeFrom, message: str) -> ConfigError:
    return ConfigError(f"recipe_from {str(recipe_from.sweep)!r}: {message}")


def _validation_wins(run_dir: Path) -> tuple[int, int] | None:
    """(games won, games played) at the run's last validation evaluation, the episodes lost
    to an infrastructure failure left out; None without one."""
    from arlarena_jax.train.held_out import evaluated_steps, held_out_path, read_records

    steps = evaluated_steps(run_dir, SPLIT)
    if not steps:
        return None
    records = [
        r for r in read_records(held_out_path(run_dir, steps[-1], SPLIT)) if not r.get("failed")
    ]
    return sum(bool(r.get("won")) for r in records), len(records)


def _search_runs(recipe_from: RecipeFrom) -> tuple[Any, list]:
    """The search sweep's spec and its planned runs, their directories under ``runs``."""
    from arlarena_jax.arena import plan as planning
    from arlarena_jax.arena.spec import load_sweep

    search = load_sweep(recipe_from.sweep)
    if search.protocol is None or search.protocol.select_on != SPLIT:
        raise _refuse(recipe_from, "a search's protocol must read the validation split")
    runs = planning.plan(search)
    if recipe_from.runs is not None:
        runs = [dataclasses.replace(r, run_dir=recipe_from.runs / r.name) for r in runs]
    return search, runs


def _recipe_keys(search: Any, recipe_from: RecipeFrom) -> list[str]:
    """The search's axis keys that make a recipe: all but ``per``, the method and the seed."""
    from arlarena_jax.arena.spec import METHOD_KEY, SEED_KEY

    axes = [*search.grid, *search.zip]
    if recipe_from.per not in axes:
        raise _refuse(recipe_from, f"per: {recipe_from.per!r} is not an axis of the search")
    keys = [k for k in axes if k not in (recipe_from.per, METHOD_KEY, SEED_KEY)]
    for key in recipe_from.prefer_lower:
        if key not in keys:
            raise _refuse(recipe_from, f"prefer_lower: {key!r} is not a recipe key ({keys})")
    return keys


def score(recipe_from: RecipeFrom) -> dict[Any, list[Scored]]:
    """Every recipe of the search, scored, by value of ``per`` (in the search's order); a run
    not done or without a validation evaluation refuses in one line."""
    from arlarena_jax.arena.jobs import read_state

    search, runs = _search_runs(recipe_from)
    keys = _recipe_keys(search, recipe_from)
    tallies: dict[Any, dict[str, list]] = {}
    for run in runs:
        state = read_state(run.run_dir)["state"]
        wins = _validation_wins(run.run_dir) if state == "done" else None
        if wins is None:
            why = "not done" if state != "done" else "has no validation evaluation"
            raise _refuse(
                recipe_from, f"search run {run.run_dir} is {state}: {why}; finish it first"
            )
        recipe = {k: run.values[k] for k in keys}
        by_recipe = tallies.setdefault(run.values[recipe_from.per], {})
        by_recipe.setdefault(repr(recipe), [recipe, []])[1].append(wins)
    return {
        per: [
            Scored(recipe, sum(w for w, _ in ws) / len(ws), ws[0][1], len(ws))
            for recipe, ws in by_recipe.values()
        ]
        for per, by_recipe in tallies.items()
    }


def choose(scored: list[Scored], recipe_from: RecipeFrom) -> Scored:
    """The best-scoring recipe; those within ``tie_games`` of it tie, and a tie goes to the
    lowest ``prefer_lower`` values, key by key (then the search's order)."""
    best = max(s.wins for s in scored)
    tied = [s for s in scored if s.wins >= best - recipe_from.tie_games - 1e-9]
    try:
        return min(tied, key=lambda s: tuple(s.recipe[k] for k in recipe_from.prefer_lower))
    except TypeError:
        raise _refuse(recipe_from, "prefer_lower: values that cannot be ordered") from None


def choices(recipe_from: RecipeFrom) -> list[Choice]:
    """The chosen recipe per value of ``per``."""
    return [
        Choice(per, choose(scored, recipe_from), tuple(scored))
        for per, scored in score(recipe_from).items()
    ]


def zip_axis(recipe_from: RecipeFrom, made: list[Choice] | None = None) -> dict[str, tuple]:
    """The zip axis the choices make: ``per`` and every recipe key, one position per value."""
    made = choices(recipe_from) if made is None else made
    keys = [recipe_from.per, *made[0].chosen.recipe]
    values = [{recipe_from.per: c.per_value, **c.chosen.recipe} for c in made]
    return {k: tuple(v[k] for v in values) for k in keys}


def describe(recipe_from: RecipeFrom, made: list[Choice]) -> str:
    """The choice, one line per value of ``per``: the chosen recipe first, then the others,
    each with its mean validation wins."""

    def text(s: Scored) -> str:
        values = " ".join(f"{k}={v}" for k, v in s.recipe.items())
        seeds = f", {s.seeds} seeds" if s.seeds > 1 else ""
        return f"{values} ({s.wins:g}/{s.games} validation games{seeds})"

    lines = [f"recipe_from {recipe_from.sweep.name} (validation only):"]
    for c in made:
        others = "; ".join(text(s) for s in c.scored if s is not c.chosen) or "nothing else"
        lines.append(f"  {recipe_from.per}={c.per_value}: {text(c.chosen)}; over {others}")
    return "\n".join(lines)


def every_recipe(recipe_from: RecipeFrom) -> dict[str, tuple]:
    """The zip axis of every recipe the search tries, with its ``per`` value (no result read):
    what a check of the sweep's runs plans before the search has finished."""
    from arlarena_jax.arena.plan import combinations
    from arlarena_jax.arena.spec import load_sweep

    search = load_sweep(recipe_from.sweep)
    keys = [recipe_from.per, *_recipe_keys(search, recipe_from)]
    seen: dict[str, dict[str, Any]] = {}
    for _, values in combinations(search):
        position = {k: values[k] for k in keys}
        seen.setdefault(repr(position), position)
    return {k: tuple(p[k] for p in seen.values()) for k in keys}
