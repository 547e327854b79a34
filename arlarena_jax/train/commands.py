"""The trainer's subcommands of the ``arlarena`` CLI: ``train``, ``sft``, ``eval``, ``export``,
``gen-data``.

Each takes a YAML config and dotted overrides (``trainer.total_steps=50 optim.lr=1e-5``); a bad
config fails with one line naming the key before anything is built or compiled (the error
boundary of ``arlarena_jax.cli.main`` prints it; exit status 2).
``--print-config`` prints the resolved configuration (what the run would dump) and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from arlarena_jax.train.config import DEVICE_COUNT
from arlarena_jax.train.config_checks import ignored_env_keys
from arlarena_jax.train.config_io import dumps_config, load_run
from arlarena_jax.train.distributed import distributed_settings, initialize_if_distributed
from arlarena_jax.train.layout import checkpoints_dir
from arlarena_jax.train.resolution import Resolved


@contextlib.contextmanager
def _one_line_config_errors():
    """Errors of a started run end the command in ``arlarena_jax.cli.main``'s error boundary,
    as at load time: one line (a ConfigError's names its key), the traceback in a log file or,
    with ``--debug``, on stderr."""
    yield


def _single_process() -> bool:
    """Whether this command runs as one process (several: devices are known only after
    ``jax.distributed.initialize``)."""
    try:
        return distributed_settings(os.environ) is None
    except ValueError:
        return False


def _device_counter() -> Callable[[], int] | None:
    """``jax.device_count`` for the mesh check while the config loads; None (checked when the
    mesh is built) when launched as several processes."""
    import jax

    return jax.device_count if _single_process() else None


def _config(
    args: argparse.Namespace,
    extra: Sequence[str] = (),
    *,
    training: bool = True,
    runs: bool = True,
) -> Resolved:
    """The config, resolved once and checked (:func:`~arlarena_jax.train.config_io.load_run`),
    for every later stage to read; a bad key, a method the trainer cannot run, missing
    environment data (ALFWorld games) or, for a command that ``runs`` the model (train, sft,
    eval), a mesh larger than the devices, a missing model or tokenizer directory, an
    unwritable run directory, checkpoints of another model, a shared start cloned with other
    settings (``training`` only) or sizes whose memory estimate is far above the machine's
    (:mod:`~arlarena_jax.train.memory_estimate`) stop here with one ConfigError line. Keys the
    environment ignores get a warning line. ``args.run_dir`` is set for the error boundary's log."""
    from arlarena_jax.train import build, memory_estimate, preflight, start

    checks_mesh = runs and not getattr(args, "print_config", False)
    token = DEVICE_COUNT.set(_device_counter() if checks_mesh else None)
    try:
        run = load_run(args.config, [*args.overrides, *extra])
    finally:
        DEVICE_COUNT.reset(token)
    args.run_dir = run.config.trainer.run_dir
    build.build_objective(run)
    for warning in ignored_env_keys(run):
        print(f"arlarena: warning: {warning}", file=sys.stderr)
    if getattr(args, "print_config", False):
        print(dumps_config(run.config), end="")
        raise SystemExit(0)
    if runs:
        preflight.check_paths(run)
        preflight.check_checkpoints(run)
        if training:  # an evaluation restores the run's own checkpoint, never the start's
            start.check_start(run)
        memory_estimate.check_config_memory(run, training=training, devices_known=_single_process())
    _check_data(run, training=training)
    return run


def _check_data(run: Resolved, *, training: bool) -> None:
    """The environment's data checked, and built where it is built on first use (TextWorld's
    games). Several processes check after process 0 has, so data on a shared disk is built once,
    never by two processes at once; a problem process 0 found is every process's one line."""
    from arlarena_jax.errors import ConfigError
    from arlarena_jax.train import build

    if distributed_settings(os.environ) is None:
        build.check_data(run, training=training)
        return
    initialize_if_distributed()
    from arlarena_jax.train.processes import Exchange

    exchange, problem = Exchange(), None
    if exchange.index == 0:
        try:
            build.check_data(run, training=training)
        except ConfigError as error:
            problem = str(error)
    problem = exchange.allgather("data", problem)[0]
    if problem is not None:
        raise ConfigError(problem)
    if exchange.index != 0:
        build.check_data(run, training=training)


def train_command(args: argparse.Namespace) -> int:
    """Cloning (if enabled) then RL; resumes from the run directory's newest checkpoint (or a
    stopped cloning's). Status 75 when stopped by SIGTERM or SIGINT after saving."""
    run = _config(args)
    initialize_if_distributed()
    return _train_and_report(run)


def sft_command(args: argparse.Namespace) -> int:
    """Behaviour cloning only: clone, evaluate, save the cloned policy as step 0."""
    run = _config(args, ["sft.enabled=true", "trainer.total_steps=0"])
    initialize_if_distributed()
    return _train_and_report(run)


def _train_and_report(run: Resolved) -> int:
    """Train; print the summary table (status 0), or, when SIGTERM or SIGINT stopped the run
    after saving, its one line (status 75, EX_TEMPFAIL: run the same command to resume), or,
    for a run that was complete already, one line saying so (status 0)."""
    import jax

    from arlarena_jax.train.loop import (
        EXIT_STOPPED,
        complete_line,
        stop_line,
        summary_table,
        train,
    )

    with _one_line_config_errors():
        summary = train(run)
    if summary.stopped is not None:
        print(stop_line(summary), file=sys.stderr, flush=True)
        return EXIT_STOPPED
    if jax.process_index() != 0:  # several processes: process 0 alone reports
        return 0
    if summary.already_complete:
        print(complete_line(summary), flush=True)
        return 0
    print(
        summary_table(summary, cloned=run.config.sft.enabled, split=run.config.trainer.eval_split)
    )
    return 0


def _check_chosen_step(run_dir: Path, step: int) -> None:
    """One ConfigError line unless ``--step`` names a valid checkpoint of the run, listing the
    ones it has."""
    from arlarena_jax.errors import ConfigError
    from arlarena_jax.train.final import valid_checkpoints

    directory = checkpoints_dir(run_dir)
    have = valid_checkpoints(directory)
    if step not in have:
        raise ConfigError(f"--step {step}: {directory} has no valid step {step} (has {have})")


def _eval_step(run_dir: Path, step: int | None, untrained: bool) -> None:
    """One ConfigError line when there is nothing to evaluate: no checkpoint (a typo?) unless
    ``--allow-untrained``, or no valid checkpoint ``--step``."""
    from arlarena_jax.errors import ConfigError
    from arlarena_jax.train.final import newest_checkpoint

    if step is not None:
        if untrained:
            raise ConfigError(f"--step {step} and --allow-untrained: choose one")
        _check_chosen_step(run_dir, step)
    elif not untrained and newest_checkpoint(checkpoints_dir(run_dir)) is None:
        raise ConfigError(
            f"config key 'trainer.run_dir': {run_dir} has no checkpoint to evaluate; "
            "--allow-untrained evaluates the untrained model"
        )


def eval_command(args: argparse.Namespace) -> int:
    """Evaluate the run's newest checkpoint (``--step N``: that one) on the held-out seeds. A
    run directory without a checkpoint (a typo?) is one ConfigError line, unless
    ``--allow-untrained`` asks for the untrained model."""
    resolved = _config(args, training=False)
    config = resolved.config
    initialize_if_distributed()  # several processes: each evaluates its block (process_shares)
    from arlarena_jax.train.run import Run

    run_dir, chosen = Path(args.run_dir), getattr(args, "step", None)
    _eval_step(run_dir, chosen, getattr(args, "allow_untrained", False))
    with _one_line_config_errors(), Run(resolved, console=False) as run:
        step = run.resume(chosen)
        metrics, rollout = run.evaluate_rollout()
        if run.pieces.exchange.index != 0:  # several processes: process 0 reports and writes
            return 0
    where = "untrained model (no checkpoint)" if step is None else f"checkpoint step {step}"
    from arlarena_jax.train.build import eval_episodes
    from arlarena_jax.train.metrics import split_tag

    split = config.trainer.eval_split
    print(f"{where}, {eval_episodes(config)} episodes of the {split} split:")
    for key, value in sorted(metrics.items()):
        print(f"  {split_tag(key, split):<40} {value:.4f}")
    if getattr(args, "episodes_out", None):
        from arlarena_jax.train.held_out import write_records

        path = write_records(Path(args.episodes_out), run.last_eval_episodes)
        print(f"per-episode outcomes: {path}")
    if getattr(args, "transcripts_out", None):
        from arlarena_jax.train.evaluation import eval_seeds
        from arlarena_jax.train.held_out import write_records
        from arlarena_jax.train.transcripts import episode_transcripts

        records = episode_transcripts(rollout, eval_seeds(config))
        path = write_records(Path(args.transcripts_out), records)
        print(f"transcripts: {path}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    """Export a run's newest checkpoint (``--step N``: that one) as a Hugging Face directory
    (default ``RUN_DIR/hf``), from the run's own ``config.yaml``: any run, a sweep's included,
    exports on its own. LoRA adapters are merged into the weights; ``--peft DIR`` also writes
    them as a PEFT adapter."""
    from arlarena_jax.errors import ConfigError
    from arlarena_jax.train.config_io import load_config
    from arlarena_jax.train.export import export_policy
    from arlarena_jax.train.run import Run

    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    config = load_config(run_dir / "config.yaml", [f"trainer.run_dir={run_dir}"])
    args.run_dir = str(run_dir)
    initialize_if_distributed()  # several processes: they gather, process 0 writes
    if args.step is not None:
        _check_chosen_step(run_dir, args.step)
    with Run(config, console=False) as run:
        step = run.resume(args.step)
        if step is None:
            raise ConfigError(f"{run_dir} has no checkpoint to export")
        x = run.pieces.exchange  # several processes: process 0 writes (export_policy)
        out = args.out or run_dir / "hf"  # LoRA: adapters merged into plain weights
        export_policy(out, run.model, run.train_state().params, run.tokenizer, run.config, x)
        peft = _export_peft(run, args.peft) if args.peft and x.index == 0 else None
    print(f"exported checkpoint step {step} of {run_dir} to {out}")
    if peft is not None:
        print(f"exported its LoRA adapter (PEFT format) to {peft}")
    return 0


def _export_peft(run, directory: str) -> Path:
    """The run's LoRA adapters as a PEFT adapter directory (refused without ``model.lora``)."""
    from arlarena_jax.errors import ConfigError
    from arlarena_jax.models.lora import save_peft_adapter
    from arlarena_jax.train.export import write_atomically

    lora = run.config.model.lora
    if lora is None:
        raise ConfigError("--peft needs a run with config key 'model.lora' (it has no adapters)")
    base = run.config.model.path
    return write_atomically(
        Path(directory), lambda staging: save_peft_adapter(run.model, lora, staging, base)
    )


def gen_data_command(args: argparse.Namespace) -> int:
    """Write expert demonstrations (prompt, reply) as JSON lines."""
    config = _config(args, runs=False).config
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
    export = commands.add_parser(
        "export", help="export a run's newest checkpoint as a Hugging Face directory"
    )
    export.add_argument("run_dir", help="a run directory (holds config.yaml and checkpoints/)")
    export.add_argument("--out", default=None, help="output directory (default: RUN_DIR/hf)")
    export.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="export checkpoint step N instead of the newest (one the run kept)",
    )
    export.add_argument(
        "--peft",
        default=None,
        metavar="DIR",
        help="also write the LoRA adapters (model.lora) as a PEFT adapter directory",
    )
    export.set_defaults(handler=export_command)
    for name, handler, text in (
        ("train", train_command, "behaviour cloning (if enabled) then RL, resumable"),
        ("sft", sft_command, "behaviour cloning only"),
        (
            "eval",
            eval_command,
            "evaluate the run's newest checkpoint (or --step N) on held-out seeds",
        ),
        ("gen-data", gen_data_command, "write expert demonstrations as JSON lines"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("config", help="a YAML config, e.g. configs/sokoban/sampo_tiny.yaml")
        if name == "gen-data":
            sub.add_argument("out", help="output .jsonl file")
            sub.add_argument("--episodes", type=int, default=256)
        if name == "eval":
            sub.add_argument(
                "--allow-untrained",
                action="store_true",
                help="evaluate the untrained model when the run directory has no checkpoint "
                "(otherwise that is an error: a mistyped trainer.run_dir)",
            )
            sub.add_argument(
                "--step",
                type=int,
                metavar="N",
                help="evaluate checkpoint step N instead of the newest (an earlier policy of "
                "the run; the checkpoints a run keeps: trainer.keep_checkpoints)",
            )
            sub.add_argument(
                "--episodes-out",
                metavar="FILE",
                help="also write each held-out episode's outcome (seed, won, return, length) "
                "as JSON lines, to pair with another evaluation (arlarena_jax.train.held_out)",
            )
            sub.add_argument(
                "--transcripts-out",
                metavar="FILE",
                help="also write each held-out episode turn by turn (observation, reply, "
                "action, validity, reward) as JSON lines (arlarena_jax.train.transcripts)",
            )
        sub.add_argument("overrides", nargs="*", help="dotted overrides, key=value")
        sub.add_argument(
            "--print-config",
            action="store_true",
            help="print the resolved configuration (every method setting, the run directory) "
            "as YAML and exit",
        )
        sub.set_defaults(handler=handler)
