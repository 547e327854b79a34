"""Everything a WebShop environment reads that does not change during a run, loaded once per
process: the catalogue, the prices and goals of the goal seed, the search engine and the noun
tagger (docs/environments.md §6.1).

:class:`ShopSource` names it (picklable: the host pool's workers receive it and load the shop
themselves); :func:`load_shop` builds it and keeps it, so the N environments of one worker share
one shop. The catalogue is either the synthetic one, generated in memory from its seed through the
same loader as files (``data="synthetic"``), or the two JSON files in a folder (``data="files"``:
``data_dir``, which the config fills from ``env.data_path`` or ``$WEBSHOP_DATA``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from envs.webshop.catalogue import (
    NOUNS_FILE,
    Catalogue,
    CatalogueError,
    build_catalogue,
    load_catalogue,
)
from envs.webshop.goals import TEST_SIZE, GoalSet, synthetic_goals
from envs.webshop.stats import SearchEngine

DATA_ENV_VAR = "WEBSHOP_DATA"
DATA_KINDS = ("synthetic", "files")


@dataclasses.dataclass(frozen=True)
class ShopSource:
    """Where a shop comes from (see module doc)."""

    data: str = "synthetic"
    data_dir: str | None = None
    catalogue_seed: int = 0
    num_products: int = 1000
    goal_seed: int = 0
    test_size: int = TEST_SIZE
    validation_size: int = 0
    nouns: str = "auto"  # auto | spacy | lexicon
    search: str = "bm25"  # bm25 | pyserini
    index_dir: str | None = None

    def __post_init__(self) -> None:
        if self.data not in DATA_KINDS:
            raise ValueError(
                f"WebShop data must be one of {', '.join(DATA_KINDS)}, got {self.data!r}"
            )


@dataclasses.dataclass(frozen=True)
class Shop:
    """A loaded shop: the catalogue, its prices and goals, search and nouns."""

    catalogue: Catalogue
    goals: GoalSet
    engine: SearchEngine  # search(keywords, k) -> ASINs best first
    nouns: Callable[[str], Sequence[str]]

    def search(self, keywords: str, k: int) -> list[str]:
        """The engine's ASINs for ``keywords``, best first, at most ``k``."""
        return self.engine.search(keywords, k)


def data_dir(configured: str | None) -> Path | None:
    """The real data's folder: ``configured``, else ``$WEBSHOP_DATA``, else None."""
    folder = configured or os.environ.get(DATA_ENV_VAR)
    return Path(folder).expanduser() if folder else None


@functools.lru_cache(maxsize=2)
def _synthetic(seed: int, num_products: int) -> tuple[list, dict, list[str]]:
    """The synthetic catalogue's records, attributes and noun lexicon (generated once)."""
    from envs.webshop.synthetic import synthetic_records

    return synthetic_records(seed, num_products)


def read_catalogue(source: ShopSource) -> tuple[Catalogue, str | None]:
    """The catalogue and the noun lexicon file (None: the synthetic lexicon is in memory)."""
    if source.data == "synthetic":
        records, attributes, _ = _synthetic(source.catalogue_seed, source.num_products)
        return build_catalogue(
            records, attributes, f"synthetic(seed={source.catalogue_seed})"
        ), None
    folder = data_dir(source.data_dir)
    if folder is None:
        raise CatalogueError(
            f"WebShop data='files' needs a folder: set env.data_path or ${DATA_ENV_VAR}"
        )
    return load_catalogue(folder), str(folder / NOUNS_FILE)


def noun_tagger(source: ShopSource, lexicon_file: str | None) -> Callable[[str], Sequence[str]]:
    """The configured noun tagger; the synthetic catalogue's lexicon comes from its generator."""
    from envs.webshop.nouns import make_noun_tagger

    words = (
        _synthetic(source.catalogue_seed, source.num_products)[2] if lexicon_file is None else None
    )
    return make_noun_tagger(source.nouns, lexicon_file, words=words)


@functools.lru_cache(maxsize=4)
def load_shop(source: ShopSource) -> Shop:
    """Build the shop of ``source`` once per process (see module doc)."""
    from envs.webshop.search import make_search

    catalogue, lexicon_file = read_catalogue(source)
    goals = synthetic_goals(catalogue, source.goal_seed, source.test_size, source.validation_size)
    engine = make_search(catalogue.products, source.search, source.index_dir)
    return Shop(catalogue, goals, engine, noun_tagger(source, lexicon_file))
