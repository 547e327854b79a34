"""WebShop data: the loader on files written in the real schema (items_shuffle_1000.json,
items_ins_v2_1000.json), the goals built as the original builds them, the one fixed split and the
one-line errors (docs/environments.md §6.1, §6.2)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from envs.webshop.catalogue import (
    ATTRIBUTES_FILE,
    ITEMS_FILE,
    CatalogueError,
    load_catalogue,
    parse_pricing,
)
from envs.webshop.goals import NO_PRICE_BOUND, price_bound, synthetic_goals
from envs.webshop.shop import DATA_ENV_VAR, ShopSource, read_catalogue
from tests.helpers.webshop_fixture import ATTRIBUTES, RECORDS


def write_data(folder, records=RECORDS, attributes=ATTRIBUTES):
    (folder / ITEMS_FILE).write_text(json.dumps(records))
    (folder / ATTRIBUTES_FILE).write_text(json.dumps(attributes))
    return folder


@pytest.fixture
def data_dir(tmp_path):
    bad = [
        {**RECORDS[0], "asin": "nan"},  # skipped
        {**RECORDS[0], "asin": "B0TOOLONG123"},  # longer than 10: skipped
        RECORDS[1],  # a duplicate of RECORDS[1] below: the first is kept
    ]
    return write_data(tmp_path, bad + RECORDS)


def test_loader_applies_the_original_rules(data_dir):
    catalogue = load_catalogue(data_dir)
    assert [p.asin for p in catalogue.products] == [
        "B0AAAAAAA2",
        "B0AAAAAAA1",
        "B0AAAAAAA3",
        "B0AAAAAAA4",
    ]
    cream = catalogue.get("B0AAAAAAA1")
    assert cream.options == (
        ("size", ("1.7 ounce", "3.4 ounce")),
        ("color", ("natural | beige", "ivory")),
    )
    assert (cream.pricing, cream.price_tag) == ((12.99,), "$12.99")
    gel = catalogue.get("B0AAAAAAA3")
    assert (gel.pricing, gel.price_tag, gel.instruction) == ((100.0,), "$100.0", None)
    assert gel.options == () and gel.attributes == ("spf 30",)
    assert catalogue.get("B0AAAAAAA4").query == "desk lamp"
    assert cream.bullets[0].endswith("bullet one") and cream.product_category.count("›") == 3


@pytest.mark.parametrize(
    ("pricing", "expected"),
    [
        ("$12.99", ((12.99,), "$12.99")),
        ("$10.00 - $20.50", ((10.0, 20.5), "$10.0 to $20.5")),
        ("$1,299.00", ((1299.0,), "$1299.0")),
        ("", ((100.0,), "$100.0")),
        (None, ((100.0,), "$100.0")),
    ],
)
def test_pricing(pricing, expected):
    assert parse_pricing(pricing) == expected


def test_goals_are_the_original_construction(data_dir):
    """Cartesian product over sorted option names, the price clause, the seeded shuffle."""
    catalogue = load_catalogue(data_dir)
    goals = synthetic_goals(catalogue, seed=7, test_size=2)
    cream = [g for g in goals.goals if g.asin == "B0AAAAAAA1"]
    combos = {g.goal_options for g in cream}
    expected = set(
        itertools.product(
            [("color", "natural | beige"), ("color", "ivory")],
            [("size", "1.7 ounce"), ("size", "3.4 ounce")],
        )
    )
    assert combos == expected and len(cream) == 4
    one = next(g for g in cream if g.goal_options == (("color", "ivory"), ("size", "3.4 ounce")))
    # 12.99: the next four multiples of 10 are 20..50; the larger of two draws is 30, 40 or 50
    assert one.price_upper in (30.0, 40.0, 50.0)
    assert one.instruction_text == (
        "i need a face moisturizer cream for dry skin with color: ivory, and size: 3.4 ounce, "
        f"and price lower than {one.price_upper:.2f} dollars"
    )
    assert (
        one.attributes == ("dry skin", "paraben free")
        and one.name == catalogue.get("B0AAAAAAA1").title
    )
    # no instruction (B0AAAAAAA3): no goal; the lamp: one goal per style; the lotion: one goal
    assert {g.asin for g in goals.goals} == {"B0AAAAAAA1", "B0AAAAAAA2", "B0AAAAAAA4"}
    assert len(goals.goals) == 4 + 1 + 2
    again = synthetic_goals(load_catalogue(data_dir), seed=7, test_size=2)
    assert again == goals and synthetic_goals(catalogue, seed=8, test_size=2).goals != goals.goals


def test_price_bound_rule():
    rng = random.Random(0)
    for _ in range(50):
        upper, clause = price_bound(12.99, rng)
        assert (
            upper in (30.0, 40.0, 50.0) and clause == f", and price lower than {upper:.2f} dollars"
        )
    assert price_bound(975.0, rng)[0] == 990.0  # exactly two multiples above: 980, 990
    assert price_bound(985.0, rng) == (NO_PRICE_BOUND, "")  # only 990 above: no clause


def test_one_fixed_partition(data_dir):
    """Every worker reads the same split: the test goals are the first ``test_size``."""
    goals = synthetic_goals(load_catalogue(data_dir), seed=0, test_size=3)
    assert goals.test == goals.goals[:3] and goals.train == goals.goals[3:]
    assert not {id(g) for g in goals.test} & {id(g) for g in goals.train}
    with pytest.raises(
        ValueError, match="7 goals, need more than the 7 test and 0 validation goals"
    ):
        synthetic_goals(load_catalogue(data_dir), seed=0, test_size=7)


def test_data_folder_from_environment_variable(data_dir, monkeypatch):
    monkeypatch.setenv(DATA_ENV_VAR, str(data_dir))
    catalogue, lexicon = read_catalogue(ShopSource(data="files"))
    assert len(catalogue) == 4 and lexicon == str(data_dir / "nouns.json")
    monkeypatch.delenv(DATA_ENV_VAR)
    with pytest.raises(CatalogueError, match=r"set env\.data_path or \$WEBSHOP_DATA"):
        read_catalogue(ShopSource(data="files"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: (d / ITEMS_FILE).unlink(),
            "WebShop data file not found: .*items_shuffle_1000.json",
        ),
        (
            lambda d: (d / ATTRIBUTES_FILE).write_text("{oops"),
            "items_ins_v2_1000.json: not readable JSON",
        ),
        (lambda d: (d / ITEMS_FILE).write_text("{}"), "expected a JSON list, got dict"),
        (
            lambda d: write_data(d, [{k: v for k, v in RECORDS[0].items() if k != "query"}]),
            r"product 0 \(B0AAAAAAA1\): missing key 'query'",
        ),
        (lambda d: write_data(d, [{**RECORDS[0], "pricing": "$abc$"}]), "product 0 .*pricing"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, change, message):
    write_data(tmp_path)
    change(tmp_path)
    with pytest.raises(CatalogueError, match=message) as info:
        load_catalogue(tmp_path)
    assert "\n" not in str(info.value)
