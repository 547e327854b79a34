"""The trainer's subcommands of the ``arlarena`` CLI: ``train``, ``sft``, ``eval``, ``gen-data``.

Each takes a YAML config and dotted overrides (``trainer.total_steps=50 optim.lr=1e-5``); a bad
config fails with one line naming the key before anything is built or compiled.
``--print-config`` prints the resolved configuration (what the run would dump) and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from arlarena_jax.train.config import ConfigError, resolve
from arlarena_jax.train.config_io import dumps_config, load_config
from arlarena_jax.train.distributed import initialize_if_distributed


@contextlib.contextmanager
def _one_line_config_errors():
    """A ConfigError found once the run has started (e.g. no demonstration succeeded) ends the
    command with its one line, as at load time."""
    try:
        yield
    except ConfigError as error:
        print(f"arlarena: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _config(args: argparse.Namespace, extra: list[str] = (), *, training: bool = True):  # type: ignore[assignment]
    """The checked config; a bad key, a method the trainer cannot run or missing environment
    data (ALFWorld games) stops here with one line."""
    from arlarena_jax.train import build

    try:
        config = load_config(args.config, [*args.overrides, *extra])
        build.build_objective(config)
        if getattr(args, "print_config", False):
            print(dumps_config(resolve(config)), end="")
            raise SystemExit(0)
        build.check_data(config, training=training)
        return config
    except ConfigError as error:
        print(f"arlarena: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def train_command(args: argparse.Namespace) -> int:
    """Cloning (if enabled) then RL; resumes from the run directory's newest checkpoint."""
    config = _config(args)
    initialize_if_distributed()
    from arlarena_jax.train.loop import summary_table, train

    with _one_line_config_errors():
        summary = train(config)
    print(summary_table(summary))
    return 0


def sft_command(args: argparse.Namespace) -> int:
    """Behaviour cloning only: clone, evaluate, save the cloned policy as step 0."""
    config = _config(args, ["sft.enabled=true", "trainer.total_steps=0"])
    initialize_if_distributed()
    from arlarena_jax.train.loop import summary_table, train

    with _one_line_config_errors():
        summary = train(config)
    print(summary_table(summary))
    return 0


def eval_command(args: argparse.Namespace) -> int:
    """Evaluate the run's newest checkpoint (or the untrained model) on the held-out seeds."""
    config = _config(args, training=False)
    from arlarena_jax.train.run import Run

    with _one_line_config_errors(), Run(config, console=False) as run:
        step = run.resume()
        metrics = run.evaluate()
    where = "untrained model (no checkpoint)" if step is None else f"checkpoint step {step}"
    print(f"{where}, {config.trainer.eval_episodes} held-out episodes:")
    for key, value in sorted(metrics.items()):
        print(f"  {key:<40} {value:.4f}")
    return 0


def gen_data_command(args: argparse.Namespace) -> int:
    """Write expert demonstrations (prompt, reply) as JSON lines."""
    config = _config(args)
    from arlarena_jax.train import build

    seeds = range(build.DEMO_SEED_BASE, build.DEMO_SEED_BASE + args.episodes)
    demos = build.demonstrations(config, seeds)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for d in demos:
            f.write(json.dumps({"prompt": d.prompt, "reply": d.reply}) + "\n")
    print(f"wrote {len(demos)} turns of {args.episodes} expert episodes to {out}")
    return 0


def add_commands(commands) -> None:
    """Register the subcommands on the ``arlarena`` parser's subparsers."""
    for name, handler, text in (
        ("train", train_command, "behaviour cloning (if enabled) then RL, resumable"),
        ("sft", sft_command, "behaviour cloning only"),
        ("eval", eval_command, "evaluate the newest checkpoint on held-out seeds"),
        ("gen-data", gen_data_command, "write expert demonstrations as JSON lines"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("config", help="a YAML config, e.g. configs/sokoban/sampo_tiny.yaml")
        if name == "gen-data":
            sub.add_argument("out", help="output .jsonl file")
            sub.add_argument("--episodes", type=int, default=256)
        sub.add_argument("overrides", nargs="*", help="dotted overrides, key=value")
        sub.add_argument(
            "--print-config",
            action="store_true",
            help="print the resolved configuration (every method setting, the run directory) "
            "as YAML and exit",
        )
        sub.set_defaults(handler=handler)
