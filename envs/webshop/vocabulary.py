"""The word tables of the synthetic WebShop catalogue (docs/environments.md §6.8): 60 query groups,
12 per category, each with breadcrumbs, type phrases, attribute phrases by grammatical role,
materials, benefits, uses, title tags, option pools and a price range; the sentences shared by a
category; and the title words that are not nouns (``NON_NOUNS``, reviewed against spaCy's tags).
Data only: :mod:`envs.webshop.synthetic` draws from it."""

from __future__ import annotations

import dataclasses
from typing import Any


def _words(text: str) -> tuple[str, ...]:
    """The whitespace-separated words of ``text``."""
    return tuple(text.split())


def _split(text: str) -> tuple[str, ...]:
    """``"a|b|c"`` -> ``("a", "b", "c")`` (an empty string is a valid item: ``"|x"``)."""
    return tuple(text.split("|"))


@dataclasses.dataclass(frozen=True)
class Group:
    """One shopping query and the word lists its products are written from."""

    query: str
    category: str
    crumbs: str  # the levels every product of the group shares
    leaves: tuple[str, ...]  # the last level(s), one per product ("" adds none)
    types: tuple[str, ...]  # type phrases, each containing the query's head noun
    plural: bool  # the type phrases are plural ("protein bars")
    adj: tuple[str, ...]  # attribute phrases used as adjectives
    with_: tuple[str, ...]  # attribute phrases used after "with"
    for_: tuple[str, ...]  # attribute phrases used after "for"
    materials: tuple[str, ...]
    mat_prep: str  # "with", "made of", "from": how the title joins the materials
    benefits: tuple[str, ...]  # sentences without a subject ("Locks in moisture for hours")
    uses: tuple[str, ...]
    tags: tuple[str, ...]  # title tails ("Hydrating Day Cream")
    specs: tuple[str, ...]  # title ends when the product has no size option ("" = none)
    options: tuple[str, ...]  # keys of OPTION_POOLS
    price: tuple[float, float]

    @property
    def head(self) -> str:
        """The type noun every title of the group contains: the query's last word."""
        return self.query.split()[-1]

    @property
    def attributes(self) -> tuple[tuple[str, str], ...]:
        """Every attribute phrase with its role (``a``, ``w``, ``f``)."""
        return (
            tuple((p, "a") for p in self.adj)
            + tuple((p, "w") for p in self.with_)
            + tuple((p, "f") for p in self.for_)
        )


def _group(query: str, category: str, crumbs: str, leaves: str, types: str, **kw: Any) -> Group:
    """A :class:`Group` from ``|``-separated strings (see the table below)."""
    lists = {k: _split(v) for k, v in kw.items() if isinstance(v, str) and k != "mat_prep"}
    return Group(
        query=query,
        category=category,
        crumbs=crumbs,
        leaves=_split(leaves),
        types=_split(types),
        plural=kw.get("plural", False),
        adj=lists["adj"],
        with_=lists["with_"],
        for_=lists["for_"],
        materials=lists["materials"],
        mat_prep=kw.get("mat_prep", "with"),
        benefits=lists["benefits"],
        uses=lists["uses"],
        tags=lists["tags"],
        specs=lists.get("specs", ("",)),
        options=lists["options"],
        price=kw["price"],
    )


# Option pools: key -> (option name, values). Colour words (the reward's COLOR_SET) only occur
# as whole words, so that its colour normalisation keeps a value matchable.
OPTION_POOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    k: (name, _split(values))
    for k, (name, values) in {
        "oz_small": ("size", "0.5 Fl Oz|1 Fl Oz|1.7 Fl Oz|2 Fl Oz|3.4 Fl Oz|4 Fl Oz|6.7 Fl Oz"),
        "oz_large": ("size", "8 Fl Oz|12 Fl Oz|16.9 Fl Oz|25.4 Fl Oz|33.8 Fl Oz"),
        "scent": (
            "scent",
            "Unscented|Lavender|Rose/Vanilla|Coconut|Eucalyptus/Mint|Citrus Bloom|Fresh Linen|"
            "Amber Musk",
        ),
        "beauty_pack": ("item package quantity", "Pack of 1|Pack of 2|Pack of 3|Pack of 4"),
        "lip_color": (
            "color",
            "Ruby Red|Nude Pink|Berry/Plum|Coral Crush|Mauve|Classic Red|Brick Brown|Soft Peach",
        ),
        "palette": (
            "style",
            "Warm Neutrals|Smoky Nude|Rose Gold|Sunset/Bronze|Cool Berry|Desert Dusk",
        ),
        "nail_color": (
            "color",
            "Candy Pink|Midnight Blue|Cherry Red|Nude/Beige|Lilac|Glitter Gold|Jet Black|"
            "Mint Green",
        ),
        "dryer_color": ("color", "Black|Rose Gold|White/Silver|Blush Pink|Navy|Champagne"),
        "brush_color": ("color", "Rose Gold|Black/Gold|Champagne|Marble White|Lavender"),
        "balm_scent": ("scent", "Cedarwood/Vanilla|Unscented|Bay Rum|Pine|Citrus"),
        "toothpaste_flavor": (
            "flavor name",
            "Fresh Mint|Cool Mint|Cinnamon|Charcoal/Mint|Herbal",
        ),
        "bar_flavor": (
            "flavor name",
            "Chocolate Chip|Peanut Butter|Cookie Dough|Salted Caramel|Birthday Cake|"
            "Mint/Chocolate|Lemon Cake",
        ),
        "bar_count": ("size", "4 Count|12 Count|15 Count|20 Count|24 Count"),
        "coffee_size": ("size", "12 Ounce|16 Ounce|32 Ounce|2 Pound|5 Pound"),
        "coffee_flavor": (
            "flavor name",
            "Original|Hazelnut|French Vanilla|Mocha/Caramel|Breakfast Blend",
        ),
        "grind": ("style", "Whole Bean|Ground|Fine Espresso Grind"),
        "tea_flavor": ("flavor name", "Original|Jasmine|Mint|Honey/Ginger|Lemon|Matcha"),
        "tea_count": ("size", "20 Count|40 Count|100 Count|Loose 8 Ounce"),
        "oil_size": ("size", "16.9 Fl Oz|25.5 Fl Oz|34 Fl Oz|51 Fl Oz|68 Fl Oz"),
        "choc_flavor": (
            "flavor name",
            "Sea Salt|Almond|Orange|Mint|Raspberry/Chili|Espresso|Coconut",
        ),
        "jerky_flavor": (
            "flavor name",
            "Original|Teriyaki|Black Pepper|Sweet/Spicy|Hickory Smoked|Sriracha",
        ),
        "oz_food": ("size", "2.85 Ounce|3.25 Ounce|8 Ounce|10 Ounce|16 Ounce"),
        "granola_flavor": (
            "flavor name",
            "Honey Almond|Maple/Pecan|Dark Chocolate|Vanilla Berry|Coconut Almond",
        ),
        "sauce_flavor": (
            "flavor name",
            "Marinara|Tomato Basil|Arrabbiata|Roasted Garlic|Vodka/Cream",
        ),
        "food_pack": ("item package quantity", "Pack of 1|Pack of 2|Pack of 3|Pack of 6"),
        "nut_style": ("style", "Low Salt|Unsalted|Sea Salt/Pepper|Honey Roasted"),
        "nut_size": ("size", "1 Pound|2 Pound|3 Pound|40 Ounce"),
        "honey_size": ("size", "12 Ounce|16 Ounce|32 Ounce|5 Pound"),
        "water_flavor": ("flavor name", "Lime|Grape|Black Cherry|Lemon/Lime|Peach|Plain"),
        "can_count": ("size", "8 Count|12 Count|18 Count|24 Count"),
        "spice_flavor": (
            "flavor name",
            "Original|Smoky Paprika|Garlic/Herb|Lemon Pepper|Cajun",
        ),
        "spice_size": ("size", "4 Ounce|6.5 Ounce|11 Ounce|16 Ounce"),
        "apparel_color": (
            "color",
            "Black|White|Navy Blue|Heather Grey|Black/White|Olive Green|Burgundy|Khaki|"
            "Light Blue|Charcoal",
        ),
        "apparel_size": ("size", "X-Small|Small|Medium|Large|X-Large|XX-Large"),
        "fit": ("fit type", "Regular|Tall|Petite"),
        "shoe_size": ("size", "6|6.5|7|7.5|8|8.5|9|9.5|10|11|12"),
        "jeans_color": ("color", "Dark Indigo|Light Indigo|Black|Medium Indigo|Vintage Blue|Grey"),
        "jeans_size": ("size", "28W x 30L|30W x 30L|32W x 32L|34W x 32L|36W x 30L|38W x 32L"),
        "dress_pattern": ("pattern name", "Solid|Floral|Polka Dot|Striped|Leopard"),
        "sock_pack": ("item package quantity", "3 Pairs|6 Pairs|10 Pairs|12 Pairs"),
        "bag_color": ("color", "Black|Brown|Beige/Tan|Burgundy|Grey|Dusty Pink|Cognac"),
        "lens_color": (
            "color",
            "Black Frame/Grey Lens|Gold Frame/Green Lens|Silver/Blue Mirror|Tortoise/Brown|"
            "Matte Black/Red",
        ),
        "watch_color": ("color", "Silver/Black|Gold/White|Rose Gold|Black/Brown|Blue Dial"),
        "wood_color": ("color", "Espresso|Walnut|White|Black|Rustic Brown|Grey/Oak|Natural"),
        "fabric_color": (
            "color",
            "Grey|Beige|Navy Blue|Dark Green|Light Grey/Linen|Cream|Charcoal",
        ),
        "bed_size": ("size", "Twin|Full|Queen|King"),
        "set_count": ("item package quantity", "Set of 2|Set of 4|Set of 6"),
        "desk_size": ("size", "32 Inch|40 Inch|47 Inch|55 Inch|63 Inch"),
        "stool_height": ("size", "24 Inch|26 Inch|29 Inch|30 Inch"),
        "tier": ("style", "3 Tier|4 Tier|5 Tier|6 Tier"),
        "tv_stand_size": ("size", "55 Inch|60 Inch|65 Inch|70 Inch"),
        "recliner_style": ("style", "Manual|Power|Power/Massage"),
        "tech_color": ("color", "Black|White|Navy/Blue|Rose Gold|Midnight Green|Silver"),
        "phone_model": ("size", "iPhone 13|iPhone 14|iPhone 14 Pro|iPhone 15|Galaxy S23|Pixel 8"),
        "case_color": ("color", "Clear|Black|Navy Blue|Pink/Purple|Forest Green|Lavender"),
        "capacity": ("style", "5000mAh|10000mAh|20000mAh|26800mAh"),
        "cable_length": ("size", "3 Feet|6 Feet|10 Feet|15 Feet|25 Feet"),
        "cable_pack": ("item package quantity", "1 Pack|2 Pack|3 Pack|5 Pack"),
        "hub_ports": ("style", "5 in 1|7 in 1|8 in 1|10 in 1"),
        "tv_size": ("size", "32 Inch|43 Inch|50 Inch|55 Inch|65 Inch|75 Inch"),
        "laptop_config": ("style", "8GB/256GB SSD|16GB/512GB SSD|16GB/1TB SSD|32GB/1TB SSD"),
        "laptop_color": ("color", "Silver|Space Grey|Midnight Black"),
        "camera_pack": ("item package quantity", "1 Camera|2 Cameras|4 Cameras"),
        "band_color": ("color", "Black|Pink|Navy|Olive/Green|Grey|Teal"),
        "switch": ("style", "Red Switch|Blue Switch|Brown Switch|Silent Switch"),
        "kb_color": ("color", "Black|White|Pink/White|Grey/Blue"),
    }.items()
}

BEAUTY, FOOD, FASHION = "beauty", "food", "fashion"
FURNITURE, ELECTRONICS = "furniture", "electronics"
BPC = "Beauty & Personal Care"
GGF = "Grocery & Gourmet Food"
CSJ = "Clothing, Shoes & Jewelry"
HKF = "Home & Kitchen › Furniture"
CAP = "Electronics › Computers & Accessories › Computer Accessories & Peripherals"

GROUPS: tuple[Group, ...] = (
    # ---------------------------------------------------------------- beauty
    _group(
        "face moisturizer", BEAUTY, f"{BPC} › Skin Care › Face",
        "Creams & Moisturizers|Moisturizers|Night Creams",
        "face moisturizer|facial moisturizer|moisturizer cream|daily face moisturizer",
        adj="paraben free|fragrance free|oil free|non comedogenic|cruelty free|"
        "dermatologist tested",
        with_="hyaluronic acid|vitamin c|spf 30|retinol|ceramides",
        for_="sensitive skin|dry skin|oily skin|combination skin|mature skin",
        materials="shea butter|aloe vera|squalane|jojoba oil|green tea extract|niacinamide|"
        "rose water",
        benefits="Locks in moisture for up to 24 hours|Absorbs quickly without a sticky feel|"
        "Helps smooth the look of fine lines|Leaves the face soft, calm and glowing|"
        "Supports the natural moisture barrier|Layers easily under makeup",
        uses="morning and night routines|daily wear under makeup|travel bags|overnight care",
        tags="Hydrating Day Cream|Facial Lotion for Women and Men|Gentle Face Cream|"
        "Daily Hydration Lotion",
        specs="Pump Bottle|Glass Jar|Tube|",
        options="oz_small|scent|beauty_pack", price=(9.0, 58.0),
    ),
    _group(
        "shampoo", BEAUTY, f"{BPC} › Hair Care › Shampoo & Conditioner",
        "Shampoos|Shampoo & Conditioner Sets",
        "shampoo|hair shampoo|clarifying shampoo|moisturizing shampoo",
        adj="sulfate free|color safe|silicone free|paraben free|vegan|salon quality",
        with_="biotin|keratin|argan oil|tea tree oil|caffeine",
        for_="curly hair|fine hair|dry scalp|thinning hair|color treated hair",
        materials="coconut oil|rosemary oil|peppermint|aloe vera|rice water|panthenol",
        benefits="Cleanses gently without stripping natural oils|"
        "Adds volume and shine from root to tip|Helps reduce frizz and flyaways|"
        "Leaves strands soft and easy to comb|Rinses clean with a rich lather|"
        "Refreshes the scalp after every shower",
        uses="daily washing|post workout showers|salon care at home",
        tags="Hair Care for Women and Men|Daily Cleansing Shampoo|Volumizing Hair Cleanser",
        specs="Salon Size|Pump Bottle|",
        options="oz_large|scent|beauty_pack", price=(7.0, 36.0),
    ),
    _group(
        "lipstick", BEAUTY, f"{BPC} › Makeup › Lips", "Lipstick|Lip Color",
        "lipstick|matte lipstick|liquid lipstick|cream lipstick",
        adj="long lasting|highly pigmented|waterproof|smudge proof|transfer proof|cruelty free",
        with_="vitamin e|satin finish|precision applicator|built in mirror",
        for_="all day wear|everyday looks|special occasions",
        materials="shea butter|jojoba oil|beeswax|avocado oil|rosehip oil",
        benefits="Glides on smoothly in one swipe|Delivers rich color that stays put|"
        "Keeps lips soft and comfortable|Will not feather or bleed|"
        "Wears for hours without drying",
        uses="date nights|office days|weddings and parties",
        tags="Lip Color for Women|Bold Lip Makeup|Velvet Lip Color",
        specs="Single Stick|Mini Size|",
        options="lip_color|beauty_pack", price=(5.0, 28.0),
    ),
    _group(
        "eyeshadow palette", BEAUTY, f"{BPC} › Makeup › Eyes", "Eyeshadow|Eyeshadow Palettes",
        "eyeshadow palette|eye shadow palette|shimmer palette|makeup palette",
        adj="highly pigmented|long lasting|blendable|crease resistant|cruelty free|talc free",
        with_="matte and shimmer shades|mirror|dual ended brush|glitter shades",
        for_="beginners|professional makeup artists|everyday looks",
        materials="mica|jojoba oil|vitamin e|pressed pigments",
        benefits="Builds from a sheer tint to a bold look|"
        "Blends easily with fingers or a brush|Stays vibrant from morning to night|"
        "Compact case fits in any makeup bag|Minimal fallout when applied",
        uses="smoky eyes|natural daytime looks|festival makeup",
        tags="Eye Makeup Kit|Nude and Bold Eye Shades|Makeup Gift Set",
        specs="35 Shades|18 Shades|12 Shades|9 Shades",
        options="palette", price=(8.0, 45.0),
    ),
    _group(
        "nail polish", BEAUTY, f"{BPC} › Foot, Hand & Nail Care › Nail Art & Polish",
        "Nail Polish|Gel Nail Polish",
        "nail polish|gel nail polish|nail polish set|nail polish kit",
        adj="quick dry|chip resistant|long lasting|non toxic|high shine|vegan",
        with_="uv gel finish|top coat|base coat|glitter flakes",
        for_="home manicures|nail salons|short nails",
        materials="keratin|vitamin e|calcium|plant based resin",
        benefits="Goes on smooth in two thin coats|Dries to a glossy finish in minutes|"
        "Resists peeling for up to ten days|Removes easily with regular remover|"
        "Wide brush covers each nail in one stroke",
        uses="wedding nails|holiday manicures|everyday color",
        tags="Nail Lacquer for Women|Salon Nail Color|Manicure Set",
        specs="0.5 Fl Oz Bottle|6 Bottle Set|",
        options="nail_color|beauty_pack", price=(4.0, 25.0),
    ),
    _group(
        "hair dryer", BEAUTY, f"{BPC} › Hair Care › Styling Tools & Appliances",
        "Hair Dryers|Hair Dryers & Accessories",
        "hair dryer|ionic hair dryer|blow dryer|travel hair dryer",
        adj="lightweight|low noise|fast drying|foldable|salon grade",
        with_="ionic technology|diffuser attachment|concentrator nozzle|cool shot button|"
        "3 heat settings|ceramic tourmaline",
        for_="curly hair|thick hair|fine hair",
        materials="brushless motor|ac motor|negative ions|heat shield",
        benefits="Cuts drying time in half|Reduces frizz for smooth, shiny results|"
        "Gentle heat protects hair from damage|Long power cord reaches any outlet|"
        "Removable filter is simple to clean",
        uses="daily styling|weekend trips|salon blowouts at home",
        tags="Professional Blow Dryer|Hair Styling Tool for Women|Salon Hair Dryer",
        specs="1875 Watt|1600 Watt|",
        options="dryer_color", price=(18.0, 160.0),
    ),
    _group(
        "perfume", BEAUTY, f"{BPC} › Fragrance",
        "Women's › Eau de Parfum|Women's › Eau de Toilette|Men's › Cologne",
        "perfume|perfume spray|eau de parfum perfume|floral perfume",
        adj="long lasting|alcohol free|travel friendly|unisex|phthalate free",
        with_="vanilla notes|citrus top notes|sandalwood base|jasmine heart|musk undertones",
        for_="date night|office wear|evening events",
        materials="bergamot|pink pepper|amber|white musk|peony",
        benefits="Opens with a bright burst and dries down warm|"
        "Lasts from morning until late evening|Fine mist spreads evenly with each spray|"
        "Elegant glass bottle looks lovely on a vanity|A signature scent that draws compliments",
        uses="daily wear|special dates|holiday gifts",
        tags="Eau de Parfum Spray|Fragrance for Women|Signature Scent Mist",
        specs="3.4 Fl Oz|1.7 Fl Oz|",
        options="oz_small|beauty_pack", price=(15.0, 120.0),
    ),
    _group(
        "sunscreen", BEAUTY, f"{BPC} › Skin Care › Sunscreens & Tanning Products",
        "Sunscreens|Face Sunscreens",
        "sunscreen|mineral sunscreen|sunscreen lotion|face sunscreen",
        adj="water resistant|reef safe|oil free|non greasy|fragrance free|broad spectrum",
        with_="spf 50|spf 30|zinc oxide|vitamin e",
        for_="sensitive skin|kids|outdoor sports|daily use",
        materials="aloe vera|titanium dioxide|green tea extract|shea butter|squalane",
        benefits="Blends in without a white cast|Protects against UVA and UVB rays|"
        "Dries down to a clean matte finish|Stays on through sweat and swimming|"
        "Gentle enough for the whole family",
        uses="beach days|hiking trips|everyday commutes",
        tags="Sun Protection Lotion|Daily Sunblock Cream|Beach Sun Care",
        specs="Tube|Pump Bottle|",
        options="oz_small|beauty_pack", price=(8.0, 35.0),
    ),
    _group(
        "body wash", BEAUTY, f"{BPC} › Personal Care › Bath & Bathing Accessories",
        "Bath › Body Washes|Bath › Bath & Shower Gels",
        "body wash|shower gel body wash|moisturizing body wash|foaming body wash",
        adj="sulfate free|paraben free|hypoallergenic|ph balanced|biodegradable",
        with_="essential oils|shea butter|exfoliating beads|oatmeal",
        for_="dry skin|sensitive skin|eczema prone skin|the whole family",
        materials="coconut oil|aloe vera|glycerin|honey|cocoa butter",
        benefits="Rich lather rinses clean and leaves skin hydrated|"
        "Gentle cleansers lift away dirt and sweat|Light scent lingers after your shower|"
        "Leaves skin feeling smooth all day|Large bottle lasts for weeks",
        uses="morning showers|post workout rinses|relaxing baths",
        tags="Shower Gel for Women and Men|Daily Body Cleanser|Hydrating Shower Soap",
        specs="Pump Bottle|Value Size|",
        options="oz_large|scent|beauty_pack", price=(5.0, 25.0),
    ),
    _group(
        "makeup brush", BEAUTY, f"{BPC} › Tools & Accessories › Makeup Brushes & Tools",
        "Brush Sets|Foundation Brushes",
        "makeup brush set|makeup brush kit|foundation makeup brush|kabuki makeup brush",
        adj="cruelty free|vegan|dense|ultra soft|easy to clean|latex free",
        with_="synthetic bristles|travel case|wooden handles|cleaning sponge|storage cup",
        for_="liquid foundation|powder and blush|contouring|beginners",
        materials="aluminum ferrules|bamboo|taklon fibers|rose gold accents",
        benefits="Picks up just the right amount of product|"
        "Blends for a flawless airbrushed finish|Keeps its shape after every cleaning|"
        "Bristles never shed or scratch|Covers face, cheeks and eyes",
        uses="daily makeup|professional looks|weekend trips",
        tags="Face Brushes for Women|Makeup Tool Kit|Cosmetic Brushes Gift Set",
        specs="14 Pieces|10 Pieces|5 Pieces|",
        options="brush_color", price=(6.0, 40.0),
    ),
    _group(
        "beard balm", BEAUTY, f"{BPC} › Shave & Hair Removal › Men's",
        "Beard & Mustache Care|Beard Care › Balms",
        "beard balm|beard conditioner balm|beard styling balm|leave in beard balm",
        adj="non greasy|all natural|light hold|paraben free|handmade",
        with_="argan oil|beeswax|shea butter|jojoba oil|vitamin e",
        for_="beard growth|itchy skin|short beards|long beards",
        materials="cocoa butter|coconut oil|lanolin|mango butter|candelilla wax",
        benefits="Tames flyaways and softens coarse hair|Calms irritation under the beard|"
        "Gives a neat look without a stiff feel|A little goes a long way|"
        "Absorbs fast and never feels sticky",
        uses="daily grooming|beard care routines|gifts for dad",
        tags="Beard Care for Men|Mustache Conditioner|Grooming Balm for Men",
        specs="2 Ounce Tin|3 Ounce Tin|",
        options="balm_scent|beauty_pack", price=(7.0, 30.0),
    ),
    _group(
        "whitening toothpaste", BEAUTY, f"{BPC} › Oral Care", "Toothpaste|Teeth Whitening",
        "toothpaste|whitening toothpaste|gel toothpaste|charcoal toothpaste",
        adj="fluoride free|sls free|enamel safe|vegan|sugar free",
        with_="activated charcoal|baking soda|xylitol|hydroxyapatite|coconut oil",
        for_="sensitive teeth|fresh breath|gum health|kids",
        materials="mint oil|tea tree oil|aloe vera|sea salt|calcium",
        benefits="Lifts surface stains for a brighter smile|"
        "Leaves your mouth feeling clean for hours|Gentle on enamel with daily brushing|"
        "Foams lightly without harsh detergents|Pleasant taste the whole family enjoys",
        uses="morning and night brushing|travel bags|family bathrooms",
        tags="Teeth Whitening Paste|Oral Care Gel|Stain Removing Paste",
        specs="4 Ounce Tube|2 Tube Set|",
        options="toothpaste_flavor|beauty_pack", price=(4.0, 22.0),
    ),
    # ------------------------------------------------------------------ food
    _group(
        "protein bars", FOOD, f"{GGF} › Snack Foods › Bars", "Protein Bars|Nutrition Bars",
        "protein bars|protein snack bars|keto protein bars|plant protein bars",
        plural=True,
        adj="gluten free|low sugar|keto friendly|non gmo|dairy free|soy free|kosher",
        with_="20g protein|whey protein isolate|prebiotic fiber|no artificial sweeteners",
        for_="meal replacement|post workout recovery|on the go snacking",
        materials="almonds|peanuts|oats|cocoa|sea salt|chicory root",
        benefits="Satisfies cravings between meals|Soft and chewy texture with real flavor|"
        "Fuels your day without a sugar crash|Each bar is sealed for lunch boxes|"
        "Made in small batches for freshness",
        uses="busy mornings|gym bags|road trips",
        tags="Healthy Snack Bars|Nutrition Bars for Adults|Energy Snack Bars",
        options="bar_flavor|bar_count", price=(12.0, 40.0),
    ),
    _group(
        "coffee beans", FOOD, f"{GGF} › Beverages › Coffee, Tea & Cocoa",
        "Coffee › Whole Coffee Beans|Coffee",
        "coffee beans|whole coffee beans|espresso beans|arabica coffee beans",
        plural=True,
        adj="medium roast|dark roast|light roast|fair trade|low acid|single origin|usda organic",
        with_="chocolate notes|nutty flavor|smooth finish|bold crema",
        for_="espresso machines|french press|cold brew|drip coffee makers",
        materials="Colombia|Ethiopia|Guatemala|Sumatra|Brazil", mat_prep="from",
        benefits="Roasted in small batches for peak freshness|Rich aroma fills the kitchen|"
        "Balanced body with a clean aftertaste|Packed in a valve bag to lock in flavor|"
        "Grind just before brewing for the best cup",
        uses="morning coffee|office break rooms|weekend brunch",
        tags="Gourmet Coffee|Specialty Coffee Roast|Premium Coffee Blend",
        options="coffee_size|coffee_flavor|grind", price=(9.0, 48.0),
    ),
    _group(
        "green tea", FOOD, f"{GGF} › Beverages › Coffee, Tea & Cocoa", "Tea › Green|Tea",
        "green tea|green tea bags|loose leaf green tea|matcha green tea",
        adj="usda organic|decaf|non gmo|kosher|caffeine free",
        with_="jasmine blossoms|ginseng|lemongrass|antioxidants|natural caffeine",
        for_="weight management|relaxation|iced tea",
        materials="sencha leaves|young tea leaves|mint leaves|ginger root|orange peel",
        benefits="Brews a smooth cup with no bitterness|Each bag is sealed for freshness|"
        "Steep for two to three minutes|Enjoy hot or over ice|"
        "Light, grassy flavor with a sweet finish",
        uses="afternoon breaks|quiet evenings|office desks",
        tags="Tea Bags for Hot or Cold Brewing|Premium Tea Selection|Daily Wellness Tea",
        options="tea_flavor|tea_count", price=(5.0, 30.0),
    ),
    _group(
        "olive oil", FOOD, f"{GGF} › Pantry Staples › Cooking Oils", "Olive Oil|Olive",
        "olive oil|extra virgin olive oil|cooking olive oil|greek olive oil",
        adj="cold pressed|non gmo|kosher|unfiltered|single estate|early harvest",
        with_="high polyphenols|peppery finish|dark glass bottle|fruity aroma",
        for_="salad dressings|sauteing|dipping bread|high heat cooking",
        materials="koroneiki olives|arbequina olives|picual olives", mat_prep="from",
        benefits="Pressed within hours of harvest|Bright, grassy taste with a gentle bite|"
        "Adds depth to pasta, fish and vegetables|Third party tested for purity|"
        "Protects flavor from light and air",
        uses="everyday cooking|salads|marinades",
        tags="Mediterranean Olive Oil|Gourmet Pantry Oil|Kitchen Cooking Oil",
        options="oil_size|food_pack", price=(10.0, 45.0),
    ),
    _group(
        "dark chocolate", FOOD, f"{GGF} › Snack Foods › Candy & Chocolate",
        "Chocolate Bars|Chocolate Assortments",
        "dark chocolate|dark chocolate bar|dark chocolate squares|artisan dark chocolate",
        adj="sugar free|dairy free|fair trade|vegan|keto friendly|gluten free|non gmo",
        with_="85 percent cacao|sea salt crystals|roasted almonds|crispy quinoa",
        for_="gift baskets|baking|snacking",
        materials="cocoa butter|bourbon vanilla|cacao nibs|coconut sugar",
        benefits="Melts slowly with a deep, rich taste|Made from ethically sourced cocoa beans|"
        "Snap off a square whenever a craving hits|Wrapped in recyclable paper|"
        "Pairs well with coffee or red wine",
        uses="holiday gifts|movie nights|afternoon treats",
        tags="Gourmet Chocolate Candy|Chocolate Gift|Bittersweet Chocolate Treat",
        options="choc_flavor|food_pack", price=(6.0, 35.0),
    ),
    _group(
        "beef jerky", FOOD, f"{GGF} › Snack Foods › Jerky & Dried Meats", "Beef|Jerky",
        "beef jerky|beef jerky strips|jerky sticks|smoked beef jerky",
        adj="high protein|low fat|gluten free|keto friendly|low sodium",
        with_="grass fed beef|no added nitrates|bold spices|no preservatives",
        for_="hiking|camping|lunch boxes",
        materials="premium beef|brown sugar|black pepper|soy sauce|garlic",
        benefits="Marinated for hours and slow smoked|Tender bite that is never tough|"
        "Resealable bag keeps it fresh|Packed with savory flavor|"
        "A satisfying snack with real meat",
        uses="long drives|game day|desk drawers",
        tags="Meat Snack|Protein Jerky Snack|Savory Meat Snacks",
        options="jerky_flavor|oz_food", price=(6.0, 40.0),
    ),
    _group(
        "granola", FOOD, f"{GGF} › Breakfast Foods › Cereals", "Granola|Granola & Muesli",
        "granola|granola cereal|crunchy granola|granola clusters",
        adj="gluten free|low sugar|non gmo|vegan|whole grain|high fiber",
        with_="ancient grains|probiotics|chia seeds|no added sugar",
        for_="breakfast bowls|yogurt toppings|snacking",
        materials="rolled oats|pumpkin seeds|coconut flakes|maple syrup|dried cranberries",
        benefits="Baked in small batches for big clusters|"
        "Crunchy texture that stays crisp in milk|Naturally sweetened and full of flavor|"
        "Resealable pouch for lasting freshness|Great with milk, yogurt or by the handful",
        uses="quick breakfasts|office snacks|kids lunches",
        tags="Breakfast Cereal|Oat Clusters Snack|Crunchy Breakfast Granola",
        options="granola_flavor|oz_food", price=(4.0, 25.0),
    ),
    _group(
        "pasta sauce", FOOD, f"{GGF} › Pantry Staples › Sauces, Gravies & Marinades",
        "Pasta Sauces|Marinara",
        "pasta sauce|marinara pasta sauce|tomato pasta sauce|italian pasta sauce",
        adj="no sugar added|low sodium|non gmo|vegan|gluten free|keto friendly",
        with_="san marzano tomatoes|fresh basil|aged parmesan|sweet onions",
        for_="family dinners|lasagna|pizza night",
        materials="vine ripened tomatoes|oregano|sea salt|garlic|carrots",
        benefits="Simmered slowly for a rich, hearty taste|"
        "Tastes homemade right out of the jar|Ready in minutes, just heat and serve|"
        "Thick enough to cling to every noodle|Made with simple pantry ingredients",
        uses="weeknight dinners|meal prep|dipping breadsticks",
        tags="Italian Tomato Sauce|Spaghetti Sauce|Gourmet Pasta Topping",
        specs="24 Ounce Jar|32 Ounce Jar",
        options="sauce_flavor|food_pack", price=(4.0, 24.0),
    ),
    _group(
        "mixed nuts", FOOD, f"{GGF} › Snack Foods › Nuts & Seeds", "Mixed Nuts|Nut Mixes",
        "mixed nuts|deluxe mixed nuts|roasted mixed nuts|trail mix nuts",
        plural=True,
        adj="keto friendly|non gmo|kosher|gluten free|vegan",
        with_="cashews|macadamia nuts|pistachios|brazil nuts|pecans",
        for_="holiday parties|keto diets|office snacking",
        materials="almonds|hazelnuts|walnuts|sea salt|peanuts",
        benefits="Roasted to a golden crunch|Lightly seasoned to bring out natural flavor|"
        "Resealable canister keeps every piece crisp|A heart healthy snack packed with protein|"
        "Perfect mix of big, whole pieces",
        uses="game nights|afternoon snacks|party bowls",
        tags="Nut Snack Mix|Gourmet Nut Assortment|Party Snack",
        options="nut_style|nut_size", price=(8.0, 35.0),
    ),
    _group(
        "raw honey", FOOD, f"{GGF} › Pantry Staples › Jams, Jellies & Sweet Spreads",
        "Honey|Honey & Syrups",
        "raw honey|wildflower honey|clover honey|manuka honey",
        adj="unfiltered|unpasteurized|kosher|non gmo|gluten free|true source certified",
        with_="bee pollen|honeycomb pieces|squeeze bottle|glass jar",
        for_="tea and coffee|baking|cough relief|natural sweetening",
        materials="local apiaries|orange blossoms|mountain meadows|clover fields",
        mat_prep="from",
        benefits="Harvested straight from the hive|Thick, golden and full of flavor|"
        "May crystallize naturally over time|A wholesome swap for refined sugar|"
        "Drizzle over toast, yogurt or oatmeal",
        uses="breakfast toast|smoothies|homemade dressings",
        tags="Natural Bee Sweetener|Golden Nectar Spread|Pantry Sweetener",
        options="honey_size|food_pack", price=(7.0, 40.0),
    ),
    _group(
        "sparkling water", FOOD,
        f"{GGF} › Beverages › Bottled Beverages, Water & Drink Mixes",
        "Water › Sparkling Water|Sparkling Water",
        "sparkling water|flavored sparkling water|sparkling mineral water|sparkling spring water",
        adj="zero calorie|sugar free|caffeine free|sodium free|non gmo|kosher",
        with_="natural fruit essence|electrolytes|bpa free cans|real fruit juice",
        for_="parties|mocktails|daily hydration|lunch boxes",
        materials="lime zest|cucumber|grapefruit peel|fresh mint",
        benefits="Crisp bubbles with a clean finish|Refreshing taste without sweeteners|"
        "Cans chill fast and travel well|A smart swap for soda|"
        "Light hint of fruit in every sip",
        uses="picnics|workday afternoons|poolside lounging",
        tags="Seltzer Drink|Carbonated Beverage|Fizzy Drink",
        options="water_flavor|can_count", price=(8.0, 30.0),
    ),
    _group(
        "spice seasoning", FOOD, f"{GGF} › Pantry Staples › Herbs, Spices & Seasonings",
        "Mixed Spices & Seasonings|Seasoning Blends",
        "seasoning blend|all purpose seasoning|grill seasoning|spice seasoning",
        adj="salt free|msg free|gluten free|non gmo|kosher|low sodium",
        with_="garlic and herbs|cracked black pepper|chili flakes|dried onion",
        for_="grilling|roasted vegetables|chicken and fish|air fryer recipes",
        materials="sea salt|garlic|paprika|turmeric|oregano",
        benefits="Shake it on before or after cooking|Bold flavor in every pinch|"
        "Large shaker with two pour options|Balanced blend of savory spices|"
        "Sealed lid keeps spices fresh",
        uses="weeknight meals|barbecues|meal prep",
        tags="Spice Blend|Kitchen Seasoning Mix|Barbecue Rub",
        options="spice_flavor|spice_size", price=(4.0, 20.0),
    ),
    # --------------------------------------------------------------- fashion
    _group(
        "yoga leggings", FASHION, f"{CSJ} › Women › Clothing › Active",
        "Leggings|Active Leggings",
        "yoga leggings|workout leggings|leggings|running leggings",
        plural=True,
        adj="high waist|squat proof|moisture wicking|quick drying|butt lifting|seamless",
        with_="tummy control|side pockets|hidden waistband pocket|four way stretch",
        for_="gym workouts|everyday wear|pilates|hot weather",
        materials="nylon|spandex|polyester|elastane", mat_prep="made of",
        benefits="Stretches with every move and keeps its shape|"
        "Smooth, opaque fabric that is not see through|"
        "Wide waistband stays put without rolling|Flatlock seams prevent chafing|"
        "Soft feel that lasts through many washes",
        uses="studio classes|long walks|lounging at home",
        tags="Athletic Pants for Women|Workout Tights|Gym Pants",
        options="apparel_color|apparel_size|fit", price=(14.0, 45.0),
    ),
    _group(
        "running shoes", FASHION, f"{CSJ} › Men › Shoes › Athletic", "Running|Road Running",
        "running shoes|road running shoes|trail running shoes|athletic running shoes",
        plural=True,
        adj="lightweight|breathable|non slip|shock absorbing|waterproof",
        with_="rubber sole|memory foam insole|knit upper|arch support|reflective details",
        for_="long distance runs|gym training|walking|flat feet",
        materials="mesh|eva foam|rubber|knit fabric", mat_prep="made of",
        benefits="Responsive cushioning returns energy with every stride|"
        "Grippy outsole handles wet pavement|Padded collar hugs the ankle|"
        "Slips on easily and stays secure|Keeps feet cool on hot days",
        uses="daily runs|treadmill sessions|errands",
        tags="Sneakers for Men|Athletic Trainers|Sport Sneakers",
        options="apparel_color|shoe_size", price=(30.0, 140.0),
    ),
    _group(
        "polo shirt", FASHION, f"{CSJ} › Men › Clothing › Shirts", "Polos|Polo Shirts",
        "polo shirt|golf polo shirt|pique polo shirt|performance polo shirt",
        adj="short sleeve|slim fit|regular fit|wrinkle free|moisture wicking|machine wash",
        with_="three button placket|ribbed collar|chest pocket|upf 50 sun protection",
        for_="tennis|business casual|summer outings|casual fridays",
        materials="cotton|polyester|pique knit|jersey fabric", mat_prep="made of",
        benefits="Soft fabric keeps its color after many washes|"
        "Tailored cut looks sharp tucked or untucked|Collar stays crisp all day|"
        "Stretch fabric moves with you|Tagless neck for comfort",
        uses="office days|weekend outings|golf courses",
        tags="Polo Tee for Men|Collared Golf Top|Casual Shirt for Men",
        options="apparel_color|apparel_size", price=(12.0, 50.0),
    ),
    _group(
        "maxi dress", FASHION, f"{CSJ} › Women › Clothing › Dresses", "Casual|Maxi",
        "maxi dress|summer maxi dress|boho maxi dress|wrap maxi dress",
        adj="short sleeve|sleeveless|loose fit|flowy|hand wash|machine wash",
        with_="v neck|side pockets|smocked waist|floral print|tie belt",
        for_="beach vacations|wedding guests|casual outings",
        materials="rayon|chiffon|cotton|polyester", mat_prep="made of",
        benefits="Lightweight fabric flows as you walk|Flattering silhouette for every body type|"
        "Lined skirt is not see through|Easy to dress up or down|Packs without wrinkling",
        uses="sunny afternoons|date nights|garden parties",
        tags="Long Dress for Women|Sundress|Casual Summer Outfit",
        options="apparel_color|apparel_size|dress_pattern", price=(18.0, 60.0),
    ),
    _group(
        "stretch jeans", FASHION, f"{CSJ} › Men › Clothing › Jeans", "|Slim|Straight",
        "jeans|denim jeans|stretch denim jeans|classic jeans",
        plural=True,
        adj="slim fit|relaxed fit|straight leg|machine wash|tapered|distressed",
        with_="zip fly|button closure|five pockets|whiskered finish",
        for_="casual wear|tall men|big men",
        materials="cotton|elastane|polyester|denim", mat_prep="made of",
        benefits="Classic styling that never goes out of fashion|"
        "Soft denim that feels broken in from day one|Holds its shape all day|"
        "Sits at the natural waist|Fades beautifully over time",
        uses="weekends|road trips|date nights",
        tags="Denim Pants for Men|Casual Jeans for Men|Everyday Denim",
        options="jeans_color|jeans_size", price=(20.0, 70.0),
    ),
    _group(
        "puffer jacket", FASHION, f"{CSJ} › Women › Clothing › Coats, Jackets & Vests",
        "Down & Down Alternative|Puffers",
        "puffer jacket|down jacket|quilted puffer jacket|winter jacket",
        adj="water resistant|windproof|packable|lightweight|insulated",
        with_="detachable hood|zip pockets|faux fur trim|elastic cuffs|fleece lining",
        for_="cold weather|hiking|ski trips|city commuting",
        materials="nylon shell|polyester fill|duck down|recycled polyester",
        benefits="Traps heat without adding bulk|Sheds light rain and snow|"
        "Stuffs into its own pocket|Quilted baffles keep the fill in place|"
        "Two way zipper for easy movement",
        uses="winter walks|commutes|weekend getaways",
        tags="Winter Coat for Women|Warm Outerwear|Warm Down Coat",
        options="apparel_color|apparel_size", price=(35.0, 160.0),
    ),
    _group(
        "athletic socks", FASHION, f"{CSJ} › Men › Clothing › Socks",
        "Athletic Socks|Casual Socks",
        "athletic socks|crew socks|ankle socks|running socks",
        plural=True,
        adj="moisture wicking|cushioned|breathable|odor resistant|machine wash",
        with_="arch support|reinforced heel and toe|mesh ventilation|seamless toe",
        for_="hiking|work boots|basketball|daily wear",
        materials="combed cotton|polyester|spandex|merino wool", mat_prep="made of",
        benefits="Stay up without slipping|Soft cushioning where you need it most|"
        "Keeps feet dry and fresh|Durable knit holds up to heavy use|"
        "Snug fit that does not bunch",
        uses="gym days|long shifts|weekend trips",
        tags="Sport Socks for Men|Performance Socks|Cotton Socks Pack",
        options="apparel_color|sock_pack", price=(8.0, 30.0),
    ),
    _group(
        "shoulder bag", FASHION, f"{CSJ} › Women › Handbags & Wallets",
        "Shoulder Bags|Totes|Crossbody Bags",
        "shoulder bag|tote bag|crossbody bag|hobo bag",
        adj="water resistant|large capacity|lightweight|vegan",
        with_="adjustable strap|zipper closure|multiple pockets|gold hardware|faux leather",
        for_="daily commute|weekend trips|college students",
        materials="canvas|pu leather|nylon|suede",
        benefits="Roomy interior fits a laptop, wallet and more|Sturdy handles carry heavy loads|"
        "Inner slip pocket keeps your phone handy|Soft lining protects your belongings|"
        "Structured shape stands on its own",
        uses="shopping trips|office days|vacations",
        tags="Purse for Women|Handbag for Women|Satchel Purse",
        options="bag_color", price=(18.0, 80.0),
    ),
    _group(
        "polarized sunglasses", FASHION,
        f"{CSJ} › Men › Accessories › Sunglasses & Eyewear Accessories", "Sunglasses|",
        "sunglasses|aviator sunglasses|sport sunglasses|square sunglasses",
        plural=True,
        adj="polarized|lightweight|scratch resistant|unbreakable|retro",
        with_="uv400 protection|metal frame|spring hinges|mirrored lenses|hard case",
        for_="driving|fishing|cycling|beach days",
        materials="acetate|polycarbonate|titanium alloy|nylon",
        benefits="Cuts glare from water and roads|Sits comfortably for hours|"
        "Flexible temples fit most faces|Comes with a cleaning cloth|Clear, true color vision",
        uses="summer road trips|outdoor sports|vacations",
        tags="Eyewear for Men and Women|Shades for Men|Sun Shades",
        options="lens_color", price=(10.0, 60.0),
    ),
    _group(
        "flat sandals", FASHION, f"{CSJ} › Women › Shoes › Sandals", "Flat|Slides",
        "flat sandals|slide sandals|strappy sandals|flip flop sandals",
        plural=True,
        adj="non slip|waterproof|lightweight|open toe|adjustable",
        with_="arch support|ankle strap|buckle closure|memory foam footbed|rubber sole",
        for_="pool days|summer vacations|long walks",
        materials="faux leather|rubber|cork|eva foam", mat_prep="made of",
        benefits="Contoured footbed cradles your arches|Soft straps never rub or pinch|"
        "Grippy sole for wet surfaces|Easy to slip on and off|"
        "Light enough to pack in any bag",
        uses="boardwalk strolls|poolside lounging|errands",
        tags="Summer Shoes for Women|Casual Slides|Beach Shoes",
        options="apparel_color|shoe_size", price=(12.0, 55.0),
    ),
    _group(
        "pullover hoodie", FASHION, f"{CSJ} › Men › Clothing › Fashion Hoodies & Sweatshirts",
        "|Hoodies",
        "pullover hoodie|fleece hoodie|hoodie|zip up hoodie",
        adj="lightweight|heavyweight|oversized|relaxed fit|machine wash",
        with_="kangaroo pocket|drawstring hood|ribbed cuffs|thumb holes|fleece lining",
        for_="cold weather|workouts|lounging",
        materials="cotton|polyester|french terry|sherpa", mat_prep="made of",
        benefits="Brushed inside feels soft against the skin|"
        "Holds its shape after many washes|Roomy fit for easy layering|"
        "Hood adjusts to keep out wind|Classic look for everyday outfits",
        uses="chilly mornings|campus days|movie nights",
        tags="Hooded Sweatshirt for Men|Casual Sweatshirt|Athletic Pullover",
        options="apparel_color|apparel_size", price=(18.0, 60.0),
    ),
    _group(
        "wrist watch", FASHION, f"{CSJ} › Men › Watches", "Wrist Watches|Dress Watches",
        "wrist watch|analog watch|quartz watch|dress watch",
        adj="water resistant|scratch resistant|minimalist|luminous|classic",
        with_="stainless steel case|leather band|date display|quartz movement|sapphire crystal",
        for_="business|everyday wear|formal events|gifts",
        materials="stainless steel|genuine leather|mineral glass|alloy",
        benefits="Easy to read dial with clear markers|Keeps accurate time for years|"
        "Comfortable strap fits most wrists|Comes in a presentation box|"
        "Slim profile slips under a cuff",
        uses="office wear|weekend dinners|anniversaries",
        tags="Watch for Men|Analog Timepiece|Wristwatch for Men",
        options="watch_color", price=(20.0, 250.0),
    ),
    # ------------------------------------------------------------- furniture
    _group(
        "sleeper sofa", FURNITURE, f"{HKF} › Living Room Furniture", "Sofas & Couches|Futons",
        "sleeper sofa|sofa bed|convertible sofa|futon sofa",
        adj="mid century modern|tufted|reclining|space saving",
        with_="removable cushions|solid wood legs|velvet upholstery|cup holders|usb ports",
        for_="small spaces|apartments|guest rooms",
        materials="linen fabric|hardwood frame|high density foam|pocket springs",
        benefits="Converts from sofa to bed in seconds|Deep seats invite you to sink in|"
        "Sturdy frame supports up to 700 pounds|Cushions keep their shape over years|"
        "Fits through narrow doorways",
        uses="movie nights|overnight guests|family lounging",
        tags="Loveseat Couch|Modern Couch|Futon Couch",
        options="fabric_color", price=(250.0, 1600.0),
    ),
    _group(
        "office chair", FURNITURE, f"{HKF} › Home Office Furniture",
        "Home Office Chairs|Home Office Desk Chairs",
        "office chair|ergonomic office chair|mesh office chair|executive office chair",
        adj="adjustable height|swivel|high back|reclining|heavy duty",
        with_="lumbar support|padded armrests|headrest|breathable mesh back|"
        "smooth rolling casters",
        for_="home office|long hours|gaming|small spaces",
        materials="nylon base|pu leather|molded foam|steel frame",
        benefits="Supports your back through long workdays|Tilt lock holds your favorite angle|"
        "Rolls quietly on carpet and hardwood|Assembles in about fifteen minutes|"
        "Thick seat cushion relieves pressure",
        uses="remote jobs|study sessions|conference rooms",
        tags="Desk Chair with Wheels|Computer Chair|Task Chair",
        options="tech_color", price=(60.0, 480.0),
    ),
    _group(
        "coffee table", FURNITURE, f"{HKF} › Living Room Furniture › Tables",
        "Coffee Tables|",
        "coffee table|lift top coffee table|round coffee table|rectangle coffee table",
        adj="rustic|mid century modern|industrial|farmhouse",
        with_="storage shelf|hidden compartment|tempered glass top|metal legs|drawers",
        for_="living room|small spaces|apartments",
        materials="engineered wood|solid pine|mdf|walnut veneer", mat_prep="made of",
        benefits="Roomy surface holds books, plants and snacks|Sturdy frame will not wobble|"
        "Rounded corners protect little ones|Wipes clean with a damp cloth|"
        "Clear instructions make setup simple",
        uses="family game nights|entertaining guests|morning coffee",
        tags="Center Table|Cocktail Table|Accent Table",
        options="wood_color", price=(60.0, 420.0),
    ),
    _group(
        "bookshelf", FURNITURE, f"{HKF} › Home Office Furniture", "Bookcases|Shelving",
        "bookshelf|tall bookshelf|ladder bookshelf|corner bookshelf",
        adj="industrial|freestanding|anti tip|open back",
        with_="adjustable shelves|metal frame|storage cubes|back panel|cabinet doors",
        for_="home office|kids rooms|plants and decor",
        materials="particleboard|steel|rubberwood|bamboo", mat_prep="made of",
        benefits="Five generous shelves hold books and decor|Holds up to 50 pounds per shelf|"
        "Slim profile fits tight corners|Leveling feet steady it on uneven floors|"
        "Open design keeps the room bright",
        uses="home libraries|study nooks|entryways",
        tags="Book Case|Shelving Unit|Display Shelf",
        options="wood_color|tier", price=(40.0, 260.0),
    ),
    _group(
        "bed frame", FURNITURE, f"{HKF} › Bedroom Furniture › Beds, Frames & Bases",
        "Beds|Bed Frames",
        "bed frame|platform bed frame|metal bed frame|upholstered bed frame",
        adj="noise free|heavy duty|tool free|low profile",
        with_="under bed storage|wooden slats|headboard|led lights|charging station",
        for_="memory foam mattresses|guest rooms|teens",
        materials="steel|solid pine|upholstered linen|rubberwood", mat_prep="made of",
        benefits="No box spring needed|Slats spaced to support every mattress|"
        "Quiet even when you toss and turn|Plenty of room underneath for storage bins|"
        "Corner legs keep everything steady",
        uses="bedrooms|guest suites|dorm rooms",
        tags="Mattress Foundation|Platform Bed|Bed Base",
        options="bed_size|wood_color", price=(90.0, 700.0),
    ),
    _group(
        "dining chairs", FURNITURE, f"{HKF} › Kitchen & Dining Room Furniture",
        "Chairs|Dining Chairs",
        "dining chairs|kitchen dining chairs|upholstered dining chairs|side chairs",
        plural=True,
        adj="mid century modern|armless|stackable|wipe clean",
        with_="solid wood legs|padded seats|curved backrest|metal legs|faux leather",
        for_="kitchens|dining rooms|restaurants",
        materials="beech wood|velvet|linen fabric|steel|rubberwood",
        benefits="Wide seat and curved back for lasting comfort|"
        "Floor protectors prevent scratches|Holds up to 300 pounds|"
        "Simple assembly with included tools|Timeless look suits any table",
        uses="family dinners|holiday meals|breakfast nooks",
        tags="Dining Room Chairs|Side Chairs Set|Kitchen Chairs",
        options="fabric_color|set_count", price=(60.0, 400.0),
    ),
    _group(
        "tv stand", FURNITURE, f"{HKF} › Living Room Furniture › TV & Media Furniture",
        "Television Stands & Entertainment Centers|",
        "tv stand|tv stand console|entertainment center tv stand|low profile tv stand",
        adj="modern|farmhouse|industrial",
        with_="led lights|storage cabinets|open shelves|cable management holes|"
        "sliding barn doors",
        for_="living room|bedroom|gaming consoles|media rooms",
        materials="engineered wood|particleboard|tempered glass|metal",
        benefits="Holds screens up to 65 inches|Hides cords for a tidy look|"
        "Doors open smoothly and close quietly|Shelves fit soundbars and streaming boxes|"
        "Wide top displays decor and photos",
        uses="movie nights|game days|streaming marathons",
        tags="Media Console|Media Cabinet|TV Console",
        options="wood_color|tv_stand_size", price=(70.0, 500.0),
    ),
    _group(
        "nightstand", FURNITURE, f"{HKF} › Bedroom Furniture", "Nightstands|",
        "nightstand|bedside nightstand|wood nightstand|modern nightstand",
        adj="rustic|farmhouse|minimalist|industrial",
        with_="charging station|storage drawer|open shelf|usb ports|led lights",
        for_="bedrooms|small spaces|dorm rooms",
        materials="solid wood|engineered wood|rattan|metal frame", mat_prep="made of",
        benefits="Keeps your phone and glasses within reach|Drawer glides open smoothly|"
        "Compact size fits beside any bed|Sturdy top holds a lamp and books|"
        "Assembly takes only minutes",
        uses="bedside storage|reading corners|guest rooms",
        tags="Bedside Cabinet|Side Cabinet|Bedroom Organizer",
        options="wood_color|set_count", price=(35.0, 250.0),
    ),
    _group(
        "bar stools", FURNITURE,
        f"{HKF} › Game & Recreation Room Furniture › Home Bar Furniture", "Barstools|",
        "bar stools|counter height bar stools|swivel bar stools|counter stools",
        plural=True,
        adj="adjustable height|armless|backless|modern|industrial",
        with_="footrest|swivel seat|faux leather cushion|back support|chrome base",
        for_="kitchen islands|home bars|pub tables",
        materials="steel|faux leather|wood|velvet",
        benefits="Gas lift adjusts seat height with ease|Rotates a full 360 degrees|"
        "Sturdy base keeps sitting comfortable|Protective floor pads prevent scratches|"
        "Holds up to 300 pounds",
        uses="breakfast bars|game rooms|cafes",
        tags="Kitchen Stools|Counter Seats|Pub Seats",
        options="fabric_color|set_count|stool_height", price=(60.0, 350.0),
    ),
    _group(
        "shoe rack", FURNITURE, "Home & Kitchen › Storage & Organization › "
        "Clothing & Closet Storage", "Shoe Organizers|Shoe Racks",
        "shoe rack|shoe storage rack|entryway shoe rack|stackable shoe rack",
        adj="space saving|freestanding|waterproof|tool free",
        with_="metal frame|fabric shelves|side hooks|top bench|dust cover",
        for_="closets|entryways|garages|dorm rooms",
        materials="bamboo|steel tubes|non woven fabric|mdf", mat_prep="made of",
        benefits="Holds up to 20 pairs of shoes|Keeps the hallway neat and clear|"
        "Wipes clean in seconds|Light enough to move anywhere|"
        "Each shelf holds heavy boots",
        uses="mudrooms|family homes|small hallways",
        tags="Shoe Organizer|Shoe Storage Shelf|Shoe Tower",
        options="wood_color|tier", price=(18.0, 120.0),
    ),
    _group(
        "computer desk", FURNITURE, f"{HKF} › Home Office Furniture",
        "Home Office Desks|Computer Desks",
        "computer desk|writing desk|home office desk|standing desk",
        adj="modern|industrial|height adjustable|l shaped",
        with_="storage shelves|monitor shelf|keyboard tray|cable management|headphone hook",
        for_="small spaces|gaming|study|remote work",
        materials="engineered wood|steel frame|carbon fiber texture|particleboard",
        benefits="Spacious top fits two monitors|Steel frame stays steady while you type|"
        "Leveling feet adjust for uneven floors|Scratch resistant surface wipes clean|"
        "Goes together in about thirty minutes",
        uses="remote jobs|homework|creative projects",
        tags="Home Workstation|PC Workstation|Office Workstation",
        options="wood_color|desk_size", price=(50.0, 450.0),
    ),
    _group(
        "recliner", FURNITURE, f"{HKF} › Living Room Furniture › Chairs", "Recliners|",
        "recliner|power recliner|rocker recliner|wall hugger recliner",
        adj="oversized|heavy duty|space saving",
        with_="massage and heat|cup holders|side pockets|usb charging port|lumbar pillow",
        for_="elderly|living room|home theater|small spaces",
        materials="pu leather|microfiber|breathable fabric|steel mechanism",
        benefits="Leans back smoothly at the pull of a lever|"
        "Thick padding cradles your whole body|Footrest extends for full support|"
        "Sturdy base supports up to 330 pounds|Fits in smaller rooms",
        uses="afternoon naps|reading|watching games",
        tags="Lounger|Theater Seat|Reading Lounger",
        options="fabric_color|recliner_style", price=(180.0, 1200.0),
    ),
    # ----------------------------------------------------------- electronics
    _group(
        "wireless earbuds", ELECTRONICS,
        "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds",
        "Earbud Headphones|In-Ear Headphones",
        "wireless earbuds|bluetooth earbuds|true wireless earbuds|sport earbuds",
        plural=True,
        adj="noise cancelling|waterproof|sweatproof|lightweight",
        with_="bluetooth 5.3|charging case|touch control|built in microphone|deep bass",
        for_="workouts|phone calls|iphone and android|sleeping",
        materials="graphene drivers|silicone ear tips|titanium drivers",
        benefits="Pairs instantly when you open the lid|Up to 40 hours of playtime|"
        "Clear calls even in noisy places|Secure fit stays in during exercise|"
        "Fast charge gives two hours of music in ten minutes",
        uses="commutes|gym sessions|long flights",
        tags="Bluetooth Headphones|In Ear Headphones|Wireless Headphones",
        options="tech_color", price=(15.0, 150.0),
    ),
    _group(
        "phone case", ELECTRONICS, "Cell Phones & Accessories › Cases, Holsters & Sleeves",
        "Basic Cases|Flip Cases",
        "phone case|protective phone case|slim phone case|clear phone case",
        adj="shockproof|scratch resistant|magnetic|anti yellowing|lightweight",
        with_="built in screen protector|kickstand|card holder|raised edges|wrist strap",
        for_="wireless charging|outdoor adventures|kids",
        materials="tpu|polycarbonate|silicone|vegan leather",
        benefits="Air cushioned corners absorb drops|Precise cutouts for every port and button|"
        "Grippy sides prevent slips|Snaps on in seconds|"
        "Thin profile slides into any pocket",
        uses="daily carry|outdoor trips|job sites",
        tags="Phone Cover|Protective Cover|Bumper Cover",
        options="case_color|phone_model", price=(6.0, 40.0),
    ),
    _group(
        "portable charger", ELECTRONICS,
        "Cell Phones & Accessories › Accessories › Chargers & Power Adapters",
        "Portable Power Banks|",
        "portable charger|power bank charger|magnetic portable charger|mini portable charger",
        adj="fast charging|compact|ultra slim|airplane safe",
        with_="usb c port|led display|dual outputs|built in cables|wireless charging pad",
        for_="android phones|camping trips|tablets|long flights",
        materials="lithium polymer cells|aluminum shell|abs plastic",
        benefits="Charges most phones three times over|"
        "Smart chip protects against overheating|Fits in a pocket or small bag|"
        "Recharges fully in about four hours|Powers two devices at once",
        uses="commutes|festivals|emergencies",
        tags="Battery Pack|External Battery|Phone Power Bank",
        options="tech_color|capacity", price=(12.0, 70.0),
    ),
    _group(
        "bluetooth speaker", ELECTRONICS,
        "Electronics › Portable Audio & Video › Portable Speakers & Docks",
        "Portable Bluetooth Speakers|Outdoor Speakers",
        "bluetooth speaker|portable bluetooth speaker|wireless speaker|outdoor speaker",
        adj="waterproof|rugged|shockproof|floating",
        with_="stereo pairing|deep bass|rgb lights|built in microphone|carrying strap",
        for_="outdoor parties|the shower|camping|pool parties",
        materials="fabric mesh|silicone housing|aluminum grille",
        benefits="Fills a room with clear, balanced sound|"
        "Plays for up to 20 hours on one charge|Pairs with phones and tablets in seconds|"
        "Survives drops, splashes and dust|Strap clips onto bags and bikes",
        uses="backyard barbecues|beach trips|road trips",
        tags="Wireless Audio Speaker|Portable Speaker|Party Speaker",
        options="tech_color", price=(18.0, 180.0),
    ),
    _group(
        "hdmi cable", ELECTRONICS,
        "Electronics › Accessories & Supplies › Audio & Video Accessories › Cables",
        "HDMI Cables|",
        "hdmi cable|hdmi 2.1 cable|braided hdmi cable|ultra hdmi cable",
        adj="gold plated|flexible|tangle free|certified",
        with_="4k 120hz|8k 60hz|ethernet channel|audio return channel|aluminum connectors",
        for_="gaming consoles|home theater|laptops and monitors",
        materials="nylon braid|copper conductors|pvc jacket",
        benefits="Supports the latest streaming devices|"
        "Locks in a stable signal with no flicker|"
        "Bends easily to route behind furniture|Snug connectors fit every port|"
        "Backward compatible with older displays",
        uses="living rooms|offices|game rooms",
        tags="Video Cable|HD Cord|Display Cord",
        options="cable_length|cable_pack", price=(5.0, 35.0),
    ),
    _group(
        "usb c hub", ELECTRONICS, CAP, "USB Hubs|Docking Stations",
        "usb c hub|usb hub|multiport usb c hub|docking hub",
        adj="plug and play|compact|bus powered|travel size",
        with_="4k hdmi output|100w power delivery|sd card reader|gigabit ethernet|"
        "usb 3.0 ports",
        for_="laptops|tablets|dual monitors",
        materials="aluminum alloy|woven cord|smart chip",
        benefits="Turns one port into many|Transfers files at high speed|"
        "Runs cool during long sessions|Slim design slips into a laptop bag|"
        "Works right out of the box",
        uses="home offices|business trips|presentations",
        tags="USB Adapter|Laptop Dock|Port Expander",
        options="tech_color|hub_ports", price=(15.0, 80.0),
    ),
    _group(
        "wireless mouse", ELECTRONICS, f"{CAP} › Keyboards, Mice & Accessories", "Mice|",
        "wireless mouse|ergonomic wireless mouse|bluetooth mouse|silent wireless mouse",
        adj="rechargeable|lightweight|ambidextrous|portable",
        with_="silent clicks|adjustable dpi|usb receiver|side buttons|long battery life",
        for_="laptops|left handed users|office use",
        materials="optical sensor|rubber grips|abs shell",
        benefits="Glides smoothly on most surfaces|Contoured shape fits your palm|"
        "Connects in seconds with no setup|Quiet buttons will not disturb others|"
        "Auto sleep saves power",
        uses="remote jobs|college classes|business trips",
        tags="Computer Mouse|Cordless Mouse|PC Mouse",
        options="tech_color", price=(8.0, 60.0),
    ),
    _group(
        "smart tv", ELECTRONICS, "Electronics › Television & Video",
        "Televisions|Televisions › Smart TVs",
        "smart tv|4k smart tv|led smart tv|qled smart tv",
        adj="frameless|wall mountable|energy efficient",
        with_="dolby vision|hdr10|voice remote|built in wifi|dolby audio",
        for_="living rooms|gaming|bedrooms|sports",
        materials="quantum dot panel|led backlight|slim bezels",
        benefits="Sharp picture with vivid, lifelike color|"
        "Streams your favorite apps right out of the box|Fast refresh keeps action smooth|"
        "Connects to speakers and soundbars with ease|Thin design looks great on any wall",
        uses="movie nights|game days|family streaming",
        tags="Television|Smart Television|Ultra HD Television",
        options="tv_size", price=(150.0, 1800.0),
    ),
    _group(
        "laptop", ELECTRONICS, "Electronics › Computers & Accessories › Computers & Tablets",
        "Laptops › Traditional Laptops|Laptops › 2 in 1 Laptops",
        "laptop|laptop computer|thin laptop|everyday laptop",
        adj="lightweight|touchscreen|convertible|fanless",
        with_="backlit keyboard|full hd display|fingerprint reader|wifi 6|thunderbolt port|"
        "long battery life",
        for_="students|business|gaming|video editing",
        materials="aluminum chassis|magnesium alloy|glass trackpad",
        benefits="Boots up in seconds|Stays cool and quiet under load|"
        "Crisp speakers for calls and movies|Thin enough to carry all day|"
        "Plenty of ports for your accessories",
        uses="remote jobs|online classes|travel",
        tags="Notebook Computer|Notebook PC|Work Notebook",
        options="laptop_config|laptop_color", price=(280.0, 2400.0),
    ),
    _group(
        "security camera", ELECTRONICS,
        "Electronics › Camera & Photo › Video Surveillance › Surveillance Cameras",
        "Bullet Cameras|Dome Cameras",
        "security camera|outdoor security camera|wifi security camera|home security camera",
        adj="weatherproof|wireless|battery powered|motion activated",
        with_="night vision|two way audio|motion detection|cloud storage|spotlight|siren",
        for_="front doors|driveways|baby monitoring|pets",
        materials="1080p sensor|metal housing|infrared leds",
        benefits="Sends alerts to your phone in real time|Clear video day and night|"
        "Installs in minutes with no wiring|Shares access with the whole family|"
        "Stores clips for easy playback",
        uses="vacation homes|garages|backyards",
        tags="Surveillance Camera|CCTV Camera|Home Camera",
        options="camera_pack|tech_color", price=(20.0, 200.0),
    ),
    _group(
        "fitness tracker", ELECTRONICS, "Electronics › Wearable Technology",
        "Activity & Fitness Trackers|Smartwatches",
        "fitness tracker|activity tracker|smart fitness tracker|health tracker",
        adj="waterproof|lightweight|slim|swimproof",
        with_="heart rate monitor|sleep tracking|blood oxygen monitor|gps|step counter",
        for_="runners|swimming|kids|seniors",
        materials="silicone band|amoled screen|tempered glass",
        benefits="Logs steps, calories and active minutes|Battery lasts up to ten days|"
        "Syncs with your phone automatically|Gentle vibration alerts for calls and texts|"
        "Comfortable enough to wear while you sleep",
        uses="daily workouts|hiking trails|weight loss goals",
        tags="Fitness Band|Activity Band|Health Band",
        options="band_color", price=(20.0, 180.0),
    ),
    _group(
        "gaming keyboard", ELECTRONICS, f"{CAP} › Keyboards, Mice & Accessories",
        "Keyboards|",
        "gaming keyboard|mechanical gaming keyboard|wireless gaming keyboard|"
        "compact gaming keyboard",
        adj="rgb backlit|hot swappable|anti ghosting|spill resistant",
        with_="wrist rest|media keys|detachable cable|macro keys|aluminum top plate",
        for_="pc gamers|typists|mac and windows",
        materials="abs keycaps|pbt keycaps|steel plate",
        benefits="Registers every key even when pressed together|"
        "Tactile feedback makes typing satisfying|Lighting effects sync with your setup|"
        "Sturdy frame will not flex|Foldable feet adjust the angle",
        uses="late night sessions|esports|coding",
        tags="Computer Keyboard|PC Keyboard|Typing Keyboard",
        options="kb_color|switch", price=(20.0, 160.0),
    ),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CategoryText:
    """Sentences and names shared by the groups of one category."""

    brands: tuple[str, ...]
    fillers: tuple[str, ...]  # neutral sentences for descriptions
    closers: tuple[str, ...]
    headers: tuple[str, ...]  # bullet headers that name no attribute
    notes: tuple[str, ...]  # second sentences of bullets


CATEGORY_TEXT: dict[str, CategoryText] = {
    BEAUTY: CategoryText(
        brands=_split(
            "Lumora|Velisse|Aurenne|Dermavie|Solenne|Kiroa|Marivelle|Botanyx|Noviera|Elarosa|"
            "Zephyra|Amberlune|Oriella|Vantelle|Celisse|Rosabel"
        ),
        fillers=_split(
            "Patch test before first use.|For external use only.|"
            "Store at room temperature away from direct sunlight.|"
            "Results may vary from person to person.|Made in a certified facility.|"
            "A little product goes a long way."
        ),
        closers=_split(
            "Backed by our 30 day happiness guarantee.|Love it or your money back.|"
            "Join thousands of happy customers who made it part of their routine."
        ),
        notes=_split(
            "Suitable for everyday use.|Gentle enough to use every day.|"
            "A staple for any vanity.|Travel ready and easy to pack.|"
            "Dermatologist approved ingredients you can pronounce.|Makes a lovely gift."
        ),
        headers=_split(
            "WHY YOU WILL LOVE IT|VISIBLE RESULTS|HOW TO USE|QUALITY YOU CAN TRUST|"
            "SELF CARE MADE SIMPLE"
        ),
    ),
    FOOD: CategoryText(
        brands=_split(
            "Brookfield|Terravale|Hearthstone|Sunmeadow|Wildgrain|Copperpot|Oakbarrel|"
            "Fieldstone|Bramblewood|Honeycrest|Silverleaf|Riverbend|Greenhollow|Tallgrass"
        ),
        fillers=_split(
            "Store in a cool, dry place.|Great at home, at work or on the go.|"
            "Packed in a facility that also handles tree nuts and milk.|"
            "Share it with friends and family.|Check the label for full nutrition facts."
        ),
        closers=_split(
            "Taste the difference with every bite.|Satisfaction guaranteed or your money back.|"
            "From our family to yours."
        ),
        notes=_split(
            "A pantry favorite for the whole family.|Made without shortcuts.|"
            "Enjoy it any time of day.|Great for sharing.|Quality you can taste.|"
            "Packed fresh and shipped fast."
        ),
        headers=_split("GREAT TASTE|SIMPLE INGREDIENTS|PANTRY ESSENTIAL|FRESHNESS FIRST"),
    ),
    FASHION: CategoryText(
        brands=_split(
            "Northwind|Ardenne|Kestrel|Marlowe|Corbin|Halden|Saffira|Rivoli|Tessaro|Wrenfield|"
            "Alpinex|Caldera|Juniper|Ostrava|Belrose"
        ),
        fillers=_split(
            "Please check the size chart before ordering.|Available in several colors and sizes.|"
            "Colors may look slightly different on screens.|Tumble dry low and do not bleach.|"
            "Designed in our studio and tested for everyday comfort."
        ),
        closers=_split(
            "Easy returns within 30 days.|Makes a thoughtful gift for family and friends.|"
            "Wear it once and you will reach for it again and again."
        ),
        notes=_split(
            "Looks great with everything in your closet.|Comfortable from morning to night.|"
            "Holds up wear after wear.|A wardrobe essential.|Easy to care for.|"
            "Makes a great gift."
        ),
        headers=_split("ALL DAY COMFORT|PERFECT FIT|EASY CARE|EVERYDAY STYLE|GIFT IDEA"),
    ),
    FURNITURE: CategoryText(
        brands=_split(
            "Oakhaven|Timberline|Hearthwood|Lindell|Norvik|Alderbrook|Casavela|Ravenna|"
            "Brookline|Stonegate|Elmwood|Walden|Cedarly|Marbury"
        ),
        fillers=_split(
            "All hardware and instructions are included.|"
            "Please measure your space before ordering.|"
            "Most customers finish setup in under an hour.|Dust with a soft, dry cloth.|"
            "Ships in one box to your door."
        ),
        closers=_split(
            "Backed by a one year warranty.|Our support team is happy to help with any question.|"
            "Built to be enjoyed for years."
        ),
        notes=_split(
            "Fits a wide range of decor styles.|Built from durable materials.|"
            "Clear instructions included.|Designed for years of daily use.|"
            "Easy to keep clean.|A practical upgrade for any home."
        ),
        headers=_split("STURDY BUILD|SIMPLE SETUP|TIMELESS DESIGN|WHAT YOU GET|DIMENSIONS"),
    ),
    ELECTRONICS: CategoryText(
        brands=_split(
            "Voltix|Sonaro|Nexora|Zentra|Auralink|Pixelon|Kinetiq|Lumitek|Quantra|Orbix|"
            "Trivox|Helion|Arcwave|Syncra|Corvex"
        ),
        fillers=_split(
            "Includes a user manual and quick start guide.|Works with most popular devices.|"
            "Firmware updates add new features over time.|"
            "Tested for safety and reliability before shipping."
        ),
        closers=_split(
            "Backed by a 12 month warranty and friendly customer support.|"
            "Contact us anytime and we will make it right.|Upgrade your setup today."
        ),
        notes=_split(
            "Compatible with most devices.|Simple to set up out of the box.|"
            "Designed for everyday reliability.|Sips power by design.|"
            "Tested to high quality standards.|Friendly support if you need help."
        ),
        headers=_split("WHAT YOU GET|EASY SETUP|RELIABLE PERFORMANCE|BUILT TO LAST|WARRANTY"),
    ),
}

INTROS = (
    "Meet the {type} from {brand}, {prep} {mat1} and {mat2}.",
    "{brand} {type}, {prep} {mat1} and {mat2}.",
    "Introducing the {brand} {type}: {prep} {mat1} and {mat2} for everyday quality.",
    "From {brand} comes a new take on the {type}, {prep} {mat1} and {mat2}.",
)
INTRO_VERBS = {"with": "crafted with", "made of": "made of", "from": "sourced from"}
ATTRIBUTE_SENTENCES = {
    "a": ("Best of all, it is {p}.", "Every piece is {p}.", "Yes, it is {p}."),
    "w": ("Comes with {p}.", "Features {p}.", "Thoughtfully designed with {p}."),
    "f": ("Made for {p}.", "A smart pick for {p}.", "Ideal for {p}."),
}
DETAILS = (
    "Thanks to the {mat}, it performs day after day.",
    "The {brand} team tested every detail, from the {mat} to the finish.",
    "Customers tell us it is their go to choice for {use}.",
    "We source the {mat} carefully to keep quality high.",
    "Whether for {use} or everyday life, it is ready when you are.",
    "Each one is inspected before it leaves our warehouse.",
    "Thoughtful details make it a pleasure to own.",
    "It is the kind of product you will buy again and again.",
)
USE_SENTENCES = ("Perfect for {use}.", "Great for {use} and {use2}.", "A favorite for {use}.")
BULLET_LEADS = {"a": "{P}", "w": "WITH {P}", "f": "GREAT FOR {P}"}
OPENERS = (
    "i'm looking for",
    "i need",
    "i want",
    "i am looking for",
    "find me",
    "i would like",
    "can you find me",
    "i'd like to buy",
    "looking for",
    "i want to buy",
    "help me find",
    "i need to buy",
)
SMALL_WORDS = frozenset(_words("a an and for from in of on or the to with made"))
ACRONYMS = frozenset(
    _words(
        "usb hdmi tv led rgb spf hd gps dpi uv bpa gmo sd ssd qled pc tpu abs pbt pvc mdf pu ac "
        "upf sls ph cctv msg usda eva hdr10 uva uvb"
    )
)
# Title words that are not nouns (adjectives, participles, verbs, function words, units): every
# other alphabetic title token goes into the noun lexicon.
NON_NOUNS = frozenset(
    _words(
        """
    a an and for from in of on or the to with made up all into out over that is not no
    adjustable airplane all ambidextrous analog anti armless artisan athletic backless battery
    backlit big blendable bold breathable broad built bus butt certified chip classic clarifying
    cold collared compact convertible cosmetic counter cruelty crunchy cushioned dairy daily
    dark deluxe dense detachable distressed dry dual early easy ergonomic executive extra
    fair fast flat flavored floating flowy foaming foldable fragrance free freestanding fresh
    full gentle gluten golf gourmet greek hand handmade healthy heavy heavyweight hidden high
    highly hooded hot hydrating hypoallergenic insulated ionic italian kosher large latex leave
    light lightweight liquid loose low luminous magnetic matte mechanical medium mid minimalist
    mineral mini mixed modern motion moisture moisturizing multiport natural non odor open
    organic oversized packable paraben pigmented plant platform polarized portable powered
    premium professional protective pullover quick quilted raw reclining rechargeable recycled
    reef regular relaxed removable retro roasted round rugged rustic safe salon savory scratch
    seamless sensitive short shock silent silicone single sleeveless slim smart smoked smudge
    soft soy sparkling special square stackable straight strappy stretch sugar sulfate summer
    sweatproof swimproof swivel tall talc tapered thick thin toxic transfer true tufted ultra
    unbreakable unfiltered unisex unpasteurized upholstered vegan versatile vibrant virgin
    waterproof weatherproof whitening whole wicking wild wireless wrinkle zero warm volumizing
    velvet bittersweet carbonated fizzy rectangle tall typing shaped fluoride absorbing
    lasting resistant proof drying lifting wicking charging cancelling swappable mounted
    mountable frameless efficient plated flexible tangle spill fingerprint activated
    exfoliating balanced comedogenic tested treated prone ripened marzano aged sweet fed added
    artificial filled purpose cracked dried cooking pressed deluxe percent crispy
    based braided casual clean clear combed cool curly deep elastic elderly ended engineered
    essential everyday external facial faux fine floral french friendly go green black brown
    handed hyaluronic infrared left local long mature molded multiple negative nutty oily
    optical outdoor padded prebiotic raised real reinforced ribbed rolled rolling saving
    shockproof sliding small smocked smooth solid synthetic tempered under whiskered wooden
    woven greasy fruity peppery biodegradable fanless brushless mediterranean standing slip
    post industrial one two three four five six ten twenty
    oz fl ounce ounces pound pounds count pack inch inches feet watt pieces pairs
    """
    )
)
