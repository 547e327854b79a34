"""Memory and process limits per sandbox call, with a control group of its own (issue 37, S3).

``RLIMIT_AS`` bounds each process, not the call: a snippet's children together could take
``processes x memory`` (64 GiB with the old defaults). Where control groups can be written (as
root, or in a delegated subtree), every call gets one, and the limits hold for the call as a whole:

* cgroup v2 (one unified hierarchy with the ``memory`` and ``pids`` controllers): a folder
  ``<own cgroup>/arlarena-sandbox/<call>`` with ``memory.max``, ``memory.swap.max = 0`` and
  ``pids.max``. The parent ``arlarena-sandbox`` holds no process, so its controllers can be
  enabled (the "no internal processes" rule); our own cgroup must allow that too (the hierarchy's
  root does, as does a systemd unit with ``Delegate=yes``).
* cgroup v1 (separate ``memory`` and ``pids`` hierarchies): the same folder in each, with
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is accounted) and
  ``pids.max``.

The call's process joins its group before it makes any namespace (:meth:`CallGroup.wrap` puts
``sh -c 'echo $$ > .../cgroup.procs; exec ...'`` in front of the command), so every descendant is
counted. When the memory is exhausted the kernel's OOM killer ends the call (status ``killed``).
Afterwards :meth:`CallGroup.close` kills anything left and removes the folders.

Where neither works, :func:`detect` returns None and the sandbox falls back to rlimits (module doc
of ``envs.math.sandbox``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "arlarena-sandbox"


def _own_paths(text: str) -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path, from ``/proc/self/cgroup``."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)


def _v2_parent(root: Path, own: str) -> Path | None:
    """``<own>/arlarena-sandbox`` with memory and pids enabled for its children, else None."""
    for base in (root / own.lstrip("/"), root):
        parent = base / PARENT
        if not {"memory", "pids"} <= set((base / "cgroup.controllers").read_text().split()):
            continue
        with contextlib.suppress(OSError):
            (base / "cgroup.subtree_control").write_text("+memory +pids")
            if _writable_dir(parent):
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
                return parent
    return None


@functools.cache
def detect(root: Path = ROOT) -> tuple[str, dict[str, Path]] | None:
    """``("v2", {"": parent})``, ``("v1", {"memory": parent, "pids": parent})`` or None: where
    per-call groups can be made here (probed once per process)."""
    try:
        own = _own_paths(Path("/proc/self/cgroup").read_text())
        if (root / "cgroup.controllers").is_file() and "" in own:
            parent = _v2_parent(root, own[""])
            return ("v2", {"": parent}) if parent else None
        parents = {}
        for name in ("memory", "pids"):
            parent = root / name / own.get(name, "/").lstrip("/") / PARENT
            if name not in own or not _writable_dir(parent):
                return None
            parents[name] = parent
        return "v1", parents
    except (OSError, ValueError):
        return None


class CallGroup:
    """The control group(s) of one call: made with its limits, joined by the command, removed by
    :meth:`close` (see module doc)."""

    def __init__(self, name: str, memory_mb: int, processes: int, found=None) -> None:
        found = found or detect()
        if found is None:
            raise OSError("no control group can be made here")
        self.version, parents = found
        self.dirs = [parent / name for parent in parents.values()]
        limit = str(memory_mb * 2**20)
        for path in self.dirs:
            path.mkdir()
        try:
            self._write_limits(limit, str(processes))
        except OSError:
            self.close()
            raise

    def _write_limits(self, memory: str, processes: str) -> None:
        if self.version == "v2":
            (cg,) = self.dirs
            (cg / "memory.max").write_text(memory)
            if (cg / "memory.swap.max").exists():  # where swap is accounted
                (cg / "memory.swap.max").write_text("0")
            (cg / "pids.max").write_text(processes)
            return
        memory_dir, pids_dir = self.dirs
        (memory_dir / "memory.limit_in_bytes").write_text(memory)
        if (memory_dir / "memory.memsw.limit_in_bytes").exists():
            (memory_dir / "memory.memsw.limit_in_bytes").write_text(memory)
        (pids_dir / "pids.max").write_text(processes)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the group(s)."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        return ["sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer (or the limit) stopped an allocation of the call."""
        with contextlib.suppress(OSError, ValueError):
            if self.version == "v2":
                lines = (self.dirs[0] / "memory.events").read_text().splitlines()
            else:
                lines = (self.dirs[0] / "memory.oom_control").read_text().splitlines()
            return int(dict(line.split() for line in lines).get("oom_kill", 0)) > 0
        return False

    def close(self, wait_s: float = 10.0) -> None:
        """Kill what is left in the group(s) and remove them (retried while processes exit)."""
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while path.exists():
                for pid in _pids(path):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    path.rmdir()
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left behind, empty later; its name is never reused
                    time.sleep(0.02)


def _pids(path: Path) -> list[int]:
    with contextlib.suppress(OSError, ValueError):
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    return []
