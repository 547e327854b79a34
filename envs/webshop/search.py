"""WebShop's search engine (docs/environments.md §6.3; spec environments §4.3, §4.8 item 7):
BM25 over one document per product, as the original's pyserini/Lucene index, in pure Python by
default.

Documents. :func:`document_text` is the original's indexed ``contents``:
``lower(title + " " + description + " " + bullets[0] + " " + option_text)`` with
``option_text = ", and ".join(f"{name}: {', '.join(values)}")`` over the options.

Analysis. :func:`analyze` follows Lucene's English analyzer (StandardTokenizer,
EnglishPossessiveFilter, LowerCaseFilter, StopFilter, PorterStemFilter):

* tokens are runs of letters, digits and ``_``; a single joiner between two letters
  (``.``, ``'``, ``’``, ``:``, ``·``) or between two digits (``.``, ``,``, ``;``, ``'``) stays
  inside the token, as the Unicode word-break rules (UAX #29) that StandardTokenizer implements
  say. So ``"3.5"`` and ``"1,000"`` are one token each, ``"x-large"`` is ``x`` + ``large``,
  ``"women's"`` is one token and ``"color:red"`` is one token too (COLON is a MidLetter);
* a final ``'s`` (also ``’s``, ``＇s``) is dropped (the possessive), then lower-case;
* Lucene's 33 English stop words (``ENGLISH_STOP_WORDS_SET``) are removed;
* Porter stemming: PyStemmer's ``porter`` (Snowball's rendering of the published algorithm)
  plus the three departures of Porter's reference code that Lucene's ``PorterStemmer`` keeps:
  words of one or two characters are left alone (Snowball: "us" -> "u"), step 2 maps ``bli`` ->
  ``ble`` (not only ``abli`` -> ``able``) and ``logi`` -> ``log`` when the stem before it has
  measure m > 0 (Lucene: "possibly" -> "possibl", "apology" -> "apolog"; Snowball "possibli",
  "apologi"). Stems are cached.

Scoring. :class:`BM25Search` scores with ``bm25s`` (``method="lucene"``) over the pre-analysed
token lists, with the Lucene 8 formula (no ``k1 + 1`` factor; it does not change the ranking):
score(q, d) = Σ_{t ∈ q} idf(t) · tf / (tf + k1 · (1 − b + b · dl / avgdl)), with
idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5)), k1 = 0.9 and b = 0.4 (pyserini's defaults); a query
term repeated r times counts r times (Anserini boosts it by r). ``search`` returns the ASINs of
the documents with a score > 0, best first, ties in catalogue order (Lucene: by doc id, which is
indexing order), at most ``k`` (the original asks for 50).

Document lengths. Lucene stores each length in one byte (``SmallFloat.intToByte4``): exact
below 24 tokens, then 24 + (dl − 24) truncated to its 4 leading bits (100 -> 96), while avgdl is
exact. By default (``lucene_norms=True``) the precomputed bm25s scores are recomputed with that
stored length (:func:`lucene_length`); ``lucene_norms=False`` keeps bm25s's exact lengths, which
moves scores by about 1 % and reorders close documents.

Checked against the real engine (Anserini 0.14.3, the jar inside pyserini 0.17.0, on Java 17):
the analysis gives the same terms on mixed test strings, and on the 1,000-product synthetic
catalogue, for its first 500 goal instructions and 500 three-word queries, the top-50 lists were
identical, scores within 2.5e-7 relative (with exact lengths no list was identical, scores were
up to 1.5 % off and the first result differed for 8 % of the instructions). What still
differs: non-Latin scripts (Lucene emits one token per CJK ideograph; here a run of them is one
token), tokens over 255 characters (Lucene splits them), and float rounding (Lucene sums float32
terms too, in its own order), which could swap exact near-ties.

``bm25s`` is imported with ``jax`` hidden: its ``selection`` module otherwise runs a JAX op at
import time, which starts JAX's default backend (on a GPU host: preallocating its memory) in every
process that builds a search engine, host pool workers included.

:class:`PyseriniSearch` is the optional original engine over a prebuilt pyserini index
(``pip install pyserini==0.17.0`` with Java 11+); :func:`make_search` picks a backend.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from envs.webshop.catalogue import Product

K1 = 0.9
B = 0.4
TOP_K = 50
LUCENE_EXACT_LENGTHS = 24  # SmallFloat.intToByte4 stores lengths below this exactly
SEARCH_BACKENDS = ("bm25", "pyserini")
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (33 words).
_STOP_WORDS_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with"
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_LETTER = r"[^\W\d_]"
_DIGIT = r"\d"
_MID_LETTER = ":\u00b7\u0387\u05f4\u2027\ufe13\ufe55\uff1a"  # UAX #29 MidLetter
_MID_NUM = ",;\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b"
_MID_NUM_LET = ".'\u2018\u2019\u2024\ufe52\uff07\uff0e"  # MidNumLet and Single_Quote
_JOINER = (
    rf"(?<={_LETTER})[{re.escape(_MID_LETTER + _MID_NUM_LET)}](?={_LETTER})"
    rf"|(?<={_DIGIT})[{re.escape(_MID_NUM + _MID_NUM_LET)}](?={_DIGIT})"
)
TOKEN_PATTERN = re.compile(rf"\w+(?:(?:{_JOINER})\w+)*")
_POSSESSIVES = ("'s", "\u2019s", "\uff07s")
_VOWELS = frozenset("aeiou")
_THREAD = threading.local()


def document_text(product: Product) -> str:
    """The indexed contents: ``lower(title + " " + description + " " + bullets[0] + " " +
    option_text)``, ``option_text = "name: v1, v2, and name2: w1"``."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options)
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join((product.title, product.description, first_bullet, option_text)).lower()


def tokenize(text: str) -> list[str]:
    """StandardTokenizer-like tokens of ``text`` (see module doc), case kept."""
    return [t for t in TOKEN_PATTERN.findall(text) if t.strip("_")]


def _snowball_porter() -> Any:
    """PyStemmer's original-Porter stemmer, one per thread (its objects are not thread-safe)."""
    stemmer = getattr(_THREAD, "stemmer", None)
    if stemmer is None:
        import Stemmer

        stemmer = _THREAD.stemmer = Stemmer.Stemmer("porter")
    return stemmer


def porter_measure(stem: str) -> int:
    """Porter's m: the stem is [C](VC)^m[V]; y is a vowel only after a consonant."""
    m, prev_vowel = 0, False
    for i, ch in enumerate(stem):
        vowel = ch in _VOWELS or (ch == "y" and i > 0 and not prev_vowel)
        m += int(prev_vowel and not vowel)
        prev_vowel = vowel
    return m


@functools.lru_cache(maxsize=1 << 17)
def stem(word: str) -> str:
    """Lucene's Porter stem of a lower-case ``word`` (Snowball porter + the reference code's
    departures, see module doc)."""
    if len(word) <= 2:
        return word
    stemmer = _snowball_porter()
    out = stemmer.stemWord(word)
    if out.endswith("logi") and porter_measure(out[:-4]) > 0:
        return out[:-1]
    if out.endswith("bli") and porter_measure(out[:-3]) > 0:
        return stemmer.stemWord(out[:-1] + "e")  # steps 3-5 on "...ble", as the reference goes on
    return out


def analyze(text: str) -> list[str]:
    """Lucene-English-analyzer terms of ``text``: tokenize, drop ``'s``, lower-case, remove stop
    words, Porter-stem (see module doc)."""
    terms = []
    for token in tokenize(text):
        token = token.lower()
        if token.endswith(_POSSESSIVES):  # Lucene strips it before lower-casing, either case
            token = token[:-2]
        if token and token not in STOP_WORDS:
            terms.append(stem(token))
    return terms


def import_bm25s() -> ModuleType:
    """``bm25s``, imported with ``jax`` hidden so that importing it starts no JAX backend."""
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    missing = object()
    saved = sys.modules.get("jax", missing)
    sys.modules["jax"] = None  # type: ignore[assignment]  # `import jax.lax` raises ImportError
    try:
        import bm25s
    finally:
        if saved is missing:
            del sys.modules["jax"]
        else:
            sys.modules["jax"] = saved  # type: ignore[assignment]
    return bm25s


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best positive ``scores``, best first, ties by lower index."""
    matched = np.flatnonzero(scores > 0)
    order = np.argsort(-scores[matched], kind="stable")  # stable: matched is ascending
    return matched[order[: max(k, 0)]]


def lucene_length(n: int) -> int:
    """The document length Lucene 8 keeps in its one-byte norm (``SmallFloat.intToByte4`` then
    ``byte4ToInt``): n below 24, else 24 + (n − 24) truncated to its 4 leading bits."""
    if n < LUCENE_EXACT_LENGTHS:
        return n
    rest = n - LUCENE_EXACT_LENGTHS
    shift = max(rest.bit_length() - 4, 0)
    return LUCENE_EXACT_LENGTHS + ((rest >> shift) << shift)


def lucene_norm_data(
    scores: dict[str, Any], docs: Sequence[Sequence[int]], k1: float, b: float
) -> np.ndarray:
    """bm25s's precomputed term-document scores (its CSC layout: ``indptr`` by term, ``indices``
    = documents) recomputed with Lucene's stored lengths: idf(t) · tf / (tf + k1 · (1 − b + b ·
    lucene_length(dl) / avgdl)), avgdl exact (Lucene: sumTotalTermFreq / docCount)."""
    import scipy.sparse

    indptr, doc_of = np.asarray(scores["indptr"]), np.asarray(scores["indices"])
    lengths = np.array([len(d) for d in docs], np.float64)
    rows = np.repeat(np.arange(len(docs)), lengths.astype(np.int64))
    cols = np.fromiter((t for d in docs for t in d), np.int64, count=len(rows))
    tf_matrix = scipy.sparse.csr_matrix(
        (np.ones(len(rows)), (rows, cols)), shape=(len(docs), len(indptr) - 1)
    )
    term_of = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    tf = np.asarray(tf_matrix[doc_of, term_of]).ravel()
    df = np.diff(indptr).astype(np.float64)  # one entry per (term, document containing it)
    idf = np.log1p((len(docs) - df + 0.5) / (df + 0.5))
    stored = np.array([lucene_length(int(n)) for n in lengths])
    norm = k1 * (1 - b + b * stored / lengths.mean())
    return (idf[term_of] * tf / (tf + norm[doc_of])).astype(np.float32)


class BM25Search:
    """Lucene-like BM25 over the products' documents (see module doc); ``lucene_norms``: use
    Lucene's one-byte document lengths (False: exact lengths, plain bm25s)."""

    def __init__(
        self,
        products: Sequence[Product],
        k1: float = K1,
        b: float = B,
        lucene_norms: bool = True,
    ) -> None:
        if not products:
            raise ValueError("BM25Search needs at least one product")
        self.asins = tuple(p.asin for p in products)
        self.k1, self.b, self.lucene_norms = float(k1), float(b), bool(lucene_norms)
        self.vocab: dict[str, int] = {}
        docs = [
            [self.vocab.setdefault(t, len(self.vocab)) for t in analyze(document_text(p))]
            for p in products
        ]
        self._retriever = None
        if self.vocab:  # else nothing is indexable and every score is 0
            self._retriever = import_bm25s().BM25(k1=self.k1, b=self.b, method="lucene")
            self._retriever.index(
                (docs, dict(self.vocab)), create_empty_token=False, show_progress=False
            )
            if self.lucene_norms:
                scores = self._retriever.scores
                scores["data"] = lucene_norm_data(scores, docs, self.k1, self.b)

    def __len__(self) -> int:
        return len(self.asins)

    def scores(self, keywords: str) -> np.ndarray:
        """[N] float32 BM25 score of every product for ``keywords`` (catalogue order)."""
        ids = [self.vocab[t] for t in analyze(keywords) if t in self.vocab]
        if not ids or self._retriever is None:
            return np.zeros(len(self.asins), np.float32)
        return self._retriever.get_scores(ids)

    def search(self, keywords: str, k: int = TOP_K) -> list[str]:
        """ASINs of the at most ``k`` best matching products (score > 0), best first."""
        return [self.asins[i] for i in top_indices(self.scores(keywords), k)]


class PyseriniSearch:
    """The original engine: a pyserini ``LuceneSearcher`` over a prebuilt index (optional)."""

    def __init__(self, index_dir: str | Path) -> None:
        try:
            from pyserini.search.lucene import LuceneSearcher
        except ImportError:
            raise RuntimeError(
                "the pyserini search backend needs pyserini: pip install pyserini==0.17.0"
                " (Java 11+; Debian bookworm's OpenJDK 17 works; pyserini >= 0.22 needs Java 21)"
            ) from None
        if not Path(index_dir).is_dir():
            raise FileNotFoundError(f"pyserini index folder not found: {index_dir}")
        self.index_dir = str(index_dir)
        self._searcher = LuceneSearcher(self.index_dir)

    def search(self, keywords: str, k: int = TOP_K) -> list[str]:
        """The ``id`` of the raw JSON of each of the top ``k`` hits, as the original reads it."""
        hits = self._searcher.search(keywords, k=k)
        return [json.loads(self._searcher.doc(hit.docid).raw())["id"] for hit in hits]


def make_search(
    products: Sequence[Product], backend: str = "bm25", index_dir: str | None = None
) -> BM25Search | PyseriniSearch:
    """The search engine of ``backend`` (``bm25``: built from ``products``; ``pyserini``: the
    index in ``index_dir``)."""
    if backend == "bm25":
        return BM25Search(products)
    if backend == "pyserini":
        if not index_dir:
            raise ValueError("the pyserini search backend needs index_dir (a pyserini index)")
        return PyseriniSearch(index_dir)
    raise ValueError(f"unknown search backend {backend!r}; valid: {', '.join(SEARCH_BACKENDS)}")
