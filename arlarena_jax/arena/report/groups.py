"""Group runs into the report's rows: one per (environment, method label); seeds replicate.

The label is the method's name (the paper's, e.g. ``SAMPO``, for the paper's methods) plus the
config keys on which runs of the same environment and method differ, e.g. ``SAPO lr=0.0003``, so
the points of a hyper-parameter sweep stay apart. Keys that never split a group:
:data:`IGNORED_KEYS` (the seeds, ``trainer.rl_seed`` too, the run's own directory, its cloned
start), and keys missing from
some runs' configs (written by another version of the trainer). Groups are ordered by
environment, then the paper's method order (``PAPER_METHODS``), then other methods by name.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from arlarena_jax.arena.report.runs import Run
from arlarena_jax.objectives.presets import PAPER_METHODS, PRESETS, preset_key
from arlarena_jax.train import start

IGNORED_KEYS = frozenset({"trainer.seed", "trainer.rl_seed", "trainer.run_dir", "sft.init_from"})


@dataclasses.dataclass(frozen=True)
class Group:
    """Runs of one environment and method label, sorted by seed."""

    env: str
    method: str  # the preset key (``sapo``), or the config's name if it is no preset
    label: str  # what tables and legends print
    dimension: str  # the paper's axis of study, "other" outside its table
    keys: tuple[tuple[str, str], ...]  # (dotted key, value) that set this group apart
    runs: tuple[Run, ...]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]


def flatten(config: Mapping[str, Any]) -> dict[str, str]:
    """Dotted keys to values as comparable text (``{"optim": {"lr": 3e-4}}`` → ``optim.lr``)."""
    return {key: _text(value) for key, value in start.flatten(dict(config)).items()}


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value)


def differing_keys(runs: Iterable[Run], ignored: Iterable[str] = IGNORED_KEYS) -> list[str]:
    """Dotted keys present in every run whose values are not all equal (``ignored`` aside)."""
    flats = [flatten(r.config) for r in runs]
    common = set.intersection(*(set(f) for f in flats)) - set(ignored) if flats else set()
    return sorted(k for k in common if len({f[k] for f in flats}) > 1)


def _short(keys: list[str]) -> dict[str, str]:
    """Each key's last part (``lr``) unless two keys share it; then the full dotted key."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def method_info(method: str) -> tuple[str, str, str]:
    """``(key, display name, dimension)``; a method that is no preset keeps its config name."""
    try:
        key = preset_key(method)
    except ValueError:
        return method, method, "other"
    preset = PRESETS[key]
    return key, preset.paper_name or key, preset.dimension


def _order(group: Group) -> tuple:
    paper = list(PAPER_METHODS)
    rank = paper.index(group.method) if group.method in paper else len(paper)
    return group.env, rank, group.method, group.label


def group_runs(runs: Iterable[Run], ignore: Iterable[str] = ()) -> list[Group]:
    """The report's groups, in table order; keys in ``ignore`` (besides :data:`IGNORED_KEYS`)
    do not split a group either."""
    buckets: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in runs:
        buckets[run.env, method_info(run.method)[0]].append(run)
    groups = []
    for (env, key), members in buckets.items():
        _, name, dimension = method_info(members[0].method)
        keys = differing_keys(members, IGNORED_KEYS | set(ignore))
        short = _short(keys)
        split: dict[tuple, list[Run]] = defaultdict(list)
        for run in members:
            flat = flatten(run.config)
            split[tuple((k, flat[k]) for k in keys)].append(run)
        for values, replicates in split.items():
            label = " ".join([name, *(f"{short[k]}={v}" for k, v in values)])
            ordered = tuple(sorted(replicates, key=lambda r: (r.seed, str(r.path))))
            groups.append(Group(env, key, label, dimension, values, ordered))
    return sorted(groups, key=_order)
