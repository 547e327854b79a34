"""Whether a checkpoint step folder is whole: the cheap check of every step, and the walk of its
array data before a restore (crash safety of :mod:`~arlarena_jax.train.checkpoint`).

A step is valid (:func:`verify_step`) when its commit marker (``commit_success.txt``), orbax's
``_CHECKPOINT_METADATA`` with a commit time and its three items are present and readable: ``host``
and ``meta`` JSON, ``state/_METADATA``, the OCDBT manifests (magic, length and CRC-32C) and the
header of every OCDBT node file. The check reads only metadata and headers. Before restoring a
step, :meth:`~arlarena_jax.train.checkpoint.Checkpointer.restore_latest_valid` walks its OCDBT
index (:func:`scan_state`): a node or array value whose file is gone is ``missing``, one whose file
is shorter than its byte range ``truncated``, a node that fails its CRC-32C (or a value orbax
cannot decode, :func:`unreadable`) ``unreadable``: a :class:`Damage`. A step skipped so is a
:class:`Fallback`, reported in one line (:func:`fallback_notice`); what happens to invalid and
skipped folders is :mod:`~arlarena_jax.train.checkpoint_folders`.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import NamedTuple

import tensorstore as ts
from etils import epath
from tensorboardX.crc32c import crc32c

from arlarena_jax.train.layout import COMMIT_MARKER

ITEMS = ("state", "host", "meta")
_MANIFEST_MAGIC, _NODE_MAGIC = 0x0CDB3A2A, 0x0CDB20DE  # OCDBT manifest / B-tree and version nodes


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


def read_json(path: epath.Path, what: str) -> dict:
    """The JSON object in ``path``, or ``_Invalid`` naming ``what``."""
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
    the first one; their byte ranges are checked before a restore (:func:`scan_state`)."""
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
    tree = read_json(state / "_METADATA", "state/_METADATA")
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
    if not read_json(path / "_CHECKPOINT_METADATA", "checkpoint metadata").get(
        "commit_timestamp_nsecs"
    ):
        raise _Invalid("checkpoint metadata without a commit time")
    for item in ITEMS:
        if not (path / item).is_dir():
            raise _Invalid(f"no {item} item")
    read_json(path / "host" / "metadata", "host item")
    meta = read_json(path / "meta" / "metadata", "meta item")
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
    """The B+tree walk of :func:`scan_state`: every node and out-of-line value it references
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


def scan_state(step_dir: epath.Path) -> _Scan:
    """Check the ``state`` item's array data against orbax's index before it is restored.

    Orbax records no file sizes of its own (``_METADATA`` and ``array_metadatas`` hold shapes and
    chunk shapes only); the sizes come from the OCDBT index, read with tensorstore's public
    ``ts.ocdbt.dump``: the manifest's newest version names the root B+tree node, each node names
    its children and the out-of-line values (raw zstd chunks) as (file, offset, length). A file
    not on disk is ``missing``, one shorter than a range in it ``truncated``, a node that does not
    decode ``unreadable``. Limits: raw values carry no checksum, so a flipped bit inside one is
    found only if decoding it fails (orbax's restore, see :func:`unreadable`) and otherwise goes
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


def unreadable(err: BaseException, files: dict[str, str]) -> Damage:
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


def _reason(err: BaseException) -> str:
    """One short line for an exception (its type and the start of its first line)."""
    text = str(err).strip().split("\n", 1)[0].split(" See full", 1)[0]
    line = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def damage_text(damage: Damage) -> str:
    """``state/d/ab12 is truncated (1141 of 1940 bytes)``."""
    detail = f" ({damage.detail})" if damage.detail else ""
    return f"{damage.file} is {damage.reason}{detail}"


def fallback_notice(bad: Fallback, resumed: int) -> str:
    """The one-line notice of a step skipped on restore, naming its file and why."""
    damage = Damage(bad.reason, bad.file, bad.detail)
    return (
        f"checkpoint step {bad.step} cannot be restored: {damage_text(damage)}; resuming from "
        f"step {resumed} (step {bad.step} moved to {bad.moved_to})"
    )
