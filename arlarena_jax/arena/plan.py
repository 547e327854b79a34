"""A sweep expanded into runs, and the shared starts they branch from.

Every combination of the grid axes (and each position of the zip axis), for every base config,
is one run: an ordinary ``arlarena train`` command with its own run directory,
``<out>/<env>/<method>[_<key>=<value>...]_seed<seed>``. Runs whose configs agree on every setting
that shapes the cloned policy (:func:`arlarena_jax.train.start.cloning_settings`: the model, the
environment, ``sft.*``, the evaluation, the seed) share one *start*, ``<starts>/<env>/<key>``:
cloned once by ``arlarena sft`` and then read by each of them through ``sft.init_from``. The start
directory depends only on those settings, so a later sweep with the same cloning config finds it.
A sweep's ``method_overrides`` join the overrides of its method's runs; each of its
``evaluate_on`` entries is one :class:`PlannedEvaluation` per run
(:mod:`arlarena_jax.arena.evaluate`).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

from arlarena_jax.arena.evaluate import EVALUATIONS_DIR, read_evaluation
from arlarena_jax.arena.spec import METHOD_KEY, SEED_KEY, STEPS_KEY, SweepSpec
from arlarena_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Start:
    """A shared start: ``arlarena sft`` of the base config with the runs' cloning overrides."""

    key: str
    env: str
    run_dir: Path
    base: Path
    overrides: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"start/{self.env}/{self.key}"

    def command(self) -> tuple[str, ...]:
        """The ``arlarena`` arguments that clone it."""
        return ("sft", str(self.base), *self.overrides, f"trainer.run_dir={self.run_dir}")


@dataclasses.dataclass(frozen=True)
class PlannedEvaluation:
    """A run's final policy evaluated under other settings (``evaluate_on``), once it is done:
    ``arlarena eval-run RUN_DIR NAME key=value ...``, its job directory
    ``RUN_DIR/evaluations/NAME``."""

    name: str
    run_name: str
    run_dir: Path
    overrides: tuple[str, ...]

    @property
    def job_name(self) -> str:
        return f"eval/{self.run_name}/{self.name}"

    @property
    def job_dir(self) -> Path:
        return self.run_dir / EVALUATIONS_DIR / self.name

    def command(self) -> tuple[str, ...]:
        """The ``arlarena`` arguments that evaluate it."""
        return ("eval-run", str(self.run_dir), self.name, *self.overrides)


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep: its axis values, its overrides, its shared start (if cloned) and
    its evaluations under other settings."""

    name: str
    base: Path
    values: dict[str, Any]
    overrides: tuple[str, ...]
    run_dir: Path
    start: Start | None
    config: Any = dataclasses.field(default=None, repr=False, compare=False)  # loaded, checked
    evaluations: tuple[PlannedEvaluation, ...] = ()

    def command(self) -> tuple[str, ...]:
        """The ``arlarena`` arguments of the run (what a user types to run it alone)."""
        start = () if self.start is None else (f"sft.init_from={self.start.run_dir}",)
        return ("train", str(self.base), *self.overrides, f"trainer.run_dir={self.run_dir}", *start)


def combinations(spec: SweepSpec) -> list[tuple[Path, dict[str, Any]]]:
    """``(base, {axis key: value})`` of every run, in order: bases, then the grid axes (methods
    first, seeds last) varying slowest to fastest, with the zip axis inside the seeds."""
    grid_keys = list(spec.grid)
    seed_last = grid_keys[-1:] == [SEED_KEY]
    outer = grid_keys[:-1] if seed_last else grid_keys
    zipped = [
        dict(zip(spec.zip, values, strict=True)) for values in zip(*spec.zip.values(), strict=True)
    ]
    seeds = spec.grid[SEED_KEY] if seed_last else (None,)
    runs = []
    for base in spec.bases:
        for outer_values in itertools.product(*(spec.grid[k] for k in outer)):
            for zip_values in zipped or [{}]:
                for seed in seeds:
                    values = dict(zip(outer, outer_values, strict=True)) | zip_values
                    runs.append((base, values | ({} if seed is None else {SEED_KEY: seed})))
    return runs


def _overrides(
    spec: SweepSpec, values: dict[str, Any], method: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The budget, then the sweep-wide overrides, then the ``method`` overrides of the run's
    method, then the axis values (the later wins)."""
    budget = {} if spec.budget.rl_steps is None else {STEPS_KEY: spec.budget.rl_steps}
    return budget | spec.overrides | (method or {}) | values


def _format(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text.replace("/", "-").replace(" ", "")


def _label(values: dict[str, Any], config: Any) -> str:
    """``<method>[_<key>=<value>...]_seed<seed>``; a key is its last dotted part unless two axis
    keys share it."""
    from arlarena_jax.objectives.presets import preset_key

    extra = [k for k in values if k not in (METHOD_KEY, SEED_KEY)]
    leaves = [k.rsplit(".", 1)[-1] for k in extra]
    names = [k if leaves.count(leaf) > 1 else leaf for k, leaf in zip(extra, leaves, strict=True)]
    parts = [preset_key(config.algorithm.method)]
    parts += [f"{n}={_format(values[k])}" for n, k in zip(names, extra, strict=True)]
    return "_".join([*parts, f"seed{config.trainer.seed}"])


def _start(spec: SweepSpec, base: Path, overrides: dict[str, Any], config: Any) -> Start | None:
    from arlarena_jax.train.config_io import override_text
    from arlarena_jax.train.start import equivalent_start, is_rl_only, start_key

    if not config.sft.enabled or config.sft.init_from is not None:
        return None
    directory = spec.starts / config.env.name / start_key(config)
    if not directory.exists():  # cloned under an older schema: the same settings, another hash
        directory = equivalent_start(directory.parent, config) or directory
    cloning = tuple(override_text(k, v) for k, v in overrides.items() if not is_rl_only(k))
    return Start(directory.name, config.env.name, directory, base, cloning)


def _load(base: Path, overrides: dict[str, Any], values: dict[str, Any]) -> tuple[tuple, Any]:
    """The override texts and the loaded, checked config; a bad one is one line naming the run."""
    from arlarena_jax.train.config_io import load_config, override_text

    texts = tuple(override_text(k, v) for k, v in overrides.items())
    try:
        return texts, load_config(base, texts)
    except ConfigError as err:
        shown = ", ".join(f"{k}={_format(v)}" for k, v in values.items())
        raise ConfigError(f"sweep run ({base.name}, {shown}): {err}") from None


def with_chosen_recipes(spec: SweepSpec, made: list | None = None) -> SweepSpec:
    """``spec`` with its zip axis filled from its ``recipe_from`` choice (the choices ``made``,
    else made now; :mod:`arlarena_jax.arena.choice`); unchanged without one."""
    from arlarena_jax.arena.choice import zip_axis

    if spec.recipe_from is None or spec.zip:
        return spec
    return dataclasses.replace(spec, zip=zip_axis(spec.recipe_from, made))


def plan(spec: SweepSpec) -> list[PlannedRun]:
    """Every run of ``spec``, its config loaded and checked (a bad one is one line naming the
    run), its run directory, its shared start and its evaluations."""
    from arlarena_jax.objectives.presets import preset_key

    spec = with_chosen_recipes(spec)
    runs = []
    for base, values in combinations(spec):
        overrides = _overrides(spec, values)
        texts, config = _load(base, overrides, values)
        method = spec.method_overrides.get(preset_key(config.algorithm.method))
        if method:
            overrides = _overrides(spec, values, method)
            texts, config = _load(base, overrides, values)
        name = f"{config.env.name}/{_label(values, config)}"
        start = _start(spec, base, overrides, config)
        runs.append(PlannedRun(name, base, values, texts, spec.out / name, start, config))
    _unique_names(runs, spec)
    runs = [dataclasses.replace(r, evaluations=_evaluations(spec, r)) for r in runs]
    for run in runs:
        check_existing(run)
    return runs


def _evaluations(spec: SweepSpec, run: PlannedRun) -> tuple[PlannedEvaluation, ...]:
    """The run's evaluations, each config loaded and checked now (one line naming the run and
    the evaluation), each already made checked against its recorded overrides."""
    from arlarena_jax.train.config_io import load_config, override_text

    planned = []
    for name, overrides in spec.evaluate_on.items():
        texts = tuple(override_text(k, v) for k, v in overrides.items())
        try:
            load_config(run.base, (*run.overrides, *texts))
        except ConfigError as err:
            raise ConfigError(f"sweep run {run.name}: evaluate_on.{name}: {err}") from None
        evaluation = PlannedEvaluation(name, run.name, run.run_dir, texts)
        made = read_evaluation(evaluation.job_dir)
        if made is not None and tuple(made.get("overrides", ())) != texts:
            raise ConfigError(
                f"sweep run {run.name}: {evaluation.job_dir} holds evaluation {name!r} with "
                f"{' '.join(made.get('overrides', ())) or 'no overrides'}, this sweep gives "
                f"{' '.join(texts)}; remove that directory or give the evaluation another name"
            )
        planned.append(evaluation)
    return tuple(planned)


def evaluations(runs: list[PlannedRun]) -> list[PlannedEvaluation]:
    """Every evaluation of ``runs``, run by run."""
    return [e for run in runs for e in run.evaluations]


# paths, spelled as given; how cloning saves and sums its gradient (memory), and how the RL
# update cuts its micro-batches' padding: not what they make
IGNORED_IN_COMPARISON = (
    "trainer.run_dir",
    "sft.init_from",
    "sft.save_every_s",
    "sft.micro_batch_size",
    "trainer.prompt_widths",
)


def check_existing(run: PlannedRun) -> None:
    """A run directory that already holds a run (its ``config.yaml``) holds this run: the same
    resolved config, so a finished run is never skipped, nor a stopped one resumed, for a sweep
    that now asks for something else."""
    from arlarena_jax.train.config_io import config_to_dict, load_config
    from arlarena_jax.train.resolution import resolve
    from arlarena_jax.train.start import flatten

    stored_file = run.run_dir / "config.yaml"
    if run.config is None or not stored_file.is_file():
        return
    try:
        stored = flatten(config_to_dict(load_config(stored_file)))
    except ConfigError:
        stored = {}
    wanted = flatten(config_to_dict(resolve(run.config)))
    for key in sorted(set(stored) | set(wanted)):
        if key not in IGNORED_IN_COMPARISON and stored.get(key, "?") != wanted.get(key):
            raise ConfigError(
                f"sweep run {run.name}: {run.run_dir} holds a run with {key}="
                f"{stored.get(key, '?')!r}, this sweep gives {wanted.get(key)!r}; give the sweep "
                "another name or out, or remove that run directory"
            )


def _unique_names(runs: list[PlannedRun], spec: SweepSpec) -> None:
    """Two bases of one environment: their runs are told apart by the base file's name."""
    names = [r.name for r in runs]
    if len(set(names)) == len(names):
        return
    for i, run in enumerate(runs):
        env, label = run.name.split("/", 1)
        name = f"{env}/{run.base.stem}_{label}"
        runs[i] = dataclasses.replace(run, name=name, run_dir=spec.out / name)
    if len({r.name for r in runs}) != len(runs):
        raise ConfigError(f"sweep file {str(spec.path)!r}: two runs would share a run directory")


def starts(runs: list[PlannedRun]) -> list[Start]:
    """The distinct shared starts of ``runs``, in first-use order."""
    seen: dict[str, Start] = {}
    for run in runs:
        if run.start is not None:
            seen.setdefault(run.start.name, run.start)
    return list(seen.values())
