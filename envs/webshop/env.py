"""One WebShop session at a time (docs/environments.md §6.5–§6.7).

:class:`WebShopEnv` is a :class:`envs.base.TextEnv`; the host pool (``envs.pool``) or
``envs.local.LocalEnvBatch`` runs N of them, built by the picklable :class:`WebShopFactory`.

* ``reset(seed)`` plays goal ``seed % len(goals)`` of the factory's split (``train`` or
  ``test``): equal seeds give the same goal (a GRPO group shares it). The start page is the
  search page.
* ``step(action)``: the action is parsed with the original's pattern ``(.+)\\[(.+)\\]``;
  ``search[<keywords>]`` searches from any page; ``click[<text>]`` clicks one of the current
  page's clickables (``click[search]`` is refused). Anything else does nothing: the
  observation stays, reward 0, not done.
* Navigation: ``back to search`` returns to the start page; ``next >`` / ``< prev`` page the
  results; ``< prev`` on an item goes back to the results (a new search: the options reset), on
  a sub-page back to the item; a product opens its item page; an option value selects it;
  ``description`` / ``features`` / ``reviews`` open the sub-pages; ``buy now`` ends the episode.
* Reward: on ``buy now`` the purchase is scored (:func:`envs.webshop.reward.purchase_score`);
  the environment reward is 10 when the score is exactly 1.0, else 0. ``info`` always holds
  ``won`` and ``task_score`` (0 until a purchase), and after a purchase the score's parts.
  An episode not ended by a purchase ends after ``max_steps`` steps with reward 0.
* Observation: the page formatted as ARLArena's manager does (quoted parts after the
  instruction), the available actions as ``admissible`` and the instruction as ``task``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from envs.base import Observation
from envs.webshop import pages
from envs.webshop.goals import Goal, goal_for
from envs.webshop.pages import Page
from envs.webshop.shop import Shop, ShopSource, load_shop

MAX_STEPS = 15
WIN_REWARD = 10.0
SEARCH_RESULTS = 50
ACTION_PATTERN = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple[str, str | None]:
    """``(name, argument)`` by the original's pattern; no match: ``(action, None)``."""
    match = ACTION_PATTERN.match(action)
    return (action, None) if match is None else (match.group(1), match.group(2))


@dataclasses.dataclass(frozen=True)
class WebShopFactory:
    """Builds a :class:`WebShopEnv` over one goal split (picklable: pool workers call it)."""

    source: ShopSource
    split: str = "train"
    max_steps: int = MAX_STEPS

    def __call__(self) -> WebShopEnv:
        return WebShopEnv(load_shop(self.source), split=self.split, max_steps=self.max_steps)


@dataclasses.dataclass
class Session:
    """Where the shopper is: the page, the last search, the open product and chosen options."""

    page: Page
    keywords: str = ""
    results: tuple[str, ...] = ()
    page_number: int = 1
    asin: str | None = None
    options: dict[str, str] = dataclasses.field(default_factory=dict)


class WebShopEnv:
    """The WebShop text environment (see module doc)."""

    def __init__(self, shop: Shop, *, split: str = "train", max_steps: int = MAX_STEPS) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.shop = shop
        self.goals = shop.goals.split(split)
        self.max_steps = max_steps
        self.goal: Goal | None = None
        self.session = Session(pages.done_page())
        self._steps = 0
        self._done = True
        self._info: dict[str, Any] = {"won": False, "task_score": 0.0}

    def goal_of(self, seed: int) -> Goal:
        """The goal ``reset(seed)`` plays."""
        return goal_for(self.goals, seed)

    @property
    def info(self) -> dict[str, Any]:
        """The latest step's info (``won``, ``task_score``, the score's parts after a purchase)."""
        return dict(self._info)

    @property
    def instruction(self) -> str:
        return self.goal.instruction_text if self.goal else ""

    def observation(self) -> Observation:
        """The current page as the agent sees it."""
        page = self.session.page
        return Observation(
            text=pages.format_page(page.parts, self.instruction),
            admissible=page.available_actions(),
            task=self.instruction,
        )

    def reset(self, seed: int) -> Observation:
        """Start the goal of ``seed`` on the search page."""
        self.goal = self.goal_of(seed)
        self.session = Session(pages.search_page(self.instruction))
        self._steps, self._done = 0, False
        self._info = {"won": False, "task_score": 0.0}
        return self.observation()

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Apply one action (see module doc)."""
        if self._done:
            return self.observation(), 0.0, True, dict(self._info)
        self._steps += 1
        reward = self._apply(str(action))
        self._done = self._done or self._steps >= self.max_steps
        return self.observation(), reward, self._done, dict(self._info)

    def _apply(self, action: str) -> float:
        name, arg = parse_action(action)
        arg = arg.lower() if arg is not None else None
        if name == "search" and arg:
            self._search(arg)
        elif name == "click" and arg in self.session.page.clickables and arg != "search":
            return self._click(arg)
        return 0.0

    def _search(self, keywords: str) -> None:
        """A new search: the top 50 products of the catalogue for ``keywords``."""
        found = self.shop.search(keywords, SEARCH_RESULTS)
        results = tuple(a for a in found if a in self.shop.catalogue)
        self.session = Session(pages.done_page(), keywords=keywords, results=results)
        self._show_results(1)

    def _show_results(self, number: int) -> None:
        """Results page ``number`` of the last search; the open product and options reset."""
        s = self.session
        shown = [self.shop.catalogue.get(a) for a in pages.page_products(s.results, number)]
        page = pages.results_page(self.instruction, shown, number, len(s.results))
        self.session = Session(page, s.keywords, s.results, number)

    def _show_item(self) -> None:
        product = self.shop.catalogue.get(self.session.asin)
        self.session.page = pages.item_page(self.instruction, product)

    def _click(self, text: str) -> float:
        s = self.session
        target = s.page.clickables[text]
        if text == pages.BUY_NOW.lower():
            return self._buy()
        if text == pages.BACK_TO_SEARCH.lower():
            self.session = Session(pages.search_page(self.instruction))
        elif text == pages.NEXT.lower() and s.page.kind == "results":
            self._show_results(s.page_number + 1)
        elif text == pages.PREV.lower() and s.page.kind == "results":
            self._show_results(s.page_number - 1)
        elif text == pages.PREV.lower() and s.page.kind == "item":
            self._show_results(s.page_number)
        elif text in ("description", "features", "reviews"):
            product = self.shop.catalogue.get(s.asin)
            s.page = pages.sub_page(self.instruction, product, text)
        else:  # a product, an option, or < prev on a sub-page: the item page
            if target.kind == "product":
                s.asin = target.value
            elif target.kind == "option":
                s.options[target.value] = text
            self._show_item()
        return 0.0

    def _buy(self) -> float:
        """Score the purchase of the open product with the chosen options; the episode ends."""
        from envs.webshop.reward import purchase_score, task_reward

        s = self.session
        product = self.shop.catalogue.get(s.asin)
        price = self.shop.goals.prices[s.asin]
        info = purchase_score(product, self.goal, price, dict(s.options), self.shop.nouns)
        reward = task_reward(info.score)
        self._info = {
            "won": reward > 0,
            "task_score": float(info.score),
            "asin": s.asin,
            **_parts(info),
        }
        self._done = True
        s.page = pages.done_page()
        return reward

    def close(self) -> None:
        """Nothing to release (the shop is shared by the process)."""


def _parts(info: Any) -> dict[str, float]:
    """The score's numeric parts (a missing part, e.g. no options, left out)."""
    keys = ("r_type", "r_att", "r_option", "r_price", "title_score")
    return {k: float(getattr(info, k)) for k in keys if getattr(info, k, None) is not None}
