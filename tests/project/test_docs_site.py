"""The documentation site's hooks (docs/hooks/): README links rewritten for the home page, links
to repository files outside docs/ dropped to their text, and the docstrings' Sphinx roles as
Markdown. mkdocs itself is not needed (the `docs` extra; CI builds the site)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


site = _load("site_hooks")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for path in ("README.md", "docs/models.md", "docs/arena/plot.png", "launch/README.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    return tmp_path


def _readme(repo: Path, markdown: str) -> str:  # README.md at the root, shown as docs/index.md
    return site.rewrite_links(markdown, repo, repo / "docs", repo / "docs")


def test_readme_links_into_docs_become_docs_relative(repo):
    text = 'See [the models](docs/models.md#gguf) and ![a plot](docs/arena/plot.png "t").'
    assert _readme(repo, text) == (
        'See [the models](models.md#gguf) and ![a plot](arena/plot.png "t").'
    )


def test_link_text_may_span_lines_and_hold_brackets(repo):
    assert _readme(repo, "[models\n[doc]](docs/models.md)") == "[models\n[doc]](models.md)"


def test_repository_files_outside_docs_become_text(repo):
    assert _readme(repo, "in [launch/README.md](launch/README.md).") == "in launch/README.md."
    page = site.rewrite_links(
        "[`launch`](../launch/README.md)", repo / "docs", repo / "docs", repo / "docs"
    )
    assert page == "`launch`"


def test_missing_files_urls_and_anchors_stay_for_mkdocs_to_judge(repo):
    text = "[a](docs/missing.md) [b](https://example.org/x.md) [c](#two-commands) [d](/abs.md)"
    assert _readme(repo, text) == text


def test_code_is_left_alone(repo):
    text = "`[a](docs/models.md)` and\n```md\n[b](docs/models.md)\n```\n[c](docs/models.md)\n"
    assert _readme(repo, text) == (
        "`[a](docs/models.md)` and\n```md\n[b](docs/models.md)\n```\n[c](models.md)\n"
    )


def test_sphinx_roles_become_code_spans():
    roles = _load_roles()
    text = (
        "See :func:`chain`, :class:`~arlarena_jax.objectives.TurnBatch`,"
        " :meth:`Objective.prepare` and :mod:`text <envs.builtin>`. Runs::\n\n    x\n"
        ".. code-block:: yaml\n\n    a: 1\n"
    )
    assert roles.rst_to_markdown(text) == (
        "See `chain`, `TurnBatch`, `Objective.prepare` and `text`. Runs:\n\n    x\n\n    a: 1\n"
    )


def _load_roles():
    pytest.importorskip("griffe", reason="griffe comes with the docs extra")
    return _load("rst_roles")
