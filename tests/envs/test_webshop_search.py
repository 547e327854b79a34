"""WebShop search (envs/webshop/search.py): Lucene-like analysis, BM25 scores checked against the
formula written out here, ranking and ties, the document text, and the backend errors."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from envs.webshop.catalogue import Product
from envs.webshop.search import (
    STOP_WORDS,
    BM25Search,
    PyseriniSearch,
    analyze,
    document_text,
    lucene_length,
    make_search,
    stem,
)


def product(asin: str, title: str, description: str = "", bullets=("",), options=()) -> Product:
    """A product with only the fields the search reads set to something meaningful."""
    return Product(
        asin=asin,
        title=title,
        description=description,
        bullets=tuple(bullets),
        pricing=(10.0,),
        price_tag="$10.0",
        options=tuple((name, tuple(values)) for name, values in options),
        attributes=("DUMMY_ATTR",),
        category="fashion",
        query="shoes",
        product_category="Clothing › Shoes",
    )


CORPUS = [
    product("B000000001", "Running Shoes", "light running shoes for men", ["breathable mesh"]),
    product("B000000002", "Leather Boots", "warm leather boots", ["waterproof"]),
    product(
        "B000000003",
        "Trail Running Jacket",
        "a jacket for running in the rain and wind, packable",
        ["hood"],
        [("color", ["red", "blue"]), ("size", ["small", "x-large"])],
    ),
    product("B000000004", "Sandals", "open sandals", ["cork sole"]),
]


def lucene_bm25(
    query: str, docs: list[list[str]], k1: float = 0.9, b: float = 0.4, dl=None
) -> np.ndarray:
    """score(q, d) = Σ_{t∈q} idf(t)·tf/(tf + k1(1 − b + b·dl/avgdl)),
    idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5)), each query term occurrence counted; ``dl``:
    the stored lengths (default: the true ones; avgdl is always the true mean)."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    dl = [len(d) for d in docs] if dl is None else dl
    out = np.zeros(n)
    for term in analyze(query):
        df = sum(term in d for d in docs)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, doc in enumerate(docs):
            tf = Counter(doc)[term]
            out[i] += idf * tf / (tf + k1 * (1 - b + b * dl[i] / avgdl))
    return out


def test_analyze_stems_and_drops_stop_words() -> None:
    assert analyze("running shoes") == ["run", "shoe"]
    assert analyze("The Shoes for THE Runners") == ["shoe", "runner"]
    assert analyze("this is not a dress, it is a skirt") == ["dress", "skirt"]
    assert len(STOP_WORDS) == 33


def test_analyze_tokens_numbers_hyphens_possessives() -> None:
    assert analyze("women's x-large 3.5 ounce") == ["women", "x", "larg", "3.5", "ounc"]
    assert analyze("MEN’S Kids' pack of 1,000") == ["men", "kid", "pack", "1,000"]
    assert analyze("v1.2 e.g. a.5") == [
        "v1.2",
        "e.g",
        "5",
    ]  # a joiner needs the same kind each side
    assert analyze("") == [] and analyze("the and of") == [] and analyze("-- __ !") == []


def test_stem_follows_lucenes_porter_stemmer() -> None:
    # the reference code's departures from the published algorithm, which Lucene keeps
    assert stem("us") == "us"  # 1-2 letter words are not stemmed (Snowball: "u")
    assert stem("possibly") == "possibl" and stem("sensibly") == "sensibl"  # bli -> ble
    assert stem("apology") == "apolog" and stem("archaeology") == "archaeolog"  # logi -> log
    assert [stem(w) for w in ("ponies", "caresses", "hopping", "relational", "generalization")] == [
        "poni",
        "caress",
        "hop",
        "relat",
        "gener",
    ]


def test_document_text_rule() -> None:
    expected = (
        "trail running jacket a jacket for running in the rain and wind, packable hood "
        "color: red, blue, and size: small, x-large"
    )
    assert document_text(CORPUS[2]) == expected
    assert document_text(product("B1", "Hat", "Warm", ["Wool", "second"])) == "hat warm wool "


def test_scores_match_the_lucene_formula() -> None:
    engine = BM25Search(CORPUS)
    docs = [analyze(document_text(p)) for p in CORPUS]
    for query in ("running shoes", "leather boots for running", "running running jacket", "red"):
        expected = lucene_bm25(query, docs)
        got = engine.scores(query)
        assert got.shape == (len(CORPUS),)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=0)
    assert engine.search("running shoes") == ["B000000001", "B000000003"]
    assert engine.search("running jacket") == ["B000000003", "B000000001"]


def test_k1_b_are_used() -> None:
    docs = [analyze(document_text(p)) for p in CORPUS]
    got = BM25Search(CORPUS, k1=1.5, b=0.75).scores("running shoes")
    np.testing.assert_allclose(got, lucene_bm25("running shoes", docs, 1.5, 0.75), rtol=1e-5)


def test_long_documents_use_lucenes_one_byte_length() -> None:
    assert [lucene_length(n) for n in (0, 23, 24, 39, 40, 55, 100, 1000)] == [
        0,
        23,
        24,
        39,
        40,
        54,
        96,
        984,
    ]
    long = product("B000000005", "Running", " ".join(f"word{i}" for i in range(99)))
    corpus = [*CORPUS, long]
    docs = [analyze(document_text(p)) for p in corpus]
    assert len(docs[-1]) == 100
    query = "running word5 jacket"
    stored = [len(d) for d in docs[:-1]] + [96]  # the short ones are stored exactly
    np.testing.assert_allclose(
        BM25Search(corpus).scores(query), lucene_bm25(query, docs, dl=stored), rtol=1e-5
    )
    np.testing.assert_allclose(
        BM25Search(corpus, lucene_norms=False).scores(query), lucene_bm25(query, docs), rtol=1e-5
    )
    assert not np.allclose(lucene_bm25(query, docs, dl=stored), lucene_bm25(query, docs))


def test_ties_keep_catalogue_order_and_k_caps() -> None:
    same = [product(f"B00000000{i}", "Blue Wool Socks") for i in range(5)]
    engine = BM25Search([CORPUS[3], *same])
    assert engine.search("wool socks") == [p.asin for p in same]
    assert engine.search("wool socks", k=2) == ["B000000000", "B000000001"]
    assert engine.search("socks sandals", k=3) == ["B000000004", "B000000000", "B000000001"]


def test_no_match_returns_nothing() -> None:
    engine = BM25Search(CORPUS)
    assert engine.search("umbrella") == []
    assert engine.search("") == []
    assert engine.search("the of and") == []
    assert not engine.scores("umbrella").any()


def test_bm25s_import_starts_no_jax_backend() -> None:
    """bm25s runs a JAX op at import when it can import jax; the engine hides jax from it."""
    script = (
        "import jax, sys\n"
        "from jax._src import xla_bridge\n"
        "from envs.webshop.search import import_bm25s\n"
        "bm25s = import_bm25s()\n"
        "assert sys.modules['jax'] is jax and not bm25s.selection.JAX_IS_AVAILABLE\n"
        "print(sorted(xla_bridge._backends))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]"


def test_make_search_backends() -> None:
    assert isinstance(make_search(CORPUS), BM25Search)
    with pytest.raises(ValueError, match=r"unknown search backend 'lucene'; valid: bm25, pyserini"):
        make_search(CORPUS, "lucene")
    with pytest.raises(ValueError, match="needs index_dir"):
        make_search(CORPUS, "pyserini")
    with pytest.raises(ValueError, match="at least one product"):
        BM25Search([])


@pytest.mark.skipif(importlib.util.find_spec("pyserini") is not None, reason="pyserini installed")
def test_pyserini_backend_without_pyserini(tmp_path) -> None:
    with pytest.raises(RuntimeError, match=r"pip install pyserini==0\.17\.0") as info:
        PyseriniSearch(tmp_path)
    assert "\n" not in str(info.value) and "Java 11" in str(info.value)
