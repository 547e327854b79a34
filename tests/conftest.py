"""Test session setup: 8 simulated CPU devices for the multi-device tests.

XLA reads the flag when JAX initialises its backend, so it is set before any test imports JAX.
"""

import os

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile afresh: the command's persistent XLA cache (arlarena_jax/compile_cache.py) stays
# off unless a test turns it on for a folder of its own.
os.environ.setdefault("ARLARENA_XLA_CACHE", "off")

# Tests of an optional extra skip, with the reason, where it is not installed. CI installs every
# extra and names them in $ARLARENA_REQUIRE_EXTRAS (comma-separated), so that an extra that
# installed but does not import fails the run instead of skipping its tests.
REQUIRE_EXTRAS = "ARLARENA_REQUIRE_EXTRAS"


def pytest_configure(config):
    required = {e.strip() for e in os.environ.get(REQUIRE_EXTRAS, "").split(",") if e.strip()}
    unknown = required - {"alfworld", "webshop"}
    if unknown:
        raise pytest.UsageError(f"${REQUIRE_EXTRAS} names unknown extras: {sorted(unknown)}")
    if "alfworld" in required:
        from envs.alfworld import engine

        try:
            engine.alfworld()
        except ImportError as error:
            raise pytest.UsageError(f"${REQUIRE_EXTRAS} requires alfworld: {error}") from None
    if "webshop" in required:  # spaCy's verified English model (the webshop extra, also in dev)
        from envs.webshop.nouns import spacy_nouns

        try:
            spacy_nouns()
        except (ImportError, RuntimeError) as error:
            raise pytest.UsageError(f"${REQUIRE_EXTRAS} requires webshop: {error}") from None


# ---- ALFWorld (docs/environments.md §4): the real engine and the shared evaluation problems ----

SPEC_GAME = "look_at_obj_in_light-CD-None-DeskLamp-320/trial_T20190907_224451_655673"


@pytest.fixture(scope="session")
def alfworld_problems(tmp_path_factory):
    """``json_2.1.1/`` of the shared evaluation tarball, unpacked once per session; skips when
    the engine (the ``alfworld`` extra) or the tarball (``$ARLARENA_ALFWORLD_TARBALL``) is
    missing."""
    from envs.alfworld import engine
    from envs.alfworld.data import TARBALL_ENV, default_tarball, unpack

    if not engine.available():
        pytest.skip(f"ALFWorld engine not installed: {engine.INSTALL_HINT}")
    tarball = default_tarball()
    if not tarball.is_file():
        pytest.skip(f"ALFWorld evaluation tarball absent: {tarball} (set ${TARBALL_ENV})")
    return unpack(tarball, tmp_path_factory.mktemp("alfworld"))


@pytest.fixture(scope="session")
def spec_game(alfworld_problems, tmp_path_factory):
    """The game of spec §8.3 built with the spec's phrasing (template 0)."""
    from envs.alfworld.games import build_trial

    out = tmp_path_factory.mktemp("alfworld_games") / "valid_seen" / SPEC_GAME
    record = build_trial(alfworld_problems / "valid_seen" / SPEC_GAME, out, phrasing=0)
    assert record.solvable, record.error
    return record


@pytest.fixture(scope="session")
def alfworld_data_root(alfworld_problems, tmp_path_factory):
    """A data root (``env.data_path``) with the first candidate trial of every task type of
    valid_seen built into ``json_2.1.1/valid_seen`` and copied as ``json_2.1.1/train``."""
    import shutil

    from envs.alfworld.data import find_trials, task_type_of
    from envs.alfworld.games import build_trials

    first = {}
    for trial in find_trials(alfworld_problems / "valid_seen"):
        first.setdefault(task_type_of(trial), trial)
    root = tmp_path_factory.mktemp("alfworld_root")
    split = root / "json_2.1.1" / "valid_seen"
    pairs = [(t, split / t.relative_to(alfworld_problems / "valid_seen")) for t in first.values()]
    records = build_trials(pairs, workers=2)
    assert len(records) == 6 and sum(r.solvable for r in records) >= 5, records
    shutil.copytree(split, root / "json_2.1.1" / "train")
    return root
