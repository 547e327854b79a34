"""Every package the code imports is declared, in the group that installs it.

The check is static: each ``import`` (module level or inside a function) and each
``pytest.importorskip`` of the project's own files is mapped to the distribution that provides
it in this environment (``importlib.metadata.packages_distributions``):

* the library (``arlarena_base/``, ``arlarena_jax/``, ``envs/``) may use the runtime
  dependencies only, and the ``alfworld`` extra inside ``envs/alfworld/`` and
  ``envs/textworld/``, imported lazily (never at module level), so that ``pip install -e .``
  without the extra imports every module;
* the ``openenv`` extra inside ``envs/serving/`` only (module level allowed there: only
  ``arlarena serve`` imports that package, and its ``__init__.py`` imports none of the extra);
* the tests, benchmarks and CI scripts may also use the ``dev``, ``alfworld`` and ``openenv``
  extras;
* ``requirements.txt`` lists exactly the requirements of ``pyproject.toml``, with the same
  version specifiers.

A package that a dependency imports without declaring it (``six`` for gymnax 1.0.1) cannot be
seen this way: ``.ci/run`` catches those by installing into fresh virtual environments.
"""

from __future__ import annotations

import ast
import gc
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCAL = {
    "arlarena_base",
    "arlarena_jax",
    "envs",
    "tests",
    "bench",
    "timing",
    "turn_rows",
    "conftest",
}
LOCAL |= {p.stem for p in (ROOT / "tests").rglob("*.py")}
LOCAL |= {p.stem for p in (ROOT / "bench").glob("*.py")}  # bench scripts import their siblings
# where an extra may be imported (lazily): the alfworld extra brings textworld, which the
# TextWorld games use too
LAZY_EXTRA_HOME = {
    "alfworld": ("envs/alfworld/", "envs/textworld/"),
    "webshop": ("envs/webshop/",),
}
# Extras whose home package imports them at module level: the package is only imported by the
# command that needs the extra (lazily, a one-line error without it), and its __init__.py imports
# none of the extra (tests/envs/test_openenv_serving.py checks the CLI loads without it).
# `arlarena serve` (envs/serving/) and env.name openenv (envs/openenv/)
PACKAGE_EXTRA_HOME = {"openenv": ("envs/serving/", "envs/openenv/")}
# Optional backends a user installs by hand (not in any extra: they need more than pip), imported
# lazily in one file only, whose one-line error says how to install them.
MANUAL_OPTIONAL = {  # imported inside a function, skipped with a reason where absent
    "pyserini": "envs/webshop/search.py",  # pyserini 0.17.0 + Java 11+ + an index
    # the docs extra's docstring parser (CI installs it)
    "griffe": "tests/project/test_docs_site.py",
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip()).group(0))


def declared(*groups: str) -> set[str]:
    project = PYPROJECT["project"]
    requirements = list(project["dependencies"])
    for group in groups:
        requirements += project["optional-dependencies"][group]
    return {requirement_name(r) for r in requirements}


def extra_only(group: str) -> set[str]:
    """The packages only the extra ``group`` declares (not the runtime dependencies)."""
    return declared(group) - declared()


def imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, at module level) of each import and importorskip in a file."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [node.args[0].value]
        found += [(name.split(".")[0], id(node) in top_level) for name in names]
    return found


def third_party(paths) -> list[tuple[Path, str, bool]]:
    # No collection while the ASTs are built: a finalizer run inside ast.parse (e.g. of a
    # coroutine an earlier test abandoned) trips CPython 3.11's "AST constructor recursion depth
    # mismatch". One collection first, not one per file: late in the suite the heap is large and
    # a full collection per file cost over a minute.
    gc.collect()
    gc.disable()
    try:
        found = [(path, *item) for path in paths for item in imports(path)]
    finally:
        gc.enable()
    return [
        (path, module, module_level)
        for path, module, module_level in found
        if module not in sys.stdlib_module_names and module not in LOCAL
    ]


def files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


PROVIDERS = {
    module: {normalize(d) for d in dists}
    for module, dists in importlib.metadata.packages_distributions().items()
}


def undeclared(paths, allowed: set[str]) -> list[str]:
    problems = []
    for path, module, module_level in third_party(paths):
        where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        providers = PROVIDERS.get(module)
        if MANUAL_OPTIONAL.get(module) == where and not module_level:
            continue
        if not providers:
            problems.append(f"{where}: imports {module!r}, which no installed package provides")
            continue
        extra = next((e for e in LAZY_EXTRA_HOME if providers & declared(e) - declared()), None)
        if extra is not None and allowed == declared():
            if not where.startswith(LAZY_EXTRA_HOME[extra]) or module_level:
                problems.append(f"{where}: imports {module!r} of the {extra!r} extra eagerly")
            continue
        home_extra = next((e for e in PACKAGE_EXTRA_HOME if providers & extra_only(e)), None)
        if home_extra is not None and allowed == declared():
            home = PACKAGE_EXTRA_HOME[home_extra]
            if not where.startswith(home) or where.endswith("__init__.py"):
                problems.append(f"{where}: imports {module!r} of the {home_extra!r} extra")
            continue
        if not providers & allowed:
            problems.append(f"{where}: imports {module!r} ({sorted(providers)}), not declared")
    return problems


def test_the_library_imports_only_runtime_dependencies():
    assert undeclared(files("arlarena_base", "arlarena_jax", "envs"), declared()) == []


@pytest.mark.parametrize("folder", ["tests", "bench", ".ci"])
def test_tests_benchmarks_and_ci_import_only_declared_packages(folder):
    assert files(folder)
    assert undeclared(files(folder), declared("dev", "alfworld", "openenv")) == []


def test_requirements_txt_lists_exactly_the_pyproject_requirements():
    project = PYPROJECT["project"]
    groups = [project["dependencies"], *project["optional-dependencies"].values()]
    expected = sorted(re.sub(r"\s+", "", r) for group in groups for r in group)
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    listed = sorted(re.sub(r"\s+", "", line.split("#")[0]) for line in lines)
    assert [line for line in listed if line] == expected


def test_the_checker_sees_an_undeclared_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ndef f():\n    import torch\n    import alfworld\n")
    problems = undeclared([bad], declared())
    assert len(problems) == 2
    assert "'torch'" in problems[0] and "not declared" in problems[0]
    assert "'alfworld'" in problems[1] and "eagerly" in problems[1]
