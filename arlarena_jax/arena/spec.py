"""A sweep file: a base config, axes, a budget, and where the runs go.

.. code-block:: yaml

    name: quick                       # runs go to <out>/<name>/... (default out: runs/sweeps)
    base: ../sokoban/base_tiny.yaml   # a config file, or a list of them (the environment axis),
                                      # relative to this file
    methods: [grpo, sapo, gspo]       # shorthand for grid: {algorithm.method: [...]}
    seeds: [0, 1]                     # shorthand for grid: {trainer.seed: [...]} (the last axis)
    grid:                             # every combination of these dotted config keys
      optim.lr: [1.0e-4, 3.0e-4]
    zip:                              # lists of one length, advanced together (one axis)
      sft.steps: [20, 60]
      trainer.total_steps: [30, 10]
    overrides:                        # set in every run
      trainer.eval_every: 4
    method_overrides:                 # set in the runs of one method (after overrides)
      ppo: {algorithm.gae_across_turns: true}
    evaluate_on:                      # after each run: its final policy evaluated again under
      next_tier:                      # these overrides (arlarena_jax.arena.evaluate)
        env.textworld.tier: w4-o6-q8
    budget:
      rl_steps: 12                    # trainer.total_steps of every run (an axis may set it)
      minutes_per_run: 30             # a run's wall-clock limit: SIGTERM, saved, resumable
    protocol:                         # the splits (docs/arena.md, "Protocol"): every run's
      select_on: validation           # evaluations play this split, and every choice reads it;
      end_point: final                # each run's final policy is evaluated once on the test
                                      # split (the evaluation "test"; none: a search that only
                                      # chooses, tested by a later sweep); select_on: test refused
    starts: runs/starts               # where shared cloned starts live (reused across sweeps)
    recipe_from: {sweep: search.yaml, per: sft.num_episodes}  # instead of zip: the recipe a
                                      # search chose on validation per value (arena.choice)
    slurm: {partition: gpu, gpus_per_node: 1, cpus_per_task: 8}   # the cluster executor's job

:func:`load_sweep` reads and checks it; every problem is one :class:`ConfigError` line naming the
sweep file and the key. The expansion into runs is :mod:`arlarena_jax.arena.plan`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from arlarena_jax.arena.choice import RecipeFrom, parse_recipe_from
from arlarena_jax.arena.evaluate import NOT_EVALUATION_KEYS, name_problem
from arlarena_jax.errors import ConfigError

KNOWN_KEYS = (
    "name",
    "base",
    "methods",
    "seeds",
    "grid",
    "zip",
    "overrides",
    "method_overrides",
    "evaluate_on",
    "budget",
    "out",
    "starts",
    "slurm",
    "protocol",
    "recipe_from",
)
METHOD_KEY, SEED_KEY, STEPS_KEY = "algorithm.method", "trainer.seed", "trainer.total_steps"
SPLIT_KEY, TEST_EVALUATION = "trainer.eval_split", "test"
# the policies a protocol evaluates on the test split: each run's final one, or none (a search
# whose runs only choose: a recipe read on validation, tested later from a sweep of its own)
END_POINTS = ("final", "none")


@dataclasses.dataclass(frozen=True)
class Budget:
    """What every run may spend: RL steps, and wall-clock minutes (None: no limit)."""

    rl_steps: int | None = None
    minutes_per_run: float | None = None


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A checked sweep file. ``grid`` keeps the file's order; ``methods`` is its first axis and
    ``seeds`` its last; ``zip`` is one more axis after them."""

    name: str
    path: Path
    bases: tuple[Path, ...]
    grid: dict[str, tuple[Any, ...]]
    zip: dict[str, tuple[Any, ...]]
    overrides: dict[str, Any]
    budget: Budget
    out: Path
    starts: Path
    slurm: dict[str, Any]
    method_overrides: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    evaluate_on: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    protocol: Protocol | None = None
    recipe_from: RecipeFrom | None = None  # the zip axis, chosen from a search (arena.choice)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """A sweep's splits: its runs evaluate on ``select_on`` (which every choice reads) and each
    run's ``end_point`` policy once on the test split."""

    select_on: str = "validation"
    end_point: str = "final"


def _fail(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"sweep file {str(path)!r}: key {key!r}: {message}")


def _mapping(data: dict, key: str, path: Path) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(path, key, f"expected a mapping of dotted keys, got {value!r}")
    return value


def _axis(values: Any, key: str, path: Path, *, distinct: bool = True) -> tuple[Any, ...]:
    if not isinstance(values, list) or not values:
        raise _fail(path, key, f"an axis is a non-empty list of values, got {values!r}")
    if distinct and len({repr(v) for v in values}) != len(values):
        raise _fail(path, key, f"repeats a value: {values!r}")
    return tuple(values)


def _axes(data: dict, path: Path) -> dict[str, tuple[Any, ...]]:
    grid = {k: _axis(v, f"grid.{k}", path) for k, v in _mapping(data, "grid", path).items()}
    shorthands = (("methods", METHOD_KEY), ("seeds", SEED_KEY))
    for shorthand, key in shorthands:
        if shorthand in data:
            if key in grid:
                raise _fail(path, shorthand, f"and grid.{key} both set the same axis")
            grid[key] = _axis(data[shorthand], shorthand, path)
    if METHOD_KEY in grid:  # methods first, seeds last: names and tables read in that order
        grid = {METHOD_KEY: grid.pop(METHOD_KEY), **grid}
    if SEED_KEY in grid:
        grid[SEED_KEY] = grid.pop(SEED_KEY)
    return grid


def _zip(data: dict, grid: dict[str, tuple], path: Path) -> dict[str, tuple[Any, ...]]:
    raw = _mapping(data, "zip", path).items()
    axes = {k: _axis(v, f"zip.{k}", path, distinct=False) for k, v in raw}
    lengths = {len(v) for v in axes.values()}
    if len(lengths) > 1:
        sizes = ", ".join(f"{k}: {len(v)}" for k, v in axes.items())
        raise _fail(path, "zip", f"lists must have one length ({sizes})")
    positions = [repr(p) for p in zip(*axes.values(), strict=True)]
    if len(set(positions)) != len(positions):
        raise _fail(path, "zip", "two positions have the same values")
    for key in axes:
        if key in grid:
            raise _fail(path, f"zip.{key}", "is also a grid axis")
    return axes


def _budget(data: dict, path: Path) -> Budget:
    raw = _mapping(data, "budget", path)
    unknown = set(raw) - {f.name for f in dataclasses.fields(Budget)}
    if unknown:
        raise _fail(path, f"budget.{sorted(unknown)[0]}", "unknown (rl_steps, minutes_per_run)")
    steps, minutes = raw.get("rl_steps"), raw.get("minutes_per_run")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        raise _fail(path, "budget.rl_steps", f"must be an integer >= 0, got {steps!r}")
    if minutes is not None and (not isinstance(minutes, int | float) or not minutes > 0):
        raise _fail(path, "budget.minutes_per_run", f"must be a number > 0, got {minutes!r}")
    return Budget(steps, None if minutes is None else float(minutes))


def _bases(data: dict, path: Path) -> tuple[Path, ...]:
    raw = data.get("base")
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise _fail(path, "base", f"expected a config file or a list of them, got {raw!r}")
    bases = tuple((path.parent / name) for name in names)
    for base in bases:
        if not base.is_file():
            raise _fail(path, "base", f"no config file {str(base)!r}")
    return bases


def _named_mappings(data: dict, key: str, path: Path) -> dict[str, dict[str, Any]]:
    """``key``: a mapping of names to non-empty mappings of dotted keys."""
    raw = data.get(key) or {}
    if not isinstance(raw, dict) or not all(isinstance(n, str) and n for n in raw):
        raise _fail(path, key, f"expected a mapping of names to overrides, got {raw!r}")
    for name, overrides in raw.items():
        if not isinstance(overrides, dict) or not overrides:
            raise _fail(
                path, f"{key}.{name}", f"expected dotted keys and values, got {overrides!r}"
            )
        if not all(isinstance(k, str) for k in overrides):
            raise _fail(path, f"{key}.{name}", f"expected dotted keys, got {list(overrides)!r}")
    return raw


def _method_overrides(data: dict, grid: dict, path: Path) -> dict[str, dict[str, Any]]:
    """``method_overrides``: preset key → overrides; each method is one of the methods axis
    (when there is one), and none sets the method itself."""
    from arlarena_jax.objectives.presets import preset_key

    out: dict[str, dict[str, Any]] = {}
    known: set[str] = set()
    for value in grid.get(METHOD_KEY, ()):  # an unknown one fails when its runs are planned
        with contextlib.suppress(ValueError):
            known.add(preset_key(str(value)))
    axis = known if METHOD_KEY in grid else None
    for method, overrides in _named_mappings(data, "method_overrides", path).items():
        try:
            key = preset_key(method)
        except ValueError as err:
            raise _fail(path, f"method_overrides.{method}", str(err)) from None
        if axis is not None and key not in axis:
            raise _fail(path, f"method_overrides.{method}", "is not a method of this sweep")
        if METHOD_KEY in overrides:
            raise _fail(path, f"method_overrides.{method}.{METHOD_KEY}", "cannot change the method")
        if key in out:
            raise _fail(path, f"method_overrides.{method}", f"names the method {key!r} again")
        out[key] = overrides
    return out


def _evaluate_on(data: dict, path: Path) -> dict[str, dict[str, Any]]:
    """``evaluate_on``: evaluation name → overrides; a name is a directory name, and no
    evaluation moves the run directory or its start (:mod:`arlarena_jax.arena.evaluate`)."""
    out = _named_mappings(data, "evaluate_on", path)
    for name, overrides in out.items():
        problem = name_problem(name)
        if problem:
            raise _fail(path, f"evaluate_on.{name}", problem)
        for key in NOT_EVALUATION_KEYS:
            if key in overrides:
                raise _fail(path, f"evaluate_on.{name}.{key}", "is set by the evaluation itself")
    return out


def _protocol(data: dict, path: Path) -> Protocol | None:
    """``protocol``: ``select_on`` a split other than test, ``end_point`` one of
    :data:`END_POINTS`."""
    if "protocol" not in data:
        return None
    raw = _mapping(data, "protocol", path)
    unknown = set(raw) - {f.name for f in dataclasses.fields(Protocol)}
    if unknown:
        raise _fail(path, f"protocol.{sorted(unknown)[0]}", "unknown (select_on, end_point)")
    protocol = Protocol(**raw)
    if protocol.select_on == "test":
        raise _fail(
            path,
            "protocol.select_on",
            "a sweep's choices read the validation split, never the test split",
        )
    if protocol.select_on not in ("validation", "train"):
        raise _fail(path, "protocol.select_on", f"validation or train, got {protocol.select_on!r}")
    if protocol.end_point not in END_POINTS:
        raise _fail(
            path,
            "protocol.end_point",
            f"final (each run's final policy) or none (a search), got {protocol.end_point!r}",
        )
    return protocol


def _apply_protocol(
    protocol: Protocol | None, path: Path, settings: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The sweep's ``overrides`` and ``evaluate_on`` with the protocol's: every run evaluates on
    ``select_on``, and an evaluation named ``test`` plays the test split. A sweep with a
    protocol sets ``trainer.eval_split`` nowhere else."""
    overrides, evaluate_on = settings["overrides"], settings["evaluate_on"]
    where = _split_settings(settings)
    if protocol is None:
        return overrides, evaluate_on
    if where:
        raise _fail(path, where[0], f"{SPLIT_KEY} is set by protocol.select_on")
    if TEST_EVALUATION in evaluate_on:
        raise _fail(path, f"evaluate_on.{TEST_EVALUATION}", "is the protocol's test evaluation")
    overrides = {**overrides, SPLIT_KEY: protocol.select_on}
    if protocol.end_point == "none":
        return overrides, evaluate_on
    return overrides, {**evaluate_on, TEST_EVALUATION: {SPLIT_KEY: "test"}}


def _split_settings(settings: dict[str, Any]) -> list[str]:
    """The sweep keys that set ``trainer.eval_split``."""
    where = [f"{k}.{SPLIT_KEY}" for k in ("grid", "zip", "overrides") if SPLIT_KEY in settings[k]]
    for method, overrides in settings["method_overrides"].items():
        if SPLIT_KEY in overrides:
            where.append(f"method_overrides.{method}.{SPLIT_KEY}")
    return where


def _recipe_from(data: dict, settings: dict[str, Any], path: Path) -> RecipeFrom | None:
    """``recipe_from``: the zip axis chosen from a search sweep (:mod:`arlarena_jax.arena.
    choice`), so the sweep has no ``zip`` of its own, and its grid sets no chosen key."""
    if "recipe_from" not in data:
        return None
    recipe_from = parse_recipe_from(data["recipe_from"], path)
    if settings["zip"]:
        raise _fail(path, "zip", "and recipe_from both set the zip axis")
    keys = (recipe_from.per, *recipe_from.prefer_lower)
    for key in keys:
        if key in settings["grid"] or key in settings["overrides"]:
            raise _fail(path, f"recipe_from.{key}", "is set by the chosen recipe, not here")
    return recipe_from


def load_sweep(path: str | Path, *, out: str | Path | None = None) -> SweepSpec:
    """The checked :class:`SweepSpec` of the YAML file ``path``; ``out`` overrides its ``out``."""
    from arlarena_jax.train.config_io import read_mapping

    path = Path(path)
    data = read_mapping(path, "sweep file")
    unknown = [k for k in data if k not in KNOWN_KEYS]
    if unknown:
        raise _fail(path, unknown[0], f"unknown (a sweep file has: {', '.join(KNOWN_KEYS)})")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name or "/" in name:
        raise _fail(path, "name", f"expected a name without '/', got {name!r}")
    grid = _axes(data, path)
    for key in ("out", "starts"):
        if key in data and not isinstance(data[key], str):
            raise _fail(path, key, f"expected a directory, got {data[key]!r}")
    settings = {
        "grid": grid,
        "zip": _zip(data, grid, path),
        "overrides": _mapping(data, "overrides", path),
        "method_overrides": _method_overrides(data, grid, path),
        "evaluate_on": _evaluate_on(data, path),
    }
    protocol = _protocol(data, path)
    overrides, evaluate_on = _apply_protocol(protocol, path, settings)
    recipe_from = _recipe_from(data, settings, path)
    return SweepSpec(
        name=name,
        path=path,
        bases=_bases(data, path),
        grid=grid,
        zip=settings["zip"],
        overrides=overrides,
        budget=_budget(data, path),
        out=Path(out if out is not None else data.get("out", "runs/sweeps")) / name,
        starts=Path(data.get("starts", "runs/starts")),
        slurm=_mapping(data, "slurm", path),
        method_overrides=settings["method_overrides"],
        evaluate_on=evaluate_on,
        protocol=protocol,
        recipe_from=recipe_from,
    )
