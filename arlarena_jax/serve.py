"""``arlarena serve ENV``: one registered environment as an OpenEnv server
(:mod:`envs.serving`; docs/environments.md §15.1).

The environment's settings are the trainer's ``env`` section: its defaults, or ``--config``'s
(a training YAML), with ``--set key=value`` overrides. Episode panels use the trainer's
evaluation seed blocks with ``env.eval_seed`` as offset, so ``--split test`` episode ``i`` is the
``i``-th episode a run's test evaluation plays. Python environments run one pool worker per
session (``--in-process``: in the server process). An unknown environment or split, a config
error, a port in use or a missing ``openenv`` extra is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from arlarena_jax.errors import ConfigError
from envs import registry

DEFAULT_IDLE_TIMEOUT_S = 600.0


def add_command(commands: Any) -> None:
    """Register ``arlarena serve`` on the CLI's subparsers."""
    sub = commands.add_parser("serve", help="serve an environment through OpenEnv")
    sub.add_argument("env", help=f"a registered environment ({', '.join(registry.names())})")
    sub.add_argument("--split", default="train", help="the split a reset plays by default")
    sub.add_argument("--host", default="127.0.0.1", help="address to listen on")
    sub.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free)")
    sub.add_argument("--config", default=None, help="a training YAML whose env section to use")
    sub.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    sub.add_argument("--max-sessions", type=int, default=64, help="sessions open at once")
    sub.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="seconds without a message after which a session's environment is reclaimed "
        "(0: never; checked every max(timeout/4, 5) s)",
    )
    sub.add_argument(
        "--in-process",
        action="store_true",
        help="run Python environments in the server process, not one pool worker per session",
    )
    sub.add_argument("--log-level", default="warning", help="uvicorn's log level")
    sub.set_defaults(handler=serve_command)


def env_config(args: argparse.Namespace) -> Any:
    """The trainer's ``env`` section for ``args.env`` (see module doc)."""
    from arlarena_jax.train.config_io import apply_overrides, config_from_dict, load_config

    sets = [f"env.name={args.env}", *args.set]
    if args.config is not None:
        env = load_config(args.config, sets).env
    else:
        env = apply_overrides(config_from_dict({"env": {"name": args.env}}), args.set).env
    workers = 0 if args.in_process else 1
    return dataclasses.replace(env, num_workers=workers)


def served(args: argparse.Namespace) -> Any:
    """What the server's sessions share; one-line ConfigErrors for bad names and values."""
    if args.env not in registry.names():
        raise ConfigError(registry.unknown_message(args.env))
    spec = registry.get(args.env)
    if args.split not in spec.splits:
        raise ConfigError(f"--split {args.split!r}: {args.env} declares {', '.join(spec.splits)}")
    if args.max_sessions < 1 or args.idle_timeout < 0 or not 0 <= args.port < 65536:
        raise ConfigError("--max-sessions must be >= 1, --idle-timeout >= 0, --port in 0..65535")
    try:
        from envs.serving.environment import Served
        from envs.serving.panels import Panels
        from envs.serving.source import BatchSource
    except ImportError as error:
        raise ConfigError(
            f"arlarena serve needs the openenv extra (pip install -e '.[openenv]'): {error}"
        ) from None
    from arlarena_jax.train.build import EVAL_SEED_BLOCKS

    env = env_config(args)
    spec.check_data(env, args.split == "train")
    panels = Panels({s: EVAL_SEED_BLOCKS[s] for s in spec.splits}, env.eval_seed)
    source = BatchSource(lambda split: spec.make_batch(env, 1, split))
    return Served(
        name=args.env,
        split=args.split,
        splits=spec.splits,
        panels=panels,
        source=source,
        idle_timeout=args.idle_timeout or None,
        moves=spec.moves,
        takes_none="trajectory" in spec.rows,
    )


def serve_command(args: argparse.Namespace) -> int:
    """Run the server until SIGTERM (:func:`envs.serving.server.serve`)."""
    shared = served(args)
    from envs.serving import server

    return server.serve(shared, args.host, args.port, args.max_sessions, args.log_level)
