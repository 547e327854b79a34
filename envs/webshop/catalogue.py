"""The WebShop catalogue: products read from the original data files' schema
(docs/environments.md §6.1).

Two JSON files make a catalogue, the same for the real data and the synthetic one:

* ``items_shuffle_1000.json``: a list of product dicts (``asin``, ``name``, ``full_description``,
  ``small_description``, ``pricing``, ``customization_options``, ``images``, ``category``,
  ``query``, ``product_category``);
* ``items_ins_v2_1000.json``: ``asin -> {attributes, instruction, instruction_attributes}``.

:func:`load_catalogue` applies the original loader's rules: an ASIN that is ``"nan"``, longer than
10 characters or seen before is skipped; ``pricing`` ``"$a"`` / ``"$a ... $b"`` becomes one value or
a range (none: ``$100.0``); option names and values are lower-cased and ``/`` in a value becomes
``" | "``; a product without attributes gets ``("DUMMY_ATTR",)``; the query is lower-cased and
stripped. Every problem with a file is a one-line :class:`CatalogueError` naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

ITEMS_FILE = "items_shuffle_1000.json"
ATTRIBUTES_FILE = "items_ins_v2_1000.json"
NOUNS_FILE = "nouns.json"  # the synthetic catalogue's noun lexicon (docs/environments.md §6.4)
DEFAULT_PRICE = 100.0
MAX_ASIN_CHARS = 10
PRODUCT_KEYS = (
    "asin",
    "name",
    "full_description",
    "small_description",
    "pricing",
    "customization_options",
    "images",
    "category",
    "query",
    "product_category",
)


class CatalogueError(ValueError):
    """A catalogue file that cannot be read as WebShop data (one line, naming the file)."""


@dataclasses.dataclass(frozen=True)
class Product:
    """One product as the pages, the search index and the reward read it."""

    asin: str
    title: str
    description: str
    bullets: tuple[str, ...]
    pricing: tuple[float, ...]  # one price, or a (low, high) range
    price_tag: str  # "$12.99", "$10.0 to $20.0", "$100.0" when the product has no price
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (name, values), in the file's order
    attributes: tuple[str, ...]
    category: str
    query: str
    product_category: str  # breadcrumbs "A › B › C"
    instruction: str | None = None  # the synthetic instruction (None: no goals from it)
    instruction_attributes: tuple[str, ...] = ()
    main_image: str = ""

    @property
    def option_map(self) -> dict[str, tuple[str, ...]]:
        """The options as ``{name: values}``."""
        return dict(self.options)


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """The products in file order (duplicates and bad ASINs dropped), by ASIN too."""

    products: tuple[Product, ...]
    source: str = ""  # the folder the files were read from

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_asin", {p.asin: p for p in self.products})

    def __len__(self) -> int:
        return len(self.products)

    def get(self, asin: str) -> Product | None:
        """The product of ``asin`` (as stored, upper-case), or None."""
        return self._by_asin.get(asin)  # type: ignore[attr-defined]

    def __contains__(self, asin: object) -> bool:
        return asin in self._by_asin  # type: ignore[attr-defined]


def parse_pricing(pricing: Any) -> tuple[tuple[float, ...], str]:
    """``"$12.99"`` -> ``((12.99,), "$12.99")``; ``"$10.00 - $20.00"`` -> ``((10.0, 20.0),
    "$10.0 to $20.0")``; empty or missing -> ``((100.0,), "$100.0")``."""
    if not pricing:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    if not isinstance(pricing, str):
        raise ValueError(f"pricing must be a string like '$12.99', got {pricing!r}")
    try:
        values = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in pricing.split("$")[1:]]
    except InvalidOperation:
        raise ValueError(f"pricing {pricing!r} is not '$a' or '$a - $b'") from None
    if not values:
        raise ValueError(f"pricing {pricing!r} has no '$' amount")
    if len(values) == 1:
        return (values[0],), f"${values[0]}"
    return (values[0], values[1]), f"${values[0]} to ${values[1]}"


def option_value(raw: str) -> str:
    """An option value as the pages show it and the reward compares it."""
    return raw.strip().replace("/", " | ").lower()


def parse_options(raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``customization_options`` (``name -> [{value, image}]``, or null/"") as (name, values)."""
    if not raw:
        return ()
    if not isinstance(raw, Mapping):
        raise ValueError(f"customization_options must be a mapping, got {type(raw).__name__}")
    options = []
    for name, contents in raw.items():
        if contents is None:
            continue
        values = tuple(option_value(c["value"]) for c in contents)
        options.append((str(name).lower(), values))
    return tuple(options)


def _bullets(raw: Any) -> tuple[str, ...]:
    return tuple(str(b) for b in raw) if isinstance(raw, list) else (str(raw),)


def product_from_record(record: Mapping[str, Any], attributes: Mapping[str, Any]) -> Product:
    """One ``items_shuffle`` record with its ``items_ins_v2`` entry (see module doc)."""
    missing = [k for k in PRODUCT_KEYS if k not in record]
    if missing:
        raise ValueError(f"missing key {missing[0]!r}")
    pricing, price_tag = parse_pricing(record["pricing"])
    entry = attributes.get(record["asin"]) or {}
    images = record["images"] or [""]
    return Product(
        asin=str(record["asin"]),
        title=str(record["name"]),
        description=str(record["full_description"] or ""),
        bullets=_bullets(record["small_description"]),
        pricing=pricing,
        price_tag=price_tag,
        options=parse_options(record["customization_options"]),
        attributes=tuple(entry.get("attributes") or ("DUMMY_ATTR",)),
        category=str(record["category"]),
        query=str(record["query"]).lower().strip(),
        product_category=str(record["product_category"]),
        instruction=entry.get("instruction"),
        instruction_attributes=tuple(entry.get("instruction_attributes") or ()),
        main_image=str(images[0]),
    )


def _read_json(path: Path, kind: type) -> Any:
    if not path.is_file():
        raise CatalogueError(f"WebShop data file not found: {path}")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise CatalogueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, kind):
        raise CatalogueError(f"{path}: expected a JSON {kind.__name__}, got {type(data).__name__}")
    return data


def build_catalogue(
    records: Sequence[Mapping[str, Any]], attributes: Mapping[str, Any], source: str = ""
) -> Catalogue:
    """Products from already-read records (see module doc for the skipping rules)."""
    seen: set[str] = set()
    products = []
    for i, record in enumerate(records):
        asin = str(record.get("asin", "nan"))
        if asin == "nan" or len(asin) > MAX_ASIN_CHARS or asin in seen:
            continue
        seen.add(asin)
        try:
            products.append(product_from_record(record, attributes))
        except (ValueError, KeyError, TypeError) as exc:
            raise CatalogueError(f"{source or 'catalogue'}: product {i} ({asin}): {exc}") from None
    if not products:
        raise CatalogueError(f"{source or 'catalogue'}: no products")
    return Catalogue(tuple(products), source)


def load_catalogue(folder: str | Path) -> Catalogue:
    """The catalogue in ``folder`` (``items_shuffle_1000.json`` + ``items_ins_v2_1000.json``)."""
    folder = Path(folder)
    records = _read_json(folder / ITEMS_FILE, list)
    attributes = _read_json(folder / ATTRIBUTES_FILE, dict)
    return build_catalogue(records, attributes, str(folder / ITEMS_FILE))
