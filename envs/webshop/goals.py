"""WebShop goals: the product prices, the synthetic goals and the fixed train/test split
(docs/environments.md §6.2).

As in the original, with one ``random.Random(seed)`` standing for its seeded global RNG:

* ``prices``: a product's price is its single price, or ``uniform(low, high)`` for a range, drawn
  in catalogue order;
* ``synthetic_goals``: every product with an instruction gives one goal per combination of its
  option values (Cartesian product over the sorted option names). The text is
  ``instruction + " with name1: v1, and name2: v2" + price clause``; the price bound ``U`` is the
  larger of two draws from the next four multiples of 10 above the price (fewer than two such
  multiples: no clause and ``U = 1e6``);
* the goal list is shuffled by ``random.Random(seed)``; test = the first ``test_size`` goals,
  as the original's; validation = the next ``validation_size`` (ours: the original has none),
  train = the rest.

The original built prices, goals and the shuffle once per worker, seeded by the worker's group, so
its "first 500" differed between workers and training goals leaked into validation. Here one seed
(``env.webshop.goal_seed``) makes one partition for every worker and purpose.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Sequence

from envs.webshop.catalogue import Catalogue, Product

PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))  # the price-bound candidates
NO_PRICE_BOUND = 1_000_000.0
TEST_SIZE = 500
SPLITS = ("train", "validation", "test")


class SplitError(ValueError):
    """Too few goals for the requested test and validation splits (one line)."""


@dataclasses.dataclass(frozen=True)
class Goal:
    """What a shopper is asked to buy, and what the reward compares the purchase with."""

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: tuple[tuple[str, str], ...]  # (option name, value), names sorted
    price_upper: float
    name: str  # the target product's title (the type factor's nouns come from it)
    query: str
    category: str
    product_category: str


def prices(catalogue: Catalogue, rng: random.Random) -> dict[str, float]:
    """Each product's price, ranges drawn uniformly with ``rng`` in catalogue order."""
    out = {}
    for p in catalogue.products:
        out[p.asin] = p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2])
    return out


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """``(U, clause)``: the larger of two draws from the next four multiples of 10 above
    ``price``, or ``(1e6, "")`` when fewer than two exist."""
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_BOUND, ""
    upper = max(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def option_combinations(product: Product) -> list[tuple[tuple[str, str], ...]]:
    """Every choice of one value per option, names sorted (one empty choice without options)."""
    options = product.option_map
    names = sorted(options)
    return [
        tuple(zip(names, combo, strict=True))
        for combo in itertools.product(*(options[n] for n in names))
    ]


def goals_of(product: Product, price: float, rng: random.Random) -> list[Goal]:
    """The synthetic goals of one product (none without an instruction)."""
    if product.instruction is None:
        return []
    upper, price_text = price_bound(price, rng)
    goals = []
    for combo in option_combinations(product):
        option_text = ", and ".join(f"{k}: {v}" for k, v in combo)
        option_text = f" with {option_text}" if option_text else ""
        goals.append(
            Goal(
                asin=product.asin,
                instruction_text=f"{product.instruction}{option_text}{price_text}",
                attributes=product.instruction_attributes,
                goal_options=combo,
                price_upper=upper,
                name=product.title,
                query=product.query,
                category=product.category,
                product_category=product.product_category,
            )
        )
    return goals


@dataclasses.dataclass(frozen=True)
class GoalSet:
    """The prices and the shuffled goals of one seed, split into test (first), validation
    (next) and train (the rest)."""

    prices: dict[str, float]
    goals: tuple[Goal, ...]
    test_size: int
    validation_size: int = 0

    @property
    def test(self) -> tuple[Goal, ...]:
        return self.goals[: self.test_size]

    @property
    def validation(self) -> tuple[Goal, ...]:
        return self.goals[self.test_size : self.test_size + self.validation_size]

    @property
    def train(self) -> tuple[Goal, ...]:
        return self.goals[self.test_size + self.validation_size :]

    def split(self, name: str) -> tuple[Goal, ...]:
        """``"train"``, ``"validation"`` or ``"test"``."""
        if name not in SPLITS:
            raise ValueError(f"goal split must be one of {', '.join(SPLITS)}, got {name!r}")
        return getattr(self, name)


def synthetic_goals(
    catalogue: Catalogue, seed: int, test_size: int = TEST_SIZE, validation_size: int = 0
) -> GoalSet:
    """Prices, goals and the one fixed split of ``seed`` (see module doc). Fewer goals than
    ``test_size + validation_size + 1`` is a :class:`SplitError` (no training goal left)."""
    rng = random.Random(seed)
    product_prices = prices(catalogue, rng)
    goals: list[Goal] = []
    for product in catalogue.products:
        goals += goals_of(product, product_prices[product.asin], rng)
    random.Random(seed).shuffle(goals)
    if len(goals) <= test_size + validation_size:
        raise SplitError(
            f"{catalogue.source or 'catalogue'}: {len(goals)} goals, need more than the "
            f"{test_size} test and {validation_size} validation goals"
        )
    return GoalSet(product_prices, tuple(goals), test_size, validation_size)


def goal_for(goals: Sequence[Goal], seed: int) -> Goal:
    """The goal ``reset(seed)`` plays: ``goals[seed % len(goals)]``."""
    return goals[int(seed) % len(goals)]
