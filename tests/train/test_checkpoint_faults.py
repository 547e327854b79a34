"""Checkpoints under faults: a corrupt newest step falls back to the previous one and is set aside
in the quarantine folder; half-deleted steps are finished off; a process killed (SIGKILL) mid-save,
between commit and pruning, or mid-prune resumes to a valid step and leaves nothing unprunable;
metrics flushed at a checkpoint survive the kill."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arlarena_jax.arena.report.events import read_events
from arlarena_jax.train.checkpoint import Checkpointer, CheckpointError
from arlarena_jax.train.checkpoint_folders import DELETING, QUARANTINE
from arlarena_jax.train.checkpoint_verify import fallback_notice, verify_step
from arlarena_jax.train.metrics import MetricsWriter, read_scalars

NODE_MAGIC = bytes.fromhex("0cdb20de")  # OCDBT B-tree / version-tree node files


@pytest.fixture(autouse=True)
def collect_abandoned_reads():
    """A restore that fails on corrupt data leaves orbax's other shard reads as coroutines;
    collect them here, not during a later test (where a finalizer inside ``ast.parse`` trips a
    CPython 3.11 bug)."""
    yield
    gc.collect()


def tiny(step: int) -> dict:
    """A small train state whose values name the step; ``w`` is big enough for OCDBT to store
    it as raw (zstd) array data in a file of its own."""
    return {
        "w": jax.random.normal(jax.random.key(step), (512,)),
        "b": {"x": jnp.arange(4.0) + step, "n": jnp.asarray(step, jnp.int32)},
        "rng": jax.random.key(100 + step),
    }


def assert_state(tree: dict, step: int) -> None:
    want = tiny(step)
    for got, exp in zip(jax.tree.leaves(tree), jax.tree.leaves(want), strict=True):
        if jax.dtypes.issubdtype(exp.dtype, jax.dtypes.prng_key):
            got, exp = jax.random.key_data(got), jax.random.key_data(exp)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(exp))


def save_steps(directory: Path, steps, keep: int = 3) -> None:
    with Checkpointer(directory, keep=keep) as ckpt:
        for s in steps:
            assert ckpt.save(s, tiny(s), {"s": s})
            ckpt.wait()


def data_files(step_dir: Path, raw: bool) -> list[Path]:
    """The OCDBT data files of a step: raw array data, or node files."""
    files = [*step_dir.glob("state/d/*"), *step_dir.glob("state/ocdbt.process_*/d/*")]
    kept = [f for f in files if (f.read_bytes()[:4] != NODE_MAGIC) == raw]
    return sorted(kept, key=lambda f: f.stat().st_size, reverse=True)


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def truncate_raw_data(d: Path) -> None:
    truncate(data_files(d, raw=True)[0])


def truncate_node_file(d: Path) -> None:
    truncate(data_files(d, raw=False)[0])


def truncate_manifest(d: Path) -> None:
    truncate(d / "state" / "ocdbt.process_0" / "manifest.ocdbt")


def truncate_top_manifest(d: Path) -> None:
    truncate(d / "state" / "manifest.ocdbt")


def remove_state_metadata(d: Path) -> None:
    (d / "state" / "_METADATA").unlink()


def garble_host_json(d: Path) -> None:
    (d / "host" / "metadata").write_text('{"s": 3,')


def remove_commit_marker(d: Path) -> None:
    (d / "commit_success.txt").unlink()


def remove_raw_data(d: Path) -> None:
    data_files(d, raw=True)[0].unlink()


def remove_node_file(d: Path) -> None:
    data_files(d, raw=False)[0].unlink()


def flip_bit(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def flip_raw_data_frame(d: Path) -> None:
    """A flipped bit in the zstd frame header (a flip inside a raw value goes unnoticed: OCDBT
    values carry no checksum and zarr's zstd frames none either)."""
    flip_bit(data_files(d, raw=True)[0], 0)


def flip_node_file(d: Path) -> None:
    node = data_files(d, raw=False)[0]
    flip_bit(node, node.stat().st_size // 2)  # the header still frames it; its CRC-32C fails


CORRUPTIONS = {  # name -> (corruption of step 3, "cheap": caught by verify_step, else the reason)
    "truncated raw array data": (truncate_raw_data, "truncated"),
    "missing raw array data": (remove_raw_data, "missing"),
    "bit-flipped raw array data": (flip_raw_data_frame, "unreadable"),
    "missing node data file": (remove_node_file, "missing"),
    "bit-flipped node data file": (flip_node_file, "unreadable"),
    "truncated node data file": (truncate_node_file, "cheap"),
    "truncated manifest.ocdbt": (truncate_manifest, "cheap"),
    "truncated top manifest.ocdbt": (truncate_top_manifest, "cheap"),
    "missing state/_METADATA": (remove_state_metadata, "cheap"),
    "unreadable host JSON": (garble_host_json, "cheap"),
    "missing commit marker": (remove_commit_marker, "cheap"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_corrupt_newest_step_falls_back_and_is_quarantined(tmp_path, name):
    corrupt, expected = CORRUPTIONS[name]
    cheap = expected == "cheap"
    save_steps(tmp_path, [1, 2, 3])
    corrupt(tmp_path / "3")
    assert (verify_step(tmp_path / "3") is not None) == cheap
    lines: list[str] = []
    with Checkpointer(tmp_path, keep=3, report=lines.append) as ckpt:
        assert ckpt.latest_step() == (2 if cheap else 3)
        restored = ckpt.restore_latest_valid(tiny(0))
        assert restored.step == 2 and restored.host_state == {"s": 2}
        assert_state(restored.train_state, 2)
        assert ckpt.all_steps() == [1, 2] and ckpt.latest_step() == 2
        assert len(lines) == 1 and "\n" not in lines[0]  # one notice, at start or at restore
        if not cheap:
            (bad,) = restored.skipped
            assert (bad.step, bad.reason) == (3, expected)
            assert bad.moved_to == str(tmp_path / QUARANTINE / f"3-{expected}")
            assert bad.file.startswith("state/") and (Path(bad.moved_to) / bad.file).parent.is_dir()
            assert lines[0] == fallback_notice(bad, 2)
            assert f"{bad.file} is {expected}" in lines[0] and "resuming from step 2" in lines[0]
        assert ckpt.save(3, tiny(3), {"s": 3})  # the resumed run saves step 3 again
    (moved,) = (tmp_path / QUARANTINE).iterdir()
    assert moved.name.startswith("3-") and (moved / "state").is_dir()  # kept for inspection
    with Checkpointer(tmp_path, keep=3) as ckpt:  # quarantine is not a step for orbax
        assert ckpt.all_steps() == [1, 2, 3] and ckpt.latest_step() == 3


def test_the_file_at_fault_is_named(tmp_path):
    """Truncated and missing files are found from the OCDBT index before orbax reads them: the
    notice names the file, and its recorded and actual sizes."""
    save_steps(tmp_path, [1, 2])
    raw = data_files(tmp_path / "2", raw=True)[0]
    size = raw.stat().st_size
    raw.write_bytes(raw.read_bytes()[:100])
    with Checkpointer(tmp_path, keep=3, report=lambda line: None) as ckpt:
        (bad,) = ckpt.restore_latest_valid(tiny(0)).skipped
    assert bad.file == str(raw.relative_to(tmp_path / "2"))
    assert bad.detail.startswith("100 of ") and int(bad.detail.split()[2]) <= size


def test_data_files_holding_several_nodes_and_values_verify(tmp_path):
    """OCDBT packs nodes and raw values back to back when writes coincide (timing-dependent):
    only the framed nodes are walked, a truncated one is caught."""
    save_steps(tmp_path, [1])
    node, raw = data_files(tmp_path / "1", raw=False)[0], data_files(tmp_path / "1", raw=True)[0]
    node_bytes = node.read_bytes()
    node.write_bytes(node_bytes + node_bytes + raw.read_bytes())  # readers use (offset, length)
    assert verify_step(tmp_path / "1") is None
    with Checkpointer(tmp_path) as ckpt:
        assert_state(ckpt.restore(tiny(0))[0], 1)
    node.write_bytes(node_bytes + node_bytes[:-5])
    assert verify_step(tmp_path / "1").startswith("truncated data file")


def test_a_stray_empty_newer_folder_is_quarantined(tmp_path):
    save_steps(tmp_path, [1, 2])
    (tmp_path / "7").mkdir()
    lines: list[str] = []
    with Checkpointer(tmp_path, keep=3, report=lines.append) as ckpt:
        assert ckpt.latest_step() == 2 and ckpt.all_steps() == [1, 2]
        restored = ckpt.restore_latest_valid(tiny(0))
        assert restored.step == 2 and not restored.skipped
        assert_state(restored.train_state, 2)
    assert len(lines) == 1 and "step 7" in lines[0] and "no commit marker" in lines[0]
    assert (tmp_path / QUARANTINE / "7-no-commit-marker").is_dir()


def test_no_fallback_for_a_target_that_does_not_fit_and_none_when_all_fail(tmp_path):
    save_steps(tmp_path, [1, 2])
    with Checkpointer(tmp_path, keep=3) as ckpt:
        with pytest.raises(CheckpointError, match="does not match the target"):
            ckpt.restore_latest_valid({"other": jnp.zeros(2)})
        assert ckpt.all_steps() == [1, 2]  # a wrong target moves nothing
    for step in (1, 2):
        truncate_raw_data(tmp_path / str(step))
    with Checkpointer(tmp_path, keep=3) as ckpt:
        with pytest.raises(CheckpointError, match=r"no checkpoint .* can be restored; step 2"):
            ckpt.restore_latest_valid(tiny(0))
        assert ckpt.all_steps() == [1, 2]  # nothing restores: nothing is set aside
    with Checkpointer(tmp_path / "empty") as ckpt:
        assert ckpt.restore_latest_valid(tiny(0)) is None


def half_delete(step_dir: Path) -> None:
    """What an interrupted ``rmtree`` left: ``state`` and ``host``, no metadata or markers."""
    for name in ("_CHECKPOINT_METADATA", "commit_success.txt"):
        (step_dir / name).unlink()
    for name in ("meta", "metrics"):
        for f in (step_dir / name).iterdir():
            f.unlink()
        (step_dir / name).rmdir()


def test_a_half_deleted_old_step_is_finished_off_at_start_and_at_save(tmp_path):
    save_steps(tmp_path, [1, 2, 3, 4], keep=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["3", "4"]
    save_steps(tmp_path / "copy", [2])
    os.rename(tmp_path / "copy" / "2", tmp_path / "2")
    half_delete(tmp_path / "2")
    lines: list[str] = []
    with Checkpointer(tmp_path, keep=2, report=lines.append) as ckpt:  # at start
        assert not (tmp_path / "2").exists() and ckpt.all_steps() == [3, 4]
        assert len(lines) == 1 and "half-deleted" in lines[0]
        shutil.copytree(tmp_path / "3", tmp_path / "1")  # an old step, half-deleted now
        half_delete(tmp_path / "1")
        ckpt.save(5, tiny(5), {"s": 5})  # at the next save
        ckpt.wait()
        assert ckpt.all_steps() == [4, 5]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["4", "5"]
    assert not (tmp_path / QUARANTINE).exists() and not list((tmp_path / DELETING).iterdir())


def test_a_step_is_pruned_only_once_keep_newer_steps_verify(tmp_path):
    save_steps(tmp_path, [1, 2, 3], keep=3)
    with Checkpointer(tmp_path, keep=2) as ckpt:
        remove_commit_marker(tmp_path / "3")
        ckpt.folders.prune(1)  # orbax's pruning: only step 2 of the newer ones is valid
        assert (tmp_path / "1").is_dir()
        ckpt.folders.prune(2)  # fewer than `keep` newer valid steps: also kept
        assert (tmp_path / "2").is_dir()


SAVER = """
import asyncio, os, sys, time
from pathlib import Path
import jax, jax.numpy as jnp
from orbax.checkpoint._src.path import atomicity
from arlarena_jax.train import checkpoint as ck, checkpoint_folders as folders
from arlarena_jax.train.metrics import MetricsWriter

directory, moment, kill_at = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

def hold(*args, **kwargs):
    (directory / "ready").write_text(moment)
    time.sleep(600)

def remove_half(path):  # mid-prune: half of the step's files are gone
    files = sorted(p for p in Path(str(path)).rglob("*") if p.is_file())
    for f in files[: len(files) // 2]:
        f.unlink()
    hold()

async def finalize_slowly(self):  # mid-save: items written, the step not committed
    await asyncio.to_thread(hold)

def arm():
    if moment == "save":
        atomicity.AtomicRenameTemporaryPath.finalize = finalize_slowly
    elif moment == "prune":
        folders._remove_tree = remove_half
    elif moment == "commit":  # the new step committed, the old one not yet pruned
        folders.StepFolders.prune = hold

with ck.Checkpointer(directory / "ckpt", keep=2) as c, MetricsWriter(directory / "tb") as w:
    for s in range(1, kill_at + 1):
        w.scalars(s, {"loss": float(s), "reward": 2.0 * s})
        w.flush()  # as Run.save does
        if s == kill_at:
            arm()
        c.save(s, {"w": jnp.arange(8.0) + s, "k": jax.random.key(s)}, {"s": s})
        c.wait()
"""


@pytest.mark.parametrize(("moment", "expected"), [("save", 3), ("commit", 4), ("prune", 4)])
def test_kill_minus_nine_resumes_to_a_valid_step(tmp_path, moment, expected):
    script = tmp_path / "saver.py"
    script.write_text(textwrap.dedent(SAVER))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), moment, "4"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the saver never reached the moment"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    directory = tmp_path / "ckpt"
    left = {p.name.split("-")[0] for p in directory.iterdir() if p.name != DELETING}
    deleting = list((directory / DELETING).iterdir())
    assert (left, len(deleting)) == {  # the kill hit the moment it was meant to
        "save": ({"2", "3", "4.orbax"}, 0),
        "commit": ({"2", "3", "4"}, 0),
        "prune": ({"3", "4"}, 1),
    }[moment]
    target = {"w": jnp.zeros(8), "k": jax.random.key(0)}
    with Checkpointer(directory, keep=2, report=lambda line: None) as ckpt:
        restored = ckpt.restore_latest_valid(target)
        assert restored.step == expected and restored.host_state == {"s": expected}
        w = np.asarray(restored.train_state["w"])
        np.testing.assert_array_equal(w, np.arange(8.0) + expected)
        steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
        assert all(verify_step(directory / str(s)) is None for s in steps)
        assert ckpt.save(expected + 1, target, {"s": expected + 1})
    steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    assert steps == [expected, expected + 1]  # everything older was pruned
    assert not list((directory / DELETING).iterdir())
    scalars = read_scalars(tmp_path / "tb")  # flushed before each save: none lost to the kill
    assert [s for s, _ in scalars["loss"]] == [1, 2, 3, 4]


def test_flush_makes_every_scalar_readable_without_close(tmp_path):
    writer = MetricsWriter(tmp_path, flush_secs=3600)
    try:
        for batch in range(2):
            steps = range(10 * batch, 10 * batch + 10)
            for step in steps:  # more events than tensorboardX's queue holds (10)
                writer.scalars(step, {f"k{i}": step + i / 10 for i in range(5)})
            writer.flush()
            scalars = read_scalars(tmp_path)  # a fresh reader, the writer still open
            assert sorted(scalars) == [f"k{i}" for i in range(5)]
            for i in range(5):
                want = [(s, pytest.approx(s + i / 10)) for s in range(10 * batch + 10)]
                assert scalars[f"k{i}"] == want
    finally:
        writer.close()


def test_run_flushes_metrics_at_save_and_reports_a_fallback_in_one_line(tmp_path, capsys):
    from arlarena_jax.train.config_io import load_config
    from arlarena_jax.train.run import Run

    config = load_config("configs/sokoban/sampo_tiny.yaml", [f"trainer.run_dir={tmp_path}"])
    with Run(config, console=False) as run:
        for step in (1, 2):
            run.host.step = step
            run.pieces.writer.scalars(step, {"actor/pg_loss": 0.5 * step})
            assert run.save(force=True)
        # the run still open (a kill now loses nothing): every saved step's scalars are on disk
        assert read_scalars(tmp_path / "tensorboard")["actor/pg_loss"] == [(1, 0.5), (2, 1.0)]
    truncate_raw_data(tmp_path / "checkpoints" / "2")
    with Run(config, console=False) as run:
        assert run.resume() == 1 and run.host.step == 1
        run.host.step = 2  # step 2 redone, logged in a new event file
        run.pieces.writer.scalars(2, {"actor/pg_loss": 7.0})
        assert run.save(force=True)
    # each (tag, step) once, with the redone step's value, for the trainer's and the report's reader
    assert read_scalars(tmp_path / "tensorboard")["actor/pg_loss"] == [(1, 0.5), (2, 7.0)]
    series = read_events(tmp_path / "tensorboard").scalars["actor/pg_loss"]
    assert (series.steps.tolist(), series.values.tolist()) == ([1, 2], [0.5, 7.0])
    out, err = capsys.readouterr()
    assert "arlarena:" not in out
    (line,) = [line for line in err.splitlines() if line.startswith("arlarena:")]
    assert line.startswith("arlarena: checkpoint step 2 cannot be restored: state/")
    assert " is truncated (" in line and "bytes); resuming from step 1" in line
    assert line.endswith("quarantine/2-truncated)")
