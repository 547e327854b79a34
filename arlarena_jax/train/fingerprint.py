"""What every process of a run must share, as fingerprints compared at start-up: the config, the
code, and the environment's episodes. Processes started with different configs, code or data
would feed one SPMD program different batches (wrong results or a hang); the run refuses them
in one line instead (:meth:`~arlarena_jax.train.processes.Exchange.same_everywhere`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from arlarena_jax.train.config_io import dumps_config
from arlarena_jax.train.processes import Exchange
from arlarena_jax.train.resolution import Resolved

PACKAGES = ("arlarena_jax", "arlarena_base", "envs")  # the code a run executes


def code_fingerprint(root: Path | None = None) -> str:
    """sha256 over the paths and bytes of the packages' Python files."""
    root = Path(__file__).resolve().parents[2] if root is None else root
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def data_fingerprint(run: Resolved) -> str:
    """sha256 of the environment's episodes per split where it declares their identities
    (``EnvSpec.split_members``: game content hashes); seed-range environments have none beyond
    the code and config."""
    if run.env.split_members is None:
        return ""
    members = run.env.split_members(run.config.env)
    listed = sorted((split, sorted(map(str, ids))) for split, ids in members.items())
    return hashlib.sha256(repr(listed).encode()).hexdigest()


def check_same_start(exchange: Exchange, run: Resolved) -> None:
    """Refuse, in one line, processes whose config, code or data differ (a collective)."""
    if exchange.count == 1:
        return
    exchange.same_everywhere(
        "config", hashlib.sha256(dumps_config(run.config).encode()).hexdigest()
    )
    exchange.same_everywhere("code", code_fingerprint())
    exchange.same_everywhere("data", data_fingerprint(run))
