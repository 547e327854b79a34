"""A hand-made WebShop catalogue for the environment tests: four products in the real files'
schema, two of them with options, searched by a keyword filter in catalogue order."""

from __future__ import annotations

from envs.webshop.catalogue import build_catalogue
from envs.webshop.goals import synthetic_goals
from envs.webshop.shop import Shop

BREADCRUMB = "Beauty & Personal Care › Skin Care › Face › Moisturizers"


def _record(asin, name, price, options=None, query="face moisturizer", crumbs=BREADCRUMB):
    return {
        "asin": asin,
        "name": name,
        "full_description": f"{name}. A daily cream for every skin type.",
        "small_description": [f"{name} bullet one", "made without parabens"],
        "pricing": price,
        "customization_options": options,
        "images": [f"https://example.invalid/{asin}.jpg"],
        "category": "beauty",
        "query": query,
        "product_category": crumbs,
    }


def _opts(name, values):
    return {name: [{"value": v, "image": None} for v in values]}


RECORDS = [
    _record(
        "B0AAAAAAA1",
        "Glow Face Moisturizer Cream for Dry Skin",
        "$12.99",
        {**_opts("Size", ["1.7 Ounce", "3.4 Ounce"]), **_opts("Color", ["Natural/Beige", "Ivory"])},
    ),
    _record("B0AAAAAAA2", "Glow Face Moisturizer Lotion for Oily Skin", "$10.00 - $20.00"),
    _record("B0AAAAAAA3", "Daily Face Moisturizer Gel with SPF 30", ""),
    _record(
        "B0AAAAAAA4",
        "Bamboo Desk Lamp with USB Port",
        "$35.50",
        _opts("Style", ["Classic", "Modern"]),
        query="desk lamp",
        crumbs="Home & Kitchen › Furniture › Lighting › Desk Lamps",
    ),
]
ATTRIBUTES = {
    "B0AAAAAAA1": {
        "attributes": ["dry skin", "paraben free"],
        "instruction": "i need a face moisturizer cream for dry skin",
        "instruction_attributes": ["dry skin", "paraben free"],
    },
    "B0AAAAAAA2": {
        "attributes": ["oily skin"],
        "instruction": "i want a lotion for oily skin",
        "instruction_attributes": ["oily skin"],
    },
    "B0AAAAAAA3": {"attributes": ["spf 30"]},
    "B0AAAAAAA4": {
        "attributes": ["usb port"],
        "instruction": "find me a bamboo desk lamp with a usb port",
        "instruction_attributes": ["usb port", "bamboo"],
    },
}
NOUNS = ["cream", "desk", "face", "gel", "lamp", "lotion", "moisturizer", "port", "skin", "usb"]


class KeywordSearch:
    """Products whose title shares a word with the query, in catalogue order."""

    def __init__(self, catalogue) -> None:
        self.catalogue = catalogue

    def search(self, query: str, k: int = 50) -> list[str]:
        words = set(query.lower().split())
        hits = [p.asin for p in self.catalogue.products if words & set(p.title.lower().split())]
        return hits[:k]


def tiny_shop(test_size: int = 2) -> Shop:
    """The four products, goal seed 0, ``test_size`` test goals (4 + 1 + 2 = 7 goals)."""
    from envs.webshop.nouns import lexicon_nouns

    catalogue = build_catalogue(RECORDS, ATTRIBUTES, "fixture")
    goals = synthetic_goals(catalogue, 0, test_size)
    return Shop(catalogue, goals, KeywordSearch(catalogue), lexicon_nouns(NOUNS))
