"""The step folders of a checkpoint directory, moved and deleted crash-safely (the
:class:`~arlarena_jax.train.checkpoint.Checkpointer`'s housekeeping).

When a :class:`~arlarena_jax.train.checkpoint.Checkpointer` starts and before each save, an
invalid step folder (:func:`~arlarena_jax.train.checkpoint_verify.verify_step`) is either the
remains of an interrupted deletion (``keep`` newer valid steps exist), which is finished off, or
else moved aside to ``<dir>/quarantine/<step>-<reason>`` (never deleted) and reported in one line;
a step that fails to restore goes there too. A step is pruned only once ``keep`` newer valid steps
exist, by an atomic rename into ``<dir>/.deleting/`` followed by the removal of that folder, so a
kill mid-prune leaves either the whole step or an entry of ``.deleting`` that the next start or
save removes. Old steps are deleted only after the new one is committed. The primary host moves
and deletes; every process meets at a barrier after.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable

import jax
import orbax.checkpoint as ocp
from etils import epath

from arlarena_jax.train.checkpoint_verify import Damage, Fallback, verify_step

QUARANTINE = "quarantine"  # invalid step folders, moved aside for a person to inspect
DELETING = ".deleting"  # pruned steps, renamed here and then removed

log = logging.getLogger("arlarena_jax.train.checkpoint")  # warnings of the Checkpointer


class StepFolders:
    """The step folders of ``directory``: their validity, quarantine and crash-safe deletion;
    ``keep`` valid steps newer than a step make it prunable; ``report`` takes the one-line
    notices of quarantined or finished-off steps."""

    def __init__(self, directory: epath.Path, keep: int, report: Callable[[str], None]) -> None:
        self.directory, self.keep, self._report = directory, keep, report

    def path(self, step: int) -> epath.Path:
        return self.directory / str(step)

    def steps(self) -> dict[int, epath.Path]:
        """Every entry of the directory named like a step (orbax's temporary folders excluded)."""
        return {int(p.name): p for p in self.directory.iterdir() if p.name.isdigit()}

    def quarantine(self, path: epath.Path, reason: str) -> epath.Path:
        """Move ``path`` to ``<dir>/quarantine/<step>-<reason>`` (a free name); its new path."""
        base = self.directory / QUARANTINE / f"{path.name}-{_slug(reason)}"
        target, n = base, 1
        while target.exists():
            n += 1
            target = base.parent / f"{base.name}-{n}"
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
        return target

    def remove(self, path: epath.Path) -> None:
        """Delete a step folder crash-safely: an atomic rename into ``.deleting``, then removal
        (a kill in between leaves an entry that :meth:`empty_trash` removes later)."""
        trash = self.directory / DELETING / f"{path.name}-{uuid.uuid4().hex[:8]}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        path.rename(trash)
        _remove_tree(trash)

    def empty_trash(self) -> None:
        trash = self.directory / DELETING
        if trash.is_dir():
            for entry in trash.iterdir():
                _remove_tree(entry)

    def sweep(self) -> None:
        """Finish interrupted deletions and move invalid step folders aside (primary host)."""
        if jax.process_index() == 0:
            self.empty_trash()
            valid_newer = 0
            for step, path in sorted(self.steps().items(), reverse=True):
                reason = verify_step(path)
                if reason is None:
                    valid_newer += 1
                elif valid_newer >= self.keep:  # older than `keep` valid steps: half-deleted
                    self.remove(path)
                    self._report(f"checkpoint step {step} was half-deleted ({reason}); removed")
                else:
                    moved = self.quarantine(path, reason)
                    self._report(f"checkpoint step {step} is invalid ({reason}); moved to {moved}")
        _sync("sweep")

    def prune(self, step: int) -> None:
        """Orbax's pruning of ``step``: done only once ``keep`` newer steps verify, else kept
        (orbax proposes it again after the next save)."""
        if jax.process_index() != 0:
            return
        folders = self.steps()
        if step not in folders:
            return
        newer = sum(verify_step(p) is None for s, p in folders.items() if s > step)
        if newer < self.keep:
            log.warning("keeping checkpoint step %d: only %d newer valid steps", step, newer)
            return
        self.remove(folders[step])

    def discard(self, steps: list[int]) -> None:
        """Delete ``steps`` (primary host; a missing folder is fine)."""
        if jax.process_index() == 0:
            for s in steps:
                if self.path(s).exists():
                    self.remove(self.path(s))
        _sync("discard")

    def set_aside(self, step: int, damage: Damage) -> Fallback:
        """Quarantine a step that failed to restore (primary host); its :class:`Fallback`."""
        moved = self.directory / QUARANTINE / f"{step}-{damage.reason}"
        if jax.process_index() == 0 and self.path(step).exists():
            moved = self.quarantine(self.path(step), damage.reason)
        _sync("set_aside")
        return Fallback(step, damage.reason, damage.file, damage.detail, str(moved))


class GuardedDeleter:
    """Orbax's deleter of pruned steps, replaced so that a step goes only once ``keep`` newer
    valid steps exist, and by an atomic rename (see :meth:`StepFolders.prune`)."""

    def __init__(self, folders: StepFolders) -> None:
        self._folders = folders

    def delete(self, step: int) -> None:
        self._folders.prune(step)

    def delete_steps(self, steps: list[int]) -> None:
        for step in steps:
            self._folders.prune(step)

    def close(self) -> None:
        pass


def _slug(reason: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")[:48] or "invalid"


def _remove_tree(path: epath.Path) -> None:
    """Remove a file or a directory tree (a missing one is fine)."""
    if path.is_dir():
        path.rmtree()
    elif path.exists():
        path.unlink()


def _sync(name: str) -> None:
    """A barrier across processes after the primary host moved step folders (multi-host only)."""
    if jax.process_count() > 1:
        ocp.multihost.sync_global_processes(f"arlarena_checkpoint_{name}")
