"""WebShop's pages as text, built directly (no Flask, no HTML round trip; docs/environments.md
§6.8).

The original renders HTML templates and reads them back with BeautifulSoup: the visible text
nodes, stripped, joined by ``" [SEP] "``. A :class:`Page` holds that list of text parts and the
page's clickables in the order the original collects them (buttons, then product links, then
option values). :func:`format_page` is ARLArena's re-formatting: the parts after the instruction,
each in single quotes, joined by ``" [SEP] "``.

Pages (the parts after the instruction; then the clickables):

* search: ``Search``; clickable ``search`` (refused when clicked).
* results: ``Back to Search``, ``Page p (Total results: n)``, [``< Prev``], ``Next >``, then
  ASIN, title and price per product; ``back to search``, [``< prev``], ``next >``, the
  lower-cased ASINs.
* item: ``Back to Search``, ``< Prev``, each option name and its values, the title,
  ``Price: …``, ``Rating: N.A.``, ``Description``, ``Features``, ``Reviews``, ``Buy Now``; the
  buttons lower-cased, then the option values.
* description / features / reviews: ``Back to Search``, ``< Prev``, then the description / the
  bullets / nothing (no reviews are loaded); ``back to search``, ``< prev``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from envs.webshop.catalogue import Product

PRODUCTS_PER_PAGE = 10
BACK_TO_SEARCH = "Back to Search"
PREV = "< Prev"
NEXT = "Next >"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
SEARCH_BAR_ACTION = "search[<your query>]"
DONE_TEXT = "Thank you for shopping with us!"


@dataclasses.dataclass(frozen=True)
class Clickable:
    """What clicking a page element does: ``kind`` is ``button``, ``product`` (value: the ASIN)
    or ``option`` (value: the option name)."""

    kind: str
    value: str = ""


@dataclasses.dataclass(frozen=True)
class Page:
    """One rendered page: its visible text parts and its clickables by lower-cased text."""

    kind: str  # search | results | item | description | features | reviews | done
    parts: tuple[str, ...]
    clickables: dict[str, Clickable]
    has_search_bar: bool = False

    def available_actions(self) -> tuple[str, ...]:
        """``search[<your query>]`` where the page has a search bar, then ``click[<text>]`` for
        every clickable (ARLArena's list of available actions)."""
        head = (SEARCH_BAR_ACTION,) if self.has_search_bar else ()
        return head + tuple(f"click[{text}]" for text in self.clickables)


def _visible(parts: Sequence[str]) -> tuple[str, ...]:
    """Text nodes as BeautifulSoup yields them: stripped, empty ones dropped."""
    return tuple(s for s in (str(p).strip() for p in parts) if s)


def _buttons(*labels: str) -> dict[str, Clickable]:
    return {label.lower(): Clickable("button") for label in labels}


def _head(instruction: str) -> list[str]:
    return ["Instruction:", instruction, BACK_TO_SEARCH]


def search_page(instruction: str) -> Page:
    """The start page: the logo, the instruction and the search button."""
    parts = _visible(["WebShop", "Instruction:", instruction, "Search"])
    return Page("search", parts, _buttons("Search"), has_search_bar=True)


def results_page(instruction: str, products: Sequence[Product], page: int, total: int) -> Page:
    """Page ``page`` (1-based) of a search that found ``total`` products; ``products`` are
    this page's (at most 10)."""
    nav = [PREV, NEXT] if page > 1 else [NEXT]
    parts = [*_head(instruction), f"Page {page} (Total results: {total})", *nav]
    clickables = _buttons(BACK_TO_SEARCH, *nav)
    for p in products:
        parts += [p.asin, p.title, p.price_tag]
        clickables[p.asin.lower()] = Clickable("product", p.asin)
    return Page("results", _visible(parts), clickables)


def item_page(instruction: str, product: Product) -> Page:
    """A product's page: its options, title, price and the sub-page and buy buttons."""
    parts = [*_head(instruction), PREV]
    option_clicks: dict[str, Clickable] = {}
    for name, values in product.options:
        parts += [name, *values]
        option_clicks.update({v: Clickable("option", name) for v in values})
    parts += [product.title, f"Price: {product.price_tag}", "Rating: N.A.", *SUB_PAGES, BUY_NOW]
    clickables = {**_buttons(BACK_TO_SEARCH, PREV, *SUB_PAGES, BUY_NOW), **option_clicks}
    return Page("item", _visible(parts), clickables)


def sub_page(instruction: str, product: Product, kind: str) -> Page:
    """The Description, Features or Reviews page of ``product``."""
    content = {
        "description": [product.description],
        "features": list(product.bullets),
        "reviews": [],
    }[kind]
    parts = [*_head(instruction), PREV, *content]
    return Page(kind, _visible(parts), _buttons(BACK_TO_SEARCH, PREV))


def done_page() -> Page:
    """After ``buy now``: the episode is over and nothing is clickable."""
    return Page("done", (DONE_TEXT,), {})


def format_page(parts: Sequence[str], instruction: str) -> str:
    """ARLArena's observation: the parts after the first one equal to the instruction, each in
    single quotes, joined by ``" [SEP] "``; without the instruction, the raw parts joined."""
    parts = list(parts)
    if instruction not in parts:
        return " [SEP] ".join(parts)
    after = parts[parts.index(instruction) + 1 :]
    return " [SEP] ".join(f"'{p}'" for p in after)


def page_products(results: Sequence[str], page: int) -> Sequence[str]:
    """The ASINs shown on results page ``page`` (1-based): 10 per page."""
    start = (page - 1) * PRODUCTS_PER_PAGE
    return results[start : start + PRODUCTS_PER_PAGE]
