"""Synthetic run directories for the report's tests: config.yaml, event files, held-out records."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from tensorboardX import SummaryWriter


def make_run(
    root: Path,
    name: str,
    *,
    method: str = "grpo",
    seed: int = 0,
    env: str = "sokoban",
    scalars: dict[str, dict[int, float]] | None = None,
    config: dict | None = None,
    texts: dict[int, str] | None = None,
    state: dict | None = None,
) -> Path:
    """A run directory: config.yaml plus one tensorboardX event file."""
    run = root / name
    cfg = {
        "env": {"name": env},
        "algorithm": {"method": method},
        "optim": {"lr": 1e-4},
        "trainer": {
            "seed": seed,
            "total_steps": 20,
            "run_dir": str(run),
            "eval_split": "validation",
        },
        "sft": {"init_from": f"starts/{seed}"},
    }
    for section, values in (config or {}).items():
        cfg.setdefault(section, {}).update(values)
    (run / "tensorboard").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    with SummaryWriter(str(run / "tensorboard")) as writer:
        for tag, points in (scalars or {}).items():
            for step, value in points.items():
                writer.add_scalar(tag, value, step)
        for step, text in (texts or {}).items():
            writer.add_text("stability", text, step)
    if state is not None:
        (run / "sweep_state.json").write_text(json.dumps(state))
    return run


def val(*points: float, start: float = 0.5) -> dict[str, dict[int, float]]:
    """val/success_rate: ``start`` at step 0, then ``points`` at steps 10, 20, ..."""
    return {"val/success_rate": {0: start, **{10 * (i + 1): v for i, v in enumerate(points)}}}


def held_out_games(run: Path, step: int, wins: list[bool]) -> None:
    """The run's per-game held-out records of ``step``: game i won or not."""
    from arlarena_jax.train.held_out import held_out_path, write_records

    games = [{"seed": i, "won": w, "return": 0.0, "length": 1} for i, w in enumerate(wins)]
    write_records(held_out_path(run, step, "validation"), games)
