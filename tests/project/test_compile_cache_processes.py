"""Every process of a multi-process CPU run keeps its own compiled programs
(arlarena_jax/compile_cache_processes.py).

Two ``jax.distributed`` processes (2 CPU devices each) are started twice over one cache folder;
each compiles a program over the 4-device mesh and one on its own devices, and reports the
programs it asked the cache for and those it found (JAX's monitoring events). With the
command's cache every process finds, on its second start, every program of its first. With
JAX's writer alone, process 1 finds none of them: the reason for the wrapper (if a JAX release
makes process 1's keys equal to process 0's, or lets it write, that check fails, and the
wrapper can go).
"""

from __future__ import annotations

import inspect
import json

import pytest

from arlarena_jax.compile_cache import CACHE_ENV, JAX_CACHE_ENV, JAX_MIN_TIME_ENV
from arlarena_jax.compile_cache_processes import WRITER_PARAMETERS, store_on_every_cpu_process
from tests.helpers.processes import finish, start, tail

CHILD = """
import json, os, jax, jax.numpy as jnp
from jax import monitoring
from jax.sharding import NamedSharding, PartitionSpec
events = []
monitoring.register_event_listener(lambda event, **kw: events.append(event))
if os.environ["WRITER"] == "command":
    from arlarena_jax.compile_cache import enable_compilation_cache
    enable_compilation_cache()
else:  # JAX's own writer: the same folder and threshold, nothing wrapped
    jax.config.update("jax_compilation_cache_dir", os.environ["ARLARENA_XLA_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
from arlarena_jax.train.distributed import initialize_if_distributed
initialize_if_distributed()
mesh = jax.make_mesh((4,), ("data",))
rows = jnp.full((2, 8), float(jax.process_index() + 1))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("data")), rows)
total = jax.jit(lambda a: (jnp.tanh(a) * a).sum())(x)  # over both processes' devices
local = jax.jit(lambda a: jnp.cos(a).sum())(rows)  # on this process's devices only
print(json.dumps({
    "process": jax.process_index(),
    "total": float(total),
    "hits": events.count("/jax/compilation_cache/cache_hits"),
    "requests": events.count("/jax/compilation_cache/compile_requests_use_cache"),
}))
"""


def started_twice(tmp_path, writer: str) -> list[list[dict]]:
    """Both processes' reports, per start (process 0's first)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    extra = {CACHE_ENV: str(tmp_path / "xla"), "WRITER": writer, JAX_MIN_TIME_ENV: "0"}
    starts = []
    for _ in range(2):
        procs = start([], 2, devices=2, script=script, extra=extra)
        results = finish(procs, 240)
        outputs = [out for _, out in results]
        assert all(code == 0 for code, _ in results), tail(outputs)
        reports = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
        starts.append(sorted(reports, key=lambda report: report["process"]))
    return starts


def test_every_process_finds_its_own_programs_on_its_next_start(tmp_path):
    first, second = started_twice(tmp_path, "command")
    assert [r["total"] for r in first] == [r["total"] for r in second]
    for before, after in zip(first, second, strict=True):
        assert before["requests"] >= 2 and before["hits"] == 0, before  # the two programs
        assert after == before | {"hits": before["requests"]}, (before, after)


def test_with_jax_writer_alone_process_1_compiles_everything_again(tmp_path):
    first, second = started_twice(tmp_path, "jax")
    assert second[0]["hits"] == second[0]["requests"] == first[0]["requests"] >= 2
    assert second[1]["hits"] == 0 and second[1]["requests"] == first[1]["requests"] >= 2


def test_a_writer_of_another_shape_is_left_alone(monkeypatch):
    from jax._src import compiler

    def other(cache_key, module_name, backend, executable):  # not JAX 0.10's signature
        return None

    monkeypatch.setattr(compiler, "_cache_write", other)
    assert store_on_every_cpu_process() is False
    assert compiler._cache_write is other


def test_wrapping_twice_wraps_once(monkeypatch):
    from jax._src import compiler

    monkeypatch.setattr(compiler, "_cache_write", compiler._cache_write)
    assert store_on_every_cpu_process() is True
    wrapped = compiler._cache_write
    assert getattr(wrapped, "every_cpu_process", False)
    assert tuple(inspect.signature(wrapped).parameters) == WRITER_PARAMETERS
    assert store_on_every_cpu_process() is True and compiler._cache_write is wrapped


@pytest.fixture(autouse=True)
def _no_jax_cache_dir_override(monkeypatch):
    """The children take the folder from ARLARENA_XLA_CACHE, not the suite's JAX setting."""
    monkeypatch.delenv(JAX_CACHE_ENV, raising=False)
