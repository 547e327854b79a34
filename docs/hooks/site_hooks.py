"""mkdocs hooks of the documentation site (mkdocs.yml `hooks:`).

- The home page `index.md` is README.md, generated at build time, so the README stays the single
  source. Its links are rewritten for its new place: `docs/models.md#x` becomes `models.md#x`.
- A relative link, on any page, to a file of the repository outside docs/ (`../launch/README.md`)
  is valid on GitHub but not on the site: it becomes its text. A link to a file that does not
  exist is left alone, so `mkdocs build --strict` still fails on it.
- MathJax is served from the site, not a CDN: its files are copied from the `django-static-mathjax`
  wheel (the `docs` extra) into `mathjax/`, so the site builds and reads offline.

The link rewriting is plain functions over strings (tests/project/test_docs_site.py); mkdocs is
imported only inside the hooks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
MATHJAX_DIR = "mathjax"  # where the site serves MathJax (mkdocs.yml's extra_javascript)
# The parts of MathJax's es5 build that the site loads: the combined TeX + SVG component and the
# TeX extensions that it autoloads on demand. SVG output draws its glyphs as paths: it needs no web
# fonts, which browsers refuse to load from file:// pages.
MATHJAX_PARTS = ("tex-svg.js", "input/tex/extensions")

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# An inline code span, or an inline link / image [text](target "title"); text may hold one level
# of brackets and may span lines.
_SPAN_OR_LINK = re.compile(
    r"(?P<code>(?P<ticks>`+)[\s\S]*?(?P=ticks))"
    r"|(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\((?P<target>[^()\s]+)(?P<title>\s+\"[^\"]*\")?\)"
)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def rewrite_target(target: str, source_dir: Path, page_dir: Path, docs_dir: Path) -> str | None:
    """The link target as seen from the page's place in docs_dir; None: a repository file outside
    docs_dir (the link should become its text). A URL, an anchor, an absolute path or a missing
    file comes back unchanged."""
    if _SCHEME.match(target) or target.startswith(("#", "/")):
        return target
    path, sep, anchor = target.partition("#")
    resolved = (source_dir / path).resolve()
    if not resolved.exists():
        return target
    if not resolved.is_relative_to(docs_dir.resolve()):
        return None
    return Path(os.path.relpath(resolved, page_dir.resolve())).as_posix() + sep + anchor


def _text_segments(markdown: str) -> list[tuple[bool, str]]:
    """The markdown cut into (is_fenced_code, text) pieces, in order."""
    pieces: list[tuple[bool, str]] = []
    current: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines(keepends=True):
        match = _FENCE.match(line)
        if fence is None and match:
            pieces.append((False, "".join(current)))
            current, fence = [line], match.group(1)
        elif fence is not None and match and match.group(1).startswith(fence):
            current.append(line)
            pieces.append((True, "".join(current)))
            current, fence = [], None
        else:
            current.append(line)
    pieces.append((fence is not None, "".join(current)))
    return pieces


def rewrite_links(markdown: str, source_dir: Path, page_dir: Path, docs_dir: Path) -> str:
    """Rewrite the inline links of markdown written at source_dir for a page at page_dir (both
    folders; see rewrite_target). Fenced code and code spans are left alone."""

    def one(match: re.Match[str]) -> str:
        if match.group("code"):
            return match.group(0)
        target = rewrite_target(match.group("target"), source_dir, page_dir, docs_dir)
        if target is None:
            return match.group("text")
        title = match.group("title") or ""
        return f"{match.group('bang')}[{match.group('text')}]({target}{title})"

    return "".join(
        text if code else _SPAN_OR_LINK.sub(one, text) for code, text in _text_segments(markdown)
    )


def _source_dir(page_src_uri: str, docs_dir: Path) -> Path:
    """Where the markdown of a page was written: the repository root for the README's index."""
    if page_src_uri == "index.md":
        return REPO_ROOT
    return (docs_dir / page_src_uri).parent


def _mathjax_root() -> Path:
    import mathjax  # the django-static-mathjax wheel of the docs extra

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def on_files(files, config):  # mkdocs hook
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    docs_dir = Path(config["docs_dir"])
    if (docs_dir / "index.md").exists():
        raise PluginError("docs/index.md must not exist: the home page is README.md")
    files.append(File.generated(config, "index.md", abs_src_path=str(README)))
    root = _mathjax_root()
    for part in MATHJAX_PARTS:
        paths = [root / part] if (root / part).is_file() else sorted((root / part).rglob("*"))
        for path in paths:
            if path.is_file():
                uri = f"{MATHJAX_DIR}/{path.relative_to(root).as_posix()}"
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):  # mkdocs hook
    docs_dir = Path(config["docs_dir"])
    src_uri = page.file.src_uri
    page_dir = (docs_dir / src_uri).parent
    return rewrite_links(markdown, _source_dir(src_uri, docs_dir), page_dir, docs_dir)
