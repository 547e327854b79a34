"""RL against more cloning at the same cost: how many continued cloning steps
(``sft.continue_steps``) take the wall time that RL phases took from their shared starts, and
both sides said in steps, examples and tokens (issue 63's arm (c), docs/arena.md).

The rule, fixed before the cloning runs: N = round(median_r T_r / median_s (C_s / K_s)), where
T_r is run r's RL phase (``timing/total`` summed over its RL steps: rollouts, updates, weight
syncs; evaluations excluded), C_s the cloning time of its start s (``timing/sft``, evaluations
excluded) and K_s that start's cloning steps (``sft/steps``). Medians, so one slow run (another
job beside it) does not set N. ``arlarena matched-cloning RUN...`` prints N and the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path

from arlarena_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RLCost:
    """An RL phase: its steps, seconds, episodes played and tokens sampled."""

    run: Path
    steps: int
    seconds: float
    episodes: int
    sampled_tokens: float


@dataclasses.dataclass(frozen=True)
class CloningCost:
    """A start's cloning: its steps, seconds, expert turns per step and the reply tokens its loss
    covered (``sft/tokens``)."""

    start: Path
    steps: int
    seconds: float
    turns_per_step: int
    tokens: float

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / self.steps


def _scalars(run_dir: Path) -> dict:
    from arlarena_jax.train.metrics import read_scalars

    if not (run_dir / "tensorboard").is_dir():
        raise ConfigError(f"{run_dir}: no tensorboard/ folder (not a run directory)")
    return read_scalars(run_dir / "tensorboard")


def _config(run_dir: Path) -> dict:
    import yaml

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no config.yaml (not a run directory)")
    return yaml.safe_load(path.read_text())


def rl_cost(run_dir: Path) -> RLCost:
    """The RL phase of the run in ``run_dir`` (refused in one line without RL steps)."""
    scalars, config = _scalars(run_dir), _config(run_dir)
    steps = [(s, v) for s, v in scalars.get("timing/total", []) if s > 0]
    if not steps:
        raise ConfigError(f"{run_dir}: no RL step recorded (timing/total): nothing to match")
    env = config["env"]
    tokens = sum(v for s, v in scalars.get("batch/response_tokens", []) if s > 0)
    episodes = len(steps) * env["train_batch_size"] * env["group_size"]
    return RLCost(run_dir, len(steps), sum(v for _, v in steps), episodes, tokens)


def cloning_cost(start_dir: Path) -> CloningCost:
    """The cloning of the start in ``start_dir`` (refused in one line if it recorded none)."""
    scalars, config = _scalars(start_dir), _config(start_dir)
    seconds, steps = scalars.get("timing/sft"), scalars.get("sft/steps")
    if not seconds or not steps:
        raise ConfigError(f"{start_dir}: no cloning recorded (timing/sft, sft/steps)")
    tokens = sum(v for _, v in scalars.get("sft/tokens", []))
    turns = int(config["sft"]["batch_size"])
    return CloningCost(start_dir, int(steps[-1][1]), seconds[-1][1], turns, tokens)


def start_of(run_dir: Path, starts: Path | None = None) -> Path:
    """The shared start a run began from (its ``sft.init_from``); with ``starts``, the folder
    of that name under ``starts`` (kept results, where the recorded path no longer holds)."""
    recorded = _config(run_dir)["sft"].get("init_from")
    if not recorded:
        raise ConfigError(f"{run_dir}: sft.init_from is not set (no shared start to match)")
    return starts / Path(recorded).name if starts is not None else Path(recorded)


def matched_steps(rl: Sequence[RLCost], cloning: Sequence[CloningCost]) -> int:
    """N = round(median RL seconds / median cloning seconds per step) (module doc), at least 1."""
    if not rl or not cloning:
        raise ConfigError("matched-cloning needs at least one RL run and its start")
    rl_seconds = statistics.median(c.seconds for c in rl)
    per_step = statistics.median(c.seconds_per_step for c in cloning)
    return max(1, round(rl_seconds / per_step))


def table(rl: Sequence[RLCost], cloning: Sequence[CloningCost], steps: int) -> str:
    """Both sides of the match, one line each, then N and what N steps amount to."""
    lines = ["RL phases (timing/total over the RL steps; evaluations excluded):"]
    for c in rl:
        lines.append(
            f"  {c.run}: {c.steps} steps, {c.seconds / 60:.1f} min, {c.episodes} episodes, "
            f"{c.sampled_tokens:.0f} sampled tokens"
        )
    lines.append("their starts' cloning (timing/sft; evaluations excluded):")
    for c in cloning:
        lines.append(
            f"  {c.start}: {c.steps} steps, {c.seconds / 60:.1f} min, "
            f"{c.seconds_per_step:.1f} s a step, {c.tokens / c.steps:.0f} reply tokens a step"
        )
    per_step = statistics.median(c.seconds_per_step for c in cloning)
    turns = statistics.median(c.turns_per_step for c in cloning)
    tokens = statistics.median(c.tokens / c.steps for c in cloning)
    lines.append(
        f"sft.continue_steps: {steps}  (median RL phase "
        f"{statistics.median(c.seconds for c in rl) / 60:.1f} min / {per_step:.1f} s a cloning "
        f"step: {steps * turns:.0f} expert turns, ~{steps * tokens:.0f} reply tokens)"
    )
    return "\n".join(lines)


def matched_command(args: argparse.Namespace) -> int:
    rl = [rl_cost(Path(run)) for run in args.runs]
    starts = sorted({start_of(Path(run), args.starts) for run in args.runs})
    cloning = [cloning_cost(start) for start in starts]
    print(table(rl, cloning, matched_steps(rl, cloning)))
    return 0


def add_command(commands) -> None:
    """Register ``arlarena matched-cloning`` on the CLI's subparsers."""
    sub = commands.add_parser(
        "matched-cloning",
        help="the continued cloning steps (sft.continue_steps) that cost what RL runs' RL "
        "phases did, from their shared starts' cloning times",
    )
    sub.add_argument("runs", nargs="+", help="RL run directories (each from a shared start)")
    sub.add_argument(
        "--starts",
        type=Path,
        default=None,
        help="the folder holding the starts, by name (kept results); default: each run's "
        "sft.init_from as recorded",
    )
    sub.set_defaults(handler=matched_command)
