"""The filesystem a sandboxed snippet sees: one description, rendered for every backend.

The view is a fresh root holding only:

* ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` links or folders, read-only;
* of ``/etc`` only ``ld.so.cache``, ``localtime`` and ``alternatives``, read-only;
* the Python installation (its prefixes and ``site-packages``), read-only;
* a new ``/proc`` (the call's PID namespace); a ``/dev`` with ``null``, ``zero``, ``full``,
  ``random``, ``urandom`` and the ``fd``/``stdin``/``stdout``/``stderr`` links;
* private, size-limited ``/tmp`` and ``/dev/shm``;
* the root itself read-only, and the folders to hide (the project, ``$HOME``, ``/root``,
  ``/home``, ``/tmp``, ``/run`` ... and ``SandboxConfig.hide``) that fall inside a bound folder
  replaced by empty tmpfs mounts, with the Python installation inside them bound back.

Nothing else of the host exists in it: no ``/var``, ``/run``, ``/sys``, ``/srv``, ``/home``,
``/media``, hence no host unix socket and no host file outside that list. bubblewrap builds it
from :func:`bwrap_args`; the ``unshare`` and ``userns`` backends from the shell lines of
:func:`shell_lines`, which build it in a tmpfs and ``pivot_root`` into it, as bubblewrap does.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/media", "/srv", "/sys")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")
DEVICES = ("null", "zero", "full", "random", "urandom")
STREAMS = ("stdin", "stdout", "stderr")
DEV_LINKS = (("/proc/self/fd", "fd"), *((f"/proc/self/fd/{i}", n) for i, n in enumerate(STREAMS)))
STAGES = ("/mnt", "/media", "/srv", "/opt", "/boot", "/var/tmp", "/tmp")  # where to build it


def keep_paths(python: str) -> list[str]:
    """The Python installation the snippet needs: prefixes and import paths."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths |= {
        os.path.realpath(p) for p in sys.path if p and os.path.isdir(p) and "site-packages" in p
    }
    paths.add(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    return sorted(paths)


def outermost(paths) -> list[str]:
    """``paths`` without those inside another one (``/`` aside), outermost first."""
    ordered = sorted(set(paths), key=len)
    return [p for i, p in enumerate(ordered) if not any(p.startswith(q + "/") for q in ordered[:i])]


def hidden_paths(hide: tuple[str, ...]) -> list[str]:
    """Folders the snippet must not see (existing ones only, outermost first)."""
    project = str(Path(__file__).resolve().parents[2])
    wanted = {*HIDDEN, os.path.expanduser("~"), project, *hide}
    return outermost(os.path.realpath(p) for p in wanted if os.path.isdir(p))


def _inside(path: str, folders) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def view(python: str, hide: tuple[str, ...], tmp_mb: int) -> list[tuple]:
    """The view as entries ``(kind, ...)``: ``symlink target path``, ``bind source``,
    ``tmpfs path mode bytes``, ``proc``, ``dev``, ``dir path``; in mount order."""
    entries: list[tuple] = []
    for path in SYSTEM:  # as on the host: merged-/usr links, or folders
        if os.path.islink(path):
            entries.append(("symlink", os.readlink(path), path))
        elif os.path.isdir(path):
            entries.append(("bind", path))
    entries.append(("dir", "/etc"))
    entries += [("bind", path) for path in ETC if os.path.exists(path)]
    tmp = tmp_mb * 2**20
    entries += [
        ("proc",),
        ("dev",),
        ("tmpfs", "/tmp", "1777", tmp),
        ("tmpfs", "/dev/shm", "1777", tmp),
    ]
    system = [p for p in SYSTEM if os.path.isdir(p) and not os.path.islink(p)]
    keep = [p for p in keep_paths(python) if p != "/"]
    outer = [p for p in outermost([*system, *keep]) if p not in system]
    hidden = [h for h in hidden_paths(hide) if any(h.startswith(b + "/") for b in [*system, *keep])]
    again = outermost(k for k in keep if _inside(k, hidden))
    entries += [("bind", path) for path in outer]
    entries += [("tmpfs", path, "0755", 2**20) for path in hidden]
    return entries + [("bind", path) for path in again]


def _parents(path: str) -> list[str]:
    return [str(q) for q in reversed(Path(path).parents) if str(q) != "/"]


def bwrap_args(entries: list[tuple]) -> list[str]:
    """bubblewrap's arguments for the view, the root made read-only last. Missing parents of a
    bound folder are made 0755 (bubblewrap would make them 0700, out of the snippet's reach)."""
    args: list[str] = []
    made: set[str] = set()
    for kind, *rest in entries:
        if kind == "symlink":
            args += ["--symlink", rest[0], rest[1]]
        elif kind == "dir":
            args += ["--perms", "0755", "--dir", rest[0]]
        elif kind == "proc":
            args += ["--proc", "/proc"]
        elif kind == "dev":
            args += ["--dev", "/dev"]
        elif kind == "tmpfs":
            args += ["--perms", rest[1], "--size", str(rest[2]), "--tmpfs", rest[0]]
        else:
            for parent in (p for p in _parents(rest[0]) if p not in made):
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
            args += ["--ro-bind", rest[0], rest[0]]
    return [*args, "--remount-ro", "/"]


def stage(entries: list[tuple]) -> str:
    """An existing folder to build the new root on that holds no bound source."""
    sources = [e[1] for e in entries if e[0] == "bind"]
    for path in STAGES:
        if (
            os.path.isdir(path)
            and not os.path.islink(path)
            and not any(_inside(s, [path]) or _inside(path, [s]) for s in sources)
        ):
            return path
    raise OSError(f"no folder to build the sandbox's root on (tried {', '.join(STAGES)})")


def _shell_entry(root: str, kind: str, rest: list) -> list[str]:
    q = shlex.quote
    if kind == "symlink":
        return [f"ln -s {q(rest[0])} {q(root + rest[1])}"]
    if kind == "dir":
        return [f"mkdir -p {q(root + rest[0])}"]
    if kind == "proc":
        return [f"mkdir -p {root}/proc", f"mount -t proc -o nosuid,nodev,noexec proc {root}/proc"]
    if kind == "tmpfs":
        where = q(root + rest[0])
        options = f"size={rest[2]},mode={rest[1]},nosuid,nodev"
        return [f"mkdir -p {where}", f"mount -t tmpfs -o {options} tmpfs {where}"]
    if kind == "dev":
        lines = [
            f"mkdir -p {root}/dev",
            f"mount -t tmpfs -o size=64k,mode=755,nosuid tmpfs {root}/dev",
        ]
        for name in DEVICES:
            lines += [f"touch {root}/dev/{name}", f"mount --bind /dev/{name} {root}/dev/{name}"]
        return lines + [f"ln -s {target} {root}/dev/{name}" for target, name in DEV_LINKS]
    source, target = q(rest[0]), q(root + rest[0])
    make = (
        f"mkdir -p {target}"
        if os.path.isdir(rest[0])
        else f"mkdir -p {q(os.path.dirname(root + rest[0]))} && touch {target}"
    )
    return [make, f"mount --bind {source} {target}", f"mount -o remount,bind,ro,nosuid {target}"]


def shell_lines(entries: list[tuple]) -> list[str]:
    """Root shell lines, run in the call's new mount namespace, that build the view in a tmpfs on
    :func:`stage`, ``pivot_root`` into it, detach the host's root and make the new one
    read-only."""
    root = stage(entries)
    lines = ["mount --make-rprivate /", f"mount -t tmpfs -o size=1m,mode=755 tmpfs {root}"]
    for kind, *rest in entries:
        lines += _shell_entry(root, kind, rest)
    lines += [f"cd {root}", "mkdir .host", "pivot_root . .host", "umount -l /.host", "rmdir /.host"]
    return [*lines, "mount -o remount,bind,ro /"]
