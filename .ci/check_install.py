"""Checks of an environment that has only ``pip install -e .`` (no extras), run by ``.ci/run``.

* every module of ``arlarena_jax`` and ``envs`` imports (an optional engine is imported lazily,
  so the package imports without its extra), except the modules of an extra's own home
  (``envs/serving/``: its classes are OpenEnv's, so it imports ``openenv`` at module level),
  which without their extra must fail for the want of that extra's packages alone;
* the installed ``arlarena`` script answers ``--help``, and so does every subcommand (through the
  script's own ``main``, in this process);
* without the ``alfworld`` extra, ``arlarena alfworld build|generate`` and ``arlarena textworld
  build`` stop with one line that names the extra, before doing any work; without the
  ``openenv`` extra, so does ``arlarena serve``.

Exits 1 with one line per failure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import pkgutil
import shutil
import subprocess
import sys
import tempfile

PACKAGES = ("arlarena_base", "arlarena_jax", "envs")
# The modules an extra's packages are imported in at module level: (module prefix, the extra, the
# top-level packages its absence may leave missing there)
EXTRA_HOMES = (("envs.serving.", "openenv", frozenset({"openenv", "uvicorn", "pydantic"})),)


def wants_missing_extra(name: str, exc: Exception) -> bool:
    """``exc``, from importing module ``name``, is only the absence of its home extra."""
    for prefix, _, packages in EXTRA_HOMES:
        if name.startswith(prefix) and isinstance(exc, ModuleNotFoundError):
            missing = (exc.name or "").split(".")[0]
            return missing in packages and importlib.util.find_spec(missing) is None
    return False


def module_names() -> list[str]:
    names = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        names.append(name)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{name}.")]
    return sorted(n for n in names if not n.endswith(".__main__"))  # __main__ runs the CLI


def import_failures() -> list[str]:
    failures = []
    for name in module_names():
        try:
            importlib.import_module(name)
        except Exception as exc:  # report every module, not only the first
            if not wants_missing_extra(name, exc):
                failures.append(f"import {name}: {type(exc).__name__}: {exc}")
    return failures


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every command path of the parser: ('demo',), ('alfworld', 'build'), ..."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from subcommands(sub, (*prefix, name))


def help_failures(script: str) -> list[str]:
    """The installed script answers ``--help`` (one process); every subcommand path answers it
    through the same ``main`` in this process (a process each would start JAX 23 times)."""
    from arlarena_jax.cli import build_parser
    from arlarena_jax.cli import main as cli_main

    failures = []
    done = subprocess.run([script, "--help"], capture_output=True, text=True)
    if done.returncode != 0 or "usage: arlarena" not in done.stdout:
        failures.append(f"arlarena --help: exit {done.returncode}")
    for path in subcommands(build_parser()):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                cli_main([*path, "--help"])
                code = "no exit"
            except SystemExit as exit:
                code = exit.code
        if code != 0 or "usage: arlarena" not in out.getvalue():
            failures.append(f"arlarena {' '.join(path)} --help: exit {code}")
    return failures


def one_line_naming(script: str, argv: list[str], extra: str) -> str | None:
    """None when ``arlarena ARGV`` exits 2 with one stderr line naming ``.[extra]``; else why."""
    done = subprocess.run([script, *argv], capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    if done.returncode == 2 and len(lines) == 1 and f".[{extra}]" in lines[0]:
        return None
    return (
        f"arlarena {' '.join(argv)} without the extra: exit {done.returncode}, "
        f"{len(lines)} stderr lines (want 2 and one line naming .[{extra}])"
    )


def extra_failures(script: str) -> list[str]:
    failures = []
    if importlib.util.find_spec("openenv") is None:
        why = one_line_naming(script, ["serve", "sokoban", "--port", "0"], "openenv")
        failures += [why] if why else []
    if importlib.util.find_spec("alfworld") is not None:
        return failures  # the extra is installed: nothing to refuse
    with tempfile.TemporaryDirectory() as out:
        for group, command in (
            ("alfworld", "build"),
            ("alfworld", "generate"),
            ("textworld", "build"),
        ):
            why = one_line_naming(script, [group, command, out], "alfworld")
            failures += [why] if why else []
    return failures


def main() -> int:
    script = shutil.which("arlarena")
    if script is None:
        print("the arlarena console script is not on PATH")
        return 1
    failures = import_failures() + help_failures(script) + extra_failures(script)
    for line in failures:
        print(line)
    if failures:
        return 1
    print(f"install check: {len(module_names())} modules import, every subcommand answers --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
