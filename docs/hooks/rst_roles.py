"""A griffe extension for the API reference (mkdocs.yml): the docstrings' reStructuredText
markup, read as Markdown.

The docstrings cite code with Sphinx roles (:func:`chain`, :class:`~a.b.TurnBatch`) and mark
literal blocks with a trailing ``::`` or ``.. code-block::``. Markdown would show the roles raw,
so each becomes a code span of the name (`~` keeps its last part, as Sphinx shows it); a trailing
``::`` becomes ``:`` and a ``.. code-block::`` line goes (the indented block under it stays a
code block).
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc|const):`(?P<ref>[^`]+)`")
_CODE_BLOCK = re.compile(r"^[ \t]*\.\. code-block::.*\n", re.MULTILINE)
_LITERAL = re.compile(r"(\S)::$", re.MULTILINE)


def _role_name(ref: str) -> str:
    ref = ref.strip()
    if "<" in ref and ref.endswith(">"):  # :func:`text <target>`
        return ref.split("<", 1)[0].strip()
    ref = ref.lstrip("!")
    if ref.startswith("~"):
        return ref[1:].rsplit(".", 1)[-1]
    return ref


def rst_to_markdown(text: str) -> str:
    """The docstring text with its Sphinx roles and literal-block markers as Markdown."""
    text = _ROLE.sub(lambda m: f"`{_role_name(m.group('ref'))}`", text)
    text = _CODE_BLOCK.sub("", text)
    return _LITERAL.sub(r"\1:", text)


class RstRoles(griffe.Extension):
    """Rewrites each object's docstring once it is loaded (before it is parsed)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
