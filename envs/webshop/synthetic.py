"""A seeded synthetic WebShop catalogue in the original data files' schema
(docs/environments.md §6.8; reference spec environments §4.7, §4.8).

The real product files cannot be downloaded offline, so this module writes a stand-in that
:func:`envs.webshop.catalogue.load_catalogue` reads like the real ones:
``items_shuffle_1000.json``, ``items_ins_v2_1000.json`` (every ASIN, an ``instruction`` for most),
``items_human_ins.json`` (``{}``) and ``nouns.json``, the noun lexicon the type factor uses when
spaCy is absent.

Design, following what spec §4.8 says a synthetic catalogue must keep:

* **Query groups.** ``vocabulary.GROUPS`` holds 60 hand-written shopping queries, 12 per WebShop
  category (beauty, food, fashion, furniture, electronics). Each has breadcrumbs (3-5 levels;
  products of a group share every level but the leaf), type phrases that all contain the query's
  head noun, attribute phrases by grammatical role (``adj``: "paraben free"; ``with``: "hyaluronic
  acid"; ``for``: "sensitive skin"), materials, benefit sentences, uses, title tags, option pools
  and a price range. About 20 products per query: ``round(num_products / 20)`` groups, spread over
  the categories in turn.
* **Families and distractors.** A group's products come in families of 3-5 that share brand,
  type phrase, materials and the text skeleton (intro, benefits, fillers, bullet headers); the
  members differ in 1-2 attributes, in their option values and in price. Every product with an
  instruction therefore has same-query look-alikes that miss one of its attributes, lack its
  option values or cost more, and BM25 over the instruction finds the family but not always the
  target first.
* **Attributes.** Each product has 3-6 features. A feature is *both* in the ``attributes`` list
  and the text, *list-only* (never in title, bullets or description: only the fuzzy list match
  credits it) or *text-only* (in the title or a bullet, not in the list: only the substring rule
  credits it). The list has 2-5 entries. Family bases favour phrases earlier families of the
  group used less. Instructions name 1-3 features verbatim, so the target itself always scores
  every attribute; the first is one that at least two other products of the query lack
  (preferably a family member), so every goal has near misses.
* **Options and prices.** 0-3 option groups with 2-8 values (at most 24 combinations; values with
  "/" and mixed case, which the loader maps); values are chosen so that the reward's colour
  normalisation finds whole words only. Prices are single, ranges, a few missing, a few >= 980
  (no price clause).
* **Text.** Titles of 10-30 words (brand, attribute phrases, type, materials, tag, spec),
  descriptions of 50-200 words, 3-6 bullets.
* **Nouns.** ``nouns.json`` lists every alphabetic title token (``[a-z0-9]+``, two letters or
  more) that is not in ``vocabulary.NON_NOUNS`` (adjectives, participles, numbers, function words,
  units): type nouns, materials, brands, activities ("hiking"). :data:`NON_NOUNS` was reviewed
  against spaCy's tags of the lower-cased titles (on the title-cased ones spaCy tags nearly
  every word PROPN, adjectives included, as it did in the original).

Everything draws from one ``random.Random(seed)`` in a fixed order and the JSON is written with a
fixed layout, so one seed gives byte-identical files.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import string
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.webshop.catalogue import ATTRIBUTES_FILE, ITEMS_FILE, NOUNS_FILE
from envs.webshop.vocabulary import (
    ACRONYMS,
    ATTRIBUTE_SENTENCES,
    BULLET_LEADS,
    CATEGORY_TEXT,
    DETAILS,
    GROUPS,
    INTRO_VERBS,
    INTROS,
    NON_NOUNS,
    OPENERS,
    OPTION_POOLS,
    SMALL_WORDS,
    USE_SENTENCES,
    Group,
)

HUMAN_INSTRUCTIONS_FILE = "items_human_ins.json"
CATEGORIES = ("beauty", "food", "fashion", "furniture", "electronics")
PRODUCTS_PER_QUERY = 20
MAX_COMBINATIONS = 24
INSTRUCTION_RATE = 0.7
IMAGE_URL = "https://images.webshop.invalid/{}.jpg"
ASIN_ALPHABET = string.ascii_uppercase + string.digits
CRUMB = " › "


# --------------------------------------------------------------------------- helpers


def title_case(phrase: str) -> str:
    """Amazon-style title case: acronyms upper-cased, small joining words kept lower."""
    words = []
    for i, word in enumerate(phrase.split()):
        low = word.lower()
        if low in ACRONYMS or (any(c.isdigit() for c in word) and word.isascii()):
            words.append(word.upper())
        elif low in SMALL_WORDS and i > 0:
            words.append(low)
        else:
            words.append(word[:1].upper() + word[1:])
    return " ".join(words)


def join_phrases(phrases: Sequence[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    if len(phrases) <= 1:
        return "".join(phrases)
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def article(phrase: str) -> str:
    """``"an"`` before a vowel sound (a vowel letter, or an acronym spelled from one such as
    "hdmi"), else ``"a"``."""
    first = phrase.split()[0] if phrase.split() else ""
    vowel_letters = "aefhilmnorsx" if first in ACRONYMS else "aeiou"
    return "an" if first[:1] in vowel_letters else "a"


def word_count(text: str) -> int:
    """Whitespace-separated words (separators like ``-`` excluded)."""
    return sum(1 for w in text.split() if any(c.isalnum() for c in w))


def title_nouns(title: str) -> list[str]:
    """The lexicon's nouns of a title: alphabetic ``[a-z0-9]+`` tokens of two or more letters
    that are not in NON_NOUNS."""
    tokens = re.findall(r"[a-z0-9]+", title.lower())
    return [t for t in tokens if t.isalpha() and len(t) > 1 and t not in NON_NOUNS]


# --------------------------------------------------------------------------- planning


@dataclasses.dataclass
class Feature:
    """An attribute phrase of one product and where it shows."""

    phrase: str
    role: str  # a | w | f
    place: str  # "both" (list and text), "list" (list only), "text" (text only)
    spot: str = ""  # where the text shows it: title | bullet | desc ("" when list only)


@dataclasses.dataclass
class Skeleton:
    """What the members of one family share."""

    group: Group
    brand: str
    type_phrase: str
    materials: tuple[str, str]
    leaf: str
    intro: str
    benefits: tuple[str, ...]  # shuffled: bullets and description take from it in order
    uses: tuple[str, str]
    use_sentence: str
    fillers: tuple[str, ...]
    details: tuple[str, ...]  # description sentences with {mat}, {use}, {brand}
    notes: tuple[str, ...]  # second sentences of bullets
    closer: str
    headers: tuple[str, ...]  # all the category's, shuffled
    tag: str
    spec: str
    n_bullets: int


@dataclasses.dataclass
class Member:
    """One product before rendering."""

    skeleton: Skeleton
    features: list[Feature]
    options: list[tuple[str, list[str]]]
    pricing: str
    instructed: bool
    instruction_attributes: list[str] = dataclasses.field(default_factory=list)


def _place(rng: random.Random) -> str:
    """Where a new feature shows: both (50%), list only (25%), text only (25%)."""
    return rng.choices(("both", "list", "text"), weights=(2, 1, 1))[0]


def _balance_list(features: list[Feature]) -> None:
    """Make the attributes list hold 2-5 entries by moving features between places."""
    listed = [f for f in features if f.place != "text"]
    for f in features:
        if len(listed) >= 2:
            break
        if f.place == "text":
            f.place = "both"
            listed.append(f)
    for f in reversed(listed[5:]):
        f.place = "text"


def _spots(rng: random.Random, features: list[Feature], n_bullets: int) -> None:
    """Choose title / bullet / description for each feature shown in text: text-only features
    go to the title (at most 3 there) or a bullet (at most ``n_bullets``), others anywhere."""
    title = bullets = 0
    for f in features:
        if f.place == "list":
            f.spot = ""
            continue
        spots = (["title"] if title < 3 else []) + (["bullet"] if bullets < n_bullets else [])
        if f.place == "both" or not spots:
            spots.append("desc")
        f.spot = rng.choice(spots)
        title += f.spot == "title"
        bullets += f.spot == "bullet"


def _pick_options(rng: random.Random, keys: Sequence[str]) -> list[tuple[str, list[str]]]:
    """0-3 option groups of 2-8 values, at most MAX_COMBINATIONS combinations."""
    count = rng.choices(range(len(keys) + 1), weights=[1] + [3] * len(keys))[0]
    chosen = sorted(rng.sample(list(keys), min(count, 3)), key=list(keys).index)
    options, combos = [], 1
    for key in chosen:
        name, pool = OPTION_POOLS[key]
        most = min(len(pool), 8, MAX_COMBINATIONS // combos)
        if most < 2:
            break
        k = rng.randint(2, min(most, 8 if len(chosen) == 1 else 5))
        values = sorted(rng.sample(pool, k), key=pool.index)
        options.append((name, values))
        combos *= k
    return options


def _vary_options(
    rng: random.Random, options: list[tuple[str, list[str]]], keys: Sequence[str]
) -> list[tuple[str, list[str]]]:
    """A family member's options: the base ones with one group's values re-drawn."""
    options = [(name, list(values)) for name, values in options]
    if not options:
        return options
    i = rng.randrange(len(options))
    name, values = options[i]
    pool = next(OPTION_POOLS[k][1] for k in keys if OPTION_POOLS[k][0] == name)
    k = len(values)
    options[i] = (name, sorted(rng.sample(pool, k), key=pool.index))
    return options


def _price(rng: random.Random, low: float, high: float) -> float:
    """A log-uniform price skewed low (few reach the top of the range)."""
    return low * (high / low) ** (rng.random() ** 1.3)


def _pricing(rng: random.Random, price: float) -> str:
    """``"$12.99"`` (85%), a range ``"$a - $b"`` (12%) or ``""`` (no price, 3%)."""
    cents = rng.choice((".99", ".95", ".49", ".00"))
    single = f"${int(price)}{cents}"
    kind = rng.random()
    if kind < 0.03:
        return ""
    if kind < 0.15:
        return f"{single} - ${int(price * rng.uniform(1.2, 1.8))}.99"
    return single


def _skeleton(rng: random.Random, group: Group, brand: str) -> Skeleton:
    """Draw what one family shares."""
    text = CATEGORY_TEXT[group.category]
    benefits = list(group.benefits)
    rng.shuffle(benefits)
    return Skeleton(
        group=group,
        brand=brand,
        type_phrase=rng.choice(group.types),
        materials=tuple(rng.sample(group.materials, 2)),  # type: ignore[arg-type]
        leaf=rng.choice(group.leaves),
        intro=rng.choice(INTROS),
        benefits=tuple(benefits),
        uses=tuple(rng.sample(group.uses, 2)),  # type: ignore[arg-type]
        use_sentence=rng.choice(USE_SENTENCES),
        fillers=tuple(rng.sample(text.fillers, 2)),
        details=tuple(rng.sample(DETAILS, 2)),
        notes=tuple(rng.sample(text.notes, len(text.notes))),
        closer=rng.choice(text.closers),
        headers=tuple(rng.sample(text.headers, len(text.headers))),
        tag=rng.choice(group.tags),
        spec=rng.choice(group.specs),
        n_bullets=rng.randint(3, 6),
    )


def _swap_features(rng: random.Random, base: list[Feature], group: Group) -> list[Feature]:
    """A copy of ``base`` with 1-2 features replaced by other phrases of the group."""
    features = [dataclasses.replace(f) for f in base]
    taken = {f.phrase for f in base}
    spare = [(p, r) for p, r in group.attributes if p not in taken]
    swaps = min(rng.choice((1, 1, 2)), len(spare), len(features) - 1)
    for i in rng.sample(range(len(features)), swaps):
        phrase, role = spare.pop(rng.randrange(len(spare)))
        features[i] = Feature(phrase, role, _place(rng))
    return features


def _base_features(rng: random.Random, group: Group, used: Counter[str]) -> list[Feature]:
    """3-6 features for a family, phrases that earlier families used less being likelier
    (so that no phrase ends up in nearly every product of the group)."""
    pool = list(group.attributes)
    chosen = []
    for _ in range(rng.randint(3, 6)):
        weights = [1 / (1 + used[phrase]) for phrase, _ in pool]
        chosen.append(pool.pop(rng.choices(range(len(pool)), weights=weights)[0]))
    used.update(phrase for phrase, _ in chosen)
    return [Feature(phrase, role, _place(rng)) for phrase, role in chosen]


def _family(
    rng: random.Random, group: Group, brand: str, size: int, used: Counter[str]
) -> list[Member]:
    """``size`` products sharing a skeleton, differing in features, options and price."""
    skeleton = _skeleton(rng, group, brand)
    base = _base_features(rng, group, used)
    options = _pick_options(rng, group.options)
    price = _price(rng, *group.price)
    members = []
    for i in range(size):
        features = base if i == 0 else _swap_features(rng, base, group)
        features = [dataclasses.replace(f) for f in features]
        _balance_list(features)
        _spots(rng, features, skeleton.n_bullets)
        member_options = options if i == 0 or rng.random() < 0.5 else None
        if member_options is None:
            member_options = _vary_options(rng, options, group.options)
        factor = 1.0 if i == 0 else rng.uniform(0.85, 1.4)
        members.append(
            Member(
                skeleton=skeleton,
                features=features,
                options=[(n, list(v)) for n, v in member_options],
                pricing=_pricing(rng, price * factor),
                instructed=rng.random() < INSTRUCTION_RATE,
            )
        )
    return members


def _lacking(phrase: str, members: Sequence[Member]) -> int:
    """How many of ``members`` lack the feature ``phrase``."""
    return sum(all(f.phrase != phrase for f in m.features) for m in members)


def _choose_instruction_attributes(
    rng: random.Random, family: list[Member], group: list[Member]
) -> None:
    """1-3 features per instructed member of ``family``. The first is one that at least two
    other products of the query group lack, preferably a family member too (a near miss)."""
    for member in family:
        if not member.instructed:
            continue
        own = [f.phrase for f in member.features]
        others = [m for m in group if m is not member]
        siblings = [m for m in family if m is not member]
        candidates = [p for p in own if _lacking(p, others) >= 2]
        rare = [p for p in candidates if _lacking(p, siblings)] or candidates
        k = min(rng.choices((1, 2, 3), weights=(3, 4.5, 2.5))[0], len(own))
        first = [rng.choice(rare)] if rare else []
        rest = [p for p in own if p not in first]
        member.instruction_attributes = first + rng.sample(rest, k - len(first))


def _family_sizes(rng: random.Random, n: int) -> list[int]:
    """Split ``n`` products into families of 3-5 (the last may be smaller)."""
    sizes = []
    while n > 0:
        size = min(rng.randint(3, 5), n)
        sizes.append(size)
        n -= size
    return sizes


def _plan_group(rng: random.Random, group: Group, n: int) -> list[Member]:
    """The ``n`` products of one query group."""
    brands = list(CATEGORY_TEXT[group.category].brands)
    rng.shuffle(brands)
    used: Counter[str] = Counter()
    families = [
        _family(rng, group, brands[i % len(brands)], size, used)
        for i, size in enumerate(_family_sizes(rng, n))
    ]
    members = [m for family in families for m in family]
    for family in families:
        _choose_instruction_attributes(rng, family, members)
    return members


def choose_groups(rng: random.Random, num_products: int) -> list[Group]:
    """About one group per 20 products (at least min(5, n)), categories taken in turn."""
    wanted = round(num_products / PRODUCTS_PER_QUERY)
    count = min(len(GROUPS), max(min(5, num_products), wanted))
    per_category = []
    for category in CATEGORIES:
        groups = [g for g in GROUPS if g.category == category]
        rng.shuffle(groups)
        per_category.append(groups)
    order = [g for row in zip(*per_category, strict=True) for g in row]
    return order[:count]


# --------------------------------------------------------------------------- rendering


def _title(member: Member) -> str:
    """Brand, title adjectives, type, materials and with-phrases, a for-phrase, tag, spec."""
    sk = member.skeleton
    shown = [f for f in member.features if f.spot == "title"]
    adjs = [f.phrase for f in shown if f.role == "a"]
    withs = [f.phrase for f in shown if f.role == "w"]
    fors = [f.phrase for f in shown if f.role == "f"]
    head = " ".join([sk.brand, *adjs, sk.type_phrase])
    prep = sk.group.mat_prep
    if prep == "with":
        parts = [head, f"with {join_phrases([*sk.materials, *withs])}"]
    else:
        parts = [head, f"{prep} {join_phrases(list(sk.materials))}"]
        parts += [f"with {join_phrases(withs)}"] if withs else []
    if fors:
        parts.append(f"for {join_phrases(fors)}")
    title = title_case(" ".join(parts))
    has_size = any(name == "size" for name, _ in member.options)
    tail = [sk.tag] + ([sk.spec] if sk.spec and not has_size else [])
    spare = [t for t in sk.group.tags if t != sk.tag] + [f"for {u}" for u in sk.uses]
    while word_count(title) + sum(map(word_count, tail)) < 10 and spare:
        tail.append(spare.pop(0))
    for piece in tail:
        if word_count(title) + word_count(piece) <= 30:
            title += " - " + title_case(piece)
    return title


def _attribute_sentence(rng: random.Random, feature: Feature) -> str:
    """A description sentence naming one feature."""
    return rng.choice(ATTRIBUTE_SENTENCES[feature.role]).format(p=feature.phrase)


def _description(rng: random.Random, member: Member) -> str:
    """Intro, benefits, feature sentences, details, use, fillers and closer: 50-200 words."""
    sk = member.skeleton
    mat1, mat2 = sk.materials
    prep = INTRO_VERBS[sk.group.mat_prep]
    intro = sk.intro.format(type=sk.type_phrase, brand=sk.brand, prep=prep, mat1=mat1, mat2=mat2)
    features = [_attribute_sentence(rng, f) for f in member.features if f.spot == "desc"]
    use = sk.use_sentence.format(use=sk.uses[0], use2=sk.uses[1])
    details = [d.format(mat=mat2, use=sk.uses[1], brand=sk.brand) for d in sk.details]
    benefits = [f"{b}." for b in sk.benefits[:3]]
    sentences = [intro, *benefits, *features, *details, use, *sk.fillers, sk.closer]
    while word_count(" ".join(sentences)) > 200 and len(sentences) > 4:
        sentences.pop(-2)
    extra = [f"{b}." for b in sk.benefits[3:]]
    while word_count(" ".join(sentences)) < 50 and extra:
        sentences.insert(1, extra.pop())
    return " ".join(sentences)


def _bullets(member: Member) -> list[str]:
    """``n_bullets`` bullets: one per feature placed in bullets, the rest under generic
    headers; bodies cycle through the benefits, each with a detail sentence."""
    sk = member.skeleton
    bodies = list(sk.benefits[::-1])
    notes = list(sk.notes)
    placed = [f for f in member.features if f.spot == "bullet"]
    leads = [BULLET_LEADS[f.role].format(P=f.phrase.upper()) for f in placed]
    headers = [*sk.headers, *(f"PERFECT FOR {u.upper()}" for u in sk.uses)]
    leads += headers[: max(sk.n_bullets, 3) - len(leads)]
    return [
        f"{lead}: {bodies[i % len(bodies)]}. {notes[i % len(notes)]}"
        for i, lead in enumerate(leads)
    ]


def _instruction(rng: random.Random, member: Member) -> str:
    """A lower-case request naming the type and the instruction attributes (verbatim)."""
    sk = member.skeleton
    roles = {f.phrase: f.role for f in member.features}
    chosen = member.instruction_attributes
    adjs = [p for p in chosen if roles[p] == "a"]
    withs = [p for p in chosen if roles[p] == "w"]
    fors = [p for p in chosen if roles[p] == "f"]
    before = bool(adjs) and rng.random() < 0.6
    core = " ".join([*(adjs if before else []), sk.type_phrase])
    parts = [core]
    if withs:
        parts.append(f"with {join_phrases(withs)}")
    if fors:
        parts.append(f"for {join_phrases(fors)}")
    if adjs and not before:
        verb = "are" if sk.group.plural else "is"
        parts.append(f"that {verb} {join_phrases(adjs)}")
    det = "" if sk.group.plural else article(core) + " "
    return f"{rng.choice(OPENERS)} {det}{' '.join(parts)}".lower()


def _option_record(name: str, values: Sequence[str], asin: str) -> list[dict[str, str]]:
    """``customization_options`` entries of one option group."""
    return [
        {"value": v, "image": IMAGE_URL.format(f"{asin}-{name.replace(' ', '-')}-{i}")}
        for i, v in enumerate(values)
    ]


def _render(rng: random.Random, member: Member, asin: str) -> tuple[dict, dict]:
    """The ``items_shuffle`` record and the ``items_ins_v2`` entry of one product."""
    sk = member.skeleton
    options = {n: _option_record(n, v, asin) for n, v in member.options}
    crumbs = sk.group.crumbs + (CRUMB + sk.leaf if sk.leaf else "")
    record = {
        "asin": asin,
        "name": _title(member),
        "full_description": _description(rng, member),
        "small_description": _bullets(member),
        "pricing": member.pricing,
        "customization_options": options or None,
        "images": [IMAGE_URL.format(asin)],
        "category": sk.group.category,
        "query": sk.group.query,
        "product_category": crumbs,
    }
    entry: dict[str, Any] = {"attributes": [f.phrase for f in member.features if f.place != "text"]}
    if member.instructed:
        entry["instruction"] = _instruction(rng, member)
        entry["instruction_attributes"] = list(member.instruction_attributes)
    else:
        entry["instruction_attributes"] = []
    return record, entry


def _asins(rng: random.Random, n: int) -> list[str]:
    """``n`` unique ASINs ``"B0" + 8`` upper-case letters and digits."""
    seen: set[str] = set()
    out = []
    while len(out) < n:
        asin = "B0" + "".join(rng.choices(ASIN_ALPHABET, k=8))
        if asin not in seen:
            seen.add(asin)
            out.append(asin)
    return out


def noun_lexicon(titles: Sequence[str]) -> list[str]:
    """The sorted noun words of ``titles`` (see :func:`title_nouns`)."""
    return sorted({w for t in titles for w in title_nouns(t)})


def synthetic_records(seed: int, num_products: int) -> tuple[list[dict], dict, list[str]]:
    """``(items_shuffle records, items_ins_v2 mapping, noun lexicon)`` of a seed."""
    if num_products < 1:
        raise ValueError(f"num_products must be >= 1, got {num_products}")
    rng = random.Random(seed)
    groups = choose_groups(rng, num_products)
    base, extra = divmod(num_products, len(groups))
    members: list[Member] = []
    for i, group in enumerate(groups):
        members += _plan_group(rng, group, base + (i < extra))
    rng.shuffle(members)
    records, attributes = [], {}
    for member, asin in zip(members, _asins(rng, len(members)), strict=True):
        record, entry = _render(rng, member, asin)
        records.append(record)
        attributes[asin] = entry
    return records, attributes, noun_lexicon([r["name"] for r in records])


def _write_json(path: Path, data: Any) -> None:
    """One-line UTF-8 JSON with a fixed layout (byte-identical for equal data)."""
    path.write_text(json.dumps(data, indent=None, ensure_ascii=False) + "\n", encoding="utf-8")


def write_synthetic_catalogue(
    folder: str | Path, *, seed: int = 0, num_products: int = 1000
) -> Path:
    """Write the four WebShop data files of ``seed`` into ``folder`` (created); returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    records, attributes, nouns = synthetic_records(seed, num_products)
    _write_json(folder / ITEMS_FILE, records)
    _write_json(folder / ATTRIBUTES_FILE, attributes)
    _write_json(folder / HUMAN_INSTRUCTIONS_FILE, {})
    _write_json(folder / NOUNS_FILE, nouns)
    return folder
