"""Orbax checkpoints of a training run: :class:`Checkpointer` saves, restores and prunes them.

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

Crash safety: which steps are whole is :mod:`~arlarena_jax.train.checkpoint_verify` (the cheap
check of every step, the walk of a step's array data before it is restored); what happens to the
others, and how old steps are pruned, is :mod:`~arlarena_jax.train.checkpoint_folders`.
:meth:`Checkpointer.restore_latest_valid` falls back to the previous step when the newest does
not restore, moves the bad one to ``<dir>/quarantine/<step>-<reason>`` and reports the file and
the reason in one line. Saves are asynchronous: :meth:`Checkpointer.save` returns once the arrays
are copied to host memory (the train state may then be donated), :meth:`Checkpointer.wait` blocks
until the files are written. On several hosts every process calls ``save`` and ``restore``.
SIGTERM/SIGINT: :class:`~arlarena_jax.train.preemption.PreemptionGuard`.

The final policy in Hugging Face format is not an orbax checkpoint: the trainer calls
``arlarena_jax.models.save_pretrained(model, directory)`` (``config.json`` + safetensors).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
from orbax.checkpoint.checkpoint_managers import preservation_policy as keep_policy
from orbax.checkpoint.checkpoint_managers import save_decision_policy as save_policy

from arlarena_jax.train.checkpoint_folders import GuardedDeleter, StepFolders
from arlarena_jax.train.checkpoint_verify import (
    Damage,
    Fallback,
    damage_text,
    fallback_notice,
    read_json,
    scan_state,
    unreadable,
    verify_step,
)

PyTree = Any
log = logging.getLogger(__name__)


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


class Restored(NamedTuple):
    """What :meth:`Checkpointer.restore_latest_valid` restored, and the newer steps it skipped."""

    step: int
    train_state: PyTree
    host_state: dict
    skipped: tuple[Fallback, ...] = ()


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
    host = read_json(path / "host" / "metadata", "host item")
    return restored[key], host


def global_copy(leaf: Any) -> Any:
    """``leaf`` as orbax saves it from several processes: an array held whole on one of this
    process's devices (a fresh optimizer's step count, the objective's state: computed alike on
    every process from the same whole batch) becomes a global array replicated over every
    process's devices; global arrays and one process's arrays pass as they are."""
    if jax.process_count() == 1 or not isinstance(leaf, jax.Array) or not leaf.is_fully_addressable:
        return leaf
    everywhere = NamedSharding(Mesh(np.asarray(jax.devices()), ("all",)), PartitionSpec())
    return jax.make_array_from_process_local_data(everywhere, np.asarray(leaf))


def _stderr(message: str) -> None:
    print(f"arlarena: {message}", file=sys.stderr, flush=True)


def barriers_through_the_coordinator() -> None:
    """Several processes: orbax's barriers wait in the coordination service (bounded), not in a
    device collective. Its default barrier is a ``psum`` over every device, and an asynchronous
    save finishes it from its own thread while the main thread runs the next step's programs:
    two threads' collectives can reach two devices in opposite orders and wait for ever
    (``arlarena_jax.device_turn``). orbax reads the choice from an absl flag."""
    if jax.process_count() == 1:
        return
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # the CLI parses its own arguments; absl's are defaults
    flags.FLAGS.experimental_orbax_use_distributed_barrier = True


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
        self.folders = StepFolders(self.directory, keep, report)
        self.folders.sweep()  # before orbax lists the steps
        barriers_through_the_coordinator()
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
        """Route orbax's pruning through :meth:`StepFolders.prune
        <arlarena_jax.train.checkpoint_folders.StepFolders.prune>`. Orbax has no public hook for
        it, so this replaces its (private) deleter where it has one of the known shape; another
        orbax version keeps its own pruning, with a warning (steps are then deleted as orbax
        does)."""
        deleter = getattr(self._manager, "_checkpoint_deleter", None)
        if deleter is None or not all(hasattr(deleter, m) for m in ("delete", "close")):
            log.warning("orbax %s: crash-safe pruning unavailable, orbax prunes", ocp.__version__)
            return
        deleter.close()
        self._manager._checkpoint_deleter = GuardedDeleter(self.folders)

    def _valid(self, step: int) -> bool:
        """The step verifies, or it is the save in flight (its folder is not yet renamed)."""
        if step == self._saving and self._manager.is_saving_in_progress():
            return True
        return verify_step(self.folders.path(step)) is None

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
        self.folders.sweep()  # finish interrupted deletions, set invalid steps aside
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
        plain = [global_copy(jax.random.key_data(x) if _is_key(x) else x) for x in leaves]
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
        self.folders.discard(newer)
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
        (:func:`~arlarena_jax.train.checkpoint_verify.scan_state`: a file missing or truncated); a
        step that fails that check or orbax's restore (``unreadable``) is skipped (listed in
        ``Restored.skipped``) and, once an older one has restored, moved to
        ``quarantine/<step>-<reason>`` and reported in one line (``report``). A target that does
        not fit the checkpoint raises :class:`CheckpointError` at once; if no step restores,
        nothing is moved and the newest step's error is raised."""
        self.wait()
        failed: list[tuple[int, Damage]] = []
        for step in reversed(self.valid_steps()):
            scan = scan_state(self.folders.path(step))
            if scan.damage is not None:
                failed.append((step, scan.damage))
                continue
            try:
                tree, host = self.restore(abstract_train_state, step)
            except CheckpointError:
                raise
            except Exception as err:  # corrupt data: orbax and tensorstore raise many types
                failed.append((step, unreadable(err, scan.files)))
                continue
            skipped = tuple(self.folders.set_aside(bad, damage) for bad, damage in failed)
            if skipped:
                self._manager.reload()
            for bad in skipped:
                self._report(fallback_notice(bad, step))
            return Restored(step, tree, host, skipped)
        if failed:
            step, damage = failed[0]
            raise CheckpointError(
                f"no checkpoint in {self.directory} can be restored; step {step}: "
                f"{damage_text(damage)}"
            )
        return None

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
            self.folders.empty_trash()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
