"""Render the report's blocks as Markdown (GitHub tables, images as relative links)."""

from __future__ import annotations

from collections.abc import Sequence

from arlarena_jax.arena.report.document import Block, Bullets, Figures, Heading, Paragraph, Table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(table: Table) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in table.headers) + " |"]
    lines.append("|" + "---|" * len(table.headers))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def _block(block: Block) -> str:
    match block:
        case Heading(text, level):
            return f"{'#' * level} {text}"
        case Paragraph(text):
            return text
        case Bullets(items):
            return "\n".join(f"- {_cell(item)}" for item in items)
        case Table():
            return _table(block)
        case Figures(items):
            return "\n\n".join(f"![{caption}]({src})" for src, caption in items)
    raise TypeError(f"not a report block: {block!r}")


def render_markdown(blocks: Sequence[Block]) -> str:
    """The report as one Markdown document."""
    return "\n\n".join(_block(b) for b in blocks) + "\n"
