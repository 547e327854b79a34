"""Orbax checkpoints of a training run, and a SIGTERM/SIGINT guard for clean pre-emption.

A checkpoint at step ``s`` is the directory ``<dir>/<s>/`` with three orbax items:

- ``state``: the device train state (parameters as an ``nnx.State`` or dict, optax state, step
  counter, PRNG keys), written with ``ocp.args.StandardSave``, every shard by the process that
  owns it. Typed PRNG keys (``jax.random.key``) are stored as ``jax.random.key_data`` (uint32,
  trailing implementation dimension) and re-wrapped with ``jax.random.wrap_key_data`` on restore.
- ``host``: a JSON dict of host state: environment seeds, counters, the data position and numpy
  generator states (``np.random.Generator.bit_generator.state``; restore with
  ``gen.bit_generator.state = host["rng"]``).
- ``meta``: the key implementation per key leaf and whether the step was marked good by the
  stability monitor; the ``good`` flag is also orbax's per-step metric, so pruning keeps the
  ``keep`` newest steps plus the newest good one (a rollback target is never pruned).

Orbax writes a step into ``<s>.orbax-checkpoint-tmp-*`` and renames it when every item is on disk,
so a crashed save leaves only a temporary directory, which :meth:`Checkpointer.latest_step`
ignores and a new :class:`Checkpointer` deletes (in the background, done before its first save).

Crash safety. A step is valid (:func:`verify_step`) when its commit marker
(``commit_success.txt``), orbax's ``_CHECKPOINT_METADATA`` with a commit time and its three items
are present and readable: ``host`` and ``meta`` JSON, ``state/_METADATA``, the OCDBT manifests
(magic, length and CRC-32C) and the header of every OCDBT node file. The check reads only metadata
and headers. Before restoring a step, :meth:`Checkpointer.restore_latest_valid` walks its OCDBT
index: a node or array value whose file is gone is ``missing``, one whose file is shorter than its
byte range ``truncated``, a node that fails its CRC-32C (or a value orbax cannot decode)
``unreadable``; it then falls back to the previous step, moves the bad one to
``<dir>/quarantine/<step>-<reason>`` and reports the file and the reason in one line. When a
:class:`Checkpointer` starts and before each save, an invalid step folder is either the remains of
an interrupted deletion (``keep`` newer valid steps exist), which is finished off, or else moved
aside to ``<dir>/quarantine/<step>-<reason>`` (never deleted) and reported in one line. A step is
pruned only once ``keep`` newer valid steps exist, by an atomic rename into ``<dir>/.deleting/``
followed by the removal of that folder, so a kill mid-prune leaves either the whole step or an
entry of ``.deleting`` that the next start or save removes. Old steps are deleted only after the
new one is committed. Saves are asynchronous:
:meth:`Checkpointer.save` returns once the arrays are copied to host memory (the train state may
then be donated), :meth:`Checkpointer.wait` blocks until the files are written. On several hosts
every process calls ``save`` and ``restore``.

The final policy in Hugging Face format is not an orbax checkpoint: the trainer calls
``arlarena_jax.models.save_pretrained(model, directory)`` (``config.json`` + safetensors).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import struct
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
from etils import epath
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding
from orbax.checkpoint.checkpoint_managers import preservation_policy as keep_policy
from orbax.checkpoint.checkpoint_managers import save_decision_policy as save_policy
from tensorboardX.crc32c import crc32c

from arlarena_jax.train.layout import COMMIT_MARKER

PyTree = Any
log = logging.getLogger(__name__)

ITEMS = ("state", "host", "meta")
QUARANTINE = "quarantine"  # invalid step folders, moved aside for a person to inspect
DELETING = ".deleting"  # pruned steps, renamed here and then removed
_MANIFEST_MAGIC, _NODE_MAGIC = 0x0CDB3A2A, 0x0CDB20DE  # OCDBT manifest / B-tree and version nodes


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or does not fit the requested train state (one line)."""


def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _names(tree: PyTree) -> list[str]:
    """Orbax's dotted leaf names (``params.model.norm.weight.value``), in leaf order."""
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [".".join(ocp.tree.str_keypath(path)) for path, _ in paths]


def abstract_like(tree: PyTree) -> PyTree:
    """``jax.ShapeDtypeStruct`` leaves with the shardings of ``tree``'s arrays (the restore target
    of a state shaped and placed like ``tree``; ``jax.eval_shape`` gives no shardings)."""

    def leaf(x):
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree.map(leaf, tree)


def _check_arrays(names: list[str], leaves: list[Any], what: str) -> None:
    for name, leaf in zip(names, leaves, strict=True):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise CheckpointError(
                f"{what} leaf {name!r} is a {type(leaf).__name__}, not an array; wrap it in "
                "jnp.asarray or keep it in host_state"
            )


def _target(name: str, leaf: Any, shape: tuple, stored_key: bool, where: str):
    """The restore target of one leaf: its shape checked against the stored ``shape``; typed
    PRNG keys become their ``key_data`` (uint32, trailing dims replicated)."""
    want, is_key = tuple(np.shape(leaf)), _is_key(leaf)
    if stored_key:
        fits = is_key and len(shape) > len(want) and shape[: len(want)] == want
    else:
        fits = not is_key and shape == want
    if not fits:
        raise CheckpointError(
            f"{where}: leaf {name!r} has shape {shape}{' (PRNG key data)' * stored_key} in the "
            f"checkpoint but {want}{' (PRNG key)' * is_key} in the target"
        )
    sharding = getattr(leaf, "sharding", None) or SingleDeviceSharding(jax.local_devices()[0])
    if not stored_key:
        return jax.ShapeDtypeStruct(want, leaf.dtype, sharding=sharding)
    if isinstance(sharding, NamedSharding):
        extra = [None] * (len(shape) - len(want))
        sharding = NamedSharding(sharding.mesh, PartitionSpec(*sharding.spec, *extra))
    return jax.ShapeDtypeStruct(shape, np.uint32, sharding=sharding)


def _good_step(metrics: dict) -> float:
    """The step if it was saved as good, else -1 (orbax's per-checkpoint metric)."""
    return metrics.get("good_step", -1)


def _jsonable(value: Any, where: str = "host_state") -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise CheckpointError(f"{where} of type {type(value).__name__} is not JSON-serialisable")


class _Invalid(Exception):
    """Why a step folder is not a valid checkpoint (a few words)."""


class Damage(NamedTuple):
    """What is wrong with a step's array data: ``reason`` is ``missing``, ``truncated`` or
    ``unreadable``; ``file`` the file at fault, relative to the step folder (``state`` where none
    is known); ``detail`` a few words (the sizes, or the reader's error)."""

    reason: str
    file: str
    detail: str = ""


class Fallback(NamedTuple):
    """A step that failed to restore, why (a :class:`Damage` reason, the file, the detail) and
    where its folder was moved (``<dir>/quarantine/<step>-<reason>``)."""

    step: int
    reason: str
    file: str
    detail: str
    moved_to: str


class Restored(NamedTuple):
    """What :meth:`Checkpointer.restore_latest_valid` restored, and the newer steps it skipped."""

    step: int
    train_state: PyTree
    host_state: dict
    skipped: tuple[Fallback, ...] = ()


def _json(path: epath.Path, what: str) -> dict:
    """The JSON object in ``path``, or :class:`_Invalid` naming ``what``."""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise _Invalid(f"no {what}") from None
    except ValueError:  # bad JSON or bad UTF-8
        raise _Invalid(f"unreadable {what}") from None
    if not isinstance(value, dict):
        raise _Invalid(f"unreadable {what}")
    return value


def _check_manifest(path: epath.Path, what: str) -> None:
    """An OCDBT manifest: magic number, total length and the trailing CRC-32C of the rest."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise _Invalid(f"no {what}") from None
    ok = len(data) >= 16 and struct.unpack(">I", data[:4])[0] == _MANIFEST_MAGIC
    ok = ok and struct.unpack("<Q", data[4:12])[0] == len(data)
    if not (ok and struct.unpack("<I", data[-4:])[0] == crc32c(data[:-4])):
        raise _Invalid(f"truncated or corrupt {what}")


def _check_data_file(path: epath.Path, what: str) -> None:
    """An OCDBT data file: not empty, and its leading nodes (B-tree and version-tree nodes, each
    framed by magic number and length) fit in it. A data file may hold several nodes and raw
    array values back to back; raw values (zstd frames) carry no length, so the walk stops at
    the first one; their byte ranges are checked before a restore (:func:`_scan_state`)."""
    size, offset = path.stat().length, 0
    if not size:
        raise _Invalid(f"empty {what}")
    with path.open("rb") as f:
        while offset + 12 <= size:
            f.seek(offset)
            head = f.read(12)
            if len(head) < 12 or struct.unpack(">I", head[:4])[0] != _NODE_MAGIC:
                return
            length = struct.unpack("<Q", head[4:12])[0]
            if length < 16:
                raise _Invalid(f"corrupt {what}")
            offset += length
    if offset > size:
        raise _Invalid(f"truncated {what}")


def _check_state(state: epath.Path) -> None:
    """The ``state`` item: ``_METADATA``, the OCDBT manifests and data file headers."""
    if not state.is_dir():
        raise _Invalid("no state item")
    tree = _json(state / "_METADATA", "state/_METADATA")
    if not isinstance(tree.get("tree_metadata"), dict):
        raise _Invalid("unreadable state/_METADATA")
    if not tree.get("use_ocdbt", True):
        return
    _check_manifest(state / "manifest.ocdbt", "state/manifest.ocdbt")
    for manifest in sorted(state.glob("ocdbt.process_*/manifest.ocdbt")):
        _check_manifest(manifest, f"state/{manifest.parent.name}/manifest.ocdbt")
    for data in sorted([*state.glob("d/*"), *state.glob("ocdbt.process_*/d/*")]):
        _check_data_file(data, f"data file {data.parent.parent.name}/d/{data.name}")


def _check_step(path: epath.Path) -> None:
    if not path.is_dir():
        raise _Invalid("not a directory")
    if not (path / COMMIT_MARKER).exists():
        raise _Invalid("no commit marker")
    if not _json(path / "_CHECKPOINT_METADATA", "checkpoint metadata").get(
        "commit_timestamp_nsecs"
    ):
        raise _Invalid("checkpoint metadata without a commit time")
    for item in ITEMS:
        if not (path / item).is_dir():
            raise _Invalid(f"no {item} item")
    _json(path / "host" / "metadata", "host item")
    meta = _json(path / "meta" / "metadata", "meta item")
    if not isinstance(meta.get("prng_keys"), dict) or "good" not in meta:
        raise _Invalid("unreadable meta item")
    _check_state(path / "state")


def verify_step(path: str | Path | epath.Path) -> str | None:
    """None if the step folder ``path`` holds a complete committed checkpoint, else why not (a
    few words). Cheap: markers, metadata, JSON items and file headers; no array data is read."""
    try:
        _check_step(epath.Path(path))
    except _Invalid as bad:
        return str(bad)
    except OSError as err:
        return f"unreadable ({err.strerror or type(err).__name__})"
    return None


class _Scan(NamedTuple):
    """The array data of a step checked against its OCDBT index: the first :class:`Damage` found
    (None: every referenced byte range is on disk), and the file holding each stored key."""

    damage: Damage | None
    files: dict[str, str]


def _ocdbt_location(location: str) -> tuple[str, int]:
    """``<kind>:<base path>:<relative path>:<offset>:<length>`` (tensorstore's dump notation):
    the file (relative to the OCDBT directory) and the end of the byte range."""
    _, rest = location.split(":", 1)
    path, offset, length = rest.rsplit(":", 2)
    return path.replace(":", "", 1), int(offset) + int(length)


def _kvstore(directory: epath.Path) -> ts.KvStore:
    url = str(directory).rstrip("/") + "/"
    return ts.KvStore.open(url if "://" in url else f"file://{url}").result()


class _Walk:
    """The B+tree walk of :func:`_scan_state`: every node and out-of-line value it references
    must lie within its file (``missing``/``truncated``) and every node must decode (its CRC-32C
    and compression are checked by tensorstore: ``unreadable``)."""

    def __init__(self, state: epath.Path) -> None:
        self.state, self.base = state, _kvstore(state)
        self.sizes: dict[str, int | None] = {}
        self.files: dict[str, str] = {}

    def _range(self, location: str) -> tuple[str, Damage | None]:
        path, end = _ocdbt_location(location)
        name = f"state/{path}"
        if path not in self.sizes:
            try:
                self.sizes[path] = (self.state / path).stat().length
            except FileNotFoundError:
                self.sizes[path] = None
        size = self.sizes[path]
        if size is None:
            return name, Damage("missing", name)
        return name, Damage("truncated", name, f"{size} of {end} bytes") if size < end else None

    def node(self, location: str, prefix: bytes) -> Damage | None:
        name, damage = self._range(location)
        if damage:
            return damage
        try:
            node = ts.ocdbt.dump(self.base, location).result()
        except Exception as err:  # a bad CRC-32C, zstd frame or encoding
            return Damage("unreadable", name, _reason(err))
        for entry in node.get("entries", []):
            key = prefix + entry.get("key", b"")
            if "location" in entry:  # an interior node: its child's keys drop the common prefix
                damage = self.node(entry["location"], prefix + entry["subtree_common_prefix"])
            elif "indirect_value" in entry:
                self.files[key.decode("utf-8", "replace")], damage = self._range(
                    entry["indirect_value"]
                )
            else:
                self.files[key.decode("utf-8", "replace")] = name
            if damage:
                return damage
        return None


def _scan_state(step_dir: epath.Path) -> _Scan:
    """Check the ``state`` item's array data against orbax's index before it is restored.

    Orbax records no file sizes of its own (``_METADATA`` and ``array_metadatas`` hold shapes and
    chunk shapes only); the sizes come from the OCDBT index, read with tensorstore's public
    ``ts.ocdbt.dump``: the manifest's newest version names the root B+tree node, each node names
    its children and the out-of-line values (raw zstd chunks) as (file, offset, length). A file
    not on disk is ``missing``, one shorter than a range in it ``truncated``, a node that does not
    decode ``unreadable``. Limits: raw values carry no checksum, so a flipped bit inside one is
    found only if decoding it fails (orbax's restore, see :func:`_unreadable`) and otherwise goes
    unnoticed; a database whose versions sit in version-tree nodes (not written by orbax) and one
    without OCDBT are not walked."""
    state = step_dir / "state"
    try:
        if not json.loads((state / "_METADATA").read_text()).get("use_ocdbt", True):
            return _Scan(None, {})
        walk = _Walk(state)
    except Exception as err:
        return _Scan(Damage("unreadable", "state", _reason(err)), {})
    try:
        manifest = ts.ocdbt.dump(walk.base).result()
    except Exception as err:
        return _Scan(Damage("unreadable", "state/manifest.ocdbt", _reason(err)), {})
    versions = manifest.get("versions") or [{}]
    root = versions[-1].get("root", {}).get("location")
    return _Scan(walk.node(root, b"") if root else None, walk.files)


def _unreadable(err: BaseException, files: dict[str, str]) -> Damage:
    """The :class:`Damage` of a step whose files are all there but fail to restore: the file that
    holds the key tensorstore names (``Error reading "w/0" ...``), else the ``state`` item."""
    causes, cause = [], err
    while cause is not None and len(causes) < 8:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    for cause in causes:
        found = re.search(r'Error reading "([^"]*)"[^:]*(?:"[^"]*")?: (.*)', str(cause))
        if found:
            detail = f"reading {found[1]}: {found[2].splitlines()[0]}"
            detail = detail if len(detail) <= 120 else detail[:117] + "..."
            return Damage("unreadable", files.get(found[1], "state"), detail)
    return Damage("unreadable", "state", _reason(err))


def read_params(
    directory: str | Path, step: int, abstract_params: PyTree, *, key: str = "params"
) -> tuple[PyTree, dict]:
    """``(params, host_state)`` of the checkpoint ``directory/step`` written by any run: only the
    ``key`` subtree of its train state is read (an orbax partial restore), placed like
    ``abstract_params`` (see :func:`abstract_like`), so a run of another method, whose optimizer
    and objective state differ, can start from it. Reads, never writes, ``directory``."""
    path = epath.Path(Path(directory).absolute()) / str(step)
    where = f"checkpoint {path}"
    problem = verify_step(path)
    if problem is not None:
        raise CheckpointError(f"{where} cannot be read: {problem}")
    absl = logging.getLogger("absl")  # orbax warns that a sub-item has no metadata file of its own
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        stored = ocp.PyTreeCheckpointer().metadata(path / "state").item_metadata.tree
    finally:
        absl.setLevel(level)
    if key not in stored:
        raise CheckpointError(f"{where} has no {key!r} in its train state")
    names = _names({key: abstract_params})
    leaves, treedef = jax.tree_util.tree_flatten(abstract_params)
    _check_arrays(names, leaves, "abstract_params")
    shapes = {leaf.name: tuple(leaf.shape) for leaf in jax.tree_util.tree_leaves(stored[key])}
    missing = sorted(set(names) - set(shapes))
    if missing or len(shapes) != len(names):
        first = missing[0] if missing else sorted(set(shapes) - set(names))[0]
        raise CheckpointError(
            f"{where}: its {key!r} do not match this model's (leaf {first!r} differs; "
            f"{len(shapes)} stored, {len(names)} wanted)"
        )
    targets = [
        _target(n, leaf, shapes[n], False, where) for n, leaf in zip(names, leaves, strict=True)
    ]
    target = {key: jax.tree_util.tree_unflatten(treedef, targets)}
    restore_args = jax.tree.map(lambda t: ocp.ArrayRestoreArgs(sharding=t.sharding), target)
    restored = ocp.PyTreeCheckpointer().restore(
        path / "state",
        args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True),
    )
    host = _json(path / "host" / "metadata", "host item")
    return restored[key], host


def _reason(err: BaseException) -> str:
    """One short line for an exception (its type and the start of its first line)."""
    text = str(err).strip().split("\n", 1)[0].split(" See full", 1)[0]
    line = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def _damage_text(damage: Damage) -> str:
    """``state/d/ab12 is truncated (1141 of 1940 bytes)``."""
    detail = f" ({damage.detail})" if damage.detail else ""
    return f"{damage.file} is {damage.reason}{detail}"


def fallback_notice(bad: Fallback, resumed: int) -> str:
    """The one-line notice of a step skipped on restore, naming its file and why."""
    damage = Damage(bad.reason, bad.file, bad.detail)
    return (
        f"checkpoint step {bad.step} cannot be restored: {_damage_text(damage)}; resuming from "
        f"step {resumed} (step {bad.step} moved to {bad.moved_to})"
    )


def _slug(reason: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")[:48] or "invalid"


def _remove_tree(path: epath.Path) -> None:
    """Remove a file or a directory tree (a missing one is fine)."""
    if path.is_dir():
        path.rmtree()
    elif path.exists():
        path.unlink()


def _stderr(message: str) -> None:
    print(f"arlarena: {message}", file=sys.stderr, flush=True)


def _sync(name: str) -> None:
    """A barrier across processes after the primary host moved step folders (multi-host only)."""
    if jax.process_count() > 1:
        ocp.multihost.sync_global_processes(f"arlarena_checkpoint_{name}")


class _GuardedDeleter:
    """Orbax's deleter of pruned steps, replaced so that a step goes only once ``keep`` newer
    valid steps exist, and by an atomic rename (see :meth:`Checkpointer._prune`)."""

    def __init__(self, owner: Checkpointer) -> None:
        self._owner = owner

    def delete(self, step: int) -> None:
        self._owner._prune(step)

    def delete_steps(self, steps: list[int]) -> None:
        for step in steps:
            self._owner._prune(step)

    def close(self) -> None:
        pass


class Checkpointer:
    """Keep the ``keep`` newest checkpoints (plus the newest good one) of a run in ``directory``,
    saving every ``save_every`` steps (or when forced / on a JAX-detected pre-emption)."""

    def __init__(
        self,
        directory: str | Path,
        *,
        keep: int = 3,
        save_every: int = 1,
        async_save: bool = True,
        report: Callable[[str], None] = _stderr,
    ) -> None:
        """``report``: where the one-line notices of quarantined or finished-off steps go."""
        if keep < 1 or save_every < 1:
            raise CheckpointError(f"keep={keep} and save_every={save_every} must be >= 1")
        self.keep, self._report = keep, report
        self.directory = epath.Path(directory)  # local, or gs:// etc. through etils.epath
        if "://" not in str(directory):
            self.directory = epath.Path(Path(directory).absolute())
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / f".write-probe-{jax.process_index()}-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except Exception as err:
            raise CheckpointError(
                f"checkpoint directory {self.directory} is not writable: "
                f"{getattr(err, 'strerror', None) or err}"
            ) from None
        self._sweep()  # before orbax lists the steps
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=save_policy.AnySavePolicy(
                [
                    save_policy.FixedIntervalPolicy(save_every),
                    save_policy.PreemptionCheckpointingPolicy(),
                ]
            ),
            preservation_policy=keep_policy.AnyPreservationPolicy(
                [keep_policy.LatestN(keep), keep_policy.BestN(get_metric_fn=_good_step, n=1)]
            ),
            best_fn=_good_step,  # only so that orbax writes the per-step metrics
            cleanup_tmp_directories=True,
            enable_async_checkpointing=async_save,
        )
        handlers = {
            "state": ocp.StandardCheckpointHandler(),
            "host": ocp.JsonCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        }
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=handlers
        )
        self._guard_pruning()
        self._saving: int | None = None  # the step of the last save started

    def _guard_pruning(self) -> None:
        """Route orbax's pruning through :meth:`_prune`. Orbax has no public hook for it, so this
        replaces its (private) deleter where it has one of the known shape; another orbax version
        keeps its own pruning, with a warning (steps are then deleted as orbax does)."""
        deleter = getattr(self._manager, "_checkpoint_deleter", None)
        if deleter is None or not all(hasattr(deleter, m) for m in ("delete", "close")):
            log.warning("orbax %s: crash-safe pruning unavailable, orbax prunes", ocp.__version__)
            return
        deleter.close()
        self._manager._checkpoint_deleter = _GuardedDeleter(self)

    # -- validity, quarantine and crash-safe deletion -------------------------------------------

    def _path(self, step: int) -> epath.Path:
        return self.directory / str(step)

    def _step_folders(self) -> dict[int, epath.Path]:
        """Every entry of the directory named like a step (orbax's temporary folders excluded)."""
        return {int(p.name): p for p in self.directory.iterdir() if p.name.isdigit()}

    def _quarantine(self, path: epath.Path, reason: str) -> epath.Path:
        """Move ``path`` to ``<dir>/quarantine/<step>-<reason>`` (a free name); its new path."""
        base = self.directory / QUARANTINE / f"{path.name}-{_slug(reason)}"
        target, n = base, 1
        while target.exists():
            n += 1
            target = base.parent / f"{base.name}-{n}"
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
        return target

    def _remove(self, path: epath.Path) -> None:
        """Delete a step folder crash-safely: an atomic rename into ``.deleting``, then removal
        (a kill in between leaves an entry that :meth:`_empty_trash` removes later)."""
        trash = self.directory / DELETING / f"{path.name}-{uuid.uuid4().hex[:8]}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        path.rename(trash)
        _remove_tree(trash)

    def _empty_trash(self) -> None:
        trash = self.directory / DELETING
        if trash.is_dir():
            for entry in trash.iterdir():
                _remove_tree(entry)

    def _sweep(self) -> None:
        """Finish interrupted deletions and move invalid step folders aside (primary host)."""
        if jax.process_index() == 0:
            self._empty_trash()
            valid_newer = 0
            for step, path in sorted(self._step_folders().items(), reverse=True):
                reason = verify_step(path)
                if reason is None:
                    valid_newer += 1
                elif valid_newer >= self.keep:  # older than `keep` valid steps: half-deleted
                    self._remove(path)
                    self._report(f"checkpoint step {step} was half-deleted ({reason}); removed")
                else:
                    moved = self._quarantine(path, reason)
                    self._report(f"checkpoint step {step} is invalid ({reason}); moved to {moved}")
        _sync("sweep")

    def _prune(self, step: int) -> None:
        """Orbax's pruning of ``step``: done only once ``keep`` newer steps verify, else kept
        (orbax proposes it again after the next save)."""
        if jax.process_index() != 0:
            return
        folders = self._step_folders()
        if step not in folders:
            return
        newer = sum(verify_step(p) is None for s, p in folders.items() if s > step)
        if newer < self.keep:
            log.warning("keeping checkpoint step %d: only %d newer valid steps", step, newer)
            return
        self._remove(folders[step])

    def _valid(self, step: int) -> bool:
        """The step verifies, or it is the save in flight (its folder is not yet renamed)."""
        if step == self._saving and self._manager.is_saving_in_progress():
            return True
        return verify_step(self._path(step)) is None

    def valid_steps(self) -> list[int]:
        """The steps that verify (:func:`verify_step`), oldest first."""
        return [s for s in self.all_steps() if self._valid(s)]

    def should_save(self, step: int) -> bool:
        return self._manager.should_save(step)

    def save(
        self,
        step: int,
        train_state: PyTree,
        host_state: dict | None = None,
        *,
        force: bool = False,
        good: bool = True,
    ) -> bool:
        """Start saving ``step`` if it is due (or ``force``); True if a save was started.

        ``good``: no stability event since the previous checkpoint (``StabilityMonitor``)."""
        if not force and not self._manager.should_save(step):
            return False
        self.wait()  # the previous save, and its pruning, are done (orbax's save waits anyway)
        self._sweep()  # finish interrupted deletions, set invalid steps aside
        self._manager.reload()  # and propose steps whose pruning was refused again
        if step in self._manager.all_steps():
            raise CheckpointError(
                f"step {step} already has a checkpoint in {self.directory}; after a rollback, "
                "call discard_after(<restored step>) before saving again"
            )
        names = _names(train_state)
        leaves, treedef = jax.tree_util.tree_flatten(train_state)
        _check_arrays(names, leaves, "train_state")
        impls = {
            n: str(jax.random.key_impl(x)) for n, x in zip(names, leaves, strict=True) if _is_key(x)
        }
        plain = [jax.random.key_data(x) if _is_key(x) else x for x in leaves]
        meta = {"prng_keys": impls, "good": bool(good)}
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(jax.tree_util.tree_unflatten(treedef, plain)),
            host=ocp.args.JsonSave(_jsonable(host_state or {})),
            meta=ocp.args.JsonSave(meta),
        )
        metrics = {"good_step": step if good else -1}
        self._saving = step
        return self._manager.save(step, args=args, metrics=metrics, force=True)

    def latest_step(self) -> int | None:
        """The newest valid step (temporary directories of unfinished saves are ignored)."""
        valid = self.valid_steps()
        return valid[-1] if valid else None

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def last_good_step(self) -> int | None:
        """The newest step saved with ``good=True`` (a rollback target), or None. Waits for a save
        in flight, whose good flag orbax records only when it commits."""
        self.wait()
        good = [s for s in self.valid_steps() if _good_step(self._manager.metrics(s) or {}) >= 0]
        return max(good) if good else None

    def discard_after(self, step: int) -> list[int]:
        """Delete the checkpoints newer than ``step`` (the abandoned branch after a rollback)."""
        self.wait()
        newer = [s for s in self.all_steps() if s > step]
        if jax.process_index() == 0:
            for s in newer:
                if self._path(s).exists():
                    self._remove(self._path(s))
        _sync("discard")
        self._manager.reload()
        return newer

    def restore(self, abstract_train_state: PyTree, step: int | None = None) -> tuple[PyTree, dict]:
        """``(train_state, host_state)`` of ``step`` (default: the latest), each array placed by
        the ``sharding`` of its leaf in ``abstract_train_state`` (``jax.ShapeDtypeStruct`` or real
        arrays, see :func:`abstract_like`; no sharding: the first local device)."""
        self.wait()
        if step is None:
            step = self.latest_step()
            if step is None:
                raise CheckpointError(f"no checkpoint to restore in {self.directory}")
        elif step not in self._manager.all_steps():
            raise CheckpointError(
                f"no checkpoint for step {step} in {self.directory}; have {self.all_steps()}"
            )
        side = self._manager.restore(
            step, args=ocp.args.Composite(host=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore())
        )
        impls = side["meta"]["prng_keys"]
        stored = {
            leaf.name: leaf
            for leaf in jax.tree_util.tree_leaves(self._manager.item_metadata(step)["state"])
        }
        names = _names(abstract_train_state)
        leaves, treedef = jax.tree_util.tree_flatten(abstract_train_state)
        _check_arrays(names, leaves, "abstract_train_state")
        where = f"checkpoint {self.directory / str(step)}"
        missing, extra = sorted(set(names) - set(stored)), sorted(set(stored) - set(names))
        if missing or extra:
            first, more = (missing, "not in the checkpoint") if missing else (extra, "extra")
            raise CheckpointError(
                f"{where} does not match the target structure: leaf {first[0]!r} is {more} "
                f"({len(missing)} leaves missing, {len(extra)} unexpected)"
            )
        targets = [
            _target(name, leaf, tuple(stored[name].shape), name in impls, where)
            for name, leaf in zip(names, leaves, strict=True)
        ]
        target = jax.tree_util.tree_unflatten(treedef, targets)
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
        )["state"]
        out = [
            jax.random.wrap_key_data(x, impl=impls[n]) if n in impls else x
            for n, x in zip(names, jax.tree_util.tree_leaves(restored), strict=True)
        ]
        return jax.tree_util.tree_unflatten(treedef, out), dict(side["host"])

    def restore_latest_valid(self, abstract_train_state: PyTree) -> Restored | None:
        """Restore the newest valid step that restores (see :meth:`restore`), or None if there is
        no checkpoint. Each step's array data is first checked against its index
        (:func:`_scan_state`: a file missing or truncated); a step that fails that check or
        orbax's restore (``unreadable``) is skipped (listed in ``Restored.skipped``) and, once an
        older one has restored, moved to ``quarantine/<step>-<reason>`` and reported in one line
        (``report``). A target that does not fit the checkpoint raises :class:`CheckpointError` at
        once; if no step restores, nothing is moved and the newest step's error is raised."""
        self.wait()
        failed: list[tuple[int, Damage]] = []
        for step in reversed(self.valid_steps()):
            scan = _scan_state(self._path(step))
            if scan.damage is not None:
                failed.append((step, scan.damage))
                continue
            try:
                tree, host = self.restore(abstract_train_state, step)
            except CheckpointError:
                raise
            except Exception as err:  # corrupt data: orbax and tensorstore raise many types
                failed.append((step, _unreadable(err, scan.files)))
                continue
            skipped = tuple(self._set_aside(bad, damage) for bad, damage in failed)
            if skipped:
                self._manager.reload()
            for bad in skipped:
                self._report(fallback_notice(bad, step))
            return Restored(step, tree, host, skipped)
        if failed:
            step, damage = failed[0]
            raise CheckpointError(
                f"no checkpoint in {self.directory} can be restored; step {step}: "
                f"{_damage_text(damage)}"
            )
        return None

    def _set_aside(self, step: int, damage: Damage) -> Fallback:
        """Quarantine a step that failed to restore (primary host); its :class:`Fallback`."""
        moved = self.directory / QUARANTINE / f"{step}-{damage.reason}"
        if jax.process_index() == 0 and self._path(step).exists():
            moved = self._quarantine(self._path(step), damage.reason)
        _sync("set_aside")
        return Fallback(step, damage.reason, damage.file, damage.detail, str(moved))

    def reached_preemption(self, step: int) -> bool:
        """JAX's multi-host pre-emption sync point (False without ``jax.distributed``)."""
        return self._manager.reached_preemption(step)

    def wait(self) -> None:
        """Block until the pending asynchronous save is on disk (raises its error if it failed)."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Wait for the pending save (and its pruning) and empty ``.deleting``."""
        self._manager.close()
        if jax.process_index() == 0:
            self._empty_trash()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PreemptionGuard:
    """``with PreemptionGuard() as guard:`` … ``if guard.requested: save(force=True); break``.

    SIGTERM (and SIGINT with ``sigint=True``) only sets ``requested`` (and ``signal``), so the loop
    saves at the next step boundary and exits cleanly; a second SIGINT raises
    ``KeyboardInterrupt``. The previous handlers come back on exit. Main thread only. On several
    hosts, combine with :meth:`Checkpointer.reached_preemption` so all processes stop together.
    """

    def __init__(self, *, sigint: bool = False) -> None:
        self.signals = (signal.SIGTERM, signal.SIGINT) if sigint else (signal.SIGTERM,)
        self.requested = False
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested, self.signal = True, signum

    def __enter__(self) -> PreemptionGuard:
        try:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:
            self.__exit__()
            raise CheckpointError("PreemptionGuard must be entered in the main thread") from None
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
