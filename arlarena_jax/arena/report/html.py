"""Render the report's blocks as one HTML page with inline CSS.

Images are ``<img>`` elements whose ``src`` the caller chooses: the PNG's path relative to the
report folder, or a ``data:`` URI that embeds it (:func:`data_uri`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from arlarena_jax.arena.report.document import Block, Bullets, Figures, Heading, Paragraph, Table

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ccc; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.wide { overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; white-space: normal; }
th.label, td.label { text-align: left; white-space: normal; }
th.label:first-child, td.label:first-child { min-width: 16em; }
tbody tr:nth-child(even) { background: #fafafa; }
.figures { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; flex: 1 1 520px; max-width: 600px; }
figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; text-align: center; }
li { margin: .2em 0; font-size: 0.92em; }
""".strip()


def data_uri(path: Path) -> str:
    """A PNG as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _cells(tag: str, texts: Sequence[str], labels: int) -> str:
    """One row's cells; the first ``labels`` are left-aligned labels."""
    return "".join(
        f'<{tag} class="label">{escape(t)}</{tag}>' if i < labels else f"<{tag}>{escape(t)}</{tag}>"
        for i, t in enumerate(texts)
    )


def _table(table: Table) -> str:
    """A table in a box that scrolls sideways when the table is wider than the page."""
    head = _cells("th", table.headers, table.labels)
    rows = "".join(f"<tr>{_cells('td', row, table.labels)}</tr>\n" for row in table.rows)
    return (
        f'<div class="wide"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}</tbody>\n'
        "</table></div>"
    )


def _figures(figures: Figures, src: Callable[[str], str]) -> str:
    items = "".join(
        f'<figure><img src="{escape(src(path))}" alt="{escape(caption)}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>\n"
        for path, caption in figures.items
    )
    return f'<div class="figures">\n{items}</div>'


def _block(block: Block, src: Callable[[str], str]) -> str:
    match block:
        case Heading(text, level):
            return f"<h{level}>{escape(text)}</h{level}>"
        case Paragraph(text):
            return f"<p>{escape(text)}</p>"
        case Bullets(items):
            return "<ul>\n" + "".join(f"<li>{escape(i)}</li>\n" for i in items) + "</ul>"
        case Table():
            return _table(block)
        case Figures():
            return _figures(block, src)
    raise TypeError(f"not a report block: {block!r}")


def render_html(
    blocks: Sequence[Block], title: str, src: Callable[[str], str] = lambda path: path
) -> str:
    """The report as one HTML page; ``src`` maps a figure's relative path to its ``src``."""
    body = "\n".join(_block(b, src) for b in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )
