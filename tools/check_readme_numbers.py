"""Check that every number of an old README still stands in the new README or in docs/.

Issue 42 moved most of the README into docs/. This script takes the old README from git
(``git show REV:README.md``), extracts every number token from it (integers, decimals, signed
exponents, percentages, ratios such as ``1.53×`` and times such as ``18:24``), and reports the
tokens that appear in neither the new README.md nor any ``docs/**/*.md``. Thousands separators
are dropped (``1,704`` and ``1704`` match) and the space before ``%`` is ignored.

    python tools/check_readme_numbers.py            # against 71f84bb:README.md
    python tools/check_readme_numbers.py --rev HEAD~3

Exit status 0 when nothing is missing, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# A number not glued to a word (so ``Qwen3``, ``w2-o3-q4`` and commit hashes are not numbers),
# with an optional unit suffix that changes its meaning: %, × (a ratio) or a clock time.
NUMBER = re.compile(
    r"(?<![\w.])"
    r"(\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?::\d{2})*)"
    r"(\s?%|×)?"
    r"(?![\w])"
)


def tokens(text: str) -> dict[str, int]:
    """Every number token of ``text``, normalised, with the first line it appears on."""
    found: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        for match in NUMBER.finditer(line):
            value = match.group(1).replace(",", "")
            suffix = (match.group(2) or "").strip()
            found.setdefault(value + suffix, lineno)
    return found


def old_readme(rev: str, path: str) -> str:
    """The file ``path`` as it stood at ``rev``."""
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def new_corpus(root: Path) -> str:
    """The new README and every Markdown page under docs/, concatenated."""
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return "\n".join(f.read_text(encoding="utf-8") for f in files if f.is_file())


def main(argv: list[str] | None = None) -> int:
    """Print the summary and every missing token with its old line; 1 if any is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="71f84bb", help="the commit of the old README")
    parser.add_argument("--path", default="README.md", help="the old file's path at --rev")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout to search")
    args = parser.parse_args(argv)
    old_text = old_readme(args.rev, args.path)
    old = tokens(old_text)
    new = tokens(new_corpus(args.root))
    missing = [t for t in old if t not in new]
    old_lines = old_text.splitlines()
    for token in missing:
        lineno = old[token]
        print(f"missing {token!r} (old line {lineno}: {old_lines[lineno - 1].strip()[:100]})")
    print(
        f"{len(old)} distinct number tokens in {args.rev}:{args.path}; "
        f"{len(old) - len(missing)} found in README.md + docs/**/*.md; {len(missing)} missing"
    )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
