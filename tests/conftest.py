"""Test session setup: 8 simulated CPU devices for the multi-device tests, one compilation cache
kept across sessions, and what pytest-xdist's workers share (docs/development.md).

XLA reads the flag when JAX initialises its backend, so it is set before any test imports JAX.
"""

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

# The suite's programs are tiny: compiling them costs more than running them. XLA's CPU backend at
# optimisation level 0 compiles them about a third faster (measured, docs/development.md,
# "Keeping the suite fast"); the computations are the same, so every test still checks the same
# numbers (the project's runs keep XLA's default). Child processes a test starts inherit these
# flags unless the test sets its own.
TEST_XLA_FLAGS = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
os.environ.setdefault("XLA_FLAGS", TEST_XLA_FLAGS)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Compile once: the command's persistent XLA cache (arlarena_jax/compile_cache.py) in a folder of
# the tests' own, $XDG_CACHE_HOME/arlarena/xla-tests (~/.cache/...), inherited through
# $ARLARENA_XLA_CACHE by pytest-xdist's workers and by every `arlarena` process a test starts, so
# a program that several tests, workers, runs or earlier sessions build is compiled once. A
# program's key covers its HLO, the JAX, jaxlib and XLA versions, the devices and the compile
# options (the -O0 above included), so a cached program is only ever the same program. The first
# process of a session (pytest-xdist's controller, before any worker starts) keeps the folder
# under 1 GiB, oldest-written programs deleted first (not JAX's jax_compilation_cache_max_size:
# it re-reads the whole folder under a lock on every write). ARLARENA_XLA_CACHE=<folder> puts it
# elsewhere, and ARLARENA_XLA_CACHE=off compiles everything afresh. The cache's own tests give
# their child processes folders of their own (tests/project/test_compile_cache.py).
from arlarena_jax.compile_cache import (  # noqa: E402 (after the flags)
    CACHE_ENV,
    default_cache_dir,
    enable_compilation_cache,
    prune_cache,
)

TEST_CACHE_MAX_BYTES = 1 << 30
if CACHE_ENV not in os.environ:
    os.environ[CACHE_ENV] = str(default_cache_dir(os.environ).with_name("xla-tests"))
    prune_cache(Path(os.environ[CACHE_ENV]), TEST_CACHE_MAX_BYTES)
enable_compilation_cache()

# Tests of an optional extra skip, with the reason, where it is not installed. CI installs every
# extra and names them in $ARLARENA_REQUIRE_EXTRAS (comma-separated), so that an extra that
# installed but does not import fails the run instead of skipping its tests.
REQUIRE_EXTRAS = "ARLARENA_REQUIRE_EXTRAS"


def pytest_configure(config):
    required = {e.strip() for e in os.environ.get(REQUIRE_EXTRAS, "").split(",") if e.strip()}
    unknown = required - {"alfworld", "webshop", "openenv"}
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
    if "openenv" in required:  # `arlarena serve`'s server and the tests' client
        try:
            import openenv.core.generic_client  # noqa: F401

            import envs.serving.server  # noqa: F401
        except ImportError as error:
            raise pytest.UsageError(f"${REQUIRE_EXTRAS} requires openenv: {error}") from None


# ---- What pytest-xdist's workers share (the README's `-n auto`, `--dist loadfile`) ----
# Each test file runs on one worker, so a module-scoped fixture is built once. A session-scoped
# one would be built once per worker: those that are expensive are built once in a folder every
# worker sees, under a lock, and host-wide state (the sandbox's uids and processes) is held by
# one test at a time.


def _shared_root(tmp_path_factory) -> "os.PathLike":
    """The session's temporary root: the same folder for every xdist worker (each has its own
    ``popen-gwN`` below it), or this process's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _host_lock(path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def built_once(tmp_path_factory, name: str, build):
    """``build(folder)`` into ``<shared root>/name`` by the first worker that asks; the others
    wait for it and reuse the folder. Returns the folder."""
    root = _shared_root(tmp_path_factory)
    folder = root / name
    with _host_lock(root / f"{name}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture
def one_sandbox_at_a_time(tmp_path_factory):
    """Held by every test that starts math sandboxes: their uids are shared by every process on
    the host, and tests/envs/test_math_sandbox.py checks that none of their processes is left on the
    host, so two workers must not run such tests at once."""
    with _host_lock(_shared_root(tmp_path_factory) / "sandbox.lock"):
        yield


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
    folder = built_once(tmp_path_factory, "alfworld", lambda out: unpack(tarball, out))
    return unpack(tarball, folder)  # unpacked already: the path of json_2.1.1/


@pytest.fixture(scope="session")
def spec_game(alfworld_problems, tmp_path_factory):
    """The game of spec §8.3 built with the spec's phrasing (template 0)."""
    from envs.alfworld.games import build_trial

    out = tmp_path_factory.mktemp("alfworld_games") / "valid_seen" / SPEC_GAME
    record = build_trial(alfworld_problems / "valid_seen" / SPEC_GAME, out, phrasing=0)
    assert record.solvable, record.error
    return record


# The training folder's trials (task type: indices among valid_seen's candidate trials of that
# type; index 0 is the test folder's): a 5-command walkthrough (pick_and_place_simple #3) keeps a
# won demonstration within the tests' 6 turns after env.alfworld.validation_games=1 carves one
# game (the lowest path hash: pick_and_place_simple #1) out as validation.
ALFWORLD_TRAIN_PICKS = {
    "pick_and_place_simple": (1, 3),
    "look_at_obj_in_light": (3,),
    "pick_cool_then_place_in_recep": (1,),
    "pick_heat_then_place_in_recep": (1,),
    "pick_two_obj_and_place": (1,),
}


@pytest.fixture(scope="session")
def alfworld_data_root(alfworld_problems, tmp_path_factory):
    """A data root (``env.data_path``) with the first candidate trial of every task type of
    valid_seen built into ``json_2.1.1/valid_seen`` (the test split) and six other trials
    (:data:`ALFWORLD_TRAIN_PICKS`) into ``json_2.1.1/train``: disjoint splits, as a training run
    requires."""
    from envs.alfworld.data import find_trials, task_type_of
    from envs.alfworld.games import build_trials

    def build(root):
        source = alfworld_problems / "valid_seen"
        by_type: dict[str, list] = {}
        for trial in find_trials(source):
            by_type.setdefault(task_type_of(trial), []).append(trial)
        chosen = [("valid_seen", trials[0]) for trials in by_type.values()]
        chosen += [("train", by_type[t][i]) for t, ix in ALFWORLD_TRAIN_PICKS.items() for i in ix]
        pairs = [(t, root / "json_2.1.1" / f / t.relative_to(source)) for f, t in chosen]
        records = build_trials(pairs, workers=2)
        assert len(records) == 12 and sum(r.solvable for r in records[:6]) >= 5, records
        assert all(r.solvable for r in records[6:]), records[6:]

    return built_once(tmp_path_factory, "alfworld_root", build)


@pytest.fixture(scope="session")
def smollm2_dir():
    """The embedded SmolLM2-135M-Instruct, imported by ``arlarena model fetch`` into the model
    cache ($ARLARENA_MODELS or ~/.cache/arlarena/models); tests that need it skip, with the
    command to run, where it was never fetched (nothing is downloaded here)."""
    from arlarena_jax.models.fetch import gguf_path, is_fetched, models_dir

    name = "smollm2-135m-instruct"
    if not is_fetched(name) or not gguf_path(name).is_file():
        pytest.skip(f"{name} is not in {models_dir()}: run `arlarena model fetch {name}`")
    return models_dir() / name
