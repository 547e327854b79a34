"""The command's persistent XLA compilation cache (arlarena_jax/compile_cache.py).

Which folder each environment setting selects, that the ``arlarena`` command fills it, and that a
second process loads the first one's programs instead of compiling them. JAX sets its cache up
once per process, so the end-to-end checks run in child processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from arlarena_jax.compile_cache import (
    CACHE_ENV,
    JAX_CACHE_ENV,
    JAX_MIN_TIME_ENV,
    MAX_GB_ENV,
    cache_dir_from_env,
    cache_limit_bytes,
    enable_compilation_cache,
    keep_bounded,
    prune_cache,
)

ROOT = Path(__file__).resolve().parents[2]

# A child process: turn the cache on the command's way, compile one program, and print the
# folder and the cache hits and misses JAX reported.
CHILD = """
import json, jax, jax.numpy as jnp
from jax import monitoring
events = []
monitoring.register_event_listener(lambda event, **kw: events.append(event))
from arlarena_jax.compile_cache import enable_compilation_cache
folder = enable_compilation_cache()
jax.jit(lambda x: jnp.tanh(x @ x.T).sum(axis=0))(jnp.ones((32, 32))).block_until_ready()
print(json.dumps({
    "folder": None if folder is None else str(folder),
    "hits": events.count("/jax/compilation_cache/cache_hits"),
    "misses": events.count("/jax/compilation_cache/cache_misses"),
    "min_seconds": jax.config.jax_persistent_cache_min_compile_time_secs,
}))
"""


def child_env(**settings: str) -> dict[str, str]:
    """This process's environment without any cache setting, plus ``settings``."""
    env = {
        k: v for k, v in os.environ.items() if k not in (CACHE_ENV, JAX_CACHE_ENV, JAX_MIN_TIME_ENV)
    }
    env["PYTHONPATH"] = str(ROOT)
    return env | settings


def run_child(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_default_folder_follows_xdg_cache_home(tmp_path):
    assert cache_dir_from_env({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "arlarena/xla"
    assert cache_dir_from_env({}) == Path("~/.cache/arlarena/xla").expanduser()
    assert cache_dir_from_env({CACHE_ENV: ""}) == Path("~/.cache/arlarena/xla").expanduser()


def test_named_folder_off_and_jax_setting(tmp_path):
    assert cache_dir_from_env({CACHE_ENV: str(tmp_path / "c")}) == tmp_path / "c"
    assert cache_dir_from_env({CACHE_ENV: "~/x"}) == Path("~/x").expanduser()
    for off in ("off", "OFF", "0", "false", "none"):
        assert cache_dir_from_env({CACHE_ENV: off}) is None
    # JAX's own variable stands: the command changes nothing
    assert cache_dir_from_env({JAX_CACHE_ENV: "/somewhere", CACHE_ENV: str(tmp_path)}) is None


def test_a_folder_that_cannot_be_made_leaves_the_cache_off(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert enable_compilation_cache({CACHE_ENV: str(blocker / "xla")}) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "compilation cache off" in err[0] and str(blocker) in err[0]


def test_a_second_process_loads_the_first_ones_programs(tmp_path):
    folder = tmp_path / "xla"
    first = run_child(child_env(**{CACHE_ENV: str(folder)}))
    assert first["folder"] == str(folder)
    assert first["min_seconds"] == 0  # every program is stored, the quick ones too
    assert first["hits"] == 0 and first["misses"] >= 1
    assert any(folder.iterdir())
    second = run_child(child_env(**{CACHE_ENV: str(folder)}))
    assert second["hits"] >= 1 and second["misses"] == 0


def test_off_caches_nothing(tmp_path):
    result = run_child(child_env(**{CACHE_ENV: "off", "XDG_CACHE_HOME": str(tmp_path)}))
    assert result == {"folder": None, "hits": 0, "misses": 0, "min_seconds": 1.0}
    assert not (tmp_path / "arlarena").exists()


def test_the_command_fills_the_default_folder(tmp_path):
    env = child_env(XDG_CACHE_HOME=str(tmp_path))
    subprocess.run(
        [sys.executable, "-m", "arlarena_jax", "demo", "--method", "gspo"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert any((tmp_path / "arlarena" / "xla").iterdir())


def test_a_threshold_of_ones_own_stands(tmp_path):
    env = child_env(**{CACHE_ENV: str(tmp_path / "xla"), JAX_MIN_TIME_ENV: "5"})
    result = run_child(env)
    assert result["min_seconds"] == 5
    stored = [p for p in (tmp_path / "xla").iterdir() if p.name.endswith("-cache")]
    assert stored == []  # the program compiled in well under 5 s


def test_prune_deletes_the_oldest_written_files_down_to_half_the_limit(tmp_path):
    """Ten files of 100 bytes written at t = 0..9: under a 1,000-byte limit nothing goes; under
    900 the oldest go until at most 450 bytes are left (six files: t = 0..5), the newest stay."""
    for t in range(10):
        path = tmp_path / f"entry{t}-cache"
        path.write_bytes(b"x" * 100)
        os.utime(path, (t, t))
    assert prune_cache(tmp_path, 1000) == 0
    assert prune_cache(tmp_path, 900) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"entry{t}-cache" for t in range(6, 10)]
    assert prune_cache(tmp_path / "missing", 10) == 0


def test_the_command_keeps_its_folder_under_the_limit(tmp_path, capsys):
    """ARLARENA_XLA_CACHE_MAX_GB bounds the folder at start-up: 1,100 bytes against a limit of
    1e-6 GiB (1,073 bytes) prune the oldest files down to 536 bytes or less (500); 0 keeps
    everything; a bad value keeps the default (4 GiB) with one warning line naming the
    variable. (Called directly: enable_compilation_cache would repoint this process's own
    cache.)"""
    folder = tmp_path / "xla"
    folder.mkdir()
    for t in range(11):
        path = folder / f"entry{t}-cache"
        path.write_bytes(b"x" * 100)
        os.utime(path, (t, t))
    assert keep_bounded(folder, {MAX_GB_ENV: "0"}) == 0
    assert len(list(folder.iterdir())) == 11
    assert cache_limit_bytes({}) == 4 << 30
    assert cache_limit_bytes({MAX_GB_ENV: "lots"}) == 4 << 30
    assert cache_limit_bytes({MAX_GB_ENV: "inf"}) == 4 << 30
    assert capsys.readouterr().err.count(MAX_GB_ENV) == 2
    assert keep_bounded(folder, {MAX_GB_ENV: "1e-6"}) == 6  # 1,073 bytes: down to 536
    assert {p.name for p in folder.iterdir()} == {f"entry{t}-cache" for t in range(6, 11)}
